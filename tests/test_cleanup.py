"""The clean-up passes on a torch graph (optimus_egg.cleanup): slices that tile a tensor become one
split or unbind, overlapping slices cats read are cut into one split, a sum of a tensor with
itself becomes a doubling, and a stack of inputs moves down to its reader.

Regressions found by the fuzzer (tests/fuzz)."""

import operator

import pytest
import torch

from optimus_egg import optimize
from optimus_egg.bounds import grad_pieces
from optimus_egg.pipeline import capture
from tests.fuzz.check import check_program
from tests.fuzz.programs import Program
from tests.helpers import Fn, calls_to, check_training


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
    assert calls_to(gm, torch.split) == 1 and calls_to(gm, torch.narrow) == 0
    assert _training_launches(gm, x) < _training_launches(Fn(fn), x)
    got_grad = torch.autograd.grad(sum(o.sum() for o in gm(x)), x)[0]
    torch.testing.assert_close(got_grad, torch.autograd.grad(sum(o.sum() for o in fn(x)), x)[0])


def _rotary(q, a):
    """Rotary embedding's ``rotate_half`` (Llama), slices of a trained ``q``, beside a split
    glued back that the rules rewrite: the graph is emitted anew."""
    return torch.cat((-q[:, 4:], q[:, :4]), 1) * 2, torch.cat([p.relu() for p in a.split(4, 1)], 1)


def test_slices_of_a_trained_tensor_the_program_sliced_stay_slices():
    # Inductor sums the slices' gradients in one loop; a split's gradient is a cat, a loop a piece
    q, a = torch.randn(4, 8, requires_grad=True), torch.randn(4, 16)
    gm, report = optimize(Fn(_rotary), (q, a))
    assert not report.kept and calls_to(gm, torch.split) == 0 and calls_to(gm, torch.narrow) == 2
    want = torch.autograd.grad(sum(o.sum() for o in _rotary(q, a)), q)[0]
    torch.testing.assert_close(torch.autograd.grad(sum(o.sum() for o in gm(q, a)), q)[0], want)
    gm, _ = optimize(Fn(_rotary), (q.detach(), a))  # without gradients, a tiling is one split
    assert calls_to(gm, torch.split) == 1


def test_selects_of_every_index_are_emitted_as_one_unbind():
    def fn(x):
        s = torch.unbind(torch.sigmoid(torch.cat([x[:, :2], x[:, 2:]], 1)), 1)
        return torch.outer(s[0], s[1]), torch.outer(s[2], s[3])

    x = torch.randn(3, 4, requires_grad=True)
    gm = _rewritten(fn, x)
    assert calls_to(gm, torch.unbind) == 1 and calls_to(gm, torch.select) == 0


def test_slices_that_leave_a_gap_stay_slices():
    def fn(x):
        y = torch.relu(torch.cat([x[:, :4], x[:, 4:]], 1))
        return y[:, :3].sum(1), y[:, 5:].amax(1)  # columns 3 and 4 unused: no tiling, no split

    gm = _rewritten(fn, torch.randn(2, 8))
    assert calls_to(gm, torch.split) == 0 and calls_to(gm, torch.narrow) == 2


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
    assert calls_to(gm, torch.split) == 1 and calls_to(gm, torch.narrow) == 0
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
    assert calls_to(gm, torch.split) == 0 and calls_to(gm, torch.narrow) == 3


def test_overlapping_slices_read_by_other_ops_are_not_cut():
    def fn(x):  # x[:, :6] is also summed: only a cat may read its pieces in its place
        p = torch.split(x, 2, dim=1)
        return torch.cat([*p[3:], torch.tanh(p[0]), *p[:3]], 1), torch.cat(p[:3], 1).sum(1)

    x = torch.randn(4, 12, requires_grad=True)
    gm = _rewritten(fn, x)
    assert calls_to(gm, torch.split) == 0 and calls_to(gm, torch.narrow) == 3
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
        assert calls_to(gm, torch.split) == 0 and calls_to(gm, torch.narrow) == 3
        torch.testing.assert_close(_gradient(gm, x), _gradient(fn, x))


def test_a_gap_is_any_stretch_no_span_covers():
    from optimus_egg.cleanup import _gap

    assert _gap([(0, 6), (2, 4), (8, 12)])  # 6..8 inside
    assert _gap([(2, 12)])  # 0..2 before the first
    assert not _gap([(0, 6), (2, 4), (4, 12)])
    assert not _gap([(0, 2), (2, 2), (2, 12)])  # an empty span on a border


def test_as_many_kernels_with_overlapping_slices_is_taken_where_the_backward_writes_fewer_pieces():
    def gap(x):
        p = torch.split(x, 2, dim=1)
        return (torch.cat([*p[3:5], torch.tanh(p[0]), *p[:3]], 1),)

    x = torch.randn(4, 12, requires_grad=True)  # (a tie under eager launches: one cat either way)
    captured = capture(Fn(gap), (x,))
    gm, report = optimize(Fn(gap), (x,), cost_model="eager")
    assert not report.kept and grad_pieces(gm) < grad_pieces(captured)  # slices of x, not 5 pieces
    check_training(Fn(gap), x, cost_model="eager")
    assert not optimize(Fn(gap), (x.detach(),), cost_model="eager")[1].kept  # without gradients, fewer cat inputs win


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
    assert calls_to(gm, torch.unbind) >= 1 and calls_to(gm, torch.select) == 0


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
    assert calls_to(gm, torch.split) == 0
    for got, want in zip(gm(x), fn(x)):
        torch.testing.assert_close(got, want)


def _sum_of_itself(x):
    """``x + x`` once simplified: the cat of every row of ``x`` plus ``x`` narrowed to its width."""
    return (torch.cat(torch.unbind(x, 1), 1) + torch.narrow(x.flatten(1), 1, 0, x.shape[1] * x.shape[2]),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_a_sum_of_a_tensor_with_itself_is_emitted_as_a_doubling(dtype):
    # Backward, x + x accumulates one gradient twice (an add of an mm to itself, which Inductor
    # turns into a second matmul); x * 2 is one pointwise op. Both are exact: same values, dtype.
    x = (torch.randn(3, 4, 5) * 1e4).to(dtype)
    gm = _rewritten(_sum_of_itself, x)
    assert calls_to(gm, torch.mul) == 1 and calls_to(gm, operator.add) == 0
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
    assert calls_to(gm, torch.mul) == 0
    for args in ((x, y), (torch.randn(3, 4, 5), torch.randn(3, 4, 5))):
        got, want = gm(*args)[0], fn(*args)[0]
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


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


class _WindowExperts(torch.nn.Module):
    """Equal windows of one linear's output, stacked, each through its own expert (a ``bmm``):
    the stack is the output with a dim moved, which the batched matmul can read in place.
    ``moved``: blocks of rows stacked after their last dim instead, which moves a dim last."""

    def __init__(self, moved=False):
        super().__init__()
        self.moved = moved
        self.proj = torch.nn.Linear(8, 6 if moved else 3 + 4 * 6)
        self.experts = torch.nn.Parameter(torch.randn(7, 4, 5) if moved else torch.randn(4, 6, 5))

    def forward(self, x):
        h = self.proj(x)
        if self.moved:  # x: 28 rows, four blocks of 7: (7, 6, 4)
            return torch.bmm(torch.stack([h[7 * i: 7 * i + 7] for i in range(4)], 2), self.experts)
        return torch.bmm(torch.stack([h[:, 3 + 6 * i: 9 + 6 * i] for i in range(4)], 0), self.experts)


def test_windows_a_batched_matmul_reads_are_read_in_place():
    gm = check_training(_WindowExperts(), torch.randn(7, 8))
    assert calls_to(gm, torch.movedim) == 1 and calls_to(gm, torch.Tensor.contiguous) == 0
    assert calls_to(gm, torch.stack) == 0


def test_a_moved_copy_is_kept_when_the_last_dim_moves_or_something_else_reads_it():
    gm = check_training(_WindowExperts(moved=True), torch.randn(28, 8))
    bmm = next(n for n in gm.graph.nodes if n.target is torch.bmm)
    assert bmm.args[0].target is not torch.movedim  # a copy in order (a stack or a Move), not the view

    def returned(x):  # the moved copy is also an output: a fresh tensor, never a view
        stacked = torch.stack([x[:, 2 * i: 2 * i + 2] for i in range(3)], 0)
        return torch.bmm(stacked, stacked.transpose(1, 2)), stacked

    gm = _rewritten(returned, torch.randn(5, 6))
    out = gm(x := torch.randn(5, 6))[1]
    assert out.is_contiguous() and out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_a_moved_copy_that_is_an_output_is_kept_though_only_a_batched_matmul_reads_it():
    """The graph's output node is written after clean-up, so an output is no reader yet: the
    copy must still be kept (erased, the output named a node no longer in the graph)."""
    def returned(x, w):
        stacked = torch.stack([x[:, 2 * i: 2 * i + 2] for i in range(3)], 0)
        return torch.bmm(stacked, w), stacked

    x, w = torch.randn(5, 6), torch.randn(3, 2, 4)
    gm, report = optimize(Fn(returned), (x, w))
    assert report.fallback is None and not report.kept
    got, want = gm(x, w), returned(x, w)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
    assert got[1].is_contiguous() and got[1].untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_a_lowered_view_keeps_its_value_for_the_lowerings_after_it():
    """``to_aten`` lowers calls in order; a movedim of an unflatten reads its input's rank off
    the reshape the unflatten became (a backward's batched layer norms made this graph)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from optimus_egg.cleanup import to_aten

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    unflat = graph.call_function(torch.unflatten, (x, 1, (2, 3)))
    moved = graph.call_function(torch.movedim, (unflat, 1, 0))
    graph.output(moved)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.empty(4, 6))
        for node, value in ((x, fake), (unflat, fake.unflatten(1, (2, 3)))):
            node.meta["val"] = value
        moved.meta["val"] = unflat.meta["val"].movedim(1, 0)
    to_aten(graph)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    t = torch.randn(4, 6)
    torch.testing.assert_close(gm(t), t.unflatten(1, (2, 3)).movedim(1, 0))


def _fused_projection_pieces(qkv, a):
    """CodeGen's attention: q, v, k one split of a fused projection, then the rotary part of q
    and of k sliced off (five pieces where the program's split wrote three), beside a split glued
    back that the rules rewrite."""
    q, v, k = qkv.split(8, 1)
    return (torch.cat([-q[:, :4], q[:, 4:]], 1) * 2, v.exp(), torch.cat([-k[:, :4], k[:, 4:]], 1) * 3,
            torch.cat([p.relu() for p in a.split(4, 1)], 1))


def test_a_trained_tensor_is_split_into_no_more_pieces_than_the_program_wrote():
    qkv, a = torch.randn(4, 24, requires_grad=True), torch.randn(4, 16)
    gm, report = optimize(Fn(_fused_projection_pieces), (qkv, a))
    assert not report.kept and all(len(n.args[1]) <= 3 for n in gm.graph.nodes if n.target is torch.split)
    want = torch.autograd.grad(sum(o.sum() for o in _fused_projection_pieces(qkv, a)), qkv)[0]
    torch.testing.assert_close(torch.autograd.grad(sum(o.sum() for o in gm(qkv, a)), qkv)[0], want)
