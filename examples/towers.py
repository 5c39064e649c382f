"""An example model for ``optimus-egg explain``: per-feature towers with split/cat cruft.

``optimus-egg explain examples/towers.py:towers`` prints what the optimizer does to it; add
``--families split_cat pointwise examples/clamp_rules.py`` to see a rule of your own fire.
"""

from __future__ import annotations

import torch
from torch import nn


class Towers(nn.Module):
    """Dense features split into towers that end in a ReLU6, glued back, ReLU6'd again."""

    def __init__(self, width: int = 32, towers: int = 4) -> None:
        super().__init__()
        self.towers = towers
        piece = width // towers
        self.tower = nn.ModuleList(nn.Sequential(nn.Linear(piece, piece), nn.ReLU6()) for _ in range(towers))
        self.act = nn.ReLU6()
        self.top = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([torch.sigmoid(p) for p in x.chunk(self.towers, dim=1)], dim=1)
        x = torch.cat(torch.split(x, 4, dim=1), dim=1)  # a no-op reshuffle
        h = self.act(torch.cat([t(p) for t, p in zip(self.tower, x.chunk(self.towers, dim=1))], dim=1))
        return self.top(h)


def towers(batch: int = 16) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = Towers()
    return model, (torch.randn(batch, model.towers * 8),)
