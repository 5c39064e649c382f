"""ATen emission: the ATen spelling of every torch call the emitter and the rules write, for a
graph that is ATen already (Inductor's post-grad graphs, lowered op by op, where a
``torch.narrow`` has no lowering)."""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from optimus_egg.nodes import val

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


def _aten_movedim(g: fx.Graph, n: fx.Node) -> fx.Node:
    x, a, b = n.args
    dims = [d for d in range(val(x).dim()) if d != a]
    dims.insert(b, a)
    return g.call_function(aten.permute.default, (x, dims))


def _as_is(target: Any) -> Callable[[fx.Graph, fx.Node], fx.Node]:
    """A call of the ATen op ``target`` with the torch call's arguments as they are."""
    return lambda g, n: g.call_function(target, n.args, n.kwargs)


#: torch callable → (graph, the torch-level node) → the ATen node that replaces it.
ATEN_CALLS: dict[Any, Callable[[fx.Graph, fx.Node], fx.Node]] = {
    torch.narrow: lambda g, n: g.call_function(aten.slice.Tensor, (*n.args[:3], n.args[2] + n.args[3])),
    torch.select: _as_is(aten.select.int), torch.squeeze: _as_is(aten.squeeze.dim),
    torch.unsqueeze: _as_is(aten.unsqueeze.default), torch.cat: _as_is(aten.cat.default), torch.stack: _aten_stack,
    torch.flatten: _aten_view, torch.unflatten: _aten_view, torch.split: _as_is(aten.split_with_sizes.default),
    torch.unbind: _as_is(aten.unbind.int), torch.clone: _as_is(aten.clone.default),
    torch.bmm: _as_is(aten.bmm.default), torch.baddbmm: _as_is(aten.baddbmm.default), torch.transpose: _aten_transpose,
    torch.movedim: _aten_movedim,
    torch.addcmul: _as_is(aten.addcmul.default), torch.mul: _as_is(aten.mul.Tensor),
    torch.add: _as_is(aten.add.Tensor),
    torch.Tensor.contiguous: lambda g, n: g.call_function(aten.clone.default, n.args[:1],
                                                          {"memory_format": torch.contiguous_format}),
    torch.sum: lambda g, n: g.call_function(aten.sum.dim_IntList, (n.args[0], [n.args[1]]))}


def is_aten(graph: fx.Graph) -> bool:
    """Is every call in ``graph`` an ATen op (or a projection out of one's tuple)?"""
    return all(n.op in ("placeholder", "get_attr", "output") or (n.op == "call_function" and (
        isinstance(n.target, torch._ops.OpOverload) or n.target is operator.getitem)) for n in graph.nodes)

