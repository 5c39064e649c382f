"""What a rewrite may not add to a step (:mod:`optimus_egg.bounds`): cats or stacks
that a matmul saves for the backward (``memory_bound``; in inference batching stays on), and
pointwise ops with gradients over more elements (a piece computed once per cat that holds it)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from optimus_egg.bench import real
from optimus_egg.pipeline import capture, optimize
from optimus_egg.bounds import grad_pieces, pointwise_elements, restacked, saved_copies
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
    assert "horizontal" in report.dropped and not report.kept  # the other families still ran
    assert report.kernels_after < report.kernels_before


def test_batching_stays_on_in_inference_and_without_the_bound():
    inference = _requires_grad(Experts(), False)
    _, gm = check(inference, X)
    assert calls_named(gm, "linear") == 1
    training = _requires_grad(Experts(), True)
    unbounded = check_training(training, X, memory_bound=False)
    assert calls_named(unbounded, "linear") == 1


class SharedExperts(nn.Module):
    """Three experts' relus, one of them in both gates' stacks (a PLE's shared expert), each
    stack mixed by its softmaxed gate."""

    def __init__(self) -> None:
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(16, 8) for _ in range(3))
        self.gates = nn.ModuleList(nn.Linear(16, 2, bias=False) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared, first, second = (torch.relu(e(x)) for e in self.experts)
        stacks = (torch.stack([shared, first], 1), torch.stack([shared, second], 1))
        return torch.cat([torch.matmul(g(x).softmax(1).unsqueeze(1), s).squeeze(1)
                          for g, s in zip(self.gates, stacks)], 1)


class Towers(nn.Module):
    """Three towers' sigmoids glued (each element in one cat), and scaled: the cat is not what
    the graph returns (the caller could write that, and autograd saves a sigmoid's result)."""

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.towers = nn.ModuleList(nn.Linear(16, 1) for _ in range(3))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        glued = torch.cat([torch.sigmoid(t(x)) for t in self.towers], 1)
        return glued * self.scale if self.scale != 1 else glued


POINTWISE = ("split_cat", "pointwise")


def test_pointwise_elements_are_those_with_gradients():
    w = torch.randn(8, 16, requires_grad=True)
    assert pointwise_elements(capture(Fn(lambda x, w: (x @ w.t()).relu() * 2), (X, w))) == 2 * 32 * 8
    assert pointwise_elements(capture(Fn(lambda x, w: (x @ w.t()).relu() * 2), (X, w.detach()))) == 0


@pytest.mark.parametrize("fn, loops", [
    (lambda x: x[:, :3] * 2, 1),  # a zero-filled gradient
    (lambda x: x[:, :3] * x[:, 3:], 1),  # one sum for all of x's slices
    (lambda x: x[:, None] * 2, 0),  # every element: the gradient passes on
    (lambda x: x[:, :6] * 2, 0),
    (lambda x: x[:1][0] * 2, 1),  # x[:1]'s gradient is zero-filled; its select of a dim of 1 is all of it
    (lambda x: x[torch.tensor([3, 2, 1, 0])] * 2, 1),  # a gather, whatever its shape
    (lambda x: x.split(2, 1)[0] * x.split(2, 1)[2], 2),  # split pieces: a cat input each
])
def test_grad_pieces_counts_the_loops_of_pieces_gradients(fn, loops):
    assert grad_pieces(capture(Fn(fn), (torch.randn(4, 6, requires_grad=True),))) == loops


def test_a_piece_shared_by_two_stacks_keeps_its_one_pointwise_op_in_training():
    inference = _requires_grad(SharedExperts(), False)
    _, moved = check(inference, X, families=POINTWISE)
    assert calls_named(moved, "relu") == 2  # one over each stack: the shared piece twice
    model = _requires_grad(SharedExperts(), True)
    gm = check_training(model, X, families=POINTWISE)
    assert calls_named(gm, "relu") == 3
    assert pointwise_elements(gm) <= pointwise_elements(capture(model, (X,)))
    _, report = optimize(model, (X,), families=POINTWISE)
    assert "pointwise" in report.dropped


def test_a_pointwise_op_over_pieces_in_one_cat_moves_in_training():
    model = _requires_grad(Towers(), True)
    gm = check_training(model, X, families=POINTWISE)
    assert calls_named(gm, "sigmoid") == 1
    _, report = optimize(model, (X,), families=POINTWISE)
    assert not report.dropped
    returned = _requires_grad(Towers(scale=1), True)  # the glued sigmoids returned: one each
    gm = check_training(returned, X, families=POINTWISE)
    assert calls_named(gm, "sigmoid") == 3


def test_restacked_counts_stacks_of_pieces_of_computed_results():
    w = torch.randn(16, 12)
    pieces_of_result = capture(Fn(lambda x, w: torch.stack((x @ w).split(4, 1)) @ w[:4]), (X, w))
    assert restacked(pieces_of_result) == 3 * 32 * 4 * 4
    through_a_view = capture(Fn(lambda x, w: torch.stack((x @ w).split(4, 1)).flatten(0, 1) @ w[:4]), (X, w))
    assert restacked(through_a_view) == 3 * 32 * 4 * 4
    fused_into_a_pointwise_op = capture(Fn(lambda x, w: torch.stack((x @ w).split(4, 1)).relu()), (X, w))
    assert restacked(fused_into_a_pointwise_op) == 0
    pieces_of_input = capture(Fn(lambda x, w: torch.stack(x.split(4, 1)) @ w[:4]), (X, w))
    assert restacked(pieces_of_input) == 0
    whole_results = capture(Fn(lambda x, w: torch.stack([x @ w, (x @ w).relu()]) @ w.t()), (X, w))
    assert restacked(whole_results) == 0


def test_inference_keeps_experts_unbatched_where_batching_would_restack_their_layer():
    """PLE's experts: two-layer MLPs on one input. Batched, the first layers are one linear whose
    windows are stacked for the second layers' batched matmul: a copy of the whole layer."""
    model, inputs = real.models()["real_ple"]()
    model = _requires_grad(model.eval(), False)
    report, gm = check(model, *inputs)
    assert "horizontal" in report.dropped and report.kernels_after < report.kernels_before
    assert "(without horizontal: it would copy pieces of a result into a stack)" in report.summary()
    assert restacked(gm) <= restacked(capture(model, inputs))
    unbounded, _ = optimize(model, inputs, memory_bound=False)
    assert restacked(unbounded) > restacked(capture(model, inputs))


class GluedBackThenMatmul(nn.Module):
    """``cat(split(x)) @ w``: eager saves the cat for ``w``'s gradient, not ``x``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat(x.split(4, 1), 1) @ self.w


def _written_between_forward_and_backward(fn, *inputs, compiled: bool):
    """The gradients of ``fn``'s parameters and of its inputs that require grad, where the caller
    writes every other input in place between the forward and the backward, as eager allows."""
    torch._dynamo.reset()
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = (torch.compile(fn, backend="optimus_egg") if compiled else fn)(*inputs)
    for t in inputs:
        if not t.requires_grad:
            t.mul_(2)
    out.sum().backward()
    params = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    grads = [t.grad.clone() for t in (*params, *inputs) if t.requires_grad]
    for t in params:
        t.grad = None
    return grads


@pytest.mark.parametrize("fn, shapes", [
    (GluedBackThenMatmul(), [(6, 8)]),
    (lambda x, w: torch.cat(x.split(4, 1), 1) @ w, [(6, 8), (8, 8)]),
    (lambda x, w: torch.stack(x.unbind(0), 0) @ w, [(3, 6, 8), (8, 8)]),
    (lambda x, w: F.linear(torch.cat(x.split(4, 1), 1), w), [(6, 8), (5, 8)]),
    (lambda x, w: torch.cat(x.split(4, 1), 1) * w, [(6, 8), (6, 8)]),
])
def test_an_input_is_not_saved_where_a_copy_of_it_was(fn, shapes):
    """The caller writes ``x`` after the forward: eager's gradients read the cat it saved. Inductor
    removes a clone (a no-op to it) before it partitions, so the copy the rewrite reads must be
    one it keeps."""
    torch.manual_seed(0)
    inputs = [torch.randn(*s, requires_grad=i > 0) for i, s in enumerate(shapes)]
    want = _written_between_forward_and_backward(fn, *inputs, compiled=False)
    got = _written_between_forward_and_backward(fn, *inputs, compiled=True)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_without_a_gradient_to_save_for_nothing_is_copied():
    x = torch.randn(6, 8)
    gm, report = optimize(GluedBackThenMatmul(), (x,))
    assert report.kept or calls_named(gm, "narrow") == 2  # the matmul reads a copy of x, as eager's cat
    gm, report = optimize(_requires_grad(GluedBackThenMatmul(), False), (x,))
    assert not report.kept and calls_named(gm, "narrow") == calls_named(gm, "cat") == 0


def test_a_saved_input_copy_costs_a_loop_for_each_tensor_it_reads_on_cpu():
    """``x`` glued back for a matmul while a piece of it is summed: as written, CPU Inductor writes
    the cat and the sum in the cat's loops; the rewrite's copy of ``x`` (a cat of two narrows,
    two loops) ties with it, and a forward tie in training keeps the graph. Priced as one kernel,
    the copy made the rewrite look cheaper, and the step built a kernel more than Inductor's."""
    def fn(x, w):
        a, b = x.split(4, 1)
        return torch.cat([a, b], 1) @ w, a.sum()

    x, w = torch.randn(6, 8), torch.randn(8, 8, requires_grad=True)
    report, _ = check(fn, x, w)
    assert report.kept and report.kernels_after == report.kernels_before
    report, gm = check(fn, x, w.detach())  # without gradients nothing is saved, nothing copied
    assert not report.kept and calls_named(gm, "narrow") <= 1


class GluedBackTwice(nn.Module):
    """``x`` glued back for a matmul, and ``y``'s relus glued back (a rewrite that pays)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        glued = torch.cat([p.relu() for p in y.split(2, 1)], 1)
        return torch.cat(x.split(4, 1), 1) @ self.w + glued @ self.w


def test_an_input_saved_where_a_copy_was_is_copied_and_the_rest_kept():
    model, x, y = GluedBackTwice(), torch.randn(6, 8), torch.randn(6, 8)
    gm = check_training(model, x, y)
    # x copied, and y: the matmul reads relu(y), which Inductor may recompute from y in the
    # backward; y's relus one
    assert calls_named(gm, "narrow") == 4 and calls_named(gm, "relu") == 1
    copied = {n.args[0].name for n in gm.graph.nodes if n.target is torch.narrow}
    assert copied == {"l_x_", "l_y_"}


def test_an_output_is_not_saved_where_the_caller_could_write_it():
    def fn(x):  # eager saves each tanh, the cat it returns is the caller's to write
        a, b = x.split(4, 1)
        return torch.cat([a.tanh(), b.tanh()], 1)

    x = torch.randn(6, 8, requires_grad=True)
    _, report = optimize(Fn(fn), (x,))  # (a copy of tanh(x) would be what AOTAutograd saves)
    assert "save an output" in report.dropped["pointwise"]
    torch._dynamo.reset()
    out = torch.compile(fn, backend="optimus_egg")(x)
    out.mul_(2)
    out.sum().backward()  # no "modified by an inplace operation"
    torch.testing.assert_close(x.grad, 2 * (1 - x.detach().tanh() ** 2))
    gm, _ = optimize(Fn(fn), (x.detach(),))  # without grad nothing is saved: one tanh
    assert calls_named(gm, "tanh") == 1


def _step(fn, x, w, non_leaf: bool, compiled: bool, write_output: bool):
    """One step of ``fn(x, w)`` where the caller writes ``x`` (``non_leaf``: an earlier layer's
    output, which requires grad) or, ``write_output``, the first output in place between the
    forward and the backward, as eager allows: the gradients of ``w`` and of ``x``'s leaf."""
    torch._dynamo.reset()
    base, w = x.clone().requires_grad_(non_leaf), w.clone().requires_grad_()
    x = base * 1 if non_leaf else base
    outs = (torch.compile(fn, backend="optimus_egg") if compiled else fn)(x, w)
    outs = outs if isinstance(outs, tuple) else (outs,)
    (outs[0] if write_output else x).mul_(2)
    sum(o.sum() for o in outs if o.requires_grad).backward()
    return [w.grad, base.grad]


def _neg_pieces_times(x, w):
    a, b = x.split(4, 1)
    return torch.cat([a.neg(), b.neg()], 1) * w


def _neg_returned_and_saved(x, w):
    a, b = x.split(4, 1)
    na, nb = a.neg(), b.neg()
    return torch.cat([na, nb], 1), na * w


@pytest.mark.parametrize("fn, w_shape, non_leaf, write_output", [
    # an input with grad that is no leaf (an earlier layer's output): the caller may write it
    (lambda x, w: torch.cat(x.split(4, 1), 1) @ w, (8, 8), True, False),
    # the rewrite leaves a neg between the input and the mul, which Inductor's partitioner
    # recomputes in the backward from the input, which it then saves
    (_neg_pieces_times, (6, 8), False, False),
    (lambda x, w: torch.cat(x.split(4, 1), 1).double() * w.double(), (6, 8), False, False),  # a loop
    # a result returned and read by a mul that saves it (neg moved out of the cat)
    (_neg_returned_and_saved, (6, 4), False, True),
    # two equal expressions computed once, one returned, the other saved
    (lambda x, w: (x.neg(), x.neg() * w), (6, 8), False, True),
    # a softmax, or an op the table does not know, is recomputed from what it reads too
    (lambda x, w: torch.cat(x.split(4, 1), 1).softmax(1) * w, (6, 8), False, False),
    (lambda x, w: torch.cat(x.split(4, 1), 1).sinh() * w, (6, 8), False, False),
    (lambda x, w: (x.neg() * 2, (x.neg() * 2).softmax(1) * w), (6, 8), False, True),
])
def test_what_autograd_saves_is_not_what_the_caller_may_write(fn, w_shape, non_leaf, write_output):
    torch.manual_seed(0)
    x, w = torch.randn(6, 8), torch.randn(*w_shape)
    want = _step(fn, x, w, non_leaf, compiled=False, write_output=write_output)
    got = _step(fn, x, w, non_leaf, compiled=True, write_output=write_output)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r)


def test_a_reshape_or_a_copy_in_order_saves_nothing():
    """An input returned as a piece, its other pieces moved and copied in order (the emitter's
    ``torch.Tensor.contiguous``) into a cat: neither the reshape nor the copy saves the input."""
    from optimus_egg.bench.optimus_cases import cases
    from optimus_egg.bench.steps import training_inputs

    model, inputs = cases()["split_cat_input_shuffling_multiple_output"]()
    report, _ = check(model, *training_inputs(model, inputs))
    assert not report.kept and not report.dropped and report.kernels_after < report.kernels_before
