"""Horizontal fusion: parallel linears (on one input, or on inputs of one shape), before and
after on random inputs, and the cases each rule must leave alone."""

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from optimus_egg import optimize
from tests.helpers import Fn, check, launches


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
    assert report.rules_fired["linear-group-next"] == 4  # 2 + 2 successors, none across inputs (one group: 5)


def test_a_linear_alone_on_its_input_is_no_group():
    report, gm = check(Towers(1), X)
    assert report.rules_fired["linear-group-ends"] == 1 and "linear-as-slice-of-fused" not in report.rules_fired


def test_linears_without_bias_are_left_alone():
    report, gm = check(Towers(5, bias=False), X)
    assert "linear-as-slice-of-fused" not in report.rules_fired


def test_fused_linears_keep_program_order_so_a_cat_of_their_outputs_is_the_fused_output():
    heads = Towers(5).towers

    def fn(x):
        return torch.cat([torch.relu(h(x)) for h in heads], 1)

    _, gm = check(fn, X)
    # the weights are concatenated in the order the cat reads the heads: the cats of the weights
    # and biases, one linear and one relu of its whole output (in reverse order, the cat of its
    # slices was a copy of each)
    assert _calls(gm, "relu") == 1 and _calls(gm, "cat") == 2
    assert launches(gm, X) == 4 < launches(fn, X) == 11


# Linears on different inputs of one shape (Optimus' batch_linear) -------------------------------


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


def _calls(gm: torch.fx.GraphModule, name: str) -> int:
    return sum(1 for n in gm.graph.nodes if name == getattr(n.target, "__name__", n.target))


XS = torch.randn(5, 32)


class Gapped(Parallel):
    """Linear ``j`` reads columns ``[8j, 8j + 4)`` of a ``[n, 64]`` input: pieces of one tensor
    that do not tile it (the pieces are stacked, not read as a view)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([t(x[:, 8 * j:8 * j + 4]) for j, t in enumerate(self.towers)], 1)


XG = torch.randn(5, 64)


def test_linears_on_different_inputs_become_one_baddbmm():
    model = Gapped(8)
    report, gm = check(model, XG)
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 8
    assert "tiled-linear-as-select" not in report.rules_fired
    assert _calls(gm, "baddbmm") == 1 and _calls(gm, "linear") == 0
    # a stack each of the inputs, weights and biases and one baddbmm replace the eight linears
    # (the weights' transpose and each output's select are views); the cat stays
    assert launches(gm, XG) == 4 + 1 < launches(model, XG) == 8 + 1


def test_linears_without_bias_become_one_bmm():
    model = Gapped(8, bias=False)
    report, gm = check(model, XG)
    assert report.rules_fired["batch-linear-as-select-of-bmm"] == 8
    assert _calls(gm, "bmm") == 1 and _calls(gm, "linear") == 0


def _assert_same_gradients(model: nn.Module, gm: torch.nn.Module, x: torch.Tensor) -> None:
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


def test_batched_linears_train_like_the_originals():
    model, x = Parallel(6), torch.randn(5, 24, requires_grad=True)
    gm, report = optimize(model, (x,))
    assert _calls(gm, "baddbmm") == 1
    _assert_same_gradients(model, gm, x)
    model, x = Gapped(6), torch.randn(5, 48, requires_grad=True)
    gm, report = optimize(model, (x,))
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 6 and _calls(gm, "baddbmm") == 1
    _assert_same_gradients(model, gm, x)


def test_linears_over_the_pieces_of_a_tensor_read_it_as_a_view():
    # x [5, 32] read as [8, 5, 4] (a transposed view: no stack of the pieces) by one baddbmm (bmm
    # without bias); one contiguous copy writes the [8, 5, 6] result as [5, 8, 6], and the cat of
    # the outputs is a view of it
    for bias, rule in ((True, "tiled-linear-as-select"), (False, "tiled-linear-as-select-no-bias")):
        model, x = Parallel(8, bias=bias), torch.randn(5, 32, requires_grad=True)
        report, gm = check(model, XS)
        assert report.rules_fired[rule] == 8
        assert _calls(gm, "baddbmm" if bias else "bmm") == 1 and _calls(gm, "linear") == 0
        assert _calls(gm, "cat") == 0 and _calls(gm, "stack") == 1 + bias and _calls(gm, "contiguous") == 1
        # the weights' (and biases') stacks, the matmul and the copy back
        assert launches(gm, XS) == 3 + bias < launches(model, XS) == 8 + 1
        _assert_same_gradients(model, gm, x)


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
    assert _calls(gm, "baddbmm") == 1 and _calls(gm, "linear") == 0
    _assert_same_gradients(model, gm, x)


def test_linears_over_pieces_that_tile_nothing_or_read_one_piece_twice_stay_exact():
    # Piece 0 read twice: one member per start is rewritten; the other keeps its own weights.
    model = ShuffledLinears([0, 1, 2, 3, 4, 5, 6, 7, 0], dtype=torch.float64)
    x = torch.randn(5, 32, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, XS.double())
    assert report.rules_fired["tiled-linear-member"] == 9
    assert report.rules_fired["tiled-linear-as-select"] == 8
    _assert_same_gradients(model, gm, x)
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
        assert _calls(gm, "linear") == 1 and _calls(gm, "stack") == 0 and _calls(gm, "baddbmm") == 0
        assert launches(gm, XS) == 1 < launches(model, XS) == 8 + 1  # the linear alone
        _assert_same_gradients(model, gm, x)


def test_linears_that_share_weights_on_some_pieces_only_are_batched_with_their_own():
    # Two towers, four pieces each: one linear of each on the whole x would compute the other
    # tower's products too, so the eight are batched as linears of their own weights. (In double
    # precision: each tower's weight gradient adds up its four pieces' in another order.)
    model = SharedTower(8, 4, dtype=torch.float64)
    x = torch.randn(5, 32, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, XS.double())
    assert "tiled-linear-as-select-of-shared" not in report.rules_fired
    assert report.rules_fired["tiled-linear-as-select"] == 8 and _calls(gm, "linear") == 0
    _assert_same_gradients(model, gm, x)
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
        assert _calls(gm, "linear") == 1 and _calls(gm, "baddbmm") == 0 and _calls(gm, "bmm") == 0
        assert _calls(gm, "stack") + _calls(gm, "cat") == 1  # the inputs, gathered once
        assert launches(gm, x) == 2 < launches(model, x) == 8 + 1
        _assert_same_gradients(model, gm, x)


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
        assert _calls(gm, "baddbmm") == 1 and _calls(gm, "linear") == 0
        _assert_same_gradients(model, gm, x)


def test_two_batched_linears_stay_apart_when_the_stacks_cost_more():
    model = Parallel(2)
    report, gm = check(model, XS[:, :8])
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 2
    assert _calls(gm, "baddbmm") == 0 and launches(gm, XS[:, :8]) == launches(model, XS[:, :8])


def test_towers_of_two_layers_batch_each_layer_apart():
    """Each tower is linear → relu → linear of one shape: the second layers read the first
    layers' outputs, so the layers are two groups (of equal height), never one."""

    class Towers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Parallel(6, 8, 8), Parallel(6, 8, 8)

        def forward(self, x):
            return torch.cat([b(torch.relu(a(p))) for a, b, p in zip(self.a.towers, self.b.towers, x.split(8, 1))], 1)

    x = torch.randn(5, 48)
    report, gm = check(Towers(), x)
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 12
    assert _calls(gm, "baddbmm") == 2 and _calls(gm, "linear") == 0
    assert launches(gm, x) < launches(Towers(), x)
    # the first layer reads x as a view; the relu reads its [6, 5, 8] result as it is, not
    # flattened and unflattened around it (equal kernels, but Inductor then fuses the second
    # layer's bias-gradient sum into the kernel before it: feature_towers training)
    relu = next(n for n in gm.graph.nodes if "relu" in str(n.target))
    assert getattr(relu.args[0].target, "__name__", None) == "baddbmm"


def test_linears_of_other_shapes_dtypes_or_chained_are_not_batched_together():
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.f32, self.f64 = Parallel(5), Parallel(5, dtype=torch.float64)
            self.wide = nn.ModuleList(nn.Linear(4, 7) for _ in range(5))  # another out size
            self.chain = nn.Sequential(*(nn.Linear(4, 4) for _ in range(5)))  # each reads the last

        def forward(self, x, y):
            pieces = x.split(4, 1)
            return (self.f32(x), self.f64(y), [w(p) for w, p in zip(self.wide, pieces)], self.chain(pieces[0]))

    x, y = torch.randn(5, 20), torch.randn(5, 20, dtype=torch.float64)
    report, gm = check(Mixed(), x, y)
    # two groups of five (f32, f64); the chain's linears each stand alone, and the wide ones are
    # outputs of their own (each a select of one baddbmm would be copied out)
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 10
    assert _calls(gm, "baddbmm") == 2


def test_linears_on_3d_inputs_or_of_dynamic_batch_are_not_batched():
    class Seq(Parallel):
        def forward(self, x):
            return torch.cat([t(p) for t, p in zip(self.towers, x.split(self.width, 2))], 2)

    report, _ = check(Seq(8), torch.randn(2, 5, 32))
    assert "batch-linear-member" not in report.rules_fired
    gm, _ = torch._dynamo.export(Parallel(8), dynamic_shapes=({0: torch.export.Dim("batch")},))(XS)
    report, _ = check(gm, XS)
    assert "batch-linear-member" not in report.rules_fired


def test_linear_arguments_are_read_by_name_not_position():
    ws, bs = torch.randn(8, 6, 4), torch.randn(8, 6)

    def fn(x):
        return torch.cat([F.linear(bias=b, weight=w, input=p) for w, b, p in zip(ws, bs, x.split(4, 1))], 1)

    report, gm = check(fn, XS)
    assert _calls(gm, "baddbmm") == 1


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
    assert _calls(gm, "layer_norm") == 1 and _calls(gm, "addcmul") == 1
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
    assert _calls(gm, "layer_norm") == 1 and launches(gm, x) == 5 + 1


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
    assert report.rules_fired["tiled-norm-as-select-of-addcmul"] == 6 and _calls(gm, "layer_norm") == 1
    _assert_same_gradients(model, gm, x)


def test_two_layer_norms_of_one_piece_stay_exact():
    # Two norms of one template read piece 0: one start, two members; only the one the
    # stacks hold is rewritten to a select of the tiled norm.
    model, x = Shuffled([0, 1, 2, 3, 4, 5, 0]).double(), torch.randn(5, 48, dtype=torch.float64, requires_grad=True)
    report, gm = check(model, XN.double())
    assert report.rules_fired["tiled-norm-member"] == 7
    _assert_same_gradients(model, gm, x)  # (float64: piece 0's two gradients add up in another order)


def test_layer_norms_without_weights_become_one_norm():
    model = Norms(affine=False)
    report, gm = check(model, XN)
    assert report.rules_fired["batch-norm-as-select-of-norm"] == 6
    # (no weights prove which dims a plain norm normalizes: never read as the tiled [5, 6, 8])
    assert "tiled-norm-member" not in report.rules_fired
    assert _calls(gm, "layer_norm") == 1 and _calls(gm, "addcmul") == 0
    assert launches(gm, XN) < launches(model, XN)


def test_one_layer_norm_applied_to_several_inputs_is_fused_too():
    norm = nn.LayerNorm(8)
    nn.init.normal_(norm.weight)
    report, gm = check(lambda *xs: [norm(x).sum(1) for x in xs], *torch.randn(6, 5, 8).unbind())
    assert _calls(gm, "layer_norm") == 1
    # returned as they are, each norm would be a select of the fused one, copied out
    _, gm = check(lambda *xs: [norm(x) for x in xs], *torch.randn(6, 5, 8).unbind())
    assert _calls(gm, "layer_norm") == 6


def test_layer_norms_over_both_dims_of_each_input_stay_exact():
    def fn(x):
        return torch.cat([F.layer_norm(p, p.shape) for p in x.chunk(6, 1)], 1)

    report, gm = check(fn, XN)
    assert report.rules_fired["batch-norm-as-select-of-norm"] == 6


def test_fused_layer_norms_train_like_the_originals():
    model, x = Norms(), torch.randn(5, 48, requires_grad=True)
    gm, report = optimize(model, (x,))
    assert _calls(gm, "addcmul") == 1 and report.rules_fired["tiled-norm-as-select-of-addcmul"] == 6
    _assert_same_gradients(model, gm, x)


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
    gm, report = optimize(half, (XN.bfloat16(),))
    assert "batch-norm-member" not in report.rules_fired
    report, _ = check(Norms(), torch.randn(2, 48, 8))  # [2, 8, 8] pieces: only [n, d] ones are stacked
    assert "batch-norm-member" not in report.rules_fired


# Elementwise ops of one kind on independent tensors that one cat reads -----------------------------


def test_one_elementwise_op_spelled_several_ways_moves_out_of_the_cat():
    xs = torch.randn(4, 5, 3).unbind()

    def fn(a, b, c, d):
        return torch.cat([torch.relu(a), F.relu(b), c.relu(), F.relu(d, inplace=False)], 1)

    report, gm = check(fn, *xs)
    assert report.rules_fired["unary-out-of-cat"] >= 1
    assert launches(gm, *xs) == 2 < launches(Fn(fn), *xs) == 5  # one cat, one relu


def test_elementwise_ops_that_differ_stay_in_the_cat():
    xs = torch.randn(3, 5, 3).unbind()

    def fn(a, b, c):
        return torch.cat([a.clamp(-1, 1), b.clamp(-2, 2), F.leaky_relu(c, 0.2)], 1)

    report, gm = check(fn, *xs)
    assert "unary-out-of-cat" not in report.rules_fired


def test_lone_linears_add_no_rounds_to_saturation():
    # Regression: every linear was a group of one whose stacked input, weight and bias (new
    # Unsqueeze terms) the pointwise rules then chased up the cruft chain, one block per five
    # rounds (82 rounds instead of 18 at 100 blocks; the round limit at 300).
    from optimus_egg.bench.models import chain

    model, inputs = chain(12)()
    _, alone = optimize(model, inputs, families=["split_cat", "pointwise"])
    _, with_horizontal = optimize(model, inputs)
    assert with_horizontal.stop_reason == alone.stop_reason == "saturated"
    assert with_horizontal.iterations == alone.iterations
    assert with_horizontal.kernels_after == alone.kernels_after


# Matmuls at one depth (Optimus' batch_linear_post_grad) -------------------------------------------


def _aten(fn, *inputs):
    """``fn`` traced to ATen with fake values on its nodes, like a post-grad graph."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*inputs)


def _weight_grads(x, *grads):
    """A backward's weight gradients: ``grad.T @ input`` per linear, each returned alone."""
    return tuple(torch.mm(g.t(), x if i % 2 else torch.tanh(x)) for i, g in enumerate(grads))


GRADS = [torch.randn(6, 5) for _ in range(4)]


def _optimized(fn, inputs, disjoint_outputs=True):
    from optimus_egg.pipeline import Options, optimize_graph

    gm = _aten(fn, *inputs)
    new, report = optimize_graph(gm, Options(strict=True), disjoint_outputs=disjoint_outputs)
    for trial in range(3):
        args = inputs if trial == 0 else tuple(torch.randn_like(t) for t in inputs)
        for got, want in zip(new(*args), fn(*args), strict=True):
            torch.testing.assert_close(got, want)
    return new, report


def test_matmuls_the_output_alone_reads_become_one_bmm_in_a_backward():
    x = torch.randn(6, 3)
    gm, report = _optimized(_weight_grads, (x, *GRADS))
    assert report.rules_fired["batch-mm-as-select-of-bmm"] == 4
    assert _calls(gm, "bmm.default") == 1 and _calls(gm, "mm.default") == 0
    outs = list(gm.graph.nodes)[-1].args[0]
    assert len({n.meta["val"].untyped_storage()._cdata for n in outs}) == 1  # selects of one tensor
    assert all(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
               or n.target is operator.getitem for n in gm.graph.nodes if n.op == "call_function")


def test_matmuls_of_distinct_outputs_stay_apart_where_each_would_need_a_copy():
    # a forward's outputs are distinct tensors: views of one bmm would each be copied out
    gm, report = _optimized(_weight_grads, (torch.randn(6, 3), *GRADS), disjoint_outputs=False)
    assert "batch-mm-member" not in report.rules_fired and _calls(gm, "mm.default") == 4


def test_matmuls_that_read_each_other_or_differ_are_not_batched():
    def chained(x, *grads):  # each reads the one before: depths differ
        out = x
        for g in grads:
            out = torch.mm(g, torch.mm(g.t(), out))
        return (out,)

    def mixed(x, y, *grads):  # two shapes, two dtypes
        return (*(torch.mm(g.t(), x) for g in grads[:2]), torch.mm(grads[2].t(), y),
                torch.mm(grads[3].double().t(), x.double()))

    _, report = _optimized(chained, (torch.randn(6, 3), *GRADS))
    assert "batch-mm-as-select-of-bmm" not in report.rules_fired
    _, report = _optimized(mixed, (torch.randn(6, 3), torch.randn(6, 4), *GRADS))
    assert report.rules_fired.get("batch-mm-as-select-of-bmm", 0) == 2  # the two [5, 6] @ [6, 3]


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


def test_linears_on_one_input_with_a_broadcasting_bias_are_left_alone():
    """A bias of one element broadcasts: a concatenated bias would be too short (it crashed)."""
    w1, w2, b1, b2 = torch.randn(2, 6), torch.randn(3, 6), torch.randn(1), torch.randn(3)
    report, _ = check(lambda x: torch.cat([F.linear(x, w1, b1), F.linear(x, w2, b2)], 1) * 2, torch.randn(4, 6))
    assert "linear-as-slice-of-fused" not in report.rules_fired
