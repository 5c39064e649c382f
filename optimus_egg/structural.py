"""The structural ops, both ways: FX calls that slice, squeeze, unsqueeze, reshape and join
tensors parsed into the IR's ``Sl``/``Squeeze``/``Unsqueeze``/``Flat``/``Unflat``/``Cat`` terms,
and those forms written back as torch calls.

A parser takes the node and a function that gives the term of an argument node (None where it
has none), and returns the node's term, or None to leave the call opaque.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from optimus_egg.effects import identity_dropout
from optimus_egg.ir import Term, as_list
from optimus_egg.nodes import bind, is_tensor_node, norm_dim, static_int, static_shape, val
from optimus_egg.optable import DROPOUTS, lookup

# ---------------------------------------------------------------------------------------------
# Structural parsers: the ops that become Sl / Squeeze / Unsqueeze / Flat / Unflat / Cat.


@dataclass(frozen=True)
class Pieces:
    """The outputs of a split-like node, each a view term of its input."""

    items: tuple[Term, ...]

    def sliced(self) -> tuple[Term, int]:
        """The tensor and dim the pieces slice (each an ``Sl``, or an unbind's ``Squeeze`` of one)."""
        first = self.items[0]
        sl = first.args[0] if first.op == "Squeeze" else first
        return sl.args[0], sl.args[1]


def parse_split_like(node: fx.Node, term: Callable[[Any], Term | None]) -> Pieces | None:
    """split / split_with_sizes / chunk / tensor_split: contiguous pieces in order along dim.

    Piece lengths are read off the node's own fake outputs, so torch's rounding rules for chunk
    and uneven splits never have to be re-derived here.
    """
    b = bind(node, ("input", "tensor", "self"), ("split_size", "split_size_or_sections", "chunks",
                                                 "sections", "indices_or_sections", "split_sizes"),
             "dim", defaults={"dim": 0})
    outs = val(node)
    if b is None or not is_tensor_node(b["input"]) or not isinstance(outs, (tuple, list)):
        return None
    src = term(b["input"])
    d = norm_dim(b["dim"], val(b["input"]).dim())
    if src is None or d is None:
        return None
    lengths = [static_int(o.shape[d]) for o in outs]
    if any(n is None for n in lengths) or sum(lengths) != static_int(val(b["input"]).shape[d]):
        return None  # (tensor_split at decreasing indices: the pieces overlap, a later one starts before)
    start, items = 0, []
    for n in lengths:
        items.append(Term("Sl", (src, d, start, n)))
        start += n
    return Pieces(tuple(items))


def parse_unbind(node: fx.Node, term: Callable[[Any], Term | None]) -> Pieces | None:
    b = bind(node, ("input", "self"), "dim", defaults={"dim": 0})
    outs = val(node)
    if b is None or not is_tensor_node(b["input"]) or not isinstance(outs, (tuple, list)):
        return None
    src, d = term(b["input"]), norm_dim(b["dim"], val(b["input"]).dim())
    if src is None or d is None:
        return None
    return Pieces(tuple(Term("Squeeze", (Term("Sl", (src, d, i, 1)), d)) for i in range(len(outs))))


def _slice_start(b: dict[str, Any] | None, term: Callable[[Any], Term | None], key: str
                 ) -> tuple[Term, int, int] | None:
    """(source term, dim, non-negative ``b[key]``) of a bound narrow/select call.

    A negative start is resolved against the dim's size, which must then be static."""
    if b is None or not is_tensor_node(b["input"]):
        return None
    x = val(b["input"])
    d, i = norm_dim(b["dim"], x.dim()), static_int(b[key])
    if d is None or i is None:
        return None
    if i < 0:
        size = static_int(x.shape[d])
        if size is None:
            return None
        i += size
    src = term(b["input"])
    return None if src is None else (src, d, i)


def parse_narrow(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    b = bind(node, ("input", "self"), "dim", "start", "length")
    got = _slice_start(b, term, "start")
    length = static_int(b["length"]) if b else None
    if got is None or length is None:
        return None
    src, d, start = got
    return Term("Sl", (src, d, start, length))


def parse_slice(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """ATen's ``slice(x, dim, start, end, step)`` (``x[a:b]`` in a post-grad graph)."""
    b = bind(node, ("input", "self"), "dim", "start", "end", "step",
             defaults={"dim": 0, "start": None, "end": None, "step": 1})
    if b is None or not is_tensor_node(b["input"]) or static_int(b["step"]) != 1:
        return None
    x = val(b["input"])
    d = norm_dim(b["dim"], x.dim())
    if d is None:
        return None
    got = _slice_bounds(slice(b["start"], b["end"]), static_int(x.shape[d]))
    src = term(b["input"])
    if got is None or src is None:
        return None
    shape = static_shape(x)
    if got != "full":
        shape[d] = got[1]
    # (an end past a symbolic size: the bounds alone don't give the length)
    return None if static_shape(val(node)) != shape else src if got == "full" else Term("Sl", (src, d, *got))


def parse_select(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    got = _slice_start(bind(node, ("input", "self"), "dim", "index"), term, "index")
    if got is None:
        return None
    src, d, i = got
    return Term("Squeeze", (Term("Sl", (src, d, i, 1)), d))


def parse_squeeze(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """``squeeze(x, d)``, ``squeeze(x, (d, ...))`` or ``squeeze(x)``: the named (or all) dims of
    size 1 dropped, each a ``Squeeze``, from the last; a named dim of another size is kept (a
    squeeze of none is ``x``). Every size must be static: which dims go depends on them."""
    b = bind(node, ("input", "self"), "dim", defaults={"dim": None})
    if b is None or not is_tensor_node(b["input"]):
        return None
    x = val(b["input"])
    named = range(x.dim()) if b["dim"] is None else b["dim"] if isinstance(b["dim"], (tuple, list)) else [b["dim"]]
    dims = [norm_dim(d, x.dim()) for d in named]
    src = term(b["input"])
    if src is None or None in dims or any(static_int(x.shape[d]) is None for d in dims):
        return None
    for d in sorted({d for d in dims if static_int(x.shape[d]) == 1}, reverse=True):
        src = Term("Squeeze", (src, d))
    return src


def parse_unsqueeze(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    b = bind(node, ("input", "self"), "dim")
    if b is None or not is_tensor_node(b["input"]):
        return None
    d = norm_dim(b["dim"], val(b["input"]).dim() + 1)
    src = term(b["input"])
    return None if src is None or d is None else Term("Unsqueeze", (src, d))


def _cat_items(node: fx.Node, term: Callable[[Any], Term | None], extra_rank: int
               ) -> tuple[list[Term], int] | None:
    b = bind(node, ("tensors", "seq"), ("dim", "axis"), defaults={"dim": 0})
    if b is None or not isinstance(b["tensors"], (list, tuple)) or not b["tensors"]:
        return None
    xs = b["tensors"]
    if not all(is_tensor_node(x) for x in xs):
        return None
    vals = [val(x) for x in xs]
    # torch.cat promotes mixed dtypes and skips legacy empty 1-D inputs: leave those alone.
    if len({v.dtype for v in vals}) != 1 or len({v.dim() for v in vals}) != 1:
        return None
    d = norm_dim(b["dim"], vals[0].dim() + extra_rank)
    items = [term(x) for x in xs]
    if d is None or any(t is None for t in items):
        return None
    return items, d


def parse_cat(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """A cat of its pieces, less those with nothing along the dim (they add nothing): with them,
    a cat can equal one of its own pieces (``x = cat([x, empty])``), and cat-of-cat unrolls that
    into ever longer lists."""
    got = _cat_items(node, term, 0)
    if got is None:
        return None
    items, d = got
    tensors = bind(node, ("tensors", "seq"), ("dim", "axis"), defaults={"dim": 0})["tensors"]
    kept = [t for t, x in zip(items, tensors) if static_int(val(x).shape[d]) != 0] or items[:1]
    return Term("Cat", (as_list(kept, d),))


def parse_stack(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """A stack is a cat of unsqueezed pieces, so split/cat rules serve unbind/stack too."""
    got = _cat_items(node, term, 1)
    if got is None:
        return None
    items, d = got
    return Term("Cat", (as_list([Term("Unsqueeze", (t, d)) for t in items], d),))


def parse_getitem(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """Basic indexing of a tensor: ints, step-1 slices, None and Ellipsis."""
    x, index = node.args
    if not is_tensor_node(x) or node.kwargs:
        return None
    index = index if isinstance(index, tuple) else (index,)
    shape = static_shape(val(x))
    cur = term(x)
    if cur is None or shape is None:
        return None
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    d = 0
    for i in index:
        if i is Ellipsis:
            d = len(shape) - (consumed - _dims_before(index, i))
            continue
        if i is None:
            cur = Term("Unsqueeze", (cur, d))
            shape.insert(d, 1)
            d += 1
        elif isinstance(i, slice):
            got = _slice_bounds(i, shape[d] if d < len(shape) else None)
            if got is None:
                return None
            if got != "full":
                start, length = got
                cur = Term("Sl", (cur, d, start, length))
                shape[d] = length
            d += 1
        elif static_int(i) is not None and d < len(shape):
            k = static_int(i)
            if k < 0:
                if shape[d] is None:
                    return None
                k += shape[d]
            cur = Term("Squeeze", (Term("Sl", (cur, d, k, 1)), d))
            del shape[d]
        else:
            return None
    return cur if shape == static_shape(val(node)) else None


def _dims_before(index: tuple[Any, ...], marker: Any) -> int:
    """Dims consumed by the index entries before ``marker`` (Ellipsis)."""
    pos = next(k for k, j in enumerate(index) if j is marker)
    return sum(1 for j in index[:pos] if j is not None)


def _slice_bounds(s: slice, size: int | None) -> tuple[int, int] | str | None:
    if s.step not in (None, 1) or not all(v is None or static_int(v) is not None
                                         for v in (s.start, s.stop)):
        return None
    if s.start in (None, 0) and s.stop is None:
        return "full"
    if size is None:
        start, stop = static_int(s.start) or 0, static_int(s.stop)
        if start < 0 or stop is None or stop < start:
            return None  # needs the (symbolic) size to resolve
        return start, stop - start
    start, stop, _ = slice(s.start, s.stop).indices(size)
    return start, max(stop - start, 0)


def parse_reshape(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """view / reshape / flatten / unflatten: a row-major reshape is fixed by its output shape,
    whatever the call form, so it is read off the static shapes. Two adjacent dims merged is one
    Flat, one dim split in two one Unflat; any other reshape is :func:`reshape_terms`. The terms
    are values: the emitter writes flattens, which copy where the strides ask for it, as reshape
    does (and a view never has to: it merges only dims laid out as one run)."""
    if not node.args or not is_tensor_node(node.args[0]) or not isinstance(val(node), torch.Tensor):
        return None
    if val(node).dtype != val(node.args[0]).dtype:  # view(dtype): the bits read as another type
        return None
    s, t = tuple(static_shape(val(node.args[0]))), tuple(static_shape(val(node)))
    if None in s or None in t or 0 in s:  # no elements: the shapes don't say which dims were split
        return None
    src = term(node.args[0])
    if src is None:
        return None
    for d in range(len(s) - 1):
        if len(t) == len(s) - 1 and t == (*s[:d], s[d] * s[d + 1], *s[d + 2:]):
            return Term("Flat", (src, d))
    for d in range(len(s)):
        if len(t) == len(s) + 1 and t[d] * t[d + 1] == s[d] and t[:d] == s[:d] and t[d + 2:] == s[d + 1:]:
            return Term("Unflat", (src, d, t[d]))
    return reshape_terms(src, s, t)


def reshape_terms(src: Term, s: Sequence[int], t: Sequence[int]) -> Term | None:
    """``src`` of shape ``s`` reshaped to ``t`` (no zero sizes): its dims of 1 squeezed away
    (each a select of a row, as the rules read one), the rest cut into the shortest runs whose
    sizes multiply alike in both shapes, each run merged (Flat) and split again (Unflat), then
    ``t``'s dims of 1 put back. None for a scalar either side."""
    if not s or not t or math.prod(s) != math.prod(t):
        return None
    cur = src
    for d in reversed(range(len(s))):
        if s[d] == 1:
            cur = Term("Squeeze", (cur, d))
    a, b = [n for n in s if n != 1], [n for n in t if n != 1]
    i = j = d = 0
    while i < len(a):
        m, k, n, e = a[i], i + 1, b[j], j + 1
        while m != n:
            if m < n:
                m, k = m * a[k], k + 1
            else:
                n, e = n * b[e], e + 1
        for _ in range(k - i - 1):
            cur = Term("Flat", (cur, d))
        for size in b[j:e - 1]:
            cur = Term("Unflat", (cur, d, size))
            d += 1
        i, j, d = k, e, d + 1
    for d, n in enumerate(t):
        if n == 1:
            cur = Term("Unsqueeze", (cur, d))
    return cur


def parse_contiguous(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """``movedim(x, a, b).contiguous()`` (or a ``permute``/``transpose`` that moves one dim):
    ``Move``, the moved tensor written out in order; any other ``contiguous`` is a call."""
    b = bind(node, ("input", "self"))
    inner = b["input"] if b is not None else None
    if not is_tensor_node(inner) or node.kwargs or inner.op not in ("call_function", "call_method"):
        return None
    moved = _one_move(inner)
    src = term(inner.args[0]) if moved is not None else None
    return None if src is None else Term("Move", (src, *moved))


def _one_move(node: fx.Node) -> tuple[int, int] | None:
    """(a, b) where ``node`` is ``movedim(x, a, b)`` of one dim, spelled as any of
    ``movedim``/``moveaxis``/``permute``/``transpose``/``swapaxes``/``swapdims``; else None."""
    op = lookup(node)
    if op is None or not node.args or not is_tensor_node(node.args[0]) or node.kwargs:
        return None
    rank = val(node.args[0]).dim()
    rest = [norm_dim(d, rank) if isinstance(d, int) else None for d in (
        node.args[1] if op.name == "permute" and len(node.args) == 2 and isinstance(node.args[1], (list, tuple))
        else node.args[1:])]
    if None in rest or op.name not in ("movedim", "moveaxis", "permute", "transpose", "swapaxes", "swapdims"):
        return None
    if op.name == "permute":
        perm = rest
    elif len(rest) == 2 and (op.name in ("movedim", "moveaxis") or abs(rest[0] - rest[1]) == 1):
        perm = list(range(rank))
        perm.insert(rest[1], perm.pop(rest[0]))
    else:
        return None
    for a in range(rank):
        for b in range(rank):
            order = [d for d in range(rank) if d != a]
            order.insert(b, a)
            if a != b and order == list(perm):
                return a, b
    return None


def parse_dropout(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """A dropout that is off is its input (:func:`~optimus_egg.effects.identity_dropout`)."""
    x = identity_dropout(node)
    return None if x is None else term(x)


#: The parser of each structural op, by op table name.
STRUCTURAL: dict[str, Callable[[fx.Node, Callable[[Any], Term | None]], Any]] = {
    "split": parse_split_like, "split_with_sizes": parse_split_like, "chunk": parse_split_like,
    "tensor_split": parse_split_like, "unbind": parse_unbind, "narrow": parse_narrow,
    "slice": parse_slice, "select": parse_select, "squeeze": parse_squeeze, "unsqueeze": parse_unsqueeze,
    "cat": parse_cat, "concat": parse_cat, "concatenate": parse_cat, "stack": parse_stack,
    "getitem": parse_getitem, "view": parse_reshape, "reshape": parse_reshape, "flatten": parse_reshape,
    "unflatten": parse_reshape, "contiguous": parse_contiguous, **dict.fromkeys(DROPOUTS, parse_dropout),
}


# ---------------------------------------------------------------------------------------------
# Structural emitters: the mirror image of the parsers above.


#: How each structural form is written back: the torch call, and whether it takes a list of
#: tensors (cat, stack) rather than one.
STRUCTURAL_CALLS: dict[str, tuple[Callable[..., Any], bool]] = {
    "Sl": (torch.narrow, False), "Select": (torch.select, False), "Squeeze": (torch.squeeze, False),
    "Unsqueeze": (torch.unsqueeze, False), "Cat": (torch.cat, True), "Stack": (torch.stack, True),
    "Flat": (torch.flatten, False), "Unflat": (torch.unflatten, False)}


def emit_structural(graph: fx.Graph, form: str, inputs: Sequence[fx.Node], literals: Sequence[int]
                    ) -> fx.Node:
    """The call in ``graph`` that computes ``form`` of ``inputs`` (a list of them for cat and
    stack), its literal arguments after them."""
    if form == "Move":  # (parse_contiguous's form)
        return graph.call_function(torch.Tensor.contiguous, (graph.call_function(torch.movedim, (*inputs, *literals)),))
    fn, variadic = STRUCTURAL_CALLS[form]
    tensors = (list(inputs),) if variadic else tuple(inputs)
    return graph.call_function(fn, (*tensors, *literals))
