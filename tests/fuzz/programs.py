"""Random PyTorch programs for the fuzzer: a hypothesis strategy and the program it draws.

A program is Python source (``def forward(self, x0, ...)``) over a pool of live tensors: splits in
every call form, pieces taken out of them, slices, narrows, selects, cats and stacks of pieces in
any order, views, elementwise ops, linears, dtype changes and in-place writes. Every line is run
on concrete tensors while it is drawn, so each op is chosen to fit the shapes it actually gets,
and the printed source of a failing program is a ready-to-paste repro.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx
from hypothesis import reject, strategies as st

from tests.fuzz.ops import Ops
from tests.fuzz.pool import NAMESPACE, setitem


@dataclass
class Program:
    source: str
    inputs: tuple[torch.Tensor, ...]
    params: dict[str, torch.Tensor] = field(default_factory=dict)

    def module(self) -> torch.nn.Module:
        """The program as an eager module: the reference the optimized graph is compared to."""
        ns = dict(NAMESPACE)
        exec(compile(self.source, "<fuzz program>", "exec"), ns)
        module = type("Program", (torch.nn.Module,), {"forward": ns["forward"]})()
        for name, value in self.params.items():
            module.register_buffer(name, value.clone())
        return module

    def graph_module(self) -> fx.GraphModule:
        module = self.module()
        graph = fx.Tracer(autowrap_functions=(setitem,)).trace(module)
        for node in graph.nodes:
            if node.target is setitem:
                node.target = operator.setitem
        return fx.GraphModule(module, graph)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')}" for t in self.inputs)
        params = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self.params.items())
        return f"Program(inputs=[{shapes}] params=[{params}])\n{self.source}"


class _Builder(Ops):
    """Draws one program line by line, running each line to know the shapes it makes."""

    # -- motifs: the patterns the rules look for, drawn often enough to matter -----------------

    def split_map_cat(self) -> None:
        """split → an op per piece → cat (pieces in order, reordered, or a subset)."""
        cands = self.ranked()
        if not cands:
            return
        x = self.pick(cands)
        rank = self.env[x].dim()
        d = self.dim(rank)
        tup = self.split(x, d)
        pieces = self.take(tup, every=True)
        if not pieces:
            return
        same = self.chance(0.6)
        form = self.one_of(self.UNARY)
        mapped = []
        for p in pieces:
            if self.chance(0.85) and self.env[p].dtype.is_floating_point:
                p = self.unary(p, form if same else None)
            mapped.append(p)
        order = self.one_of(["keep", "keep", "shuffle", "subset"])
        if order == "shuffle":
            mapped = self.draw(st.permutations(mapped))
        elif order == "subset":
            mapped = self.draw(st.lists(st.sampled_from(mapped), min_size=1, max_size=len(mapped)))
        ranks = {self.env[p].dim() for p in mapped}
        if ranks == {rank}:
            self.cat(mapped, d)
        elif len({tuple(self.env[p].shape) for p in mapped}) == 1:
            self.stack(mapped, d)

    def cat_then_split(self) -> None:
        """cat → split on the same boundaries, or other ones."""
        items, d = self.cat_operands(stack=False)
        if not items:
            return
        out = self.cat(items, d)
        self.take(self.split(out, d) if self.chance(0.7) else self.split(out))

    def sliced_binary(self) -> None:
        """The same slice of two same-shape tensors, or slices of one and one tensor shared by
        all, combined elementwise; maybe glued back (a stack where the slices are of one size)."""
        cands = self.ranked()
        if not cands:
            return
        a = self.pick(cands)
        if not self.env[a].dtype.is_floating_point:
            return
        b = self.operand_for(a)
        if self.env[b].shape != self.env[a].shape:
            return
        shape = self.shape_of(a)
        d = self.dim(len(shape))
        sizes = self.sizes(shape[d])
        form = self.one_of(self.BINARY)
        one_size = len(set(sizes)) == 1
        shared = self.new_input([*shape[:d], sizes[0], *shape[d + 1:]], self.env[a].dtype) \
            if one_size and self.chance(0.3) else None
        outs, start = [], 0
        for n in sizes:
            sl = f"{start}, {n}"
            outs.append(self.emit(form.format(a=f"{a}.narrow({d}, {sl})", b=shared or f"{b}.narrow({d}, {sl})")))
            start += n
        if self.chance(0.6):
            if one_size and self.chance(0.5):
                self.stack(outs, self.draw(st.integers(-len(shape) - 1, len(shape))))
            else:
                self.cat(outs, d)

    def pieces_linear_cat(self) -> None:
        """One weight applied to every piece of a split, glued back (horizontal fusion): each
        piece with a bias of its own or none, or one Linear on all of them (a shared tower), on
        the pieces themselves or on an elementwise op of each (separate inputs)."""
        cands = [n for n in self.ranked(2) if self.env[n].dtype in (torch.float32, torch.float64)]
        if not cands:
            return
        x = self.pick(cands)
        rank = self.env[x].dim()
        d = self.draw(st.integers(0, rank - 2))
        pieces = self.take(self.split(x, d), every=True)
        if not pieces or any(self.env[p].dim() != rank for p in pieces):
            return
        weight = self.param([self.draw(st.integers(1, 8)), self.env[x].shape[-1]], self.env[x].dtype)
        if not self.chance(0.5):
            self.cat([self.linear(p, weight) for p in pieces], d)
            return
        bias = f", {self.param([self.env_param(weight).shape[0]], self.env[x].dtype)}" if self.chance(0.5) else ""
        if self.chance(0.5):
            pieces = [self.unary(p, self.one_of(self.UNARY)) for p in pieces]
        self.cat([self.emit(f"F.linear({p}, {weight}{bias})") for p in pieces], d)

    def parallel_linears(self) -> None:
        """Linears with their own weights on one input (horizontal fusion: one linear on the
        concatenated weights), their outputs glued together or returned apart."""
        cands = [n for n in self.ranked() if self.env[n].dtype in (torch.float32, torch.float64)]
        if not cands:
            return
        x = self.pick(cands)
        t = self.env[x]
        bias = self.chance(0.7)
        outs = []
        for _ in range(self.draw(st.integers(2, 6))):
            weight = self.param([self.draw(st.integers(1, 6)), t.shape[-1]], t.dtype)
            b = f", {self.param([self.env_param(weight).shape[0]], t.dtype)}" if bias else ""
            outs.append(self.emit(f"F.linear({x}, {weight}{b})"))
        if self.chance(0.6):
            self.cat(outs, -1)

    def unbind_stack(self) -> None:
        cands = self.ranked()
        if not cands:
            return
        x = self.pick(cands)
        rank = self.env[x].dim()
        d = self.dim(rank)
        pieces = self.take(self.emit(f"torch.unbind({x}, {d})"), every=True)
        if self.chance(0.5):
            pieces = [self.unary(p) if self.env[p].dtype.is_floating_point else p for p in pieces]
        self.stack(pieces, self.draw(st.integers(-rank, rank - 1)) if self.chance(0.3) else d)

    OPS = ("split", "take", "narrow", "index", "select", "cat", "stack", "whole_tuple", "view",
           "unary", "binary", "linear", "inplace", "opaque", "random", "split_map_cat", "cat_then_split",
           "sliced_binary", "pieces_linear_cat", "parallel_linears", "unbind_stack")

    def step(self) -> None:
        weighted = [op for op in self.OPS for _ in range(self.mix.get(op, 0))]
        getattr(self, self.one_of(weighted))()

    def outputs(self) -> str:
        """Usually the last value, and any others: inputs, pieces, the same value twice, a value
        and its detach (AOTAutograd fails on a partial view of a computed tensor so returned,
        which a rewrite must not make of a fresh one: seed 5139), a tuple."""
        names = self.draw(st.lists(st.sampled_from(list(reversed(self.tensors))), max_size=3))
        if not names or self.chance(0.7):
            names.insert(0, self.tensors[-1])
        if self.chance(0.1):
            names.append(f"{names[0]}.detach()")
        if self.tuples and self.chance(0.1):
            names.append(self.pick(self.tuples))
        if len(names) == 1 and self.chance(0.5):
            return names[0]
        return f"({', '.join(names)},)" if self.chance(0.8) else f"[{', '.join(names)}]"


#: How often each op is drawn (relative weights), per program flavour.
MIXES: dict[str, dict[str, int]] = {
    "general": {"split": 3, "take": 4, "narrow": 2, "index": 3, "select": 1, "cat": 3, "stack": 2,
                "whole_tuple": 1, "view": 3, "unary": 3, "binary": 3, "linear": 1, "inplace": 1, "opaque": 1,
                "split_map_cat": 2, "cat_then_split": 1, "sliced_binary": 1, "pieces_linear_cat": 1,
                "parallel_linears": 1, "unbind_stack": 1},
    "split_cat": {"split": 2, "take": 3, "narrow": 1, "index": 1, "cat": 2, "stack": 1,
                  "whole_tuple": 1, "unary": 1, "split_map_cat": 4, "cat_then_split": 3,
                  "sliced_binary": 2, "pieces_linear_cat": 1, "parallel_linears": 1, "unbind_stack": 2},
    "mutation": {"split": 2, "take": 3, "narrow": 1, "index": 2, "cat": 2, "view": 2, "unary": 2,
                 "binary": 2, "inplace": 5, "opaque": 1, "random": 1, "split_map_cat": 2, "cat_then_split": 1},
}


#: The ``modes`` mix: general's ops but in-place ones (its programs are differentiated, and a
#: write to what autograd saved fails in eager too), and a with-block (see :func:`programs`).
MIXES["modes"] = {op: n for op, n in MIXES["general"].items() if op != "inplace"}

#: ``with`` blocks the ``modes`` mix puts around a run of a program's statements.
MODES = ["torch.no_grad()", "torch.enable_grad()", 'torch.autocast("cpu", dtype=torch.bfloat16)',
         'torch.autocast("cpu", enabled=False)']


@st.composite
def programs(draw: Callable[[Any], Any], mix: str = "general", max_steps: int = 10) -> Program:
    """``mix`` "modes": a general program with a run of its statements in a ``with`` block that
    switches grad mode or autocast (optimus_egg.modes)."""
    b = _Builder(draw, draw(st.integers(0, 2**31 - 1)), MIXES[mix])
    for _ in range(draw(st.integers(1, 3))):
        b.new_input(b.random_shape())
    for _ in range(draw(st.integers(1, max_steps))):
        b.step()
    ret = b.outputs()
    params = ", ".join(["self", *b.input_names])
    lines = [f"    {line}" for line in b.lines]
    if mix == "modes" and lines:
        start = draw(st.integers(0, len(lines) - 1))
        end = draw(st.integers(start + 1, len(lines)))
        lines[start:end] = [f"    with {draw(st.sampled_from(MODES))}:", *(f"    {line}" for line in lines[start:end])]
    body = "\n".join([*lines, f"    return {ret}"])
    program = Program(f"def forward({params}):\n{body}\n", tuple(b.input_values), dict(b.params))
    if mix == "modes":
        try:  # the statements were drawn without the block: under autocast some no longer run
            program.module()(*[t.clone() for t in program.inputs])
        except (RuntimeError, IndexError, ValueError, TypeError):
            reject()
    return program
