"""The emitter: outputs keep their aliasing and grad flags, every new node gets a fake value.

Regressions found by the fuzzer (tests/fuzz)."""

import operator

import pytest
import torch

from optimus_egg import optimize
from tests.fuzz.check import check_program
from tests.fuzz.programs import Program
from tests.helpers import Fn


def _storages(out):
    return [t.untyped_storage()._cdata for t in out]


def test_fresh_output_returned_twice_is_one_copy_not_the_input():
    # cat([x]) → x: both outputs were one fresh tensor; the optimizer once copied only the first.
    x = torch.randn(5, 8)
    gm = check_program(Program("def forward(self, x0):\n    v0 = torch.cat((x0,), 0)\n    return (v0, v0)\n", (x,)))
    a, b = gm(x)
    assert a is b and a.untyped_storage()._cdata != x.untyped_storage()._cdata


def test_equal_fresh_outputs_stay_distinct_tensors():
    x = torch.randn(5, 8)
    gm = check_program(Program(
        "def forward(self, x0):\n    a = torch.cat([x0], 0)\n    b = torch.cat([x0], 0)\n    return (a, b, a[1:])\n", (x,)))
    a, b, tail = gm(x)
    assert len({*_storages([a, b]), x.untyped_storage()._cdata}) == 3
    assert tail.untyped_storage()._cdata == a.untyped_storage()._cdata


def test_piece_returned_beside_its_split_tuple_shares_one_copy():
    # The tuple output (an opaque split of the input after cat-single) aliased the input.
    x0, x1 = torch.randn(1), torch.randn(3, 2)
    gm = check_program(Program(
        "def forward(self, x0, x1):\n    v0 = torch.cat([x1], 0)\n    v1 = torch.split(v0, 1, 0)\n"
        "    v2 = v1[-1]\n    return (v2, v1)\n", (x0, x1)))
    piece, pieces = gm(x0, x1)
    assert piece.untyped_storage()._cdata == pieces[0].untyped_storage()._cdata != x1.untyped_storage()._cdata


def test_outputs_sharing_a_fresh_tensor_still_share_it_when_one_simplifies():
    # v2 = cat([x1, x0])[0:1] simplifies to x1, but it must stay a view of the cat v3 is split from.
    x0, x1 = torch.randn(1), torch.randn(1)
    gm = check_program(Program(
        "def forward(self, x0, x1):\n    v0 = torch.cat([x1, x0], 0)\n    v1 = torch.split(v0, 1, 0)\n"
        "    v2 = v1[-2]\n    v3 = torch.split(v0, 1, 0)\n    return (v2, v3)\n", (x0, x1)))
    piece, pieces = gm(x0, x1)
    assert len({*_storages([piece, *pieces])}) == 1
    assert piece.untyped_storage()._cdata not in _storages([x0, x1])


def test_leaf_module_calls_of_a_traced_graph_get_fake_values():
    # fx.symbolic_trace keeps nn.Linear as a call_module node; the emitter only fake-ran
    # functions and methods, so the cat reading it failed.
    class Halves(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.cat([self.lin(x[:2]), self.lin(x[2:])], 0)

    model = Halves()
    gm = torch.fx.symbolic_trace(model)
    assert any(n.op == "call_module" for n in gm.graph.nodes)
    x = torch.randn(4, 4)
    new, report = optimize(gm, (x,))
    assert report.fallback is None
    torch.testing.assert_close(new(x), model(x))


def test_piece_of_a_cat_that_requires_grad_still_requires_grad():
    # Found by the fuzzer: split(cat([b, d]))[-1] became d, which was detached, so the output
    # no longer required grad (backward through it raised). It is re-derived from the cat.
    def fn(a, b):
        return torch.split(torch.cat([b, a.relu().detach()], 0), 1, 0)[-1]

    a, b = torch.randn(1, 3, requires_grad=True), torch.randn(1, 3, requires_grad=True)
    gm, report = optimize(Fn(fn), (a, b))
    assert report.fallback is None
    out = gm(a, b)
    assert out.requires_grad
    torch.testing.assert_close(out, fn(a, b))
    out.sum().backward()
    assert not b.grad.any()  # as in eager: the cat gives b a zero gradient


def _calls(gm, target):
    return sum(n.op == "call_function" and n.target is target for n in gm.graph.nodes)


def _rewritten(fn, x):
    """``fn`` optimized (a rewrite, not the graph kept as it was), equal to ``fn`` on ``x``."""
    gm, report = optimize(Fn(fn), (x,))
    assert report.fallback is None and not report.kept
    for got, want in zip(gm(x), fn(x), strict=True):
        torch.testing.assert_close(got, want)
    return gm


def _training_launches(fn, *inputs):
    from optimus_egg.counting import eager_launches

    def step(*args):
        sum(o.sum() for o in fn(*args)).backward()

    return eager_launches(step, *inputs)


def test_slices_that_tile_a_tensor_are_emitted_as_one_split():
    # Each slice's backward is a zero-filled tensor, a copy and an add; a split's is one cat.
    def fn(x):
        parts = torch.split(torch.relu(torch.cat([x[:, :4], x[:, 4:]], 1)), [3, 5], 1)
        return parts[0].sum(1), parts[1].amax(1)

    x = torch.randn(2, 8, requires_grad=True)
    gm = _rewritten(fn, x)
    assert _calls(gm, torch.split) == 1 and _calls(gm, torch.narrow) == 0
    assert _training_launches(gm, x) < _training_launches(Fn(fn), x)
    got_grad = torch.autograd.grad(sum(o.sum() for o in gm(x)), x)[0]
    torch.testing.assert_close(got_grad, torch.autograd.grad(sum(o.sum() for o in fn(x)), x)[0])


def test_selects_of_every_index_are_emitted_as_one_unbind():
    def fn(x):
        s = torch.unbind(torch.sigmoid(torch.cat([x[:, :2], x[:, 2:]], 1)), 1)
        return torch.outer(s[0], s[1]), torch.outer(s[2], s[3])

    x = torch.randn(3, 4, requires_grad=True)
    gm = _rewritten(fn, x)
    assert _calls(gm, torch.unbind) == 1 and _calls(gm, torch.select) == 0


def test_slices_that_leave_a_gap_stay_slices():
    def fn(x):
        y = torch.relu(torch.cat([x[:, :4], x[:, 4:]], 1))
        return y[:, :3].sum(1), y[:, 5:].amax(1)  # columns 3 and 4 unused: no tiling, no split

    gm = _rewritten(fn, torch.randn(2, 8))
    assert _calls(gm, torch.split) == 0 and _calls(gm, torch.narrow) == 2


def _steps(x, p):
    """Each step of a history plus its position, transformed, stacked back (the zoo's sequence
    model): rewritten, one tanh of the pieces' sums unflattened to (1, n) and catted."""
    return (torch.stack([torch.tanh(s + q) for s, q in zip(torch.unbind(x, 1), torch.unbind(p, 0))], 1),)


def test_a_cat_of_pieces_unflattened_to_size_one_is_written_as_a_stack():
    from torch._inductor.fx_passes.pre_grad import pre_grad_passes

    from tests.helpers import check

    x, p = torch.randn(4, 5, 3), torch.randn(5, 3)
    _, gm = check(_steps, x, p)
    assert _calls(gm, torch.stack) == 1 and _calls(gm, torch.cat) == 0 and _calls(gm, torch.unflatten) == 0
    # Inductor's pre-grad sink_cat_after_pointwise splits a tanh of a cat into one per piece;
    # a stack it leaves alone
    assert _calls(pre_grad_passes(gm, (x, p)), torch.tanh) == 1
    xg, pg = x.requires_grad_(), p.requires_grad_()
    got = torch.autograd.grad(gm(xg, pg)[0].sum(), (xg, pg))
    for g, want in zip(got, torch.autograd.grad(_steps(xg, pg)[0].sum(), (xg, pg)), strict=True):
        torch.testing.assert_close(g, want)


def test_only_unflattens_to_size_one_on_the_cat_dim_count_as_unsqueezed():
    from types import SimpleNamespace as N

    from optimus_egg.emit import _unsqueezed

    assert _unsqueezed(N(op="Unsqueeze", children=(7, 1)), 1) and _unsqueezed(N(op="Unflat", children=(7, 1, 1)), 1)
    assert not _unsqueezed(N(op="Unflat", children=(7, 1, 2)), 1)  # (2, n): two rows per piece
    assert not _unsqueezed(N(op="Unflat", children=(7, 0, 1)), 1)  # another dim
    assert not _unsqueezed(N(op="Flat", children=(7, 1)), 1)


def _split_cat(x):
    """Two runs of split pieces swapped around a piece read again (family split_cat_to_slices):
    rewritten, the cat reads x[:, 6:], tanh(x[:, :2]) and x[:, :6], slices that overlap."""
    p = torch.split(x, 2, dim=1)
    return (torch.cat([*p[3:], torch.tanh(p[0]), *p[:3]], 1),)


def _gradient(fn, x):
    return torch.autograd.grad(sum(o.sum() for o in fn(x)), x)[0]


def test_overlapping_slices_that_cats_read_are_cut_into_one_split():
    x = torch.randn(4, 12, requires_grad=True)
    gm = _rewritten(_split_cat, x)
    assert _calls(gm, torch.split) == 1 and _calls(gm, torch.narrow) == 0
    cat = next(n for n in gm.graph.nodes if n.target is torch.cat)
    assert len(cat.args[0]) == 4  # x[:, 6:], tanh(x[:, :2]), x[:, :2], x[:, 2:6]
    assert _training_launches(gm, x) <= _training_launches(Fn(_split_cat), x)
    for trial in range(3):
        y = torch.randn(4, 12, requires_grad=True)
        torch.testing.assert_close(gm(y)[0], _split_cat(y)[0])
        torch.testing.assert_close(_gradient(gm, y), _gradient(_split_cat, y))


def test_overlapping_slices_are_not_cut_without_gradients():
    # forward, a cut is one cat input more (CPU Inductor: one copy loop more) and nothing less
    gm = _rewritten(_split_cat, torch.randn(4, 12))
    assert _calls(gm, torch.split) == 0 and _calls(gm, torch.narrow) == 3


def test_overlapping_slices_read_by_other_ops_are_not_cut():
    def fn(x):  # x[:, :6] is also summed: only a cat may read its pieces in its place
        p = torch.split(x, 2, dim=1)
        return torch.cat([*p[3:], torch.tanh(p[0]), *p[:3]], 1), torch.cat(p[:3], 1).sum(1)

    x = torch.randn(4, 12, requires_grad=True)
    gm = _rewritten(fn, x)
    assert _calls(gm, torch.split) == 0 and _calls(gm, torch.narrow) == 3
    torch.testing.assert_close(_gradient(gm, x), _gradient(fn, x))


def test_overlapping_slices_with_a_gap_or_read_by_a_cat_on_another_dim_are_not_cut():
    def gap(x):  # columns 10 and 11 unread: no split tiles x
        p = torch.split(x, 2, dim=1)
        return (torch.cat([torch.cat(p[3:5], 1), torch.tanh(p[0]), *p[:3]], 1),)

    def other_dim(x):  # x[:, :6] is glued along dim 0
        p = torch.split(x, 2, dim=1)
        return torch.cat([torch.cat(p[:3], 1), torch.cat(p[3:], 1)], 0), torch.tanh(p[0])

    x = torch.randn(4, 12, requires_grad=True)
    for fn in (gap, other_dim):
        gm = _rewritten(fn, x)
        assert _calls(gm, torch.split) == 0 and _calls(gm, torch.narrow) == 3
        torch.testing.assert_close(_gradient(gm, x), _gradient(fn, x))


def test_a_gap_is_any_stretch_no_span_covers():
    from optimus_egg.cleanup import _gap

    assert _gap([(0, 6), (2, 4), (8, 12)])  # 6..8 inside
    assert _gap([(2, 12)])  # 0..2 before the first
    assert not _gap([(0, 6), (2, 4), (4, 12)])
    assert not _gap([(0, 2), (2, 2), (2, 12)])  # an empty span on a border


def test_as_many_kernels_with_overlapping_slices_that_cannot_be_cut_is_kept_in_training():
    def gap(x):
        p = torch.split(x, 2, dim=1)
        return (torch.cat([*p[3:5], torch.tanh(p[0]), *p[:3]], 1),)

    x = torch.randn(4, 12, requires_grad=True)
    gm, report = optimize(Fn(gap), (x,))
    assert report.kept and report.kept_reason == "slices would cost backward kernels"
    assert not optimize(Fn(gap), (x.detach(),))[1].kept  # without gradients, fewer cat inputs win


def test_a_narrow_kept_as_written_with_keywords_is_left_alone():
    # Found by the fuzzer: under dynamic shapes a zero-length narrow from the end stays the
    # program's own call, with its arguments as keywords, which the split grouping read
    # positionally (IndexError, so the optimizer fell back).
    from tests.fuzz.check import dynamo_graph

    program = Program("def forward(self, x0, x1):\n    v1 = torch.split(torch.cat([x1, x0], dim=1), 1, 1)\n"
                      "    v4 = torch.narrow(v1[-2], dim=0, start=-1, length=0)\n    return (v4, v1,)\n",
                      (torch.randn(2, 1, 1, 1), torch.randn(2, 1, 1, 1)))
    check_program(program, dynamo_graph(program, True, False))


def test_selects_of_every_row_of_a_specialized_size_become_one_unbind_searched_or_cached():
    # Found by the fuzzer (seed 2512, dynamic flavour): Dynamo specializes x0's symbolic length
    # to 3 (unbind gives a fixed number of pieces), and that size read as a SymInt kept the
    # searched graph's selects apart, where the graph served from the cache, whose fake values
    # read it as an int, had one unbind: the cache returned another graph than the search.
    from tests.fuzz.check import dynamo_graph

    program = Program("def forward(self, x0):\n    v0 = torch.unbind(x0, 0)\n"
                      "    v1 = torch.unbind(torch.stack([p.detach() for p in v0], 0), 0)\n"
                      "    v2 = torch.stack([torch.relu(v1[0]), torch.relu(v1[1]), v1[2].to(torch.float64)], 0)\n"
                      "    return (v2, v0,)\n", (torch.randn(3),))
    gm = check_program(program, dynamo_graph(program, True, False))
    assert _calls(gm, torch.unbind) >= 1 and _calls(gm, torch.select) == 0


def _sum_of_itself(x):
    """``x + x`` once simplified: the cat of every row of ``x`` plus ``x`` narrowed to its width."""
    return (torch.cat(torch.unbind(x, 1), 1) + torch.narrow(x.flatten(1), 1, 0, x.shape[1] * x.shape[2]),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_a_sum_of_a_tensor_with_itself_is_emitted_as_a_doubling(dtype):
    # Backward, x + x accumulates one gradient twice (an add of an mm to itself, which Inductor
    # turns into a second matmul); x * 2 is one pointwise op. Both are exact: same values, dtype.
    x = (torch.randn(3, 4, 5) * 1e4).to(dtype)
    gm = _rewritten(_sum_of_itself, x)
    assert _calls(gm, torch.mul) == 1 and _calls(gm, operator.add) == 0
    assert gm(x)[0].dtype == dtype
    if dtype.is_floating_point:
        big = torch.full((3, 4, 5), torch.finfo(dtype).max, dtype=dtype)  # overflows to inf either way
        torch.testing.assert_close(gm(big)[0], _sum_of_itself(big)[0])
        y = torch.randn(3, 4, 5, dtype=dtype, requires_grad=True)
        got, = torch.autograd.grad(gm(y)[0].sum(), y)
        want, = torch.autograd.grad(_sum_of_itself(y)[0].sum(), y)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fn", [
    lambda x, y: (torch.cat(torch.unbind(x, 1), 1) + y.flatten(1),),  # two tensors
    lambda x, y: (torch.add(torch.cat(torch.unbind(x, 1), 1), x.flatten(1), alpha=3),),  # x + 3x
    lambda x, y: _sum_of_itself(x > 0),  # bool: a logical or, and x * 2 would be an int64
], ids=["different-tensors", "alpha", "bool"])
def test_sums_that_are_not_a_doubling_stay_sums(fn):
    x, y = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    gm, report = optimize(Fn(fn), (x, y))
    assert report.fallback is None
    assert _calls(gm, torch.mul) == 0
    for args in ((x, y), (torch.randn(3, 4, 5), torch.randn(3, 4, 5))):
        got, want = gm(*args)[0], fn(*args)[0]
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def _order(gm, *targets):
    """Each target's first node's position in ``gm``'s graph."""
    nodes = list(gm.graph.nodes)
    return [next(i for i, n in enumerate(nodes) if n.target is t) for t in targets]


def test_a_stack_of_inputs_moves_down_to_its_reader():
    # Written first, a stack of weights lands above the compute that its reader also reads;
    # Inductor (CPU) then copies it in a kernel of its own instead of in the reader's.
    def fn(x, a, b):
        return (torch.stack([a, b]) * torch.exp(torch.cat([x[:, :2], x[:, 2:]], 1)).unsqueeze(0),)

    args = (torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4))
    gm, report = optimize(Fn(fn), args)
    assert report.fallback is None and not report.kept
    stack, exp = _order(gm, torch.stack, torch.exp)
    assert exp < stack
    torch.testing.assert_close(gm(*args)[0], fn(*args)[0])


def test_nothing_moves_past_a_write():
    # An in-place op anywhere: the graph keeps the emitted order (the stack still reads its
    # inputs before any op that could write them).
    def fn(x, a, b):
        s = torch.stack([a, b])
        y = torch.exp(torch.cat([x[:, :2], x[:, 2:]], 1))
        return (s * y.unsqueeze(0), x.clone().add_(1))

    args = (torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4))
    gm, report = optimize(Fn(fn), args)
    assert report.fallback is None and not report.kept
    stack, exp = _order(gm, torch.stack, torch.exp)
    assert stack < exp
    for got, want in zip(gm(*args), fn(*args), strict=True):
        torch.testing.assert_close(got, want)


def test_a_stack_never_moves_past_a_write_through_out():
    # torch.mul is also a call the rules build: its out= form writes c, which the stack reads
    # before the write.
    def fn(x, a, b, c):
        s = torch.stack([a, c])
        y = torch.exp(torch.cat([x[:, :2], x[:, 2:]], 1))
        torch.mul(b, 2, out=c)
        return (s * y.unsqueeze(0),)

    args = tuple(torch.randn(2, 4) for _ in range(4))
    gm, report = optimize(Fn(fn), tuple(a.clone() for a in args))
    assert report.fallback is None and not report.kept
    got_args, want_args = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(gm(*got_args)[0], fn(*want_args)[0])
    torch.testing.assert_close(got_args[3], want_args[3])


def test_a_dynamo_graph_keeps_what_tells_its_parameters_from_its_inputs():
    """AOTAutograd takes a graph without Dynamo's ``_param_name_to_source`` (and each
    placeholder's ``_dynamo_source``) for an exported one whose parameters are ordinary inputs: the
    min-cut partitioner then saved views of the weights, not the weights (CPU Inductor, cruft chain
    training: 45 vs 39 launches per step, its rewritten graph the twin's node for node)."""
    from optimus_egg.pipeline import Options, optimize_graph

    seen = []

    def backend(gm, example_inputs):
        new, report = optimize_graph(gm, Options())
        seen.append((gm, new, report))
        return new.forward

    lin = torch.nn.Linear(8, 8)
    torch._dynamo.reset()
    torch.compile(lambda x: lin(torch.cat(torch.split(x, 4, 1), 1)), backend=backend)(torch.randn(2, 8))
    (old, new, report), = seen
    assert new is not old and not report.kept and hasattr(old, "_param_name_to_source")
    assert new._param_name_to_source == old._param_name_to_source
    sources = [[p._dynamo_source for p in g.graph.find_nodes(op="placeholder")] for g in (old, new)]
    assert sources[0] == sources[1] and len(sources[0]) == 3  # x, the weight, the bias


def test_an_output_whose_grad_flag_the_rewrite_drops_is_computed_as_written():
    """``cat([x[0:1].detach(), relu(x[1:])])`` of a one-row ``x`` is ``x[0:1].detach()`` in value
    (the second piece is empty) but requires grad through the empty piece: the output is computed
    as the program wrote it (fuzzer, seed 31, grad flavour: the optimizer fell back)."""
    from tests.fuzz.check import dynamo_graph

    src = ("def forward(self, x0):\n"
           "    v0 = torch.stack([torch.relu(v) for v in torch.unbind(x0, 1)], 1)\n"
           "    v1 = torch.tensor_split(v0, [1], dim=0)\n"
           "    v2 = torch.cat([v1[0].detach(), torch.relu(v1[1])], 0)\n"
           "    return (v2, v1)\n")
    program = Program(src, (torch.randn(1, 10),))
    check_program(program, dynamo_graph(program, False, True), True)


def test_outputs_that_a_doubling_makes_one_tensor_stay_apart():
    """``cat([a[:3] + a[:3], a[3:] + a[3:]])`` is ``a * 2``, and the second piece, also returned, a
    slice of it: the two outputs were distinct tensors and must stay so. The doubling's readers
    kept the fake value of the add it replaced, so the aliasing check saw two storages (fuzzer,
    2000 programs, seed 31)."""
    src = ("def forward(self, x0):\n"
           "    v0 = torch.relu(x0)\n"
           "    v1 = v0.narrow(0, 3, 1) + v0.narrow(0, 3, 1)\n"
           "    v2 = torch.cat([v0.narrow(0, 0, 3) + v0.narrow(0, 0, 3), v1], 0)\n"
           "    return (v2, v1)\n")
    gm = check_program(Program(src, (torch.randn(4, 3),)))
    a, b = gm(torch.randn(4, 3))
    assert a.untyped_storage()._cdata != b.untyped_storage()._cdata


def test_tilings_of_a_piece_of_a_tiling_are_split_from_the_new_piece():
    """``x`` tiled along dim 1 and its second piece tiled again along dim 0: both become splits,
    and the second reads the first's piece; it read the slice the first had replaced (the
    generated code then read a deleted variable; fuzzer, 2000 programs, seed 37)."""
    src = ("def forward(self, x0):\n"
           "    v0 = torch.div(x0.narrow(3, 0, 1), x0.narrow(3, 0, 1))\n"
           "    v1 = torch.div(x0.narrow(3, 1, 6), x0.narrow(3, 1, 6))\n"
           "    v2 = torch.cat([v0, v1], 3)\n"
           "    return (v1[..., :, :8:2, :], v1, v0, torch.split(v1, 1, 0))\n")
    from tests.fuzz.check import dynamo_graph

    program = Program(src, (torch.randn(2, 3, 4, 7),))
    check_program(program, dynamo_graph(program, False, False))


def _aten_weight_grads():
    """A backward-like ATen graph (fake values on its nodes): weight gradients the backward
    rules batch into one ``bmm``, and calls they leave as they are."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def grads(x, *gs):
        return (*(torch.mm(g.t(), x if i % 2 else torch.tanh(x)) for i, g in enumerate(gs)), torch.sigmoid(x) * 2)

    inputs = (torch.randn(6, 3), *(torch.randn(6, 5) for _ in range(4)))
    return make_fx(grads, tracing_mode="fake")(*inputs), grads, inputs


def test_calls_an_aten_graph_keeps_take_its_fake_values_and_match_a_fake_run():
    """A post-grad backward is mostly written back unchanged: those calls take the original's
    fake values instead of fake-running again; every value is what a fake run gives, storages
    shared between the same nodes."""
    from optimus_egg.fake_values import propagate
    from optimus_egg.pipeline import Options, optimize_graph

    gm, grads, inputs = _aten_weight_grads()
    new, report = optimize_graph(gm, Options(strict=True), disjoint_outputs=True)
    assert not report.kept and any(n.target is torch.ops.aten.bmm.default for n in new.graph.nodes)
    for got, want in zip(new(*inputs), grads(*inputs), strict=True):
        torch.testing.assert_close(got, want)
    original = {id(n.meta["val"]) for n in gm.graph.nodes if n.op == "call_function"}
    taken = {n.target for n in new.graph.nodes if n.op == "call_function" and id(n.meta["val"]) in original}
    assert {torch.ops.aten.tanh.default, torch.ops.aten.sigmoid.default, torch.ops.aten.mul.Tensor} <= taken
    fresh = torch.fx.Graph()
    copies: dict = {}
    fresh.graph_copy(new.graph, copies)
    for n in fresh.nodes:
        if n.op == "call_function":
            n.meta = {}
    propagate(fresh, new)  # nothing known: every call fake-run
    pairs = [(a.meta["val"], copies[a].meta["val"]) for a in new.graph.nodes
             if a.op == "call_function" and isinstance(a.meta["val"], torch.Tensor)]
    for kept, run in pairs:
        assert (kept.shape, kept.stride(), kept.dtype) == (run.shape, run.stride(), run.dtype)
    same = [[a.untyped_storage()._cdata == b.untyped_storage()._cdata for a, _ in pairs] for b, _ in pairs]
    assert same == [[a.untyped_storage()._cdata == b.untyped_storage()._cdata for _, a in pairs] for _, b in pairs]


def _assert_untouched(rewrite, gm: torch.fx.GraphModule) -> None:
    """``rewrite`` (a graph pass returning what it replaced) replaces nothing and leaves every
    node as it was."""
    before = [(n.target, n.args) for n in gm.graph.nodes]
    assert rewrite(gm.graph) == {}
    assert [(n.target, n.args) for n in gm.graph.nodes] == before


def _stack_of_inputs(read=torch.bmm, pieces=(None, None, None)):
    """The ATen graph (fake values) of ``read`` of ``g`` (``[n, 6, 4]``) and a stack of inputs
    (``[4, 5]`` each; the saved inputs a backward's bmm of weight gradients stacks), each
    through its function in ``pieces`` (None: as it is), with the function and inputs it
    traces (-0.0, inf and nan among them)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(g, *xs):
        return read(g, torch.cat([(f(x) if f else x).unsqueeze(0) for f, x in zip(pieces, xs)]))

    xs = [torch.randn(4, 5) for _ in pieces]
    xs[0][0, :3] = torch.tensor([-0.0, float("inf"), float("nan")])
    inputs = (torch.randn(len(pieces), 6, 4), *xs)
    return make_fx(fn, tracing_mode="fake")(*inputs), fn, inputs


def test_a_stack_of_inputs_a_bmm_reads_is_each_input_scattered_into_its_slot():
    """Inductor (CPU) copies each input of a cat in a kernel of its own, which fused with
    whichever kernel near it read the same input, or with none: the scatters are one kernel."""
    from optimus_egg.cleanup import scatter_input_stacks

    aten = torch.ops.aten
    gm, fn, inputs = _stack_of_inputs()
    [new] = scatter_input_stacks(gm.graph).values()
    gm.graph.lint()
    gm.recompile()
    [bmm] = gm.graph.find_nodes(op="call_function", target=aten.bmm.default)
    assert bmm.args[1] is new and not gm.graph.find_nodes(op="call_function", target=aten.cat.default)
    scatters = [new]
    while scatters[-1].target == aten.slice_scatter.default:
        scatters.append(scatters[-1].args[0])
    zeros = scatters.pop()
    assert zeros.target == aten.full.default and zeros.args == ([3, 4, 5], 0)
    xs = [n for n in gm.graph.find_nodes(op="placeholder")][1:]
    assert [(s.args[1].target, s.args[1].args, s.args[2:]) for s in reversed(scatters)] == [
        (aten.unsqueeze.default, (x, 0), (0, i, i + 1)) for i, x in enumerate(xs)]
    torch.testing.assert_close(gm(*inputs), fn(*inputs), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("read", [lambda g, s: torch.bmm(g[1:], s[1:]),  # through a slice
                                  lambda g, s: torch.bmm(g, torch.ops.aten.alias(s))])
def test_a_stack_of_inputs_a_bmm_reads_through_any_view_is_scattered(read):
    """Which calls are views is the op table's to say (``calls.launches``), as for the rest of
    the emitter: a slice or an alias between the stack and the bmm reads no loop either."""
    from optimus_egg.cleanup import scatter_input_stacks

    gm, fn, inputs = _stack_of_inputs(read=read)
    assert scatter_input_stacks(gm.graph)
    gm.graph.lint()
    gm.recompile()
    assert not gm.graph.find_nodes(op="call_function", target=torch.ops.aten.cat.default)
    torch.testing.assert_close(gm(*inputs), fn(*inputs), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("case", [
    dict(read=lambda g, s: s * 2),  # a kernel reads the stack: the copies join it
    dict(read=lambda g, s: (torch.bmm(g, s), s)),  # ... or the output returns it
    dict(pieces=(None, torch.tanh, None)),  # a kernel writes a piece: its copy joins that kernel
    dict(pieces=(None,) * 17),  # more than a few: each element would test its slot 17 times
])
def test_other_stacks_of_inputs_keep_their_cat(case):
    from optimus_egg.cleanup import scatter_input_stacks

    gm, _, _ = _stack_of_inputs(**case)
    _assert_untouched(scatter_input_stacks, gm)


def test_weights_concatenated_for_a_matmul_are_each_scattered_into_their_rows():
    """A forward's linears that read one input become one ``addmm`` of their weights, concatenated
    in every step; Inductor (CPU) copied each weight in a loop of its own (zoo ple inference:
    93 kernel objects, 63 scattered). Read through a view (``permute``), as a linear reads its
    weight."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from optimus_egg.cleanup import scatter_input_stacks

    aten = torch.ops.aten

    def fn(x, b, *ws):
        return torch.addmm(b, x, torch.cat(ws).t())

    rows = [3, 1, 4, 3]  # linears of different widths (zoo mmoe: gates and experts)
    ws = [torch.randn(n, 5) for n in rows]
    ws[1][0, :3] = torch.tensor([-0.0, float("inf"), float("nan")])
    inputs = (torch.randn(2, 5), torch.randn(sum(rows)), *ws)
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    [new] = scatter_input_stacks(gm.graph).values()
    gm.graph.lint()
    gm.recompile()
    assert not gm.graph.find_nodes(op="call_function", target=aten.cat.default)
    scatters = [new]
    while scatters[-1].target == aten.slice_scatter.default:
        scatters.append(scatters[-1].args[0])
    assert scatters.pop().args == ([11, 5], 0)
    assert [s.args[2:] for s in reversed(scatters)] == [(0, 0, 3), (0, 3, 4), (0, 4, 8), (0, 8, 11)]
    torch.testing.assert_close(gm(*inputs), fn(*inputs), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("fn", [
    lambda x, b, w0, w1: torch.cat([w0, w1]).sum() * x,  # a kernel reads the cat: its copies join it
    lambda x, b, w0, w1: torch.addmm(b, x, torch.cat([w0, w1.unsqueeze(0)[0]]).t()),  # a piece not an input
    lambda x, b, w0, w1: torch.mm(torch.cat([w0, w1], 1).t(), w0),  # along dim 1
])
def test_other_concatenated_weights_keep_their_cat(fn):
    from torch.fx.experimental.proxy_tensor import make_fx

    from optimus_egg.cleanup import scatter_input_stacks

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(2, 5), torch.randn(6), torch.randn(3, 5), torch.randn(3, 5))
    _assert_untouched(scatter_input_stacks, gm)


def _stack_of_transposes(piece=torch.tanh, read=torch.bmm, transposed=(True, True), n=5, inner=6):
    """The ATen graph (fake values) of ``read`` of a stack of ``piece(g).T`` (``g``: ``[6, n]``;
    the weight gradients a backward batches into one bmm) and ``x`` (``[2, inner, 3]``), with
    the function and inputs it traces."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(a, b, x):
        pieces = [piece(g).t() if t else piece(g) for g, t in zip((a, b), transposed)]
        return read(torch.cat([p.unsqueeze(0) for p in pieces]), x)

    inputs = (torch.randn(6, n), torch.randn(6, n), torch.randn(2, inner, 3))
    return make_fx(fn, tracing_mode="fake")(*inputs), fn, inputs


def test_a_stack_of_transposed_gradients_a_bmm_reads_is_the_transpose_of_their_stack():
    """Inductor copies each piece into the stack; a copy of ``g.T`` walks ``g`` as the bias
    gradient's column sum does and took those sums out of the layers' kernels (CPU)."""
    from optimus_egg.cleanup import stack_untransposed

    gm, fn, inputs = _stack_of_transposes()
    [(old, new)] = stack_untransposed(gm.graph).items()
    gm.graph.lint()
    gm.recompile()
    aten = torch.ops.aten
    [bmm] = gm.graph.find_nodes(op="call_function", target=aten.bmm.default)
    assert bmm.args[0] is new and new.target == aten.permute.default and list(new.args[1]) == [0, 2, 1]
    stack = new.args[0]
    assert stack.target == aten.cat.default
    assert [(u.target, u.args[0].target) for u in stack.args[0]] == [(aten.unsqueeze.default, aten.tanh.default)] * 2
    assert not gm.graph.find_nodes(op="call_function", target=aten.t.default)
    torch.testing.assert_close(gm(*inputs), fn(*inputs))


def test_a_gradient_that_is_an_input_is_stacked_untransposed_with_the_others():
    """The last layer's gradient is the backward's input when no activation follows the layer
    (the tangent; zoo clean_chain): its copy is one loop in either layout, and the others still
    join the kernels that compute them (training there: 25 kernel objects, 31 when an input
    kept every piece transposed)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from optimus_egg.cleanup import stack_untransposed

    aten = torch.ops.aten

    def fn(a, b, x):
        return torch.bmm(torch.cat([a.t().unsqueeze(0), torch.tanh(b).t().unsqueeze(0)]), x)

    inputs = (torch.randn(6, 5), torch.randn(6, 5), torch.randn(2, 6, 3))
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    [new] = stack_untransposed(gm.graph).values()
    gm.graph.lint()
    gm.recompile()
    a = next(iter(gm.graph.find_nodes(op="placeholder")))
    assert [u.args[0] for u in new.args[0].args[0]][0] is a
    assert [u.args[0].target for u in new.args[0].args[0]][1] == aten.tanh.default
    torch.testing.assert_close(gm(*inputs), fn(*inputs))


@pytest.mark.parametrize("case", [
    dict(read=lambda s, x: s * 2),  # a kernel reads the stack: its layout is what it was
    dict(read=lambda s, x: (torch.bmm(s, x), s)),  # ... or the output returns it
    dict(piece=lambda g: g),  # inputs alone: no kernel writes any of them
    dict(piece=lambda g: torch.tanh(g)[:, 1:]),  # a view: nor here
    dict(piece=lambda g: torch.tanh(g).sum(0, keepdim=True), inner=1),  # [1, n]: its transpose moves nothing
    dict(transposed=(True, False), n=6),  # one piece is not a transpose
])
def test_other_stacks_keep_their_pieces(case):
    from optimus_egg.cleanup import stack_untransposed

    gm, _, _ = _stack_of_transposes(**case)
    _assert_untouched(stack_untransposed, gm)


def test_slices_of_a_tensor_the_graph_writes_are_not_made_one_split():
    """A split goes before the first slice it replaces: with ``y.t_()`` between two narrows of y,
    the later one read the columns of y before the transpose (1.27 off eager)."""
    def fn(x):
        y = x.clone()
        a = torch.narrow(y, 1, 0, 2)
        y.t_()
        b = torch.narrow(y, 1, 2, 2)
        return a + 1, b + 1, torch.cat([p.relu() for p in x.split(2, 1)], 1)

    x = torch.randn(4, 4)
    gm = _rewritten(fn, x)
    assert _calls(gm, torch.split) == 0
    for got, want in zip(gm(x), fn(x)):
        torch.testing.assert_close(got, want)


def test_a_base_recomputed_as_written_reads_the_dropout_it_drew():
    """``v = cat([d.detach(), y[0:0]])`` is ``d.detach()`` but requires grad through the empty
    piece, so the views returned of it get their base computed as written. That copied the
    dropout ``d`` came from: a second mask, which outputs 0 and 1 had and output 2 did not
    (eager's share one), and the generator moved on twice."""
    def fn(x, y):
        d = torch.nn.functional.dropout(x, 0.5)
        v = torch.cat([d.detach(), y[0:0]])
        return v[1:], v[:2], d * 2, torch.cat([p.relu() for p in x.split(1, 1)], 1)

    x, y = torch.rand(6, 4) + 0.5, torch.randn(3, 4, requires_grad=True)
    gm, report = optimize(Fn(fn), (x, y))
    assert not report.kept
    assert sum("dropout" in str(n.target) for n in gm.graph.nodes) == 1
    torch.manual_seed(0)
    want = [*fn(x, y), torch.rand(3)]
    torch.manual_seed(0)
    got = [*gm(x, y), torch.rand(3)]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


class _DetachedTwin(torch.nn.Module):
    """The fuzzer's (a probe, seed 5139), cut down: ``y`` is ``gelu`` of a slice, computed twice."""

    def forward(self, x):
        b = torch.split(torch.cat([x, x], dim=1), [1, 3], dim=0)[1]
        g = torch.nn.functional.gelu(b)
        y = torch.nn.functional.gelu(torch.stack([b, g], 3).unbind(3)[0])
        return y.detach(), y


def test_a_slice_of_a_wider_op_is_never_returned_with_its_detached_twin():
    """Rewritten, ``y`` is a slice of one gelu over the whole cat; returned with ``y.detach()``,
    AOTAutograd (torch 2.13 to 2.15) regenerates one output from the other and fails ("incorrect
    out shape after application of ViewMeta sequence"). The slice is copied out instead: the two
    outputs alias each other, as ``y.detach()`` and ``y`` did."""
    model, x = _DetachedTwin(), torch.randn(4, 3, 8, requires_grad=True)
    gm, report = optimize(model, (x,))
    assert report.fallback is None and report.kernels_after < report.kernels_before
    detached, y = torch.compile(gm, backend="aot_eager")(x)
    want_detached, want = model(x)
    torch.testing.assert_close(y, want)
    assert not detached.requires_grad and detached.data_ptr() == y.data_ptr()
    torch.testing.assert_close(torch.autograd.grad(y.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])
