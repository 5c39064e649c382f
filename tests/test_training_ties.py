"""A rewrite that only ties in the forward is taken without gradients (fewer eager launches, then
fewer tensors read by cats) and never in a step with gradients, whose backward the cost models
do not price (:func:`optimus_egg.pipeline._cheaper`)."""

import pytest
import torch

from optimus_egg.bench.optimus_cases import cases
from optimus_egg.bench.steps import training_inputs
from optimus_egg.pipeline import TRAINING_TIE
from tests.helpers import INDUCTOR_2_13, check


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


def weight_pieces(x, w):
    """Pieces of x times pieces of a weight, glued back: as a split of w, the weight's gradient is
    a cat of sums where CPU Inductor fuses the slices' gradients into one."""
    return torch.cat([x[:, :3] * w[:3], x[:, 3:6] * w[3:6], x[:, 6:] * w[6:]], 1)


def slices_of_equal_products(x, w):
    """Two equal products, a slice of each: computed once and split, the product's gradient is a
    cat of the two slices' that CPU Inductor builds in more kernels than their sum."""
    return (x * w)[:, :4].exp() + 0, (x * w)[:, 4:].sin()


@pytest.mark.parametrize("fn", [swapped_neg, swapped_relu, glued_back])
def test_a_forward_tie_with_gradients_keeps_the_graph(fn):
    report, _ = check(fn, torch.randn(6, 8, requires_grad=True))
    assert report.kernels_after == report.kernels_before
    assert report.kept and report.kept_reason == TRAINING_TIE
    assert TRAINING_TIE in report.summary()


def test_without_gradients_the_tie_is_broken_by_eager_launches():
    report, gm = check(swapped_neg, torch.randn(6, 8))
    assert not report.kept
    assert sum(n.op == "call_method" and n.target == "neg" for n in gm.graph.nodes) == 1


def test_a_tie_among_the_optimus_cases_keeps_the_graph():
    """Pieces split again and a third read by a sin, between tanhs: a tie in the forward."""
    model, inputs = cases(interior=True)["split_cat_merge_splits_other_users"]()
    report, _ = check(model, *training_inputs(model, inputs))
    assert report.kept and report.kept_reason == TRAINING_TIE


@INDUCTOR_2_13
@pytest.mark.parametrize("fn", [weight_pieces, slices_of_equal_products])
def test_a_training_step_with_weight_pieces_builds_no_more_than_inductor(fn):
    from torch._inductor import metrics

    from optimus_egg.bench.steps import measured_compile
    from optimus_egg.counting import wrapper_extern_calls

    x, w = torch.randn(4, 8), torch.randn(8)

    def built(backend):
        torch._dynamo.reset()
        weight = w.clone().requires_grad_()
        with measured_compile(cold=False) as codes:
            out = torch.compile(fn, backend=backend)(x, weight)
            sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
            return metrics.generated_kernel_count + sum(wrapper_extern_calls(c) for c in codes)

    assert built("optimus_egg") <= built("inductor")
