"""Parallel linears, each on its own piece of an input, and what the horizontal-fusion tests
(test_horizontal, test_horizontal_tiled) ask of a rewritten model: its calls, its gradients."""

import torch
from torch import nn


class Parallel(nn.Module):
    """``n`` linears, each on its own piece of the input, the outputs concatenated."""

    def __init__(self, n: int, width: int = 4, out: int = 6, bias: bool = True,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.width = width
        self.towers = nn.ModuleList(nn.Linear(width, out, bias=bias, dtype=dtype) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([t(p) for t, p in zip(self.towers, x.split(self.width, 1))], 1)


def calls_named(gm: torch.fx.GraphModule, name: str) -> int:
    return sum(1 for n in gm.graph.nodes if name == getattr(n.target, "__name__", n.target))


XS = torch.randn(5, 32)


class Gapped(Parallel):
    """Linear ``j`` reads columns ``[8j, 8j + 4)`` of a ``[n, 64]`` input: pieces of one tensor
    that do not tile it (the pieces are stacked, not read as a view)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([t(x[:, 8 * j:8 * j + 4]) for j, t in enumerate(self.towers)], 1)


XG = torch.randn(5, 64)


def assert_same_gradients(model: nn.Module, gm: torch.nn.Module, x: torch.Tensor) -> None:
    """The input's and every parameter's gradient of a weighted sum of the outputs, as eager."""
    grads = []
    for fn in (model, gm):
        model.zero_grad(set_to_none=True)
        x.grad = None
        out = fn(x)
        (out * torch.arange(float(out.numel())).reshape(out.shape)).sum().backward()
        grads.append([x.grad, *(p.grad for p in model.parameters())])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)
