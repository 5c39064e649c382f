"""A forward tie in a step with gradients is settled by the forward and backward graphs
AOTAutograd derives for the part of the graph the rewrite changes (:mod:`optimus_egg.step_cost`)."""

import pytest
import torch

from optimus_egg import step_cost
from optimus_egg.bench.optimus_cases import cases
from optimus_egg.bench.steps import training_inputs
from optimus_egg.options import Options
from optimus_egg.pipeline import capture, optimize_graph
from tests.helpers import INDUCTOR_2_13, Fn, check


def swapped_neg(x):
    """A unary op on each piece of a split, the pieces glued back in another order: the forward
    is one loop either way; ``neg(cat(b, a))``'s gradient is written once more into the split's."""
    a, b = x.split(4, 1)
    return torch.cat([b.neg(), a.neg()], 1)


def swapped_relu(x):
    a, b = x.split(4, 1)
    return torch.cat([b.relu(), a.relu()], 1)


def glued_back(x):
    """A split glued back whole while its pieces are read too: ``clone(x)``'s gradient is added
    to the pieces' one loop after the cat eager writes them into."""
    a, b = x.split(4, 1)
    return a.relu(), torch.cat([a, b], 1), b


@INDUCTOR_2_13
@pytest.mark.parametrize("fn", [swapped_neg, swapped_relu, glued_back])
def test_a_forward_tie_whose_backward_costs_more_keeps_the_graph(fn):
    report, _ = check(fn, torch.randn(6, 8, requires_grad=True))
    assert report.kept and report.kept_reason == "the backward would cost more"
    before, after = report.step_kernels
    assert after > before
    assert "with the backward" in report.summary()


def test_without_gradients_the_tie_is_broken_by_eager_launches():
    report, gm = check(swapped_neg, torch.randn(6, 8))
    assert not report.kept and report.step_kernels is None
    assert sum(n.op == "call_method" and n.target == "neg" for n in gm.graph.nodes) == 1


def test_a_cheaper_step_takes_nothing_the_rest_refuses():
    """Pieces split again and a third read by a sin, between tanhs: the step model prices the
    rewrite's backward cheaper, but it slices outside splits, which the step alone does not
    overrule (its backward is less calibrated than the forward's figure)."""
    model, inputs = cases(interior=True)["split_cat_merge_splits_other_users"]()
    report, _ = check(model, *training_inputs(model, inputs))
    assert report.kept and report.kept_reason == "slices would cost backward kernels"


def test_only_the_calls_a_rewrite_changes_are_traced():
    """A chain the rewrite leaves alone is not part of what is priced: the two parts are the
    split, its pieces and the negs against neg, split and pieces, and the cat beside them."""
    def fn(x, y):
        return swapped_neg(x), (y.sin() * 2).cos()

    x, y = torch.randn(6, 8), torch.randn(6, 8)  # (without gradients the tie-break rewrites it)
    gm = capture(Fn(fn), (x, y))
    new_gm, report = optimize_graph(gm, Options(strict=True))
    assert not report.kept
    old_part, new_part = step_cost._differing(gm, new_gm)
    untouched = {"sin", "mul", "cos"}
    assert not {n.name for n in old_part} & untouched and not {n.name for n in new_part} & untouched
    assert old_part and new_part


@INDUCTOR_2_13
def test_a_training_step_with_weight_pieces_builds_no_more_than_inductor():
    """Pieces of x times pieces of a weight, glued back: the forward ties, and the step model
    prices the rewrite's backward (the weight's slices as a split) cheaper than CPU Inductor
    builds it; the step alone takes no tie."""
    from torch._inductor import metrics

    from optimus_egg.bench.steps import measured_compile
    from optimus_egg.counting import wrapper_extern_calls

    def fn(x, w):
        return torch.cat([x[:, :3] * w[:3], x[:, 3:6] * w[3:6], x[:, 6:] * w[6:]], 1)

    x, w = torch.randn(4, 8), torch.randn(8)

    def built(backend):
        torch._dynamo.reset()
        weight = w.clone().requires_grad_()
        with measured_compile(cold=False) as codes:
            torch.compile(fn, backend=backend)(x, weight).sum().backward()
            return metrics.generated_kernel_count + sum(wrapper_extern_calls(c) for c in codes)

    assert built("optimus_egg") <= built("inductor")
