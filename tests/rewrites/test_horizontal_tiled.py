"""Horizontal fusion over the pieces of one tensor: linears and layer norms read it as a view
(tiled), one linear shared by the pieces or by separate inputs, and windows that overlap tiles;
before and after on random inputs, and the cases each rule must leave alone."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from optimus_egg import optimize
from tests.helpers import EAGER, launches
from tests.helpers import check_rule as check
from tests.rewrites.linears import XG, XS, Gapped, Parallel, assert_same_gradients, calls_named


# Linears over the pieces of one tensor, or one linear shared by several inputs -------------------


def test_linears_over_the_pieces_of_a_tensor_read_it_as_a_view():
    # x [5, 32] read as [8, 5, 4] (a transposed view: no stack of the pieces) by one baddbmm (bmm
    # without bias); one contiguous copy writes the [8, 5, 6] result as [5, 8, 6], and the cat of
    # the outputs is a view of it
    for bias, rule in ((True, "tiled-linear-as-select"), (False, "tiled-linear-as-select-no-bias")):
        model, x = Parallel(8, bias=bias), torch.randn(5, 32, requires_grad=True)
        report, gm = check(model, XS)
        assert report.rules_fired[rule] == 8
        assert calls_named(gm, "baddbmm" if bias else "bmm") == 1 and calls_named(gm, "linear") == 0
        assert calls_named(gm, "cat") == 0 and calls_named(gm, "stack") == 1 + bias and calls_named(gm, "contiguous") == 1
        # the weights' (and biases') stacks, the matmul and the copy back
        assert launches(gm, XS) == 3 + bias < launches(model, XS) == 8 + 1
        assert_same_gradients(model, gm, x)


class ShuffledLinears(Parallel):
    """Linear ``j`` reads piece ``order[j]`` of the pieces of ``x``."""

    def __init__(self, order: list[int], dtype: torch.dtype = torch.float32) -> None:
        super().__init__(len(order), dtype=dtype)
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pieces = x.split(self.width, 1)
        return torch.cat([t(pieces[j]) for t, j in zip(self.towers, self.order)], 1)


def test_linears_over_the_pieces_of_a_tensor_in_any_order_keep_their_own_weights():
    model, x = ShuffledLinears([7, 2, 0, 5, 1, 6, 3, 4]), torch.randn(5, 32, requires_grad=True)
    report, gm = check(model, XS)
    assert report.rules_fired["tiled-linear-as-select"] == 8
    assert calls_named(gm, "baddbmm") == 1 and calls_named(gm, "linear") == 0
    assert_same_gradients(model, gm, x)


def test_linears_over_pieces_that_tile_nothing_or_read_one_piece_twice_stay_exact():
    # Piece 0 read twice: one member per start is rewritten; the other keeps its own weights.
    model = ShuffledLinears([0, 1, 2, 3, 4, 5, 6, 7, 0], dtype=torch.float64)
    x = torch.randn(5, 32, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, XS.double())
    assert report.rules_fired["tiled-linear-member"] == 9
    assert report.rules_fired["tiled-linear-as-select"] == 8
    assert_same_gradients(model, gm, x)
    # pieces with gaps, pieces that stop short of x's end, one piece (g = 1) and one row (n = 1:
    # the copy back would be a contiguous() that returns a view) tile nothing
    for model, x in ((Gapped(8), XG), (Parallel(8), torch.randn(5, 36)), (Parallel(1), XS[:, :4]),
                     (Parallel(8), XS[:1])):
        report, _ = check(model, x)
        assert "tiled-linear-as-select" not in report.rules_fired


class SharedTower(Parallel):
    """Linear ``towers[j // per]`` on piece ``j`` of the input: one tower the features share
    (``per`` = all of them), or one per run of ``per`` pieces."""

    def __init__(self, n: int, per: int, bias: bool = True, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(-(-n // per), bias=bias, dtype=dtype)
        self.per = per

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.towers[j // self.per](p) for j, p in enumerate(x.split(self.width, 1))], 1)


def test_one_linear_over_every_piece_of_a_tensor_becomes_one_linear_on_its_view():
    # x [5, 32] viewed as [5, 8, 4], one linear, the cat of the outputs a view of its [5, 8, 6]
    # result: no stacks, and no copy back
    for bias, suffix in ((True, ""), (False, "-no-bias")):
        model, x = SharedTower(8, 8, bias=bias), torch.randn(5, 32, requires_grad=True)
        report, gm = check(model, XS)
        assert report.rules_fired[f"tiled-linear-as-select-of-shared{suffix}"] == 8
        assert calls_named(gm, "linear") == 1 and calls_named(gm, "stack") == 0 and calls_named(gm, "baddbmm") == 0
        assert launches(gm, XS) == 1 < launches(model, XS) == 8 + 1  # the linear alone
        assert_same_gradients(model, gm, x)


def test_linears_that_share_weights_on_some_pieces_only_are_batched_with_their_own():
    # Two towers, four pieces each: one linear of each on the whole x would compute the other
    # tower's products too, so the eight are batched as linears of their own weights. (In double
    # precision: each tower's weight gradient adds up its four pieces' in another order.)
    model = SharedTower(8, 4, dtype=torch.float64)
    x = torch.randn(5, 32, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, XS.double())
    assert "tiled-linear-as-select-of-shared" not in report.rules_fired
    assert report.rules_fired["tiled-linear-as-select"] == 8 and calls_named(gm, "linear") == 0
    assert_same_gradients(model, gm, x)
    # nor over pieces that do not tile the input: gaps, short of its end, one piece
    tower = nn.Linear(4, 6)
    for fn, x in ((lambda x: torch.cat([tower(x[:, 8 * j:8 * j + 4]) for j in range(8)], 1), XG),
                  (lambda x: torch.cat([tower(p) for p in x.split(4, 1)[:8]], 1), torch.randn(5, 36)),
                  (lambda x: torch.cat([tower(p) for p in x.split(4, 1)], 1), XS[:, :4])):
        report, _ = check(fn, x)
        assert "tiled-linear-as-select-of-shared" not in report.rules_fired


class SharedGapped(SharedTower):
    """:class:`SharedTower` on :class:`Gapped`'s pieces: separate inputs, not a tiling."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = len(self.towers) * self.per
        return torch.cat([self.towers[j // self.per](x[:, 8 * j:8 * j + 4]) for j in range(n)], 1)


def test_one_linear_on_separate_inputs_becomes_one_linear_of_their_stack():
    # a stack of the inputs along dim 1 and one linear, the cat of its outputs a view of its
    # [5, 8, 6] result: no stack of the one weight per input (the baddbmm's form, which the
    # extractor takes where the weights differ), and no copy back. (In double precision: the
    # weight's gradient adds up the eight inputs' in another order.)
    for bias, suffix in ((True, ""), (False, "-no-bias")):
        model = SharedGapped(8, 8, bias=bias, dtype=torch.float64)
        x = torch.randn(5, 64, dtype=torch.float64, requires_grad=True)
        report, gm = check(model, x.detach())
        assert report.rules_fired[f"batch-linear-as-select-of-shared{suffix}"] == 8
        assert calls_named(gm, "linear") == 1 and calls_named(gm, "baddbmm") == 0 and calls_named(gm, "bmm") == 0
        assert calls_named(gm, "stack") + calls_named(gm, "cat") == 1  # the inputs, gathered once
        assert launches(gm, x) == 2 < launches(model, x) == 8 + 1
        assert_same_gradients(model, gm, x)


class Odd(nn.Module):
    """One Linear on seven of eight gapped inputs, another on input ``odd``."""

    def __init__(self, n: int, odd: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.n, self.odd = n, odd
        self.tower, self.other = (nn.Linear(4, 6, dtype=torch.float64) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([(self.other if j == self.odd else self.tower)(x[:, 8 * j:8 * j + 4])
                          for j in range(self.n)], 1)


def test_linears_that_share_weights_on_some_inputs_only_are_batched_with_their_own():
    # two towers of four inputs each, and one tower but for the last input (where the walk starts)
    # or the first: a stacked weight per input, as for linears of their own
    for model in (SharedGapped(8, 4, dtype=torch.float64), Odd(8, odd=7), Odd(8, odd=0)):
        x = torch.randn(5, 64, dtype=torch.float64, requires_grad=True)
        report, gm = check(model, XG.double())
        assert "batch-linear-as-select-of-shared" not in report.rules_fired
        assert calls_named(gm, "baddbmm") == 1 and calls_named(gm, "linear") == 0
        assert_same_gradients(model, gm, x)


# Layer norms of one template on inputs of one shape (Optimus' batch_layernorm) ------------------


class Norms(nn.Module):
    """``n`` layer norms over the chunks of the input, the outputs concatenated."""

    def __init__(self, n: int = 6, width: int = 8, affine: bool = True, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norms = nn.ModuleList(nn.LayerNorm(width, elementwise_affine=affine, dtype=dtype) for _ in range(n))
        for p in self.norms.parameters():
            nn.init.normal_(p)  # weights and biases that differ per norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([n(p) for n, p in zip(self.norms, x.chunk(len(self.norms), 1))], 1)


XN = torch.randn(5, 48)


def test_layer_norms_with_their_own_weights_become_one_norm_and_one_affine():
    model = Norms()
    report, gm = check(model, XN)
    assert report.rules_fired["batch-norm-as-select-of-addcmul"] == 6
    assert calls_named(gm, "layer_norm") == 1 and calls_named(gm, "addcmul") == 1
    # stacks of the weights and biases, the norm and the affine replace six norms; the pieces
    # tile the input, so the norm reads it as [5, 6, 8] and the cat of the outputs is a view
    assert report.rules_fired["tiled-norm-as-select-of-addcmul"] == 6
    assert launches(gm, XN) == 4 < launches(model, XN) == 6 + 1


def test_layer_norms_on_pieces_that_tile_no_tensor_read_a_stack_of_them():
    norms, x = Norms().norms, torch.randn(5, 96)

    def fn(x):  # every other 8 columns unread
        return torch.cat([n(x[:, 16 * i:16 * i + 8]) for i, n in enumerate(norms)], 1)

    report, gm = check(fn, x)
    assert report.rules_fired["batch-norm-as-select-of-addcmul"] == 6
    assert "tiled-norm-as-select-of-addcmul" not in report.rules_fired
    # stacks of the inputs, weights and biases, the norm and the affine replace six norms
    assert calls_named(gm, "layer_norm") == 1 and launches(gm, x) == 5 + 1


class Shuffled(Norms):
    """Norm ``i`` reads piece ``order[i]``; every piece read once, one piece maybe twice."""

    def __init__(self, order: list[int]) -> None:
        super().__init__(len(order))
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pieces = x.chunk(6, 1)
        return torch.cat([n(pieces[i]) for n, i in zip(self.norms, self.order)], 1)


def test_layer_norms_over_the_pieces_of_a_tensor_in_any_order_keep_their_own_weights():
    model, x = Shuffled([3, 0, 5, 1, 4, 2]), torch.randn(5, 48, requires_grad=True)
    report, gm = check(model, XN)
    assert report.rules_fired["tiled-norm-as-select-of-addcmul"] == 6 and calls_named(gm, "layer_norm") == 1
    assert_same_gradients(model, gm, x)


def test_two_layer_norms_of_one_piece_stay_exact():
    # Two norms of one template read piece 0: one start, two members; only the one the
    # stacks hold is rewritten to a select of the tiled norm.
    model, x = Shuffled([0, 1, 2, 3, 4, 5, 0]).double(), torch.randn(5, 48, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, XN.double())
    assert report.rules_fired["tiled-norm-member"] == 7
    assert_same_gradients(model, gm, x)  # (float64: piece 0's two gradients add up in another order)


def test_layer_norms_without_weights_become_one_norm():
    model = Norms(affine=False)
    report, gm = check(model, XN)
    assert report.rules_fired["batch-norm-as-select-of-norm"] == 6
    # (no weights prove which dims a plain norm normalizes: never read as the tiled [5, 6, 8])
    assert "tiled-norm-member" not in report.rules_fired
    assert calls_named(gm, "layer_norm") == 1 and calls_named(gm, "addcmul") == 0
    assert launches(gm, XN) < launches(model, XN)


def test_one_layer_norm_applied_to_several_inputs_is_fused_too():
    norm = nn.LayerNorm(8)
    nn.init.normal_(norm.weight)
    report, gm = check(lambda *xs: [norm(x).sum(1) for x in xs], *torch.randn(6, 5, 8).unbind())
    assert calls_named(gm, "layer_norm") == 1
    # returned as they are, each norm would be a select of the fused one, copied out
    _, gm = check(lambda *xs: [norm(x) for x in xs], *torch.randn(6, 5, 8).unbind())
    assert calls_named(gm, "layer_norm") == 6


def test_layer_norms_over_both_dims_of_each_input_stay_exact():
    def fn(x):
        return torch.cat([F.layer_norm(p, p.shape) for p in x.chunk(6, 1)], 1)

    report, gm = check(fn, XN)
    assert report.rules_fired["batch-norm-as-select-of-norm"] == 6


def test_fused_layer_norms_train_like_the_originals():
    model, x = Norms(), torch.randn(5, 48, requires_grad=True)
    gm, report = optimize(model, (x,), **EAGER)
    assert calls_named(gm, "addcmul") == 1 and report.rules_fired["tiled-norm-as-select-of-addcmul"] == 6
    assert_same_gradients(model, gm, x)


def test_layer_norms_that_differ_depend_or_round_are_not_fused():
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.eps = nn.ModuleList(nn.LayerNorm(8, eps=i / 10) for i in range(1, 7))  # six templates
            self.chain = nn.Sequential(*(nn.LayerNorm(8) for _ in range(6)))  # each reads the last

        def forward(self, x):
            return [n(p) for n, p in zip(self.eps, x.chunk(6, 1))], self.chain(x[:, :8])

    report, _ = check(Mixed(), XN)
    assert "batch-norm-as-select-of-addcmul" not in report.rules_fired
    half = Norms(dtype=torch.bfloat16)  # the affine after the norm would round once more
    gm, report = optimize(half, (XN.bfloat16(),), **EAGER)
    assert "batch-norm-member" not in report.rules_fired
    report, _ = check(Norms(), torch.randn(2, 48, 8))  # [2, 8, 8] pieces: only [n, d] ones (their rows) are stacked
    assert report.rules_fired["norm-of-rows"] == report.rules_fired["batch-norm-member"] == 6


class Windows(nn.Module):
    """One module (``shared``) or one each on windows of ``x`` of its width that may overlap."""

    def __init__(self, starts: list[int], make, shared: bool) -> None:
        super().__init__()
        one = make()
        self.mods = nn.ModuleList(one if shared else make() for _ in starts)
        self.starts = starts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([m(x[:, s:s + 2]) for m, s in zip(self.mods, self.starts)], 1)


@pytest.mark.parametrize("make", [lambda: nn.Linear(2, 3), lambda: nn.Linear(2, 3, bias=False), lambda: nn.LayerNorm(2)])
@pytest.mark.parametrize("starts, shared, cost_model", [([0, 1, 2], True, "eager"), ([0, 2, 4, 6, 1], False, "memory"),
                                                        ([0, 2, 4, 6, 5, 1], True, "eager")])
def test_windows_that_start_inside_a_tile_are_no_select_of_the_tiled_result(make, starts, shared, cost_model):
    """Windows at 0, 2, 4, 6 tile x; one at 1 overlaps two tiles and was taken for the select at
    1 // 2 = 0 of the tiled linear or norm (a wrong answer, found in review): it keeps its own."""
    torch.manual_seed(0)
    check(Windows(starts, make, shared), torch.randn(5, 8), cost_model=cost_model)


class Norms2(nn.Module):
    """Layer norms over the last two dims ``(5, 10)`` of pieces of ``x`` [2, 5, 10 * n], each with
    its own ``[5, 10]`` weight and bias; ``starts`` picks where each piece begins along dim 2."""

    def __init__(self, starts: list[int], dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.starts = starts
        self.norms = nn.ModuleList(nn.LayerNorm((5, 10), dtype=dtype) for _ in starts)
        for p in self.norms.parameters():
            nn.init.normal_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([n(x[:, :, s:s + 10]) for n, s in zip(self.norms, self.starts)], 2)


def test_layer_norms_over_two_dims_of_the_pieces_of_a_tensor_read_it_as_a_view():
    # x [2, 5, 60] viewed as [2, 5, 6, 10], dims 1 and 2 swapped: one norm over [2, 6, 5, 10]
    # (float64: the batched backward sums the weights' gradients in another order)
    model = Norms2([30, 0, 20, 10, 50, 40], dtype=torch.float64)
    x = torch.randn(2, 5, 60, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, x.detach())
    assert report.rules_fired["tiled-norm-as-select-of-addcmul-two-dims"] == 6
    assert calls_named(gm, "layer_norm") == 1 and calls_named(gm, "addcmul") == 1
    assert launches(gm, x.detach()) < launches(model, x.detach())
    assert_same_gradients(model, gm, x)


def test_layer_norms_over_two_dims_of_pieces_that_tile_nothing_read_a_stack_of_them():
    # every other 10 columns unread: the pieces are stacked, not read as a view
    model = Norms2([0, 20, 40, 60, 80, 100], dtype=torch.float64)
    x = torch.randn(2, 5, 120, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, x.detach())
    assert "tiled-norm-as-select-of-addcmul-two-dims" not in report.rules_fired
    assert report.rules_fired["batch-norm2-as-select-of-addcmul"] == 6 and calls_named(gm, "layer_norm") == 1
    assert_same_gradients(model, gm, x)


def test_layer_norms_over_the_last_dim_or_in_half_precision_are_not_two_dim_members():
    report, _ = check(Norms(), torch.randn(2, 48, 8))  # [8] weights: over the last dim alone
    assert "batch-norm2-member" not in report.rules_fired
    half = Norms2([0, 10]).bfloat16()  # the affine after the norm would round once more
    _, report = optimize(half, (torch.randn(2, 5, 20).bfloat16(),), **EAGER)
    assert "batch-norm2-member" not in report.rules_fired


@pytest.mark.parametrize("normalized", [(10,), (5, 10), (2, 5, 10)])
def test_layer_norms_without_weights_of_3d_inputs_become_one_norm_of_their_stack(normalized):
    # a new leading dim is never normalized, whatever the normalized shape
    def fn(x):
        return torch.cat([F.layer_norm(p, normalized) for p in x.split(10, 2)], 2)

    x = torch.randn(2, 5, 60, dtype=torch.float64, requires_grad=True)
    report, gm = check(fn, x.detach())
    assert report.rules_fired["batch-norm3-as-select-of-norm"] == 6 and calls_named(gm, "layer_norm") == 1
    torch.testing.assert_close(torch.autograd.grad(gm(x).square().sum(), x), torch.autograd.grad(fn(x).square().sum(), x))


def test_layer_norms_without_weights_of_3d_inputs_of_other_shapes_or_heights_are_not_fused():
    def fn(x):  # pieces of two shapes: two groups of one, each kept as written
        return torch.cat([F.layer_norm(p, (5, p.shape[2])) for p in x.split([10, 20], 2)], 2)

    report, _ = check(fn, torch.randn(2, 5, 30))
    assert "batch-norm3-as-select-of-norm" not in report.rules_fired

    def chain(x):  # each norm reads the last: no two of one height
        for _ in range(3):
            x = F.layer_norm(x, (5, 10))
        return x

    report, _ = check(chain, torch.randn(2, 5, 10))
    assert "batch-norm3-as-select-of-norm" not in report.rules_fired
