"""Real-model suite, vision blocks that split and cat channels, at toy sizes: torchvision's
ShuffleNetV2 unit (chunk, branch, cat, channel shuffle), GhostNet's Ghost module (a cheap
depthwise half glued to the primary half, then cut back), Res2Net's hierarchical split
(``torch.split`` by width, each piece added to the last one's output) and Ultralytics' C2f
block (``chunk(2, 1)``, a list extended by bottlenecks, one cat).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from optimus_egg.bench.models import Factory
from optimus_egg.bench.zoo import _factory

BATCH, CHANNELS, SIDE = 4, 16, 8


class VisionBlock(nn.Module):
    """A block of convolutions with batch norm: its weight gradients sum over batch and pixels,
    so any reordering of the sums (Inductor's or eager's) moves them by ~1e-4; the bench
    compares its outputs and gradients with these tolerances (rtol, atol)."""

    tolerance = (1e-3, 1e-3)


def conv_bn(cin: int, cout: int, k: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU()) if act else nn.Sequential(*layers)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """torchvision's ``channel_shuffle``: view as groups, transpose, contiguous, view back."""
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    """torchvision's ``InvertedResidual`` with stride 1: half the channels pass, the other half
    goes through 1x1, depthwise 3x3, 1x1; cat, channel shuffle."""

    def __init__(self, channels: int = CHANNELS) -> None:
        super().__init__()
        half = channels // 2
        self.branch2 = nn.Sequential(conv_bn(half, half), conv_bn(half, half, 3, groups=half, act=False),
                                     conv_bn(half, half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((x1, self.branch2(x2)), dim=1), 2)


class ShuffleNetStage(VisionBlock):
    def __init__(self) -> None:
        super().__init__()
        self.units = nn.Sequential(*(ShuffleUnit() for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.units(x)


class GhostModule(nn.Module):
    """GhostNet's ``GhostModule``: a primary 1x1 conv makes half the outputs, a cheap depthwise
    conv of them the other half; glued and cut to ``oup`` channels."""

    def __init__(self, inp: int, oup: int) -> None:
        super().__init__()
        self.oup, init = oup, (oup + 1) // 2
        self.primary_conv = conv_bn(inp, init)
        self.cheap_operation = conv_bn(init, init, 3, groups=init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.primary_conv(x)
        x2 = self.cheap_operation(x1)
        return torch.cat([x1, x2], dim=1)[:, :self.oup, :, :]


class GhostBottleneck(VisionBlock):
    """Two Ghost modules and a residual, as GhostNet's stride-1 bottleneck."""

    def __init__(self) -> None:
        super().__init__()
        self.ghost1, self.ghost2 = GhostModule(CHANNELS, 2 * CHANNELS - 2), GhostModule(2 * CHANNELS - 2, CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ghost2(self.ghost1(x)) + x


class Res2NetBottleneck(VisionBlock):
    """Res2Net's ``Bottle2neck`` (stride 1): 1x1 conv, split by ``width`` into ``scale``
    pieces, each 3x3 conv reading its piece plus the last conv's output, the last piece passed
    through, cat, 1x1 conv, residual."""

    def __init__(self, width: int = 4, scale: int = 4) -> None:
        super().__init__()
        self.width, self.nums = width, scale - 1
        self.conv1 = conv_bn(CHANNELS, width * scale)
        self.convs = nn.ModuleList(conv_bn(width, width, 3) for _ in range(self.nums))
        self.conv3 = conv_bn(width * scale, CHANNELS, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spx = torch.split(self.conv1(x), self.width, 1)
        out = sp = None
        for i in range(self.nums):
            sp = spx[i] if i == 0 else sp + spx[i]
            sp = self.convs[i](sp)
            out = sp if i == 0 else torch.cat((out, sp), 1)
        out = torch.cat((out, spx[self.nums]), 1)
        return F.relu(self.conv3(out) + x)


class C2f(VisionBlock):
    """Ultralytics' ``C2f``: a 1x1 conv chunked in two, the list extended by bottlenecks each
    reading the last entry, one cat of all, a 1x1 conv."""

    def __init__(self, n: int = 2, hidden: int = CHANNELS // 2) -> None:
        super().__init__()
        self.cv1 = conv_bn(CHANNELS, 2 * hidden)
        self.cv2 = conv_bn((2 + n) * hidden, CHANNELS)
        self.m = nn.ModuleList(nn.Sequential(conv_bn(hidden, hidden, 3), conv_bn(hidden, hidden, 3)) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


def _images() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, CHANNELS, SIDE, SIDE),)


def models() -> dict[str, Factory]:
    """This module's models by suite name."""
    return {
        "real_shufflenet_v2": _factory(ShuffleNetStage, _images),
        "real_ghostnet": _factory(GhostBottleneck, _images),
        "real_res2net": _factory(Res2NetBottleneck, _images),
        "real_yolo_c2f": _factory(C2f, _images),
    }
