"""What Inductor makes of a call the op table does not name (optimus_egg.lowered), and the cost
model's use of it: a producer Inductor inlines into such a call is not priced as a kernel."""

import pytest
import torch
import torch.nn.functional as F

from optimus_egg.bench.steps import measured_compile
from optimus_egg.counting import wrapper_extern_calls
from optimus_egg.lowered import lowered_kind
from optimus_egg.optable import lookup
from optimus_egg.bounds import grad_pieces
from optimus_egg.pipeline import capture
from tests.helpers import INDUCTOR_2_13, check

LABELS = torch.zeros(6, dtype=torch.long)


#: Inductor's tables (tags, lowerings, decompositions) as of torch 2.13; an older torch may lack
#: one, and the call is then priced as an extern call, as before.
@INDUCTOR_2_13
@pytest.mark.parametrize("fn, kind", [
    (lambda x: torch.logsumexp(x, 1), "reduction"),
    (lambda x: F.softmin(x, 1), "reduction"),
    (lambda x: F.cross_entropy(x, LABELS), "reduction"),
    (lambda x: torch.var_mean(x, 1)[0], "reduction"),
    (lambda x: F.glu(x, 1), "pointwise"),
    (lambda x: x.tril(), "pointwise"),
    (lambda x: x.flip(1), "pointwise"),
    (lambda x: x.roll(1, 1), "pointwise"),
    (lambda x: torch.diff(x, 1, 1, prepend=x[:, :1] - 1), "pointwise"),  # a cat, its pieces loops
    (lambda x: torch.tensordot(x, x, ([1], [1])), "extern"),  # an mm
    (lambda x: torch.cdist(x, x), "extern"),
    (lambda x: x.masked_select(x > 0), "extern"),  # an ATen fallback
])
def test_an_unnamed_call_is_what_its_aten_ops_are(fn, kind):
    gm = capture(fn, [torch.randn(6, 8)])
    unnamed = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method") and lookup(n) is None]
    assert unnamed and lowered_kind(unnamed[-1]) == kind


@INDUCTOR_2_13
def test_symbolic_sizes_are_traced_at_their_hints():
    x = torch.randn(6, 8)
    torch._dynamo.mark_dynamic(x, 0)
    gm = capture(lambda x: torch.logsumexp(x, 1), [x])
    node = next(n for n in gm.graph.nodes if n.target is torch.logsumexp)
    assert lowered_kind(node) == "reduction"


@torch.library.custom_op("optimus_egg_test::opaque", mutates_args=())
def _opaque(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_opaque.register_fake
def _(x):
    return torch.empty_like(x)


def _raises(x):
    raise RuntimeError("no trace")


def test_a_custom_op_or_a_call_the_trace_cannot_run_is_extern():
    gm = capture(lambda x: _opaque(x), [torch.randn(6, 8)])  # (Inductor has no lowering of it)
    assert lowered_kind(next(n for n in gm.graph.nodes if n.op == "call_function")) == "extern"
    gm = capture(lambda x: x.exp(), [torch.randn(6, 8)])
    node = next(n for n in gm.graph.nodes if n.op == "call_method")
    node.op, node.target = "call_function", _raises
    assert lowered_kind(node) == "extern"


def sums_of_slices_logsumexp(x, y):
    """Sums of slices read by a reduction the op table does not name: Inductor computes each sum
    inside its ``logsumexp``, so slices of ``x + y`` save no kernel (priced as an extern call that
    nothing fuses into, they did: 4 → 3). Taken as a gain, ``x + y`` was split, whose gradient is
    a cat where Inductor sums the slices' (hunt11 F2: 8 kernel objects against Inductor's 7)."""
    return torch.logsumexp(x[:, :4] + y[:, :4], 1), torch.logsumexp(x[:, 4:] + y[:, 4:], 1)


@INDUCTOR_2_13
def test_a_producer_inlined_into_an_unnamed_reduction_is_not_a_kernel():
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    report, _ = check(sums_of_slices_logsumexp, x, y)
    assert report.kernels_after == report.kernels_before == 2
    x.requires_grad_(), y.requires_grad_()
    report, gm = check(sums_of_slices_logsumexp, x, y)  # a tie, taken: the slices of one sum's gradients
    assert report.kernels_after == report.kernels_before == 2 and not report.kept
    assert grad_pieces(gm) < grad_pieces(capture(sums_of_slices_logsumexp, (x, y)))


@INDUCTOR_2_13
def test_sums_of_slices_of_trained_tensors_build_no_more_than_inductor():
    from torch._inductor import metrics

    def built(backend):
        torch._dynamo.reset()
        x, y = torch.randn(6, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
        with measured_compile(cold=False) as codes:
            sum(o.sum() for o in torch.compile(sums_of_slices_logsumexp, backend=backend)(x, y)).backward()
            return metrics.generated_kernel_count + sum(wrapper_extern_calls(c) for c in codes)

    assert built("optimus_egg") <= built("inductor")
