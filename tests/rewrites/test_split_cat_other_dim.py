"""Pieces glued along another dim than the one they were cut along (``piece-as-row``,
``stacked-row``, ``cat-row``, the ``Move`` view they build) and runs of pieces among other
tensors: the graph before and after on random inputs, and the must-not-fire cases."""

import torch
from torch import nn

from optimus_egg import optimize
from optimus_egg.frontend import translate
from optimus_egg.pipeline import capture
from tests.helpers import EAGER, Fn, Weighted, check_training, launches
from tests.helpers import check_rule as check

X = torch.randn(2, 6, 4, 3)


def _moved(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is torch.movedim)


def _cats(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.target in (torch.cat, torch.stack))


def test_cat_of_all_pieces_along_another_dim_is_one_copy():
    for split_dim, sizes in ((1, 2), (1, 3), (2, 2), (-1, 1), (-3, 3)):
        for cat_dim in range(-4, 4):
            if cat_dim % 4 == split_dim % 4:
                continue
            report, gm = check(lambda x: torch.cat(torch.split(x, sizes, split_dim), cat_dim), X)
            assert not report.kept and report.rules_fired["cat-row"] > 0, (split_dim, cat_dim)
            assert _cats(gm) == 0 and _moved(gm) == 1, gm.code
    # rows of 1 moved past a dim of 1: x itself in another shape (move-past-one), an output that
    # would alias the input, so copied: one launch, as the cat
    report, gm = check(lambda x: torch.cat(torch.split(x, 1, 2), 3), X)
    assert report.rules_fired["move-past-one"] > 0 and launches(gm, X) == 1
    assert gm(X).untyped_storage().data_ptr() != X.untyped_storage().data_ptr()


def test_rows_of_one_glued_along_the_next_dim_are_a_view():
    """cat(split(t, 1, d), d + 1) is t with a 1 put at d and dims d, d + 1 merged; the stack is
    the 1 alone (move-past-one: no copy, no cat)."""
    for d in (0, 1, 2, -2):
        for fn in (lambda x: torch.cat(torch.split(torch.tanh(x), 1, d), d % 4 + 1),
                   lambda x: torch.stack(torch.split(torch.tanh(x), 1, d), d % 4 + 1)):
            report, gm = check(fn, X)
            assert report.rules_fired.get("move-past-one", 0) > 0, (d, report.rules_fired)
            assert _cats(gm) == 0 and _moved(gm) == 0 and launches(gm, X) == 1, gm.code
    check_training(Weighted(3, lambda x, w: torch.relu(torch.cat(torch.split(x * w, 1, 1), 2))), X, **EAGER)



def test_rows_of_one_moved_further_or_blocks_are_still_copies():
    for fn in (lambda x: torch.cat(torch.split(torch.tanh(x), 1, 1), 3),  # past a dim of 4
               lambda x: torch.cat(torch.split(torch.tanh(x), 2, 1), 2),  # blocks of 2
               lambda x: torch.stack(torch.split(torch.tanh(x), 1, 1), 3)):
        report, gm = check(fn, X)
        assert "move-past-one" not in report.rules_fired and _moved(gm) == 1, gm.code


def test_stack_of_all_pieces_or_rows_along_another_dim_is_one_copy():
    for fn in (lambda x: torch.stack(torch.unbind(x, 1), 0), lambda x: torch.stack(torch.unbind(x, -1), 1),
               lambda x: torch.stack(torch.split(x, 2, 1), 3),  # pieces of 2: a dim of 2 in the middle
               lambda x: torch.stack([p.squeeze(2) for p in torch.split(x, 1, 2)], 0),
               lambda x: torch.stack([p.squeeze() for p in torch.split(x, 1, 2)], -1)):
        report, gm = check(fn, X)
        assert not report.kept and report.rules_fired["stacked-row"] > 0 and _cats(gm) == 0, gm.code


def test_pieces_with_other_users_and_inside_a_graph():
    def fn(x):
        rows = [p.squeeze(1) for p in torch.split(torch.tanh(x), 1, 1)]
        return torch.tanh(torch.stack(rows, 0)), torch.relu(rows[0]), rows[2] * 2

    report, gm = check(fn, X)
    assert not report.kept and _cats(gm) == 0


def test_runs_of_pieces_among_other_tensors_are_slices_of_one_copy():
    one = torch.ones(2, 2, 4, 3)

    def fn(x):
        p = torch.split(x, 1, 1)
        return torch.stack([one[:, 0], *[q.squeeze(1) for q in p[1:4]], one[:, 1], *[q.squeeze(1) for q in p[4:]]], 2)

    report, gm = check(fn, X, cost_model="inductor")
    assert not report.kept and report.cat_inputs[1] < report.cat_inputs[0]
    # unaligned pieces (of 2 from 1): rows of x[:, 1:5]
    check(lambda x: torch.cat([one, *torch.split(x, [1, 2, 2, 1], 1)[1:3], one], 2), X, cost_model="inductor")


def test_runs_of_stacked_pieces_merge_after_other_tensors():
    one = torch.ones(2, 2, 4, 3)
    report, gm = check(lambda x: torch.stack([one, *torch.split(x, 2, 1), one], 1), X)
    assert not report.kept and report.cat_inputs == (5, 3), report.summary()


def test_gradients_through_the_copy():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(2, 6, 4, 3))

        def forward(self, x):
            y = x * self.w
            return torch.cat(torch.split(y, 2, 1), 3), torch.stack(torch.unbind(y, 2), 0)

    check_training(M(), X, **EAGER)


def test_no_copy_where_pieces_are_not_equal_rows():
    # rows of two tensors, one each: two copies would cost more than the cat
    y = torch.randn(2, 6, 4, 3)
    report, gm = check(lambda x, y: torch.cat([x[:, :2], y[:, 2:4]], 2), X, y)
    assert report.kept
    # glued along the dim they were cut along: the pieces merge, no copy
    report, gm = check(lambda x: torch.cat(torch.split(x, 2, 1), 1) * 2, X)
    assert "piece-as-row" not in report.rules_fired and _moved(gm) == 0
    # a part of the pieces only, under the eager model: a copy and a cat cost more than the cat
    report, gm = check(lambda x: torch.cat(torch.split(x, 2, 1)[:2], 2), X)
    assert report.kept


def test_squeeze_forms_parse():
    y = torch.randn(3, 1, 4, 1)
    for fn, ops in ((lambda y: y.squeeze() + 1, ["Squeeze", "Squeeze"]), (lambda y: y.squeeze(0) + 1, []),
                    (lambda y: torch.squeeze(y, (1, 2)) + 1, ["Squeeze"]), (lambda y: y.squeeze(-1) + 1, ["Squeeze"])):
        tr = translate(capture(Fn(fn), (y,)))
        arg = tr.outputs[0].args[1]
        got = []
        while arg.op == "Squeeze":
            got.append(arg.op)
            arg = arg.args[0]
        assert got == ops and arg.op == "Input"
        check(fn, y)


def test_contiguous_of_one_moved_dim_is_move_both_ways():
    y = torch.randn(3, 4, 5)
    for fn, move in ((lambda y: y.movedim(0, 2).contiguous(), (0, 2)),
                     (lambda y: y.permute(1, 0, 2).contiguous(), (0, 1)),
                     (lambda y: y.transpose(1, 2).contiguous(), (1, 2)),
                     (lambda y: torch.permute(y, (2, 0, 1)).contiguous(), (2, 0))):
        out = translate(capture(Fn(fn), (y,))).outputs[0]
        assert out.op == "Move" and out.args[1:] == move
        check(fn, y)
    for fn in (lambda y: y.permute(2, 1, 0).contiguous(), lambda y: y.transpose(0, 2).contiguous()):
        assert translate(capture(Fn(fn), (y,))).outputs[0].op != "Move"  # more than one dim moves
        check(fn, y)


def test_moved_outputs_are_laid_out_as_eager_lays_them():
    gm, _ = optimize(Fn(lambda x: torch.stack(torch.unbind(x, 1), 0)), (X,), **EAGER)
    out = gm(X)
    assert out.is_contiguous() and torch.equal(out, torch.stack(torch.unbind(X, 1), 0))


def test_the_copy_in_an_aten_graph_is_permute_and_clone():
    from torch.fx.experimental.proxy_tensor import make_fx

    from optimus_egg.pipeline import optimize_graph

    x = torch.randn(4, 6, 5)
    gm = make_fx(lambda x: (torch.stack(torch.unbind(x.relu(), 1), 0) * 2,), tracing_mode="fake")(x)
    new, report = optimize_graph(gm)
    assert not report.kept
    targets = {n.target for n in new.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.permute.default in targets and torch.ops.aten.cat.default not in targets
    assert all(isinstance(t, torch._ops.OpOverload) for t in targets)
    torch.testing.assert_close(new(x)[0], torch.stack(torch.unbind(x.relu(), 1), 0) * 2)


def test_no_copy_of_rows_the_rules_batch():
    class Towers(nn.Module):
        def __init__(self):
            super().__init__()
            self.towers = nn.ModuleList(nn.Linear(8, 4) for _ in range(3))

        def forward(self, x):
            return torch.stack([t(x) for t in self.towers], 1).relu()

    report, gm = check(Towers().eval(), torch.randn(5, 8))
    assert not any(r in report.rules_fired for r in ("stacked-row", "cat-row", "piece-as-row")), report.rules_fired


def test_the_copys_own_slices_are_not_rows_again():
    """Found by the fuzzer: the rows of x, stacked back in order, are x, so a row's class holds x's
    slices and the copy's; matching any row form in a row's class made each copy's slices rows of
    a new copy, without end (the e-node limit, 235k nodes). Only the rows the program takes, and
    the pieces it cuts, are rows."""
    def fn(x):
        rows = torch.unbind(x, 0)
        return torch.stack([rows[0], rows[1]], 0), torch.cat((rows[0],), 1)

    for shape in ((2, 3, 2), (2, 3, 1)):
        report, _ = check(fn, torch.randn(shape))
        assert report.stop_reason == "saturated" and report.enodes < 200, report.summary()


def test_rows_of_an_op_the_rules_batch_are_one_copy_where_the_program_cuts_them():
    """Tower outputs, batched into one bmm (each a row of it), glued along the features and cut
    there again: the cut pieces are the bmm's rows, and the cat of them one copy of the bmm."""
    class Towers(nn.Module):
        def __init__(self):
            super().__init__()
            self.towers = nn.ModuleList(nn.Linear(4, 8) for _ in range(8))

        def forward(self, x):
            y = torch.cat([t(g) for t, g in zip(self.towers, x.split(4, 1))], 1)
            return torch.cat([torch.relu(h) for h in y.chunk(8, 1)], 1)

    report, gm = check(Towers().eval(), torch.randn(5, 32))
    assert report.rules_fired["row-of-op"] > 0 and report.rules_fired["cat-row"] > 0, report.rules_fired
    assert _moved(gm) == 1 and not any(n.target is torch.cat for n in gm.graph.nodes), gm.code  # (stacks: weights)
