"""Linears and layer norms on inputs of rank 3 or more, as the same calls on 2-D views
(rewrites/rows.py), which the horizontal rules then group; before and after on random inputs, in
training too, and the cases the rules must leave alone."""

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import check_training
from tests.helpers import check_rule as check
from tests.rewrites.linears import calls_named


class Bilinear(nn.Module):
    """FiBiNET's bilinear interaction: one linear per pair of fields, on the first field's
    ``[n, 1, k]`` piece of the input, times the second one's."""

    def __init__(self, fields: int = 4, dim: int = 8, bias: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pairs = list(itertools.combinations(range(fields), 2))
        self.linears = nn.ModuleList(nn.Linear(dim, dim, bias=bias) for _ in self.pairs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fields = x.split(1, 1)
        return torch.cat([lin(fields[i]) * fields[j] for (i, j), lin in zip(self.pairs, self.linears)], 1)


def test_linears_on_pieces_with_a_size_1_dim_are_batched_as_2d_linears():
    for bias, rule in ((False, "batch-linear-as-select-of-bmm"), (True, "batch-linear-as-select-of-baddbmm")):
        model, x = Bilinear(bias=bias), torch.randn(5, 4, 8)
        report, gm = check(model, x)
        assert report.rules_fired["linear-of-rows" + ("" if bias else "-no-bias")] == 6
        assert report.rules_fired[rule] == 6
        assert calls_named(gm, "baddbmm" if bias else "bmm") == 1 and calls_named(gm, "linear") == 0
        check_training(model, x, cost_model="eager")


def test_linears_on_a_rank_4_input_with_size_1_dims_become_2d():
    linears = nn.ModuleList(nn.Linear(8, 6) for _ in range(4))
    report, _ = check(lambda *xs: torch.cat([lin(x) for lin, x in zip(linears, xs)], 2),
                      *torch.randn(4, 5, 1, 1, 8).unbind())
    # [5, 1, 1, 8] → [5, 1, 8] → [5, 8]: two steps per linear, then one group of the four
    assert report.rules_fired["linear-of-rows"] == 8 and report.rules_fired["batch-linear-as-select-of-baddbmm"] == 4


def test_linears_whose_rows_are_no_view_or_whose_size_1_dim_is_the_last_are_left_alone():
    # Pieces [2, 5, 4] of a split along the last dim: merging their leading dims would copy.
    linears = nn.ModuleList(nn.Linear(4, 6) for _ in range(8))
    report, _ = check(lambda x: torch.cat([lin(p) for lin, p in zip(linears, x.split(4, 2))], 2),
                      torch.randn(2, 5, 32))
    assert not {"linear-of-rows", "linear-of-rows-no-bias", "batch-linear-member"} & set(report.rules_fired)
    # The size-1 dim is the one the linear reads.
    ones = nn.ModuleList(nn.Linear(1, 6) for _ in range(4))
    report, _ = check(lambda x: torch.cat([lin(p) for lin, p in zip(ones, x.split(1, 2))], 2),
                      torch.randn(2, 5, 4))
    assert not {"linear-of-rows", "linear-of-rows-no-bias"} & set(report.rules_fired)


class RowNorms(nn.Module):
    """``n`` layer norms over the chunks of the input's last dim, the outputs concatenated."""

    def __init__(self, n: int = 6, width: int = 8, affine: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norms = nn.ModuleList(nn.LayerNorm(width, elementwise_affine=affine) for _ in range(n))
        for p in self.norms.parameters():
            nn.init.normal_(p)  # weights and biases that differ per norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([n(p) for n, p in zip(self.norms, x.chunk(len(self.norms), -1))], -1)


def test_layer_norms_over_the_pieces_of_a_rank_3_or_4_tensor_read_its_rows_as_a_view():
    for shape in ((2, 5, 48), (2, 3, 5, 48)):
        model, x = RowNorms(), torch.randn(shape)
        report, gm = check(model, x)
        assert report.rules_fired["norm-of-rows"] == 6 * (len(shape) - 2)
        # the pieces still tile one tensor: the rows of the input, read as [n, 6, 8]
        assert report.rules_fired["tiled-norm-as-select-of-addcmul"] == 6
        assert calls_named(gm, "layer_norm") == 1 and calls_named(gm, "addcmul") == 1
        check_training(model, x, cost_model="eager")


def test_layer_norms_on_separate_rank_3_inputs_are_batched():
    model = RowNorms()
    report, gm = check(lambda *xs: [n(x).sum(-1) for n, x in zip(model.norms, xs)], *torch.randn(6, 2, 5, 8).unbind())
    assert report.rules_fired["batch-norm-as-select-of-addcmul"] == 6 and calls_named(gm, "layer_norm") == 1


def test_layer_norms_over_more_than_the_last_dim_or_without_weights_are_left_alone():
    # Normalized over (5, 8): a row of the merged view is no unit of the norm.
    weights, biases = torch.randn(6, 5, 8).unbind(), torch.randn(6, 5, 8).unbind()
    report, _ = check(lambda x: torch.cat([F.layer_norm(p, (5, 8), w, b)
                                           for p, w, b in zip(x.chunk(6, -1), weights, biases)], -1),
                      torch.randn(2, 5, 48))
    assert "norm-of-rows" not in report.rules_fired
    # No weights: nothing in the graph proves which dims the norm normalizes.
    report, _ = check(RowNorms(affine=False), torch.randn(2, 5, 48))
    assert "norm-of-rows" not in report.rules_fired
