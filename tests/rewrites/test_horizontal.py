"""Horizontal fusion: parallel linears on one input, before and after on random inputs."""

import torch
from torch import nn

from tests.helpers import check, launches


class Towers(nn.Module):
    """``n`` linears read one input; each output goes its own way."""

    def __init__(self, n: int, dtype: torch.dtype = torch.float32, bias: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.towers = nn.ModuleList(nn.Linear(8, 3 + i, bias=bias, dtype=dtype) for i in range(n))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [t(x).relu().sum(1) for t in self.towers]


X = torch.randn(5, 8)


def test_parallel_linears_on_one_input_become_one_linear_on_concatenated_weights():
    model = Towers(5)
    report, gm = check(model, X)
    assert report.rules_fired["linear-as-slice-of-fused"] == 5
    linears = [n for n in gm.graph.nodes if "linear" in str(n.target)]
    assert len(linears) == 1
    # one linear, a cat of weights and one of biases, one relu on the fused output, five sums
    assert launches(gm, X) == 9 < launches(model, X) == 15


def test_two_linears_stay_apart_when_the_weight_cats_cost_more():
    model = Towers(2)
    report, gm = check(model, X)
    assert report.rules_fired["linear-as-slice-of-fused"] == 2
    assert launches(gm, X) == launches(model, X)


def test_linears_on_different_inputs_are_not_grouped():
    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Towers(3), Towers(3)

        def forward(self, x, y):
            return self.a(x) + self.b(y)

    report, gm = check(TwoInputs(), X, torch.randn(5, 8))
    assert report.rules_fired["linear-as-slice-of-fused"] == 6  # two groups of three, not one of six
    assert report.rules_fired["linear-group-next"] == 6  # 3 + 3 ordered pairs, none across inputs


def test_linears_without_bias_are_left_alone():
    report, gm = check(Towers(5, bias=False), X)
    assert "linear-as-slice-of-fused" not in report.rules_fired
