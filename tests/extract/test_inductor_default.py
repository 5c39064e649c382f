"""The default cost model is Inductor-aware: a graph is rewritten only where Inductor builds it
with no more kernel objects + extern calls than as written (CPU), and its figures are Inductor's."""

import torch

from optimus_egg import optimize
from optimus_egg.bench.calibrate import measure
from optimus_egg.bench.models import chain
from tests.helpers import INDUCTOR_2_13, Fn, calls_to
from tests.rewrites.linears import XG, Gapped, calls_named


#: The model is calibrated on torch 2.13's Inductor: what it builds is compared there; the
#: decisions are checked on every version.
CALIBRATED = torch.__version__.startswith("2.13")


def _built(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    got = measure(model, inputs)
    return got["objects"] + got["extern"]


@INDUCTOR_2_13
def test_figures_are_what_inductor_builds_and_the_cruft_goes():
    """(Exact on torch 2.13, the calibration's; later Inductors may build a loop more or less.)"""
    model, inputs = chain(2)()
    with torch.no_grad():  # (the figures are measured in inference)
        gm, report = optimize(model, inputs)
    assert report.cost_model == "inductor" and not report.kept
    assert report.kernels_before > report.kernels_after
    if CALIBRATED:
        assert (report.kernels_before, report.kernels_after) == (_built(model, inputs), _built(gm, inputs))


@INDUCTOR_2_13
def test_a_rewrite_inductor_builds_with_more_loops_is_not_taken():
    """A stack of relus is one relu of the stack in eager launches (2 for 4), but CPU Inductor
    writes each relu into its slot (3 loops) where the stack of inputs first costs a loop each."""
    xs = tuple(torch.randn(4, 3) for _ in range(3))
    model = Fn(lambda a, b, c: torch.stack([a.relu(), b.relu(), c.relu()], 0))
    gm, report = optimize(model, xs)
    assert report.kept and gm is not model
    eager_gm, eager_report = optimize(model, xs, cost_model="eager")
    assert not eager_report.kept
    assert not CALIBRATED or _built(gm, xs) == _built(model, xs) < _built(eager_gm, xs)


@INDUCTOR_2_13
def test_linears_are_batched_on_cpu_only_where_inductor_builds_less():
    """Eight linears on pieces of one input write their cat's slots straight from ``addmm``;
    batched, the pieces, weights and biases are copied into stacks first: more to build."""
    model = Gapped(8)
    gm, report = optimize(model, (XG,))
    assert calls_named(gm, "linear") == 8 and calls_named(gm, "baddbmm") == 0
    eager_gm, _ = optimize(model, (XG,), cost_model="eager", memory_bound=False)
    assert calls_named(eager_gm, "baddbmm") == 1
    assert not CALIBRATED or _built(gm, (XG,)) <= _built(model, (XG,)) < _built(eager_gm, (XG,))


@INDUCTOR_2_13
def test_pieces_glued_along_another_dim_are_one_copy_with_an_output_copy_counted():
    """Six pieces cut along one dim and glued along another: CPU Inductor writes a loop per
    piece; as one copy of x, even though the output must be a copy of its own (rows of one
    moved past a dim of 1 are x in another shape: move-past-one; eager prices both one launch
    and takes the copy too)."""
    x = torch.randn(2, 6, 4, 3)
    model = Fn(lambda x: torch.cat(torch.split(x, 1, 2), 3))
    gm, report = optimize(model, (x,))
    assert not report.kept and report.kernels_after < report.kernels_before
    assert not CALIBRATED or _built(gm, (x,)) < _built(model, (x,))
    gm, report = optimize(model, (x,), cost_model="eager")
    assert report.kernels_after == report.kernels_before and calls_to(gm, torch.cat) == 0


@INDUCTOR_2_13
def test_windows_stacked_for_a_batched_matmul_are_read_in_place():
    """Equal windows of a relu stacked (a cat along a size-1 dim) for one ``baddbmm``: a loop per
    window as written; optimized, the ``movedim`` view of the relu, which the matmul reads."""
    w1, b1, w2, b2 = torch.randn(206, 16), torch.randn(206), torch.randn(6, 32, 8), torch.randn(6, 1, 8)

    def fn(x):
        h = torch.relu(torch.nn.functional.linear(x, w1, b1)).unflatten(0, (1, -1))
        return torch.baddbmm(b2, torch.cat([h.narrow(2, 14 + 32 * i, 32) for i in range(6)], 0), w2)

    x = torch.randn(64, 16)
    gm, report = optimize(Fn(fn), (x,))
    torch.testing.assert_close(gm(x), fn(x))
    assert not report.kept and report.kernels_after < report.kernels_before
    if CALIBRATED:
        assert (report.kernels_before, report.kernels_after) == (_built(Fn(fn), (x,)), _built(gm, (x,)))
