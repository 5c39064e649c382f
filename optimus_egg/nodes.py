"""What an FX node's metadata says: its fake value, static sizes, and its arguments bound to
parameter names."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree


def val(node: Any) -> Any:
    """The fake value a Dynamo/AOT node carries."""
    if not isinstance(node, fx.Node):
        return node
    meta = node.meta
    return meta["val"] if "val" in meta else meta.get("example_value")


def value_in(gm: torch.nn.Module, node: fx.Node) -> Any:
    """A node's value in ``gm``: a ``get_attr``'s attribute (a real tensor), else its fake value."""
    return operator.attrgetter(node.target)(gm) if node.op == "get_attr" else val(node)


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors a value holds: itself, or the leaves of a tuple or list."""
    if isinstance(value, torch.Tensor):  # most values: no pytree walk
        return [value]
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


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
    """A tensor's sizes, None for each symbolic one; None for anything but a tensor."""
    if not isinstance(t, torch.Tensor):
        return None
    return [static_int(s) for s in t.shape]


def is_tensor_node(node: Any) -> bool:
    return isinstance(node, fx.Node) and isinstance(val(node), torch.Tensor)


def norm_dim(dim: Any, rank: int) -> int | None:
    """``dim`` of a tensor of rank ``rank`` counted from the front, or None if it is out of range
    or symbolic."""
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

