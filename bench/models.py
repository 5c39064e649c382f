"""Benchmark models: recommendation-style graphs full of split/cat cruft, and their clean twins.

Each model has a fixed seed and an input factory, so every backend sees the same weights and
inputs.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

Factory = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]


class CruftChain(nn.Module):
    """N blocks of split → pointwise per piece → cat → re-split → cat, a Linear every N/6 blocks.

    Every block is an identity reshuffle around one pointwise op, which is what feature
    pipelines stitched together by different teams tend to look like.
    """

    def __init__(self, blocks: int, width: int = 64, pieces: int = 8) -> None:
        super().__init__()
        self.blocks, self.pieces = blocks, pieces
        self.every = max(blocks // 6, 1)
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks // self.every))
        self.ops = [torch.relu, torch.tanh, torch.sigmoid]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = x.shape[1] // self.pieces
        for i in range(self.blocks):
            op = self.ops[i % len(self.ops)]
            x = torch.cat([op(p) for p in torch.split(x, w, dim=1)], dim=1)
            x = torch.cat(x.chunk(self.pieces, dim=1), dim=1)
            if (i + 1) % self.every == 0:
                x = self.linears[(i + 1) // self.every - 1](x)
        return x


class CleanChain(CruftChain):
    """The same function as :class:`CruftChain` without the cruft: the floor for kernel counts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.blocks):
            x = self.ops[i % len(self.ops)](x)
            if (i + 1) % self.every == 0:
                x = self.linears[(i + 1) // self.every - 1](x)
        return x


def chain(blocks: int, clean: bool = False, batch: int = 32, width: int = 64) -> Factory:
    def make() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        model = (CleanChain if clean else CruftChain)(blocks, width)
        return model, (torch.randn(batch, width),)

    return make


class WideTowers(nn.Module):
    """N per-feature towers (a Linear, then a ReLU) on the pieces of one tensor, glued back: a
    recommendation model's dense features, N ops wide where the chain is one op wide."""

    def __init__(self, towers: int, width: int = 4) -> None:
        super().__init__()
        self.width = width
        self.towers = nn.ModuleList(nn.Linear(width, width) for _ in range(towers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(t(p)) for t, p in zip(self.towers, x.split(self.width, dim=1))], dim=1)


class WideInputs(WideTowers):
    """The same towers, each on a feature of its own (N inputs): they batch into one linear over
    the stacked inputs instead of a view of one tensor."""

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(t(x)) for t, x in zip(self.towers, xs)], dim=1)


class WideSequence(nn.Module):
    """A history of N items unbound, an op on each item, stacked back (sequence features)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.sigmoid(item) * 2 for item in x.unbind(1)], dim=1)


#: The wide benchmark's shapes: N → (model, inputs) for a batch and a feature width.
WIDE_SHAPES: dict[str, Callable[[int, int, int], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "towers": lambda n, b, w: (WideTowers(n, w), (torch.randn(b, n * w),)),
    "inputs": lambda n, b, w: (WideInputs(n, w), tuple(torch.randn(b, w) for _ in range(n))),
    "sequence": lambda n, b, w: (WideSequence(), (torch.randn(b, n, w),)),
}


def wide(towers: int, batch: int = 32, width: int = 4, shape: str = "towers") -> Factory:
    def make() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        return WIDE_SHAPES[shape](towers, batch, width)

    return make


class RecDemo(nn.Module):
    """A small recommendation model: dense features split into per-feature towers, embedding
    bags pooled and glued back, and the split/cat cruft that accumulates around them."""

    def __init__(self, dense: int = 16, towers: int = 4, emb: int = 8, tables: int = 4) -> None:
        super().__init__()
        self.towers = towers
        self.emb = nn.ModuleList(nn.EmbeddingBag(100, emb, mode="sum") for _ in range(tables))
        width = dense // towers
        self.tower = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(towers))
        self.norm = nn.LayerNorm(dense + emb * tables)
        self.top = nn.Linear(dense + emb * tables, 1)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        parts = torch.split(dense, dense.shape[1] // self.towers, dim=1)
        feats = torch.cat([torch.sigmoid(p) for p in parts], dim=1)  # one sigmoid would do
        feats = torch.cat(torch.split(feats, 2, dim=1), dim=1)  # a no-op reshuffle
        towers = [t(p) for t, p in zip(self.tower, feats.chunk(self.towers, dim=1))]
        pooled = torch.stack([e(ids[:, i]) for i, e in enumerate(self.emb)], dim=1)
        pooled = torch.cat(torch.unbind(pooled, dim=1), dim=1)  # stack → unbind → cat
        x = torch.cat([*towers, pooled], dim=1)
        x = torch.cat([torch.tanh(c) for c in x.split(8, dim=1)], dim=1)
        return torch.sigmoid(self.top(self.norm(x)))


def rec_demo(batch: int = 64) -> Factory:
    def make() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        return RecDemo(), (torch.randn(batch, 16), torch.randint(0, 100, (batch, 4, 3)))

    return make
