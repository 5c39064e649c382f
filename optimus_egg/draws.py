"""Dropouts that draw random numbers, as terms the rules may batch (option ``batch_random``).

By default a dropout that draws is an opaque ``Op`` pinned on the effect chain: the same seed
gives eager's mask. Under ``batch_random`` a plain elementwise dropout (``dropout``, training,
not in place) becomes ``Binary(key, x, token)``, where ``key`` names the call (shared by every
dropout of the same ``p`` on the same device, so the pointwise rules can pull it out of cats and
slices as they do ``add``) and ``token`` stands for the random numbers it reads: a tensor of
``x``'s shape that no program computes. Read so, a dropout is a deterministic elementwise
function of ``x`` and its numbers, every rule is an identity on values, and two draws are never
one term: ``dropout(x) + dropout(x)`` reads two tokens.

Tokens are slices of *atoms* (independent random tensors, ``Op`` terms of a key of their own that
cost nothing and are never written back). Dropouts that the program concatenates, or that read
disjoint slices of one tensor, read disjoint slices of one atom, so that
``cat([dropout(a), dropout(b)])`` equals ``dropout(cat([a, b]))`` reading the whole atom (the
slices of a cat of slices merge), and ``dropout`` of each piece of a split equals a slice of one
``dropout`` of the tensor (Optimus's ``batch_dropout``).

What the program runs draws fresh numbers for the whole token of every dropout it writes. That
realizes one sample of the atoms, whatever the extraction chose, as long as no two dropouts it
writes read overlapping parts of one atom: :func:`consistent` checks this on what the emitter
wrote (a fused dropout with one of its members written beside it would give the member's elements
two masks), and the pipeline otherwise optimizes the graph again without the option.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from optimus_egg.calls import Call, Registry, Slot
from optimus_egg.ir import Term, nil
from optimus_egg.nodes import bind, is_tensor_node, static_shape, val
from optimus_egg.optable import CATS, lookup


def drawn_input(node: fx.Node) -> fx.Node | None:
    """The input of a plain elementwise dropout that draws (``F.dropout``, ``torch.dropout``,
    ``aten.dropout``; ``training`` a literal True, ``p`` a literal in (0, 1), not in place, a
    floating result of its input's shape and dtype), else None. Channel and alpha dropouts zero
    other patterns than one independent draw per element and are left as they are; at ``p = 0``
    ATen returns the input itself, an alias."""
    op = lookup(node)
    if op is None or op.name != "dropout":
        return None
    b = bind(node, ("input",), "p", ("training", "train"), "inplace",
             defaults={"p": 0.5, "training": True, "inplace": False})
    if b is None or b["training"] is not True or b["inplace"] is not False or not is_tensor_node(b["input"]):
        return None
    p, x, out = b["p"], val(b["input"]), val(node)
    if (isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 < p < 1
            or not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point
            or out.dtype != x.dtype or out.shape != x.shape):
        return None
    return b["input"]


#: Calls that read or set the generator's state: a program that replays it (``set_rng_state``
#: between two dropouts gives both one mask) relies on the order of its draws, kept as written.
_GENERATOR_STATE = ("rng_state", "manual_seed", "seed", "fork_rng")


def reseeds(graph: fx.Graph) -> bool:
    """Does ``graph`` read or set the random generator's state (its dropouts are then left alone)?"""
    return any(n.op in ("call_function", "call_method") and any(
        w in (n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target)))
        for w in _GENERATOR_STATE) for n in graph.nodes)


def _call(node: fx.Node) -> Call:
    """``node`` as one canonical call (``F.dropout(x, p, True, False)``; ATen's ``dropout(x, p,
    True)`` in an ATen graph), so that every spelling of the same dropout shares a key."""
    b = bind(node, ("input",), "p", ("training", "train"), "inplace",
             defaults={"p": 0.5, "training": True, "inplace": False})
    aten = isinstance(node.target, torch._ops.OpOverload)
    target, consts = (torch.ops.aten.dropout.default, [True]) if aten else (F.dropout, [True, False])
    leaves, spec = pytree.tree_flatten(([Slot(0), float(b["p"]), *consts], {}))
    out = val(node)
    return Call("dropout", "call_function", target, spec, tuple(leaves), 1.0, "Binary", str(out.device),
                draws=True)


def _never_written(*_: Any) -> None:
    raise RuntimeError("a dropout's random numbers (a token) are never written into the graph")


class Tokens:
    """Builds each drawing dropout's term, and the token it reads (see the module's docstring)."""

    def __init__(self, graph: fx.Graph, registry: Registry, facts: list[tuple[Term, list[int | None], str]]) -> None:
        self.registry = registry
        self.facts = facts  # the translation's facts: atoms' are added, terms' shapes read
        self._shapes: dict[Term, list[int | None]] = {}
        self._read = 0
        self._groups: dict[fx.Node, Term] = {}  # a cat -> its atom
        self._pieces: dict[tuple[Term, int], list[tuple[Term, list[tuple[int, int]]]]] = {}
        self._members: dict[fx.Node, tuple[fx.Node, int, int, int, bool]] = {}
        for node in graph.nodes:
            self._plan_cat(node)

    def _plan_cat(self, node: fx.Node) -> None:
        """A cat or stack of dropouts of one kind, each read by this cat alone: each member's
        token is its slot of the cat's atom (member -> (cat, dim, start, length, stacked))."""
        op = lookup(node)
        if op is None or op.name not in CATS:
            return
        b = bind(node, ("tensors", "seq"), ("dim", "axis"), defaults={"dim": 0})
        out = val(node)
        if b is None or not isinstance(b["tensors"], (list, tuple)) or not isinstance(out, torch.Tensor):
            return
        xs, shape = list(b["tensors"]), static_shape(out)
        if (len(xs) < 2 or len(set(xs)) != len(xs) or None in shape or not isinstance(b["dim"], int)
                or not all(isinstance(x, fx.Node) and drawn_input(x) is not None and len(x.users) == 1
                           for x in xs)
                or len({(str(c.leaves), c.target, c.device) for c in map(_call, xs)}) != 1):
            return
        stacked = op.name == "stack"
        d = b["dim"] % len(shape)
        start = 0
        for x in xs:
            n = 1 if stacked else static_shape(val(x))[d]
            if n is None:
                return
            self._members[x] = (node, d, start, n, stacked)
            start += n

    def term(self, node: fx.Node, x: Term) -> Term:
        """The dropout ``node`` of ``x`` (its input's term), reading its own token."""
        key = self.registry.key(_call(node), shareable=True)
        return Term("Binary", (key, x, self._token(node, x)))

    def _token(self, node: fx.Node, x: Term) -> Term:
        if node in self._members:
            cat, d, start, n, stacked = self._members[node]
            if cat not in self._groups:
                self._groups[cat] = self._atom(static_shape(val(cat)), val(cat).dtype)
            token = Term("Sl", (self._groups[cat], d, start, n))
            return Term("Squeeze", (token, d)) if stacked else token
        squeezed = x.op == "Squeeze" and x.args[0].op == "Sl" and x.args[0].args[1] == x.args[1]
        sliced = x.args[0] if squeezed else x
        dtype = val(node).dtype
        if sliced.op == "Sl":
            base, d, start, n = sliced.args
            shape = self._shape(base)
            if shape is not None and None not in shape:
                token = Term("Sl", (self._slot(base, d, start, n, shape, dtype), d, start, n))
                return Term("Squeeze", (token, d)) if squeezed else token
        return self._atom(static_shape(val(node)), dtype)

    def _slot(self, base: Term, d: int, start: int, n: int, shape: list[int | None], dtype: torch.dtype) -> Term:
        """An atom of ``base``'s shape in which ``[start, start + n)`` along ``d`` is still free:
        dropouts of disjoint slices share one (one dropout of ``base`` serves them all), a slice
        that overlaps one taken gets another atom."""
        groups = self._pieces.setdefault((base, d), [])
        for atom, taken in groups:
            if all(start + n <= s or e <= start for s, e in taken):
                taken.append((start, start + n))
                return atom
        atom = self._atom(shape, dtype)
        groups.append((atom, [(start, start + n)]))
        return atom

    def _atom(self, shape: list[int | None], dtype: torch.dtype) -> Term:
        spec = pytree.tree_flatten(([], {}))[1]  # its one leaf, its rank, is for _part alone
        call = Call("draw-token", "call_function", _never_written, spec, (len(shape),), 0.0, "Op")
        atom = Term("Op", (self.registry.key(call, shareable=False), nil()))
        self.facts.append((atom, shape, str(dtype).removeprefix("torch.")))
        return atom

    def _shape(self, term: Term) -> list[int | None] | None:
        for t, shape, _ in self.facts[self._read:]:
            self._shapes.setdefault(t, shape)
        self._read = len(self.facts)
        return self._shapes.get(term)


# ---------------------------------------------------------------------------------------------
# What the emitted graph draws.

#: Part of an atom: (atom key, {atom dim: [start, end)} (dims not listed: whole), the atom dim
#: each dim of the term is; None for one that is not a dim of the atom (an unsqueezed size-1 dim,
#: or dims a reshape merged or split: a slice of it is taken as the whole, a superset)).
Piece = tuple[str, dict[int, tuple[int, int]], list[int | None]]


def consistent(written: dict[int, fx.Node], node_of: Callable[[int], Any], registry: Registry,
               graph: fx.Graph) -> bool:
    """Do the dropouts among the classes ``written`` (each class written once, as the node it
    maps to, its e-node ``node_of(cls)``) read disjoint parts of every atom, and does ``graph``
    (what the emitter wrote) draw in no other dropout (a call copied as the program wrote it
    would draw its member's numbers again)? False also when a token's part cannot be told (the
    check then fails safe)."""
    classes = set(written.values())
    if any(drawn_input(n) is not None and n not in classes for n in graph.nodes):
        return False
    seen: list[tuple[int, str, dict[int, tuple[int, int]]]] = []
    for cls in written:
        node = node_of(cls)
        if node.op != "Binary" or not registry.calls[node.children[0]].draws:
            continue
        try:
            pieces = _part(node.children[2], node_of, registry)
        except (KeyError, IndexError):  # a token class with no e-node chosen, a dim it lacks
            return False
        if pieces is None:
            return False
        for atom, box, _ in pieces:
            if any(a == atom and c != cls and _meet(box, b) for c, a, b in seen):
                return False
            seen.append((cls, atom, box))
    return True


def is_token(node: Any, registry: Registry) -> bool:
    return node.op == "Op" and registry.calls[node.children[0]].name == "draw-token"


def is_draw(node: Any, registry: Registry) -> bool:
    """Is this e-node a dropout that draws (whose last operand is its token, never written)?"""
    return node.op == "Binary" and registry.calls[node.children[0]].draws


def _part(cls: int, node_of: Callable[[int], Any], registry: Registry) -> list[Piece] | None:
    """The parts of atoms a token class's chosen term covers (a superset where it slices a cat or
    a reshaped dim), or None when it is not a term of atoms, slices, squeezes, reshapes and cats."""
    node = node_of(cls)
    op, kids = node.op, node.children
    if op == "Op" and is_token(node, registry):
        rank = registry.calls[kids[0]].leaves[0]
        return [(kids[0], {}, list(range(rank)))]
    if op == "Cat":
        out: list[Piece] = []
        lst = node_of(kids[0])
        while lst.op == "Cons":
            got = _part(lst.children[0], node_of, registry)
            if got is None:
                return None
            out += got
            lst = node_of(lst.children[1])
        return out
    if op not in ("Sl", "Squeeze", "Unsqueeze", "Flat", "Unflat"):
        return None
    inner = _part(kids[0], node_of, registry)
    if inner is None:
        return None
    out = []
    for atom, box, dims in inner:
        box, dims, d = dict(box), list(dims), kids[1]
        if op == "Squeeze":
            del dims[d]
        elif op == "Unsqueeze":
            dims.insert(d, None)
        elif op in ("Flat", "Unflat"):  # the reshaped dims are taken whole
            merged = 2 if op == "Flat" else 1
            for a in dims[d:d + merged]:
                box.pop(a, None)
            dims[d:d + merged] = [None] * (3 - merged)
        elif len(inner) == 1 and dims[d] is not None:  # Sl(c, d, s, n) of one part: narrowed
            a, s, n = dims[d], kids[2], kids[3]
            lo = box[a][0] if a in box else 0
            box[a] = (lo + s, lo + s + n)
        out.append((atom, box, dims))
    return out


def _meet(a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]]) -> bool:
    """Do two boxes of one atom share an element?"""
    return all(a[d][0] < b[d][1] and b[d][0] < a[d][1] for d in a.keys() & b.keys()) and \
        all(a[d][0] < a[d][1] for d in a) and all(b[d][0] < b[d][1] for d in b)
