"""What a graph that ``optimize`` returns assumes of its arguments, checked on every call.

``optimize`` specializes its graph to the example inputs (capture traces sizes into constants
and bakes in non-tensor arguments, and the rules fire on the shapes and dtypes seen), so the
graph refuses arguments it was not optimized for instead of computing something else for them.
Sizes and scalars the captured graph holds symbolic are not specialized.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx as fx

from optimus_egg import effects
from optimus_egg.nodes import static_int, val


def refuse_others(gm: fx.GraphModule, example_inputs: Sequence[Any], captured: fx.Graph) -> None:
    """``gm``, optimized for ``example_inputs`` (captured as ``captured``), refuses other
    arguments, and, where it switches grad mode, a grad mode other than the current one: a graph
    that switches grad mode sets it back to the mode it was captured in, not the caller's. So
    do its deep copies: a GraphModule's deepcopy drops forward hooks, but runs its deepcopy
    hooks, which are copied along."""
    grad = torch.is_grad_enabled() if any(effects.switches_mode(n) for n in gm.graph.nodes) else None
    expected = (*_specialized(example_inputs, captured), grad)
    gm.register_forward_pre_hook(functools.partial(_check_inputs, expected))
    if hasattr(gm, "_register_deepcopy_hook"):  # torch >= 2.5
        gm._register_deepcopy_hook(functools.partial(_refuse_again, expected))


def _refuse_again(expected: tuple[Any, list[Any], bool | None], copy: fx.GraphModule) -> None:
    copy.register_forward_pre_hook(functools.partial(_check_inputs, expected))


@dataclass(frozen=True)
class _TensorArg:
    shape: tuple[int | None, ...]  # None: a symbolic size of the graph's, any
    dtype: torch.dtype
    device: torch.device

    def admits(self, other: Any) -> bool:
        return (isinstance(other, _TensorArg) and len(self.shape) == len(other.shape)
                and all(n is None or n == m for n, m in zip(self.shape, other.shape))
                and (self.dtype, self.device) == (other.dtype, other.device))

    def __str__(self) -> str:
        return f"a {self.dtype} tensor of shape [{', '.join('any' if n is None else str(n) for n in self.shape)}] on {self.device}"


_ANY = object()  # a symbolic scalar of the graph's: any value


def _specialized(inputs: Sequence[Any], graph: fx.Graph | None = None) -> tuple[Any, list[Any]]:
    """What a graph optimized for ``inputs`` assumes of its arguments: their structure, each
    tensor's shape, dtype and device, each other value; except the sizes and scalars
    that ``graph``'s placeholders (one per argument, where it has them) hold symbolic."""
    leaves, spec = torch.utils._pytree.tree_flatten(list(inputs))
    holders = [n for n in graph.nodes if n.op == "placeholder"] if graph is not None else []
    vals = [val(n) for n in holders] if len(holders) == len(leaves) else [None] * len(leaves)
    out: list[Any] = []
    for x, v in zip(leaves, vals):
        if isinstance(x, torch.Tensor):
            sizes = v.shape if isinstance(v, torch.Tensor) and v.dim() == x.dim() else x.shape
            shape = tuple(None if static_int(s) is None else n for n, s in zip(x.shape, sizes))
            out.append(_TensorArg(shape, x.dtype, x.device))
        else:
            out.append(_ANY if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) else x)
    return spec, out


def _check_inputs(expected: tuple[Any, list[Any], bool | None], module: torch.nn.Module, args: tuple[Any, ...]
                  ) -> None:
    (spec, want, grad), (got_spec, got) = expected, _specialized(args)
    if grad is not None and torch.is_grad_enabled() != grad:
        # (its _set_grad_enabled(True) after a no_grad region would leave grad mode on in the caller's no_grad)
        raise ValueError(f"optimus_egg: this graph switches grad mode and was optimized with grad mode "
                         f"{'on' if grad else 'off'}; it would leave grad mode {'on' if grad else 'off'} here: "
                         f"optimize it again in this mode")
    if got_spec != spec:
        raise ValueError(f"optimus_egg: this graph was optimized for arguments structured as {spec}, got "
                         f"{got_spec}: optimize it again for these")
    for i, (w, g) in enumerate(zip(want, got)):
        if not (w is _ANY or (w.admits(g) if isinstance(w, _TensorArg) else type(w) is type(g) and w == g)):
            raise ValueError(f"optimus_egg: this graph was optimized for its example inputs; argument {i} was "
                             f"{w if isinstance(w, _TensorArg) else repr(w)}, got "
                             f"{g if isinstance(g, _TensorArg) else repr(g)}: optimize it again for these")
