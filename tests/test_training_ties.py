"""A rewrite that only ties in the forward is taken without gradients where it makes fewer eager
launches, or reads fewer tensors in cats; in a step with gradients, where the backward writes
fewer pieces' gradients, whatever the eager launches (:func:`optimus_egg.pipeline._settle_tie`)."""

import pytest
import torch

from optimus_egg.bounds import grad_pieces
from optimus_egg.pipeline import TRAINING_TIE, capture
from tests.helpers import INDUCTOR_2_13, calls_to, check


def swapped_neg(x):
    """A unary op on each piece of a split, the pieces glued back in another order: the forward
    is one loop either way; rewritten, ``cat`` of slices of ``neg(x)``, the backward sums the
    slices' gradients in one loop where the program's split wrote a cat."""
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


def tanh_beside_glued_pieces(x):
    """A tie under eager launches (the Inductor model prices the cat's seven inputs): the
    backward writes one piece of x where it wrote seven."""
    return torch.cat([torch.tanh(x[:, :2]), *x.split(2, 1)], 1)


def test_a_forward_tie_with_gradients_keeps_the_graph():
    report, _ = check(glued_back, torch.randn(6, 8, requires_grad=True))
    assert report.kernels_after == report.kernels_before
    assert report.kept and report.kept_reason == TRAINING_TIE
    assert TRAINING_TIE in report.summary()


@pytest.mark.parametrize("fn", [swapped_neg, swapped_relu])
def test_a_forward_tie_whose_backward_sums_slices_for_a_split_is_taken(fn):
    x = torch.randn(6, 8, requires_grad=True)
    report, gm = check(fn, x)
    assert report.kernels_after == report.kernels_before and not report.kept
    assert grad_pieces(gm) < grad_pieces(capture(fn, (x,)))


def products_of_slices(x, y):
    """Slices of two trained tensors multiplied: as ``split(x * y)`` the backward wrote the two
    pieces' gradients into a cat (a loop each) before the product's, where Inductor sums the
    slices' gradients in the product's loop (hunt11: 5 against 3; eight pieces 17 against 9).
    As slices of ``x * y``, its backward sums them in one loop too."""
    return (x[:, :4] * y[:, :4]).exp(), (x[:, 4:] * y[:, 4:]).exp()


def test_a_tie_that_trades_slices_of_two_tensors_for_slices_of_one_is_taken():
    x, y = torch.randn(6, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
    report, gm = check(products_of_slices, x, y)
    assert report.kernels_after == report.kernels_before and not report.kept
    assert calls_to(gm, torch.split) == 0 and grad_pieces(gm) == 1  # the product's slices, not pieces


def test_without_gradients_the_tie_is_broken_by_eager_launches():
    report, gm = check(swapped_neg, torch.randn(6, 8))
    assert not report.kept
    assert sum(n.op == "call_method" and n.target == "neg" for n in gm.graph.nodes) == 1


def rotary_beside_glued_pieces(a, q):
    """Llama's ``rotate_half`` of both halves of a trained ``q`` (four slices that tile it) beside
    a split glued back. Made one split, ``q``'s backward was a cat, four loops where Inductor sums
    the slices' gradients in one: 11 against Inductor's 9 (hunt12: a training step of Llama,
    Mistral, Qwen2, Gemma or Phi-3 built 4 to 6 kernel objects more than Inductor)."""
    def rotate_half(x):
        return torch.cat((-x[:, 4:], x[:, :4]), 1)

    return rotate_half(q[:, :8]) * 2, rotate_half(q[:, 8:]) * 3, torch.cat([p.relu() for p in a.split(4, 1)], 1)


def partial_rotary(cos, sin, qkv):
    """GPT-NeoX's attention: q, k, v chunks of one projection, the rotary embedding on the first
    columns of q and k (``rotate_half``'s slices of slices), the rest passed and glued back. As
    written the backward writes q's and k's pieces apart; rewritten (slices of ``qkv``), one
    loop sums them. The forward ties with as many eager launches (GPT-NeoX's training step,
    and this pattern: a kernel object fewer than Inductor, where keeping the graph was as many)."""
    def rotate_half(x):
        return torch.cat((-x[..., 2:], x[..., :2]), -1)

    q, k, v = qkv.chunk(3, dim=-1)
    q = torch.cat([q[..., :4] * cos + rotate_half(q[..., :4]) * sin, q[..., 4:]], -1)
    k = torch.cat([k[..., :4] * cos + rotate_half(k[..., :4]) * sin, k[..., 4:]], -1)
    return (q @ k.transpose(-1, -2)).softmax(-1) @ v


def test_a_tie_whose_backward_writes_fewer_pieces_is_taken_whatever_the_eager_launches():
    inputs = torch.randn(8, 4), torch.randn(8, 4), torch.randn(2, 4, 8, 24, requires_grad=True)
    report, gm = check(partial_rotary, *inputs)
    eager_before, eager_after = report.costs["eager"]
    assert report.kernels_after == report.kernels_before and eager_after >= eager_before and not report.kept
    assert grad_pieces(gm) < grad_pieces(capture(partial_rotary, inputs))


@INDUCTOR_2_13
@pytest.mark.parametrize("fn, shapes", [(partial_rotary, [(8, 4), (8, 4), (2, 4, 8, 24)]), (weight_pieces, [(4, 8), (8,)]), (slices_of_equal_products, [(4, 8), (8,)]),
                                        (tanh_beside_glued_pieces, [(4, 12)]), (swapped_neg, [(6, 8)]),
                                        (rotary_beside_glued_pieces, [(4, 8), (4, 16)])])
def test_a_training_step_builds_no_more_than_inductor(fn, shapes):
    """The last input trains."""
    from torch._inductor import metrics

    from optimus_egg.bench.steps import measured_compile
    from optimus_egg.counting import wrapper_extern_calls

    inputs = [torch.randn(*shape) for shape in shapes]

    def built(backend):
        torch._dynamo.reset()
        trained = inputs[-1].clone().requires_grad_()
        with measured_compile(cold=False) as codes:
            out = torch.compile(fn, backend=backend)(*inputs[:-1], trained)
            sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
            return metrics.generated_kernel_count + sum(wrapper_extern_calls(c) for c in codes)

    assert built("optimus_egg") <= built("inductor")
