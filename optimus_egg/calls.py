"""Call templates: a graph's call with its node arguments replaced by slots, kept under a string
key that ``Op``/``Unary``/``Binary`` terms name, and written back with the nodes the e-graph
chose.

A :class:`Registry` holds one graph's calls and the calls rules may build (:data:`BUILT`, and
the variants of :data:`DERIVED`); :func:`generic_call` reads a call off its node, with its cost
in kernel launches (:func:`launches`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from optimus_egg.effects import aliases_input
from optimus_egg.lowered import lowered_kind
from optimus_egg.nodes import bind, is_tensor_node, static_int, val
from optimus_egg.optable import COMMUTATIVE, IDENTITY_VIEWS, SINGULAR, Kind, OpDef, lookup


@dataclass(frozen=True)
class Slot:
    """Where a call's ``index``-th node argument goes in its template."""

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
    lowered: str = ""  # what Inductor makes of a call the op table does not name (optimus_egg.lowered)

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
        marks = f"{EXACT if call.exact else ''}{DRAWS if call.draws else ''}"
        key = f"{call.name}{marks}#{n}{COMMUTES if _commutes(call) else ''}"
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
    if op is not None and (op.kind is Kind.POINTWISE or op.name in IDENTITY_VIEWS) and isinstance(out, torch.Tensor):
        shapes = [val(i).shape if is_tensor_node(i) else None for i in inputs]
        if all(s is not None and _same_shape(s, out.shape) for s in shapes) and len(inputs) in (1, 2):
            constructor = "Unary" if len(inputs) == 1 else "Binary"
    name = op.name if op is not None else _target_name(node)
    device = str(out.device) if isinstance(out, torch.Tensor) else ""
    exact = constructor != "Op" and computes_exactly(name, out)
    lowered = lowered_kind(node) if op is None else ""
    return Call(name, node.op, node.target, spec, leaves, _cost(node, op), constructor, device, exact,
                lowered=lowered), inputs


#: Marks the key of a call that :func:`computes_exactly` (rules test it with ``count-matches``).
EXACT = "!"
#: Marks the key of a dropout that draws, batched under ``batch_random`` (:mod:`optimus_egg.draws`).
DRAWS = "~"
#: Marks the key of a binary call whose operands may swap (:func:`_commutes`); after the number,
#: so that ``op_named`` still reads the name.
COMMUTES = "^"


def _commutes(call: Call) -> bool:
    """``f(a, b) = f(b, a)``: a :data:`~optimus_egg.optable.COMMUTATIVE` op called on its two
    tensors alone (``torch.add(a, b, alpha=2)`` is not ``torch.add(b, a, alpha=2)``)."""
    return call.constructor == "Binary" and call.name in COMMUTATIVE and call.leaves == (Slot(0), Slot(1))


def computes_exactly(name: str, out: Any) -> bool:
    """Whether an elementwise call must run on exactly the elements the program runs it on: a
    rule that moves it out of a slice (``(a / b)[:2]`` for ``a[:2] / b[:2]``) also runs it on the
    rest, where its gradient, zero times the derivative there, was ``0 / 0`` (NaN) where ``b`` is
    0, while the program's was 0; on integers, it raised where the program did not. So every
    :data:`~optimus_egg.optable.SINGULAR` op, whether or not its value requires grad here: a
    graph ``optimize`` returns for inputs that need none may be differentiated later."""
    return name in SINGULAR and isinstance(out, torch.Tensor)


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
