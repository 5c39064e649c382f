"""The programs ``optimus-egg discover`` enumerates: small PyTorch programs of one or two inputs,
built bottom-up by size (Ruler's way) and run on concrete tensors as they are built.

A program is a tree of :class:`Prog` nodes; its size is the number of ops (a split and the cat of
its pieces are two; taking a piece ``t[i]`` is free). Programs are grouped by what they compute
(:class:`Signature`: shape, the bits of its values on three draws of the inputs, and whether the
result aliases an input), and only the first program of each group, its representative, is
extended to bigger ones: a bigger program over another member is equal to one over the
representative by congruence, which any e-graph proves for free.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch

#: A tensor's shape.
Shape = tuple[int, ...]

#: The highest rank a program's value may reach (unsqueezes and views grow it).
MAX_RANK = 4


@dataclass(frozen=True, eq=False)
class Prog:
    """One op applied to its operands (programs or input names), with its literal arguments.
    ``piece`` is ``t[i]`` of a tuple-valued operand (split, chunk, unbind): it costs no op.
    ``clone`` is never enumerated: it is the copy of a view the pipeline makes of an output that
    would alias an input (see :func:`copied`)."""

    op: str
    params: tuple
    kids: tuple["Prog", ...] = ()
    size: int = 0
    is_tuple: bool = False

    def form(self) -> str:
        """The program with its literals left out: ``cat(split(x))``. Instances of one form on
        other shapes and dims are where a candidate rule's side conditions are read off."""
        if self.op == "input":
            return self.params[0]
        return f"{self.op}({', '.join(k.form() for k in self.kids)})"


#: How each op is written: its Python call, from its operands' names and its literals.
_WRITE: dict[str, Callable[[Sequence[str], tuple], str]] = {
    "narrow": lambda a, p: f"torch.narrow({a[0]}, {p[0]}, {p[1]}, {p[2]})",
    "slice": lambda a, p: f"{a[0]}[{', '.join([':'] * p[0] + [f'{p[1]}:{p[2]}'])}]",
    "select": lambda a, p: f"{a[0]}.select({p[0]}, {p[1]})",
    "squeeze": lambda a, p: f"{a[0]}.squeeze({p[0]})",
    "unsqueeze": lambda a, p: f"{a[0]}.unsqueeze({p[0]})",
    "view": lambda a, p: f"{a[0]}.view({', '.join(map(str, p[0]))})",
    "reshape": lambda a, p: f"{a[0]}.reshape({', '.join(map(str, p[0]))})",
    "flatten": lambda a, p: f"torch.flatten({a[0]}, {p[0]}, {p[1]})",
    "permute": lambda a, p: f"{a[0]}.permute({', '.join(map(str, p[0]))})",
    "transpose": lambda a, p: f"{a[0]}.transpose({p[0]}, {p[1]})",
    "relu": lambda a, p: f"torch.relu({a[0]})",
    "split": lambda a, p: f"torch.split({a[0]}, {list(p[0]) if isinstance(p[0], tuple) else p[0]}, {p[1]})",
    "chunk": lambda a, p: f"torch.chunk({a[0]}, {p[0]}, {p[1]})",
    "unbind": lambda a, p: f"torch.unbind({a[0]}, {p[0]})",
    "piece": lambda a, p: f"{a[0]}[{p[0]}]",
    "cat": lambda a, p: f"torch.cat([{', '.join(f'{a[0]}[{i}]' for i in p[0])}], {p[1]})",
    "stack": lambda a, p: f"torch.stack([{', '.join(f'{a[0]}[{i}]' for i in p[0])}], {p[1]})",
    "cat2": lambda a, p: f"torch.cat([{a[0]}, {a[1]}], {p[0]})",
    "stack2": lambda a, p: f"torch.stack([{a[0]}, {a[1]}], {p[0]})",
    "add": lambda a, p: f"{a[0]} + {a[1]}",
    "mul": lambda a, p: f"{a[0]} * {a[1]}",
    "clone": lambda a, p: f"{a[0]}.clone()",
}

#: How each op runs on concrete values (a tuple for the splits).
_RUN: dict[str, Callable[[Sequence, tuple], object]] = {
    "narrow": lambda a, p: torch.narrow(a[0], *p),
    "slice": lambda a, p: a[0][(slice(None),) * p[0] + (slice(p[1], p[2]),)],
    "select": lambda a, p: a[0].select(*p),
    "squeeze": lambda a, p: a[0].squeeze(p[0]),
    "unsqueeze": lambda a, p: a[0].unsqueeze(p[0]),
    "view": lambda a, p: a[0].view(p[0]),
    "reshape": lambda a, p: a[0].reshape(p[0]),
    "flatten": lambda a, p: torch.flatten(a[0], *p),
    "permute": lambda a, p: a[0].permute(p[0]),
    "transpose": lambda a, p: a[0].transpose(*p),
    "relu": lambda a, p: torch.relu(a[0]),
    "split": lambda a, p: torch.split(a[0], list(p[0]) if isinstance(p[0], tuple) else p[0], p[1]),
    "chunk": lambda a, p: torch.chunk(a[0], *p),
    "unbind": lambda a, p: torch.unbind(a[0], p[0]),
    "piece": lambda a, p: a[0][p[0]],
    "cat": lambda a, p: torch.cat([a[0][i] for i in p[0]], p[1]),
    "stack": lambda a, p: torch.stack([a[0][i] for i in p[0]], p[1]),
    "cat2": lambda a, p: torch.cat([a[0], a[1]], p[0]),
    "stack2": lambda a, p: torch.stack([a[0], a[1]], p[0]),
    "add": lambda a, p: a[0] + a[1],
    "mul": lambda a, p: a[0] * a[1],
    "clone": lambda a, p: a[0].clone(),
}


def copied(prog: Prog) -> Prog:
    """``prog``'s result copied: what a fresh output costs where the cheapest program for its
    values is a view of an input."""
    return Prog("clone", (), (prog,), prog.size + 1)


def source_lines(prog: Prog, prefix: str = "v") -> tuple[list[str], str]:
    """The program as assignments, one op a line, and the name of its result. Names start with
    ``prefix`` so that several programs can share one function."""
    lines: list[str] = []
    names: dict[int, str] = {}

    def name(p: Prog) -> str:
        if p.op == "input":
            return p.params[0]
        if id(p) in names:
            return names[id(p)]
        args = [name(k) for k in p.kids]
        expr = _WRITE[p.op](args, p.params)
        if p.op == "piece" and p.kids[0].op != "input":
            names[id(p)] = expr  # t[i] is read in place, as the program writes it
            return expr
        names[id(p)] = f"{prefix}{len(lines) + 1}"
        lines.append(f"{names[id(p)]} = {expr}")
        return names[id(p)]

    return lines, name(prog)


def source(prog: Prog) -> str:
    """One line of readable Python: ``v1 = torch.split(x, 2, 0); return torch.cat(...)``."""
    lines, result = source_lines(prog)
    if lines and lines[-1].startswith(f"{result} = "):
        last = lines.pop().removeprefix(f"{result} = ")
    else:
        last = result
    return "; ".join([*lines, f"return {last}"])


def function(progs: Sequence[Prog], inputs: Sequence[str]) -> str:
    """Python source of ``def f(x, y)`` returning every program's result, in order."""
    body, results = [], []
    for k, prog in enumerate(progs):
        lines, result = source_lines(prog, f"p{k}_v")
        body += lines
        results.append(result)
    return "\n    ".join([f"def f({', '.join(inputs)}):", *body, f"return ({', '.join(results)},)"]) + "\n"


# -- signatures ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    """What a program computes, to compare programs: shape, the bits of its values on each draw,
    and whether it shares storage with an input (a view of ``x`` and a fresh copy of it differ)."""

    shape: Shape
    aliases: bool
    values: bytes


def draws(shape: Shape, inputs: Sequence[str], seed: int) -> list[dict[str, torch.Tensor]]:
    """Three draws of the inputs: distinct values (so every element of a gather is told apart)
    with random signs (so relu keeps some and zeroes others); small integers (so that values
    repeat, and relu and sums meet zeros); and floats with full mantissas, on which products and
    sums reassociated or distributed round otherwise (on integers they are exact, and a rule may
    only equate what is equal in floating point): most of magnitude 2**-8 to 2**8, a quarter (the
    same elements of every input) at the ends of float32's range, where a product underflows
    (2**-70) or a sum of two overflows (2**127), as (x + x) + (y + y) does where (x + y) + (x + y)
    need not."""
    gen = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    perm = (torch.randperm(n * len(inputs), generator=gen) + 1).float()
    signs = torch.randint(0, 2, (n * len(inputs),), generator=gen).float() * 2 - 1
    distinct = (perm * signs).split(n)
    small = torch.randint(-3, 4, (len(inputs), n), generator=gen).float()
    exponents = torch.randint(-8, 9, (len(inputs), n), generator=gen).float()
    ends = torch.tensor([-70.0, 127.0])[torch.randint(0, 2, (n,), generator=gen)]
    exponents = torch.where(torch.rand(n, generator=gen) < 0.25, ends, exponents)
    mantissas = 1 + torch.rand(len(inputs), n, generator=gen) / 2  # below 2: 2**127 stays finite
    floats = mantissas * exponents.exp2() * (torch.randint(0, 2, (len(inputs), n), generator=gen) * 2 - 1)
    return [{name: d[i].reshape(shape).clone() for i, name in enumerate(inputs)}
            for d in (distinct, small, floats)]


def bits(t: torch.Tensor) -> bytes:
    """A tensor's values as bytes: equal exactly where the values are, bit for bit (-0.0 is not
    0.0: its sign shows in a division, and the rules keep it)."""
    return t.contiguous().numpy().tobytes()


def signature(values: Sequence[torch.Tensor], inputs: Sequence[dict[str, torch.Tensor]]) -> Signature:
    storages = {t.untyped_storage().data_ptr() for t in inputs[0].values()}
    aliases = values[0].untyped_storage().data_ptr() in storages
    return Signature(tuple(values[0].shape), aliases, b"".join(map(bits, values)))


# -- enumeration ---------------------------------------------------------------------------------


@dataclass
class Found:
    """A program as enumerated, and its values on each draw (a tuple for a split)."""

    prog: Prog
    values: list


@dataclass
class Groups:
    """The enumerated programs of one input shape, by signature. ``members[s][0]`` is the
    representative; ``reps`` lists representatives by size, with their values."""

    shape: Shape
    inputs: tuple[str, ...]
    members: dict[Signature, list[Prog]] = field(default_factory=dict)
    reps: dict[int, list[Found]] = field(default_factory=dict)
    tuples: dict[int, list[Found]] = field(default_factory=dict)
    programs: int = 0


def _factor(n: int) -> int | None:
    return next((a for a in range(2, n) if n % a == 0), None)


def unary_ops(shape: Shape, rng: random.Random) -> Iterator[tuple[str, tuple]]:
    """The one-operand ops that fit ``shape``, with dims, sizes and orders drawn for it."""
    r = len(shape)
    for d, n in enumerate(shape):
        if n >= 2:
            s = rng.randrange(1, n)
            yield "narrow", (d, 0, s)
            yield "narrow", (d, s, n - s)
            yield "slice", (d, 1, n)
            yield "select", (d, rng.randrange(n))
        if n == 1:
            yield "squeeze", (d,)
        if n >= 4 and (a := _factor(n)) and r < MAX_RANK:
            yield "view", ((*shape[:d], a, n // a, *shape[d + 1:]),)
    if r < MAX_RANK:
        yield "unsqueeze", (0,)
        yield "unsqueeze", (r,)
    for d in range(r - 1):
        yield "flatten", (d, d + 1)
    if r >= 3:
        yield "reshape", ((-1,),)
    if r >= 2:
        yield "transpose", tuple(sorted(rng.sample(range(r), 2)))
    if r >= 3:
        order = list(range(r))
        while order == sorted(order):
            rng.shuffle(order)
        yield "permute", (tuple(order),)
    yield "relu", ()


def tuple_ops(shape: Shape, rng: random.Random) -> Iterator[tuple[str, tuple]]:
    """The splits that fit ``shape``: even, uneven, chunk and unbind, along each dim."""
    for d, n in enumerate(shape):
        if n >= 2:
            yield "split", (n // 2 if n % 2 == 0 else rng.randrange(1, n), d)
            if n >= 3:
                yield "split", ((1, n - 1), d)
                yield "chunk", (2, d)
            if n <= 4:
                yield "unbind", (d,)


def consumer_ops(pieces: Sequence[torch.Tensor], split_dim: int, unbound: bool) -> Iterator[tuple[str, tuple]]:
    """What reads a split's pieces: one piece, the pieces glued in order, reversed or along
    another dim, and stacked."""
    k = len(pieces)
    yield "piece", (0,)
    yield "piece", (k - 1,)
    order, back = tuple(range(k)), tuple(reversed(range(k)))
    r = pieces[0].dim()
    if not unbound:
        yield "cat", (order, split_dim)
        yield "cat", (back, split_dim)
        other = next((e for e in range(r) if e != split_dim
                      and all(p.shape[:e] + p.shape[e + 1:] == pieces[0].shape[:e] + pieces[0].shape[e + 1:]
                              for p in pieces)), None)
        if other is not None:
            yield "cat", (order, other)
    elif r >= 1:
        yield "cat", (order, 0)
    if all(p.shape == pieces[0].shape for p in pieces) and r < MAX_RANK:
        yield "stack", (order, split_dim if unbound else 0)
        if unbound and split_dim != 0:
            yield "stack", (order, 0)


def binary_ops(a: torch.Tensor, b: torch.Tensor) -> Iterator[tuple[str, tuple]]:
    if a.shape == b.shape:
        yield "add", ()
        yield "mul", ()
        if a.dim() < MAX_RANK:
            yield "stack2", (0,)
    if a.dim() == b.dim():
        for d in range(a.dim()):
            if a.shape[:d] + a.shape[d + 1:] == b.shape[:d] + b.shape[d + 1:]:
                yield "cat2", (d,)


def enumerate_programs(shape: Shape, inputs: Sequence[str], size: int, seed: int, max_programs: int,
                       progress: Callable[[int], None] = lambda n: None) -> Groups:
    """Every program of up to ``size`` ops over ``inputs`` of ``shape`` (the ops' literals drawn
    with ``seed``), grouped by signature; at most ``max_programs``, the candidates of the last
    size reached sampled when they would exceed it."""
    rng = random.Random(f"{seed}:{shape}")
    env = draws(shape, inputs, seed)
    groups = Groups(shape, tuple(inputs))

    def run(op: str, params: tuple, kids: Sequence[Found]) -> list | None:
        try:
            return [_RUN[op]([k.values[i] for k in kids], params) for i in range(len(env))]
        except RuntimeError:  # a view of a non-contiguous tensor, or the like: not a program
            return None

    def record(found: Found) -> None:
        sig = signature(found.values, env)
        members = groups.members.setdefault(sig, [])
        if not members:
            groups.reps.setdefault(found.prog.size, []).append(found)
        members.append(found.prog)
        groups.programs += 1
        progress(groups.programs)

    for name in inputs:
        record(Found(Prog("input", (name,)), [e[name] for e in env]))
    for k in range(1, size + 1):
        cands = list(_candidates(groups, k, rng))
        if groups.programs + len(cands) > max_programs:
            cands = rng.sample(cands, max(0, max_programs - groups.programs))
        produced: list[Found] = []
        for op, params, kids in cands:
            values = run(op, params, kids)
            if values is None or (not isinstance(values[0], tuple) and (values[0].numel() == 0
                                                                         or values[0].dim() > MAX_RANK)):
                continue
            prog = Prog(op, params, tuple(f.prog for f in kids), k, isinstance(values[0], tuple))
            produced.append(Found(prog, values))
        # a split's tuple first, then the pieces it is read as (free: the same size)
        groups.tuples[k] = [f for f in produced if f.prog.is_tuple]
        for f in produced:
            if not f.prog.is_tuple:
                record(f)
        for t in groups.tuples[k]:
            for i in {0, len(t.values[0]) - 1}:
                record(Found(Prog("piece", (i,), (t.prog,), k), [v[i] for v in t.values]))
    return groups


def _candidates(groups: Groups, k: int, rng: random.Random) -> Iterator[tuple[str, tuple, list[Found]]]:
    """Ops of size ``k``: one op on a representative or on a split's tuple of size ``k - 1``,
    or a binary op on two representatives whose sizes add up to ``k - 1``."""
    for f in groups.reps.get(k - 1, []):
        shape = tuple(f.values[0].shape)
        for op, params in [*unary_ops(shape, rng), *tuple_ops(shape, rng)]:
            yield op, params, [f]
    for t in groups.tuples.get(k - 1, []):
        unbound = t.prog.op == "unbind"
        dim = t.prog.params[-1]
        for op, params in consumer_ops(t.values[0], dim, unbound):
            if op != "piece":  # (pieces are taken where the tuple is made, at its own size)
                yield op, params, [t]
    for i in range(k):
        for a in groups.reps.get(i, []):
            for b in groups.reps.get(k - 1 - i, []):
                for op, params in binary_ops(a.values[0], b.values[0]):
                    yield op, params, [a, b]
