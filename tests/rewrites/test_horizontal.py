"""Horizontal fusion: parallel linears on one input, and linears, elementwise ops and matmuls on
inputs of one shape batched; before and after on random inputs, and the cases each rule must
leave alone. (Linears and norms over the pieces of one tensor: test_horizontal_tiled.)"""

import operator

import torch
import torch.nn.functional as F
from torch import nn

from optimus_egg import optimize
from tests.helpers import EAGER, Fn, launches
from tests.helpers import check_rule as check
from tests.rewrites.linears import XG, XS, Gapped, Parallel, assert_same_gradients, calls_named


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


def test_parallel_linears_without_bias_on_one_input_become_one_linear():
    model = Towers(5, bias=False)
    report, gm = check(model, X)
    assert report.rules_fired["linear-as-slice-of-fused-no-bias"] == 5 and "linear-as-slice-of-fused" not in report.rules_fired
    # one linear, the cat of the weights, one relu on the fused output, five sums
    assert launches(gm, X) == 8 < launches(model, X) == 15


def test_query_key_value_linears_without_bias_on_a_sequence_are_one_linear():
    """T5's attention: q, k and v projections of one [batch, tokens, dim] input."""
    q, k, v = (nn.Linear(8, 8, bias=False) for _ in range(3))
    fn = lambda x: torch.softmax(q(x) @ k(x).transpose(1, 2), -1) @ v(x)  # noqa: E731
    x = torch.randn(2, 5, 8)
    report, gm = check(fn, x)
    assert report.rules_fired["linear-as-slice-of-fused-no-bias"] == 3
    assert calls_named(gm, "linear") == 1


def test_linears_with_and_without_bias_on_one_input_are_not_one_group():
    """A bias-free linear has a template of its own: the two kinds never share a fused linear."""
    a, b = nn.Linear(8, 3, bias=False), nn.Linear(8, 4)
    report, _ = check(lambda x: torch.cat([a(x), b(x)], 1).relu(), X)
    assert not {"linear-as-slice-of-fused", "linear-as-slice-of-fused-no-bias"} & set(report.rules_fired)


def test_fused_linears_keep_program_order_so_a_cat_of_their_outputs_is_the_fused_output():
    heads = Towers(5).towers

    def fn(x):
        return torch.cat([torch.relu(h(x)) for h in heads], 1)

    _, gm = check(fn, X)
    # the weights are concatenated in the order the cat reads the heads: the cats of the weights
    # and biases, one linear and one relu of its whole output (in reverse order, the cat of its
    # slices was a copy of each)
    assert calls_named(gm, "relu") == 1 and calls_named(gm, "cat") == 2
    assert launches(gm, X) == 4 < launches(fn, X) == 11


def test_linears_on_one_input_with_a_broadcasting_bias_are_left_alone():
    """A bias of one element broadcasts: a concatenated bias would be too short (it crashed)."""
    w1, w2, b1, b2 = torch.randn(2, 6), torch.randn(3, 6), torch.randn(1), torch.randn(3)
    report, _ = check(lambda x: torch.cat([F.linear(x, w1, b1), F.linear(x, w2, b2)], 1) * 2, torch.randn(4, 6))
    assert "linear-as-slice-of-fused" not in report.rules_fired


# Linears on different inputs of one shape (Optimus' batch_linear) -------------------------------


def test_linears_on_different_inputs_become_one_baddbmm():
    model = Gapped(8)
    report, gm = check(model, XG)
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 8
    assert "tiled-linear-as-select" not in report.rules_fired
    assert calls_named(gm, "baddbmm") == 1 and calls_named(gm, "linear") == 0
    # a stack each of the inputs, weights and biases and one baddbmm replace the eight linears
    # (the weights' transpose and each output's select are views); the cat stays
    assert launches(gm, XG) == 4 + 1 < launches(model, XG) == 8 + 1


def test_linears_without_bias_become_one_bmm():
    model = Gapped(8, bias=False)
    report, gm = check(model, XG)
    assert report.rules_fired["batch-linear-as-select-of-bmm"] == 8
    assert calls_named(gm, "bmm") == 1 and calls_named(gm, "linear") == 0


def test_batched_linears_train_like_the_originals():
    model, x = Parallel(6), torch.randn(5, 24, requires_grad=True)
    gm, report = optimize(model, (x,), **EAGER)
    assert calls_named(gm, "baddbmm") == 1
    assert_same_gradients(model, gm, x)
    model, x = Gapped(6), torch.randn(5, 48, requires_grad=True)
    gm, report = optimize(model, (x,), **EAGER)
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 6 and calls_named(gm, "baddbmm") == 1
    assert_same_gradients(model, gm, x)


def test_two_batched_linears_stay_apart_when_the_stacks_cost_more():
    model = Parallel(2)
    report, gm = check(model, XS[:, :8])
    assert report.rules_fired["batch-linear-as-select-of-baddbmm"] == 2
    assert calls_named(gm, "baddbmm") == 0 and launches(gm, XS[:, :8]) == launches(model, XS[:, :8])


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
    assert calls_named(gm, "baddbmm") == 2 and calls_named(gm, "linear") == 0
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
    assert calls_named(gm, "baddbmm") == 2


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
    assert calls_named(gm, "baddbmm") == 1


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
    _, alone = optimize(model, inputs, families=["split_cat", "pointwise"], **EAGER)
    _, with_horizontal = optimize(model, inputs, **EAGER)
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
    new, report = optimize_graph(gm, Options(strict=True, cost_model="eager"), disjoint_outputs=disjoint_outputs)
    for trial in range(3):
        args = inputs if trial == 0 else tuple(torch.randn_like(t) for t in inputs)
        for got, want in zip(new(*args), fn(*args), strict=True):
            torch.testing.assert_close(got, want)
    return new, report


def test_matmuls_the_output_alone_reads_become_one_bmm_in_a_backward():
    x = torch.randn(6, 3)
    gm, report = _optimized(_weight_grads, (x, *GRADS))
    assert report.rules_fired["batch-mm-as-select-of-bmm"] == 4
    assert calls_named(gm, "bmm.default") == 1 and calls_named(gm, "mm.default") == 0
    outs = list(gm.graph.nodes)[-1].args[0]
    assert len({n.meta["val"].untyped_storage()._cdata for n in outs}) == 1  # selects of one tensor
    assert all(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
               or n.target is operator.getitem for n in gm.graph.nodes if n.op == "call_function")


def test_matmuls_of_distinct_outputs_stay_apart_where_each_would_need_a_copy():
    # a forward's outputs are distinct tensors: views of one bmm would each be copied out
    gm, report = _optimized(_weight_grads, (torch.randn(6, 3), *GRADS), disjoint_outputs=False)
    assert "batch-mm-member" not in report.rules_fired and calls_named(gm, "mm.default") == 4


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
