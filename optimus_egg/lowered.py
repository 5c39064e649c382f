"""What Inductor makes of a call the op table does not name: traced to ATen through Inductor's
own decompositions, a call is ``pointwise`` when every op it becomes is a loop Inductor fuses,
``reduction`` when one of them reduces and the rest are such loops, and ``extern`` otherwise
(a library call, an ATen fallback, or anything the trace cannot tell).

Without it every unnamed call would be priced as an extern call that nothing fuses into, which is
what Inductor does with ``cumsum`` but not with ``logsumexp``, ``glu`` or ``prelu``: a
producer that Inductor inlines into such a call would be priced as a kernel of its own, and a
rewrite that computes it once for several slices would look like a gain it is not.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from optimus_egg.nodes import static_int, val

#: ATen ops Inductor writes as loops of the pointwise kind although their schema has no
#: ``pointwise`` tag: factories, copies and indexed reads.
_LOOPS = frozenset({"full", "scalar_tensor", "iota", "empty", "zeros", "ones", "arange", "clone", "_to_copy",
                    "copy", "where", "masked_fill", "repeat", "rev", "gather", "index", "_unsafe_index",
                    "constant_pad_nd", "embedding", "index_select", "glu", "convert_element_type", "cat"})

#: A symbolic size without a hint is traced at this size (the kind does not depend on it).
_UNHINTED = 8


def lowered_kind(node: fx.Node) -> str:
    """``pointwise``, ``reduction`` or ``extern``: what Inductor lowers ``node``'s call to."""
    if node.op not in ("call_function", "call_method"):
        return "extern"
    tensors = [a for a in node.all_input_nodes if isinstance(val(a), torch.Tensor)]
    key = (node.op, node.target, _shape_free(node.args, tensors), _shape_free(node.kwargs, tensors),
           tuple((t.dtype, t.dim(), t.device.type) for t in map(val, tensors)))
    try:
        hash(key)
    except TypeError:  # an unhashable constant among the arguments: traced each time
        return _traced_kind(node, tensors)
    if key not in _CACHE:
        _CACHE[key] = _traced_kind(node, tensors)
    return _CACHE[key]


def _shape_free(x: Any, tensors: list[fx.Node]) -> Any:
    """The arguments with tensors as their positions and other nodes (symbolic sizes) as None:
    part of the cache key."""
    return pytree.tree_map(lambda a: (tensors.index(a) if a in tensors else None) if isinstance(a, fx.Node) else a,
                           x)


#: Kinds by call, arguments and operand dtypes, ranks and devices.
_CACHE: dict[tuple[Any, ...], str] = {}


def _traced_kind(node: fx.Node, tensors: list[fx.Node]) -> str:
    """``node``'s call traced on fake copies of its tensor operands (``tensors``)."""
    from torch._subclasses import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            fakes = {a: _like(val(a)) for a in tensors}
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: fakes.get(a, _concrete(val(a))))

            def call(*_: Any) -> Any:
                if node.op == "call_method":
                    return getattr(args[0], node.target)(*args[1:], **kwargs)  # type: ignore[arg-type]
                return node.target(*args, **kwargs)  # type: ignore[operator]

            traced = make_fx(call, decomposition_table=_decompositions())()
        kinds = {_aten_kind(n.target) for n in traced.graph.nodes if n.op == "call_function"}
    except Exception:  # noqa: BLE001 - a call the trace cannot run (or a torch without the tables it reads): extern
        return "extern"
    if "extern" in kinds:
        return "extern"
    return "reduction" if "reduction" in kinds else "pointwise"


def _like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(_concrete(tuple(t.shape)), _concrete(tuple(t.stride())), dtype=t.dtype,
                               device=t.device)


def _concrete(x: Any) -> Any:
    """``x`` with every symbolic int replaced by its hint."""
    def one(s: Any) -> Any:
        if isinstance(s, torch.SymInt):
            n = static_int(s)
            return n if n is not None else (s.node.hint if s.node.has_hint() else _UNHINTED)
        return s
    return pytree.tree_map(one, x)


@functools.cache
def _decompositions() -> dict[Any, Any]:
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def _aten_kind(target: Any) -> str:
    """``view`` | ``pointwise`` | ``reduction`` | ``extern`` for one op of a traced call."""
    from torch._inductor import lowering

    if target is operator.getitem:
        return "view"
    if not isinstance(target, torch._ops.OpOverload):
        return "extern"
    if target.is_view:
        return "view"
    lowered = lowering.lowerings.get(target)
    if lowered is None or target in lowering.fallbacks or lowered.__module__.startswith("torch._inductor.kernel"):
        return "extern"  # an ATen fallback, or a library call (matmuls, convolutions)
    if torch.Tag.reduction in target.tags:
        return "reduction"
    if torch.Tag.pointwise in target.tags or target.__name__.split(".")[0] in _LOOPS:
        return "pointwise"
    return "extern"
