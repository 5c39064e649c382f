"""The op table: every supported FX target, its IR constructor, and the way back.

Both translations read this module and nothing else about ops. A node is parsed by the entry
its target maps to; an IR term is emitted by the entry its constructor (or its ``Op``/``Unary``/
``Binary`` key) names. Calls the table does not know become opaque ``Op`` terms that reproduce
the original call exactly.
"""

from __future__ import annotations

import enum
import functools
import inspect
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from optimus_egg.ir import ARGS, Term, as_list


class Kind(enum.Enum):
    """What an op costs and which rules may touch it."""

    VIEW = "view"  # never launches a kernel
    MAYBE_VIEW = "maybe_view"  # a view or a copy; the node's metadata decides
    POINTWISE = "pointwise"  # elementwise: Unary/Binary when shapes allow
    KERNEL = "kernel"  # one launch, kept as it is
    RANDOM = "random"  # draws random numbers: kept, and kept in order


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: Kind
    targets: tuple[Any, ...]  # torch callables, Tensor method names (str), ATen overloads


def _ops(kind: Kind, spec: dict[str, Sequence[Any]]) -> list[OpDef]:
    return [OpDef(name, kind, tuple(targets)) for name, targets in spec.items()]


def _fn(*names: str) -> list[Any]:
    """The torch-level callables, Tensor method names and ATen ops (every overload: Inductor's
    post-grad graphs) that spell one op."""
    out: list[Any] = []
    for name in names:
        for ns in (torch, F, torch._C._nn, torch.special, torch.ops.aten):
            obj = getattr(ns, name, None)
            if obj is not None and obj not in out:
                out.append(obj)
        if hasattr(torch.Tensor, name):
            out.append(name)
    return out


_UNARY = ["relu", "sigmoid", "tanh", "neg", "negative", "exp", "exp2", "expm1", "log", "log1p",
          "log2", "log10", "abs", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "sign",
          "floor", "ceil", "round", "trunc", "frac", "erf", "erfc", "square", "silu", "gelu",
          "elu", "selu", "celu", "leaky_relu", "hardtanh", "relu6", "hardsigmoid", "hardswish",
          "mish", "softplus", "softsign", "logsigmoid", "tanhshrink", "clamp", "clip",
          "clamp_min", "clamp_max", "nan_to_num", "logit", "expit"]
#: Views that are their input elementwise: Unary too, so that they move through splits and cats as
#: the pointwise ops do (``cat(p.detach() for p in split(x))`` is ``x.detach()``), at no cost.
_IDENTITY_VIEWS = frozenset({"detach"})
_BINARY = {"add": [operator.add, "__add__", "__radd__"], "sub": [operator.sub, "__sub__", "__rsub__"],
           "mul": [operator.mul, "__mul__", "__rmul__"],
           "div": [operator.truediv, "__truediv__", "__rtruediv__", "true_divide"],
           "floordiv": [operator.floordiv, "floor_divide"], "pow": [operator.pow, "__pow__"],
           "maximum": [], "minimum": [], "atan2": [], "hypot": [], "fmod": [], "remainder": []}

OPS: list[OpDef] = [
    *_ops(Kind.POINTWISE, {n: _fn(n) for n in _UNARY}),
    *_ops(Kind.POINTWISE, {n: [*extra, *_fn(n)] for n, extra in _BINARY.items()}),
    *_ops(Kind.VIEW, {n: _fn(n) for n in [
        "view", "permute", "transpose", "swapaxes", "swapdims", "t", "expand", "expand_as",
        "view_as", "unflatten", "movedim", "moveaxis", "squeeze", "unsqueeze", "detach", "alias",
        "narrow", "select", "split", "split_with_sizes", "chunk", "unbind", "tensor_split",
        "real", "imag", "diagonal", "slice"]}),
    *_ops(Kind.MAYBE_VIEW, {n: _fn(n) for n in [
        "reshape", "flatten", "contiguous", "to", "type", "float", "half", "double", "bfloat16",
        "int", "long", "bool", "type_as"]}),
    *_ops(Kind.KERNEL, {n: _fn(n) for n in [
        "linear", "addmm", "mm", "bmm", "baddbmm", "matmul", "einsum", "layer_norm",
        "group_norm", "batch_norm", "softmax", "log_softmax", "sum", "mean", "amax", "amin",
        "prod", "var", "std", "norm", "embedding", "embedding_bag", "clone", "where",
        "masked_fill", "cat", "concat", "concatenate", "stack", "cumsum", "max", "min",
        "argmax", "argmin", "topk", "sort", "gather", "index_select", "conv1d", "conv2d",
        "scaled_dot_product_attention", "normalize", "cosine_similarity", "pad", "zeros_like",
        "ones_like", "full_like", "empty_like", "one_hot"]}),
    *_ops(Kind.RANDOM, {n: _fn(n) for n in [
        "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
        "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli",
        "multinomial", "normal", "poisson", "randperm", "rrelu"]}),
]
#: Matmuls a library computes whole (Inductor's extern calls): no loop of Inductor's reads their
#: operands. ``linear`` and ``matmul`` become ``addmm``/``mm``/``bmm`` in ATen.
MATMULS = frozenset({"linear", "matmul", "mm", "addmm", "bmm", "baddbmm"})
_BY_TARGET: dict[Any, OpDef] = {}
for _op in OPS:
    for _t in _op.targets:
        _BY_TARGET.setdefault(_t, _op)
# `x[i]`, `x[a:b]` on a tensor (the parser below), or a projection out of a multi-output op.
_BY_TARGET[operator.getitem] = OpDef("getitem", Kind.MAYBE_VIEW, (operator.getitem,))


def lookup(node: fx.Node) -> OpDef | None:
    if node.op not in ("call_function", "call_method"):
        return None
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        target = target.overloadpacket
    try:
        return _BY_TARGET.get(target)
    except TypeError:  # unhashable target
        return None


# ---------------------------------------------------------------------------------------------
# Node metadata helpers


def val(node: Any) -> Any:
    """The fake value a Dynamo/AOT node carries."""
    if not isinstance(node, fx.Node):
        return node
    meta = node.meta
    return meta["val"] if "val" in meta else meta.get("example_value")


def static_int(x: Any) -> int | None:
    """``x`` as a Python int when it is one without guarding a symbolic size."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        return x.node.maybe_as_int()
    return None


def static_shape(t: Any) -> list[int | None] | None:
    if not isinstance(t, torch.Tensor):
        return None
    return [static_int(s) for s in t.shape]


def is_tensor_node(node: Any) -> bool:
    return isinstance(node, fx.Node) and isinstance(val(node), torch.Tensor)


def _norm_dim(dim: Any, rank: int) -> int | None:
    d = static_int(dim)
    if d is None or not -max(rank, 1) <= d < max(rank, 1):
        return None
    return d + rank if d < 0 else d


def bind(node: fx.Node, *params: tuple[str, ...] | str, defaults: dict[str, Any] | None = None
         ) -> dict[str, Any] | None:
    """Bind a call's arguments to canonical parameter names, or None if they don't fit.

    Each parameter is a name or a tuple of aliases (``split_size`` vs ``split_size_or_sections``);
    the first alias is the canonical name.
    """
    names = [(p,) if isinstance(p, str) else p for p in params]
    if len(node.args) > len(names):
        return None
    given = {aliases[0]: arg for aliases, arg in zip(names, node.args)}
    for key, value in node.kwargs.items():
        canon = next((a[0] for a in names if key in a), None)
        if canon is None or canon in given:
            return None
        given[canon] = value
    out = {**(defaults or {}), **given}
    return out if all(a[0] in out for a in names) else None


# ---------------------------------------------------------------------------------------------
# Structural parsers: the ops that become Sl / Squeeze / Unsqueeze / Cat.


@dataclass(frozen=True)
class Pieces:
    """The outputs of a split-like node, each a view term of its input."""

    items: tuple[Term, ...]


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
    d = _norm_dim(b["dim"], val(b["input"]).dim())
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
    src, d = term(b["input"]), _norm_dim(b["dim"], val(b["input"]).dim())
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
    d, i = _norm_dim(b["dim"], x.dim()), static_int(b[key])
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
    d = _norm_dim(b["dim"], x.dim())
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
    b = bind(node, ("input", "self"), "dim")
    if b is None or not is_tensor_node(b["input"]):
        return None
    x = val(b["input"])
    d = _norm_dim(b["dim"], x.dim())
    if d is None or static_int(x.shape[d]) != 1:
        return None
    src = term(b["input"])
    return None if src is None else Term("Squeeze", (src, d))


def parse_unsqueeze(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    b = bind(node, ("input", "self"), "dim")
    if b is None or not is_tensor_node(b["input"]):
        return None
    d = _norm_dim(b["dim"], val(b["input"]).dim() + 1)
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
    d = _norm_dim(b["dim"], vals[0].dim() + extra_rank)
    items = [term(x) for x in xs]
    if d is None or any(t is None for t in items):
        return None
    return items, d


def parse_cat(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    """A cat of its pieces, less those with nothing along the dim (they add nothing): with them,
    a cat can equal one of its own pieces (``x = cat([x, empty])``), and cat-of-cat unrolls that
    into ever longer lists (found by the fuzzer: 70k e-nodes for a 10-node graph)."""
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
    """view / reshape / flatten / unflatten that merge two adjacent dims (Flat) or split one dim
    in two (Unflat). Read off the static shapes, not the arguments: a row-major reshape is fixed
    by its output shape, whatever the call form."""
    if not node.args or not is_tensor_node(node.args[0]) or not isinstance(val(node), torch.Tensor):
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
    return None


#: Each dropout's ``training`` default: off for the alpha dropouts (``torch.dropout`` and ATen's
#: name it ``train`` and have none).
_DROPOUT_TRAINING = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
                     "alpha_dropout": False, "feature_alpha_dropout": False}


def draws_random(node: fx.Node) -> bool:
    """Does this call draw random numbers (every random op but a dropout that is off)?"""
    op = lookup(node)
    return op is not None and op.kind is Kind.RANDOM and identity_dropout(node) is None


def runs_once(node: fx.Node) -> bool:
    """A call that must run where the program runs it, once: it draws random numbers, or it is
    a submodule or higher-order op (a checkpointed region may draw)."""
    return draws_random(node) or node.op == "call_module" or isinstance(node.target, torch._ops.HigherOrderOperator)


def identity_dropout(node: fx.Node) -> fx.Node | None:
    """The input of a dropout that is off (``training`` a literal False), else None. Such a call
    draws nothing and returns its input itself (ATen: ``if (!train) return input``); an
    ``eval()`` model is full of them, and kept as random ops they hid every split and cat
    around them from the rules."""
    op = lookup(node)
    if op is None or op.name not in _DROPOUT_TRAINING:
        return None
    b = bind(node, ("input",), "p", ("training", "train"), "inplace",
             defaults={"p": 0.5, "training": _DROPOUT_TRAINING[op.name], "inplace": False})
    if b is None or b["training"] is not False or not is_tensor_node(b["input"]):
        return None
    return b["input"]


def parse_dropout(node: fx.Node, term: Callable[[Any], Term | None]) -> Term | None:
    x = identity_dropout(node)
    return None if x is None else term(x)


STRUCTURAL: dict[str, Callable[[fx.Node, Callable[[Any], Term | None]], Any]] = {
    "split": parse_split_like, "split_with_sizes": parse_split_like, "chunk": parse_split_like,
    "tensor_split": parse_split_like, "unbind": parse_unbind, "narrow": parse_narrow,
    "slice": parse_slice, "select": parse_select, "squeeze": parse_squeeze, "unsqueeze": parse_unsqueeze,
    "cat": parse_cat, "concat": parse_cat, "concatenate": parse_cat, "stack": parse_stack,
    "getitem": parse_getitem, "view": parse_reshape, "reshape": parse_reshape, "flatten": parse_reshape,
    "unflatten": parse_reshape, **dict.fromkeys(_DROPOUT_TRAINING, parse_dropout),
}


# ---------------------------------------------------------------------------------------------
# Generic calls: a template with slots for node arguments, registered under a string key.


@dataclass(frozen=True)
class Slot:
    index: int


@dataclass
class Call:
    """A call with its FX-node arguments replaced by slots; emits the same call back."""

    name: str
    op: str  # "call_function" | "call_method"
    target: Any
    spec: Any  # pytree spec of (args, kwargs)
    leaves: tuple[Any, ...]  # constants and Slots
    cost: float
    constructor: str  # "Op" | "Unary" | "Binary"
    device: str = ""  # the result's device: calls on different devices never share a key
    exact: bool = False  # elementwise, but only on the elements written (:func:`computes_exactly`)
    draws: bool = False  # a dropout that draws, batched under ``batch_random`` (optimus_egg.draws)

    def emit(self, graph: fx.Graph, inputs: Sequence[fx.Node]) -> fx.Node:
        leaves = [inputs[x.index] if isinstance(x, Slot) else x for x in self.leaves]
        args, kwargs = pytree.tree_map(lambda x: slice(*x) if isinstance(x, SliceArgs) else x,
                                       pytree.tree_unflatten(leaves, self.spec),
                                       is_leaf=lambda x: isinstance(x, SliceArgs))
        return graph.create_node(self.op, self.target, tuple(args), dict(kwargs))


class SliceArgs(NamedTuple):
    """A slice with a node among its bounds (``x[: s0 // 2]``), spelled as a pytree node so that
    the node is an argument of the call (pytree keeps a slice whole, as a constant)."""

    start: Any
    stop: Any
    step: Any


def _built(name: str, target: Callable[..., Any], slots: int, *constants: Any, cost: float = 1.0
           ) -> tuple[str, Call]:
    """A call rules may build although the graph has none: ``target(slot0, ..., constants)``,
    under a fixed key (``name#`` and the constants) that rule text names with :func:`built`."""
    leaves, spec = pytree.tree_flatten(([*(Slot(i) for i in range(slots)), *constants], {}))
    key = f"{name}#{','.join(map(str, constants))}"
    return key, Call(name, "call_function", target, spec, tuple(leaves), cost, "Op")


#: The calls rules build (every registry holds them): a batched matmul with and without the
#: added bias, the view that turns stacked ``[N, out, in]`` weights into ``bmm``'s operand and
#: the one that swaps two leading dims (``[n, g, i]`` as ``bmm``'s ``[g, n, i]``),
#: ``addcmul(b, y, w) = b + y * w`` (an affine transform applied after a fused normalization),
#: a broadcasting ``mul`` (an ``Op``: ``Binary`` promises operands of the result's shape), and
#: ``contiguous`` (one copy that writes a transposed result in row-major order).
BUILT: dict[str, Call] = dict([
    _built("baddbmm", torch.baddbmm, 3), _built("bmm", torch.bmm, 2),
    _built("transpose", torch.transpose, 1, 1, 2, cost=0.0), _built("transpose", torch.transpose, 1, 0, 1, cost=0.0),
    _built("addcmul", torch.addcmul, 3), _built("mul", torch.mul, 2),
    _built("contiguous", torch.Tensor.contiguous, 1)])


def built(name: str, *constants: Any) -> str:
    """The key of a :data:`BUILT` call as an egglog string literal, for rule text."""
    key = f"{name}#{','.join(map(str, constants))}"
    if key not in BUILT:
        raise KeyError(f"no built call {key!r}; known: {', '.join(BUILT)}")
    return f'"{key}"'


def _plain_unary(call: Call) -> bool:
    """An elementwise op of its tensor alone (``inplace=False`` aside): every spelling of it in
    the op table (``torch.X``, ``F.X``, ``Tensor.X``) computes the same."""
    if call.constructor != "Unary":
        return False
    return _PLAIN_UNARY_LEAVES.get(call.spec) == call.leaves


#: The spec of ``f(x)`` and of ``f(x, inplace=False)`` → the leaves of that call.
_PLAIN_UNARY_LEAVES = {pytree.tree_structure(([0], {})): (Slot(0),),
                       pytree.tree_structure(([0], {"inplace": 0})): (Slot(0), False)}


def _plain_layer_norm(call: Call) -> Call | None:
    """``layer_norm(x, shape, w, b, eps)`` without ``w`` and ``b`` (positional calls only, where
    slots 1 and 2 are the weight and the bias): the normalization alone; a call of ``x`` alone is
    that already."""
    args, kwargs = pytree.tree_unflatten(list(call.leaves), call.spec)
    slots = sum(isinstance(x, Slot) for x in call.leaves)
    if kwargs or len(args) < 4 or args[0] != Slot(0):
        return None
    if slots == 1:
        return call
    if slots != 3 or args[2:4] != [Slot(1), Slot(2)]:
        return None
    leaves, spec = pytree.tree_flatten(([*args[:2], None, None, *args[4:]], {}))
    return Call(call.name, call.op, call.target, spec, tuple(leaves), call.cost, call.constructor, call.device)


def contracts_last(equation: str) -> bool:
    """Is ``equation`` Optimus' einsum_to_pointwise_pass form ``"bcd,bcde->bce"`` (any four
    letters): ``x``'s last dim contracted against ``w``'s third, the leading two shared? Unlike
    Optimus' matcher, the four letters must differ (``"bcd,bcdd->bcd"`` takes a diagonal)."""
    parts = "".join(equation.split()).replace("->", ",").split(",")
    if len(parts) != 3 or [len(p) for p in parts] != [3, 4, 3]:
        return False
    x, w, out = parts
    return (w.isalpha() and len(set(w)) == 4 and x == w[:3] and out == w[:2] + w[3])


def _contraction_sum(call: Call) -> Call | None:
    """``einsum("bcd,bcde->bce", x, w)`` is ``(x.unsqueeze(-1) * w).sum(2)``: the sum that
    finishes it once its operands are multiplied (``torch.sum(slot 0, 2)``), for an einsum of
    two tensors in that form (:func:`contracts_last`); None for any other einsum."""
    args, kwargs = pytree.tree_unflatten(list(call.leaves), call.spec)
    if kwargs or len(args) < 2 or not isinstance(args[0], str):
        return None
    operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
    if operands != [Slot(0), Slot(1)] or not contracts_last(args[0]):
        return None
    leaves, spec = pytree.tree_flatten(([Slot(0), 2], {}))
    return Call("sum", "call_function", torch.sum, spec, tuple(leaves), 1.0, "Op", call.device)


#: Variants of a graph's call that rules may build, registered next to it under its key plus a
#: suffix (rule text names one as ``(+ k "-plain")``): op name → (suffix, the variant or None).
DERIVED: dict[str, tuple[str, Callable[[Call], Call | None]]] = {
    "layer_norm": ("-plain", _plain_layer_norm), "einsum": ("-sum", _contraction_sum)}


@dataclass
class Registry:
    """String keys for ``Op``/``Unary``/``Binary`` terms of one graph, and the calls rules build
    (:data:`BUILT`, under their fixed keys)."""

    calls: dict[str, Call] = field(default_factory=lambda: dict(BUILT))
    _by_identity: dict[tuple[Any, ...], str] = field(default_factory=dict)

    def key(self, call: Call, shareable: bool) -> str:
        if _plain_unary(call):  # torch.relu(x), F.relu(x), x.relu(): one op, one key
            identity: tuple[Any, ...] = ("Unary", call.name, call.device, call.exact)
        else:
            identity = (call.op, call.target, str(call.spec), call.constructor, call.cost,
                        tuple(repr(x) for x in call.leaves), call.device, call.exact, call.draws)
        if shareable and identity in self._by_identity:
            return self._by_identity[identity]
        n = len(self.calls) - len(BUILT)
        key = f"{call.name}{EXACT if call.exact else ''}{DRAWS if call.draws else ''}#{n}"
        if call.name in DERIVED and call.constructor == "Op":
            suffix, variant = DERIVED[call.name]
            derived = variant(call)
            if derived is None:  # rules that name the variant must not see this call as that op
                key = f"{call.name}-as-written#{n}"
            else:
                self.calls[key + suffix] = derived
        self.calls[key] = call
        if shareable:
            self._by_identity[identity] = key
        return key


#: Ops whose calls rules read by position: bound to these parameters (with these defaults) and
#: written back positionally, so slot ``i`` is the same parameter however the call was spelled
#: (``F.linear(bias=b, input=x, weight=w)`` would otherwise put the bias in slot 0).
POSITIONAL: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "linear": (("input", "weight", "bias"), {"bias": None}),
    "layer_norm": (("input", "normalized_shape", "weight", "bias", "eps"),
                   {"weight": None, "bias": None, "eps": 1e-5}),
}


def _arguments(node: fx.Node, op: OpDef | None) -> tuple[list[Any], dict[str, Any]]:
    if op is not None and op.name in POSITIONAL and node.op == "call_function":
        params, defaults = POSITIONAL[op.name]
        bound = bind(node, *params, defaults=defaults)
        if bound is not None:
            return [bound[p] for p in params], {}
    return list(node.args), dict(node.kwargs)


#: Argument types pytree keeps whole: a call whose arguments are all of these (``relu(x)``,
#: ``add(x, y, alpha=2)``, most of a graph) is flattened without walking it.
_LEAF_TYPES = frozenset({fx.Node, int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                         torch.memory_format})
#: (number of positional arguments, keyword names) → the spec of such a call's ``(args, kwargs)``.
_FLAT_SPECS: dict[tuple[int, tuple[str, ...]], Any] = {}


def template(node: fx.Node, op: OpDef | None = None) -> tuple[Any, tuple[Any, ...], list[fx.Node]]:
    """(spec, leaves with Slots, the node arguments in slot order)."""
    args, kwargs = _arguments(node, op)
    if all(type(x) in _LEAF_TYPES for x in args) and all(type(x) in _LEAF_TYPES for x in kwargs.values()):
        shape = (len(args), tuple(kwargs))
        spec = _FLAT_SPECS.get(shape)
        if spec is None:
            spec = _FLAT_SPECS[shape] = pytree.tree_structure((list(args), kwargs))
        leaves = [*args, *kwargs.values()]
    else:
        leaves, spec = pytree.tree_flatten(_node_slices((args, kwargs)))
    inputs: list[fx.Node] = []
    out = []
    for leaf in leaves:
        if isinstance(leaf, fx.Node):
            out.append(Slot(len(inputs)))
            inputs.append(leaf)
        else:
            out.append(leaf)
    return spec, tuple(out), inputs


def _node_slices(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(_node_slices(y) for y in x)
    if isinstance(x, dict):
        return {k: _node_slices(v) for k, v in x.items()}
    if isinstance(x, slice) and any(isinstance(b, fx.Node) for b in (x.start, x.stop, x.step)):
        return SliceArgs(x.start, x.stop, x.step)
    return x


def generic_call(node: fx.Node, op: OpDef | None) -> tuple[Call, list[fx.Node]]:
    """Classify a call as Unary / Binary (elementwise, rules may move it) or a plain Op."""
    product = _elementwise_einsum(node, op)
    if product is not None:
        return product
    spec, leaves, inputs = template(node, op)
    out = val(node)
    constructor = "Op"
    if op is not None and (op.kind is Kind.POINTWISE or op.name in _IDENTITY_VIEWS) and isinstance(out, torch.Tensor):
        shapes = [val(i).shape if is_tensor_node(i) else None for i in inputs]
        if all(s is not None and _same_shape(s, out.shape) for s in shapes) and len(inputs) in (1, 2):
            constructor = "Unary" if len(inputs) == 1 else "Binary"
    name = op.name if op is not None else _target_name(node)
    device = str(out.device) if isinstance(out, torch.Tensor) else ""
    exact = constructor != "Op" and computes_exactly(name, out)
    return Call(name, node.op, node.target, spec, leaves, _cost(node, op), constructor, device, exact), inputs


#: Elementwise ops that may blow up on values the program never gave them: a derivative that is
#: infinite at finite inputs (``1 / b`` at 0, ``sqrt`` at 0, ``exp`` past overflow), or, on
#: integers, an error (division by zero).
_SINGULAR = frozenset({"div", "pow", "floordiv", "fmod", "remainder", "atan2", "hypot", "exp", "exp2", "expm1",
                       "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "tan", "logit"})
#: Marks the key of a call that :func:`computes_exactly` (rules test it with ``count-matches``).
EXACT = "!"
#: Marks the key of a dropout that draws, batched under ``batch_random`` (:mod:`optimus_egg.draws`).
DRAWS = "~"


def computes_exactly(name: str, out: Any) -> bool:
    """Whether an elementwise call must run on exactly the elements the program runs it on: a
    rule that moves it out of a slice (``(a / b)[:2]`` for ``a[:2] / b[:2]``) also runs it on the
    rest, where its gradient, zero times the derivative there, was ``0 / 0`` (NaN) where ``b`` is
    0, while the program's was 0; on integers, it raised where the program did not. So every
    :data:`_SINGULAR` op, whether or not its value requires grad here: a graph ``optimize``
    returns for inputs that need none may be differentiated later."""
    return name in _SINGULAR and isinstance(out, torch.Tensor)


def _elementwise_einsum(node: fx.Node, op: OpDef | None) -> tuple[Call, list[fx.Node]] | None:
    """``einsum("bi,bi->bi", a, b)`` is ``a * b``: an elementwise Binary the rules can move
    (Optimus' einsum_to_pointwise_pass rewrites another form, see :func:`contracts_last`). Only
    when both operands have the output's exact shape."""
    if op is None or op.name != "einsum" or node.kwargs or len(node.args) < 2:
        return None
    eq, *operands = node.args
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    if not isinstance(eq, str) or len(operands) != 2 or not all(is_tensor_node(o) for o in operands):
        return None
    lhs, _, rhs = eq.replace(" ", "").partition("->")
    subs = lhs.split(",")
    if not rhs or len(subs) != 2 or any(s != rhs for s in subs) or len(set(rhs)) != len(rhs) or "." in rhs:
        return None
    out = val(node)
    if not isinstance(out, torch.Tensor) or any(val(o).dtype != out.dtype or not _same_shape(val(o).shape, out.shape)
                                                for o in operands):
        return None
    leaves, spec = pytree.tree_flatten(([Slot(0), Slot(1)], {}))
    return Call("mul", "call_function", torch.mul, spec, tuple(leaves), 1.0, "Binary"), list(operands)


def _same_shape(a: Sequence[Any], b: Sequence[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        sx, sy = static_int(x), static_int(y)
        if sx is None or sy is None:
            if not (isinstance(x, torch.SymInt) and isinstance(y, torch.SymInt)
                    and x.node.expr == y.node.expr):
                return False
        elif sx != sy:
            return False
    return True


def _target_name(node: fx.Node) -> str:
    t = node.target
    name = t if isinstance(t, str) else getattr(t, "__name__", None) or str(t)
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)


def launches(node: fx.Node) -> float:
    """Kernels a node launches in eager mode (views none)."""
    return _cost(node, lookup(node)) if node.op in ("call_function", "call_method") else 0.0


def _cost(node: fx.Node, op: OpDef | None) -> float:
    if op is None:
        return 1.0
    if op.name == "getitem" and not is_tensor_node(node.args[0]):
        return 0.0  # a projection out of a tuple
    if op.kind is Kind.VIEW:
        return 0.0
    if op.kind is Kind.MAYBE_VIEW:
        return 0.0 if aliases_input(node) else 1.0
    if node.target is F.embedding_bag:
        return _embedding_bag_launches(node)
    return 1.0


def _embedding_bag_launches(node: fx.Node) -> float:
    """``F.embedding_bag`` of a 2-D input (bags of one length) makes its offsets (``arange``) and
    flattens the input and any ``per_sample_weights`` in Python before its one kernel; a
    flattening that cannot be a view is a copy (``ids[:, i]`` of a 3-D tensor of ids)."""
    b = bind(node, "input", "weight", "offsets", "max_norm", "norm_type", "scale_grad_by_freq", "mode",
             "sparse", "per_sample_weights", "include_last_offset", "padding_idx",
             defaults={"offsets": None, "max_norm": None, "norm_type": 2, "scale_grad_by_freq": False,
                       "mode": "mean", "sparse": False, "per_sample_weights": None,
                       "include_last_offset": False, "padding_idx": None})
    x = val(b["input"]) if b is not None else None
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.is_nested:
        return 1.0
    flat = [t for t in (x, val(b["per_sample_weights"])) if isinstance(t, torch.Tensor)]
    return 2.0 + sum(not _flattens_as_view(t) for t in flat)


def _flattens_as_view(t: torch.Tensor) -> bool:
    """Whether ``t.reshape(-1)`` is a view: its dims of more than one element are laid out as
    one run (a symbolic size: assumed a copy)."""
    dims = [(static_int(n), static_int(s)) for n, s in zip(t.shape, t.stride())]
    if any(n is None or s is None for n, s in dims):
        return False
    run = [(n, s) for n, s in dims if n != 1]
    return all(s == n_next * s_next for (_, s), (n_next, s_next) in zip(run, run[1:]))


class StorageKey(torch.multiprocessing.reductions.StorageWeakRef):
    """A tensor's storage, as a key: equal to the key of the same storage and to nothing else.
    (torch's ``StorageWeakRef`` raises when compared with ``None``, the key of a non-tensor
    argument such as a symbolic size: ``reshape(t, s0, -1)``.)"""

    __slots__ = ()
    __hash__ = torch.multiprocessing.reductions.StorageWeakRef.__hash__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageKey) and self.cdata == other.cdata


def storage_key(t: Any) -> StorageKey | None:
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return StorageKey(t.untyped_storage())
    except Exception:  # noqa: BLE001 - tensors without storage (sparse, nested) alias nothing we track
        return None


def aliases_input(node: fx.Node) -> bool:
    out = storage_key(val(node))
    return out is not None and any(storage_key(val(i)) == out for i in node.all_input_nodes)


#: Functions that write some of their tensor arguments when called a certain way, not in place
#: of their result: a batch norm in training (or an instance norm on its input's statistics)
#: updates the running statistics it is given; an embedding with ``max_norm`` renormalizes the
#: rows it reads, in its weight. Each: the arguments written, and when, from the bound arguments.
_WRITES_WHEN: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], Any]]] = {
    "batch_norm": (("running_mean", "running_var"), lambda b: b["training"]),
    "instance_norm": (("running_mean", "running_var"), lambda b: b["use_input_stats"]),
    "embedding": (("weight",), lambda b: b["max_norm"] is not None),
    "embedding_bag": (("weight",), lambda b: b["max_norm"] is not None),
}


#: ATen ops that update a batch norm's running statistics while their schemas declare no write
#: (``native_batch_norm`` is what ``make_fx`` records for ``F.batch_norm`` in training).
_UNDECLARED_WRITES = frozenset({"native_batch_norm", "batch_norm_update_stats", "_batch_norm_impl_index",
                                "cudnn_batch_norm", "miopen_batch_norm"})


def written_arguments(node: fx.Node) -> list[fx.Node]:
    """The inputs a call writes to: all of them for a call in place (:func:`is_inplace`), else
    what it writes besides computing its result (:func:`_written_besides`)."""
    return node.all_input_nodes if _writes_in_place(node) else _written_besides(node)


def _written_besides(node: fx.Node) -> list[fx.Node]:
    """The inputs a call that is not in place writes to: those :data:`_WRITES_WHEN` names, all
    of them for an ATen op (or a builtin's) that writes one, all of them (and the tensors of its
    submodule) for a submodule that may write (:func:`_module_writes`)."""
    if node.op == "call_module":
        return _module_writes(node)
    if node.op not in ("call_function", "call_method"):
        return []
    name = _op_name(node.target) if node.op == "call_function" else ""
    entry = _WRITES_WHEN.get(name)
    if entry is None or not inspect.isfunction(node.target):
        # an ATen op, or a builtin whose ATen op, writes an argument (fake quantization's
        # observer statistics) or updates running statistics undeclared: as if it wrote all
        return node.all_input_nodes if name in _UNDECLARED_WRITES or _aten_writes(name) else []
    names, when = entry
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
        bound.apply_defaults()
        written = when(bound.arguments)
    except (TypeError, ValueError, KeyError):  # (arguments that do not bind: as if it wrote all)
        return node.all_input_nodes
    if isinstance(written, fx.Node) or written:  # (a flag computed in the graph: it may be set)
        return [a for n in names if isinstance(a := bound.arguments.get(n), fx.Node)]
    return []


def _op_name(target: Any) -> str:
    """``native_batch_norm`` for ``torch.native_batch_norm``, ``aten.native_batch_norm`` and its
    overloads alike."""
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[-1]
    return getattr(target, "__name__", "")


def _module_writes(node: fx.Node) -> list[fx.Node]:
    """What a submodule call (``fx.symbolic_trace`` keeps ``torch.nn`` modules whole) may write:
    nothing for a ``torch.nn`` module that has no in-place flag, ``max_norm`` or running
    statistics it updates; otherwise its inputs and every tensor of it the graph reads."""
    root = node.graph.owning_module
    try:
        mod = root.get_submodule(node.target) if root is not None else None
    except AttributeError:
        mod = None
    pure = (mod is not None and type(mod).__module__.startswith("torch.nn.modules")
            and not getattr(mod, "inplace", False) and getattr(mod, "max_norm", None) is None
            and not (getattr(mod, "track_running_stats", False) and mod.training))
    if pure:
        return []
    prefix = f"{node.target}."
    held = [n for n in node.graph.find_nodes(op="get_attr") if n.target.startswith(prefix)]
    return [*node.all_input_nodes, *held]


@functools.cache
def _aten_writes(name: str) -> bool:
    """Does an overload of ``aten::name``, other than an ``out=`` one, write to an argument?"""
    packet = getattr(torch.ops.aten, name, None) if name else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only
               and str(a.type) in ("Tensor", "Optional[Tensor]")  # (not TorchScript's list ops)
               for o in packet.overloads() if "out" not in o for a in getattr(packet, o)._schema.arguments)


#: Calls whose result depends on how their input is laid out in memory, not only on its values.
_LAYOUT_READERS = frozenset({"as_strided", "as_strided_copy", "as_strided_scatter"})


def reads_layout(node: fx.Node) -> bool:
    """Does this call read the memory layout of a tensor the graph computes (``as_strided`` of
    anything but an input)? A rewrite may compute that tensor with other strides."""
    if node.op not in ("call_function", "call_method"):
        return False
    name = node.target if node.op == "call_method" else _op_name(node.target)
    source = node.args[0] if node.args else node.kwargs.get("input", node.kwargs.get("self"))
    return name in _LAYOUT_READERS and isinstance(source, fx.Node) and source.op not in ("placeholder", "get_attr")


def is_inplace(node: fx.Node) -> bool:
    """Does this call write to one of its arguments?"""
    return _writes_in_place(node) or bool(_written_besides(node))


def _writes_in_place(node: fx.Node) -> bool:
    """Does this call write to one of its arguments, returning it (``add_``, ``out=``)?"""
    t = node.target
    if node.op == "call_method":
        return (t.endswith("_") and not t.startswith("__")) or t in (
            "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
            "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__setitem__")
    if node.op != "call_function":
        return False
    if isinstance(t, torch._ops.OpOverload):
        return any(a.alias_info is not None and a.alias_info.is_write for a in t._schema.arguments)
    if isinstance(t, torch._ops.OpOverloadPacket):  # (the overload is picked at the call: any that writes)
        return any(a.alias_info is not None and a.alias_info.is_write
                   for o in t.overloads() for a in getattr(t, o)._schema.arguments)
    if t in (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
             operator.ifloordiv, operator.ipow, operator.iand, operator.ior, operator.ixor,
             operator.ilshift, operator.irshift, operator.imatmul):
        return True
    if "out" in node.kwargs:
        return True
    name = getattr(t, "__name__", "")
    if name.endswith("_") and not name.startswith("__"):
        return True
    if inspect.isfunction(t) and "inplace" in inspect.signature(t).parameters:
        try:
            return bool(inspect.signature(t).bind(*node.args, **node.kwargs).arguments.get("inplace"))
        except TypeError:
            return True
    return node.kwargs.get("inplace") is True


#: The calls Dynamo writes where a ``with`` block changes how the calls after it compute: grad
#: mode (``no_grad``, ``enable_grad``, ``set_grad_enabled``), forward AD, ``autocast``,
#: ``inference_mode``, saved-tensor hooks, functorch transforms, the attention backend.
_MODE_SWITCHES = frozenset({
    "_set_grad_enabled", "_set_fwd_grad_enabled", "_enter_autocast", "_exit_autocast",
    "_enter_inference_mode", "_exit_inference_mode", "set_inplace_requires_grad_allowed",
    "_saved_tensors_hooks_disable", "_saved_tensors_hooks_enable", "_vmap_increment_nesting",
    "_vmap_decrement_nesting", "_jvp_increment_nesting", "_jvp_decrement_nesting", "_enter_dual_level",
    "_exit_dual_level", "push_dynamic_layer_stack", "pop_dynamic_layer_stack", "_grad_increment_nesting",
    "_grad_decrement_nesting", "_sdpa_kernel"})


def switches_mode(node: fx.Node) -> bool:
    """Does this call change a mode the calls after it compute under (see ``_MODE_SWITCHES``)?
    The same call computes another value (``x @ y`` in bfloat16 under autocast) or gradient
    (``p.exp()`` under ``no_grad``) on either side of it."""
    t = node.target
    return (node.op == "call_function" and getattr(t, "__name__", None) in _MODE_SWITCHES
            and str(getattr(t, "__module__", "")).startswith("torch"))


# ---------------------------------------------------------------------------------------------
# Structural emitters: the mirror image of the parsers above.


#: How each structural form is written back (see ``Emitter.form``): the torch call, and whether
#: it takes a list of tensors (cat, stack) rather than one.
STRUCTURAL_CALLS: dict[str, tuple[Callable[..., Any], bool]] = {
    "Sl": (torch.narrow, False), "Select": (torch.select, False), "Squeeze": (torch.squeeze, False),
    "Unsqueeze": (torch.unsqueeze, False), "Cat": (torch.cat, True), "Stack": (torch.stack, True),
    "Flat": (torch.flatten, False), "Unflat": (torch.unflatten, False)}


def emit_structural(graph: fx.Graph, form: str, inputs: Sequence[fx.Node], literals: Sequence[int]
                    ) -> fx.Node:
    fn, variadic = STRUCTURAL_CALLS[form]
    tensors = (list(inputs),) if variadic else tuple(inputs)
    return graph.call_function(fn, (*tensors, *literals))


aten = torch.ops.aten


def _aten_view(g: fx.Graph, n: fx.Node) -> fx.Node:  # flatten / unflatten: to the shape it has
    return g.call_function(aten.reshape.default, (n.args[0], list(val(n).shape)))


def aten_stack(g: fx.Graph, xs: Sequence[fx.Node], d: int) -> fx.Node:
    """``stack(xs, d)`` in ATen (``d`` non-negative): Inductor lowers cat, not stack."""
    return g.call_function(aten.cat.default, ([g.call_function(aten.unsqueeze.default, (x, d)) for x in xs], d))


def _aten_stack(g: fx.Graph, n: fx.Node) -> fx.Node:
    xs, d = n.args
    return aten_stack(g, xs, d % val(n).dim())


def _aten_transpose(g: fx.Graph, n: fx.Node) -> fx.Node:  # Inductor lowers permute, not transpose
    x, a, b = n.args
    dims = list(range(val(x).dim()))
    dims[a], dims[b] = dims[b], dims[a]
    return g.call_function(aten.permute.default, (x, dims))


def _same(target: Any) -> Callable[[fx.Graph, fx.Node], fx.Node]:
    return lambda g, n: g.call_function(target, n.args, n.kwargs)


#: The ATen spelling of every torch call the emitter and the rules write, for a graph that is
#: ATen already (Inductor's post-grad graphs, lowered op by op, where a ``torch.narrow`` has no
#: lowering): torch callable → (graph, the torch-level node) → the ATen node that replaces it.
ATEN_CALLS: dict[Any, Callable[[fx.Graph, fx.Node], fx.Node]] = {
    torch.narrow: lambda g, n: g.call_function(aten.slice.Tensor, (*n.args[:3], n.args[2] + n.args[3])),
    torch.select: _same(aten.select.int), torch.squeeze: _same(aten.squeeze.dim),
    torch.unsqueeze: _same(aten.unsqueeze.default), torch.cat: _same(aten.cat.default), torch.stack: _aten_stack,
    torch.flatten: _aten_view, torch.unflatten: _aten_view, torch.split: _same(aten.split_with_sizes.default),
    torch.unbind: _same(aten.unbind.int), torch.clone: _same(aten.clone.default), torch.bmm: _same(aten.bmm.default),
    torch.baddbmm: _same(aten.baddbmm.default), torch.transpose: _aten_transpose,
    torch.addcmul: _same(aten.addcmul.default), torch.mul: _same(aten.mul.Tensor), torch.add: _same(aten.add.Tensor),
    torch.Tensor.contiguous: lambda g, n: g.call_function(aten.clone.default, n.args[:1],
                                                          {"memory_format": torch.contiguous_format}),
    torch.sum: lambda g, n: g.call_function(aten.sum.dim_IntList, (n.args[0], [n.args[1]]))}


def is_aten(graph: fx.Graph) -> bool:
    """Is every call in ``graph`` an ATen op (or a projection out of one's tuple)?"""
    return all(n.op in ("placeholder", "get_attr", "output") or (n.op == "call_function" and (
        isinstance(n.target, torch._ops.OpOverload) or n.target is operator.getitem)) for n in graph.nodes)


#: The constructors that never launch a kernel by themselves.
FREE_CONSTRUCTORS = frozenset({"Input", "Sl", "Squeeze", "Unsqueeze", "Flat", "Unflat", "Cons", "Nil"})
__all__ = ["ARGS", "OPS", "Kind", "OpDef", "Registry", "Call", "Pieces", "lookup", "val"]
