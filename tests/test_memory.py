"""The memory bound: in training, a rewrite may not add cats or stacks that a matmul saves for the
backward (``memory_bound``, :mod:`optimus_egg.memory`); in inference batching stays on."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from optimus_egg.memory import saved_copies
from optimus_egg.pipeline import capture
from tests.helpers import Fn, check, check_training
from tests.rewrites.linears import calls_named


class Experts(nn.Module):
    """Four linears on one input, their relus stacked and summed (an MMoE's experts)."""

    def __init__(self) -> None:
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(16, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.relu(e(x)) for e in self.experts], 1).sum(1)


X = torch.randn(32, 16)


def _requires_grad(model: nn.Module, flag: bool) -> nn.Module:
    for p in model.parameters():
        p.requires_grad_(flag)
    return model


def test_a_differentiated_matmul_of_a_cat_saves_the_cat():
    w = torch.randn(8, 16, requires_grad=True)
    both = torch.randn(8, 16, requires_grad=True)
    fused = capture(Fn(lambda x, a, b: F.linear(x, torch.cat([a, b])).relu()), (X, w, both))
    assert saved_copies(fused) == 16 * 16 * 4  # the [16, 16] float cat
    through_view = capture(Fn(lambda x, a, b: x @ torch.cat([a, b]).t()), (X, w, both))
    assert saved_copies(through_view) == 16 * 16 * 4
    undifferentiated = capture(Fn(lambda x, a, b: F.linear(x, torch.cat([a, b]))), (X, w.detach(), both.detach()))
    assert saved_copies(undifferentiated) == 0
    no_matmul = capture(Fn(lambda x, a, b: torch.cat([a, b]).relu() * 2), (X, w, both))
    assert saved_copies(no_matmul) == 0


def test_training_keeps_each_linear_where_batching_would_save_concatenated_weights():
    model = _requires_grad(Experts(), True)
    gm = check_training(model, X)
    assert calls_named(gm, "linear") == 4 and calls_named(gm, "cat") == 0
    report, _ = check(model, X)
    assert report.unbatched and not report.kept  # the other families still ran
    assert report.kernels_after < report.kernels_before


def test_batching_stays_on_in_inference_and_without_the_bound():
    inference = _requires_grad(Experts(), False)
    _, gm = check(inference, X)
    assert calls_named(gm, "linear") == 1
    training = _requires_grad(Experts(), True)
    unbounded = check_training(training, X, memory_bound=False)
    assert calls_named(unbounded, "linear") == 1
