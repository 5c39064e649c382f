"""What a call does besides its result (optimus_egg.effects): random draws keep their order and
numbers, a dropout that is off is its input, and calls name the arguments they write."""

import pytest
import torch
import torch.nn.functional as F

from optimus_egg import effects, optimize
from optimus_egg.pipeline import capture
from tests.helpers import Fn, check, launches


def test_random_ops_keep_their_order():
    def fn(x):
        a = F.dropout(x, 0.5, training=True)
        b = torch.rand_like(x)
        return torch.cat([a[:, :2], a[:, 2:]], 1) + b

    torch.manual_seed(0)
    ref = Fn(fn)(torch.ones(4, 4))
    gm, _ = optimize(Fn(fn), (torch.ones(4, 4),))
    torch.manual_seed(0)
    torch.testing.assert_close(gm(torch.ones(4, 4)), ref)


@pytest.mark.parametrize("drop", [
    lambda p: F.dropout(p, 0.3, training=False), lambda p: F.dropout(p, 0.3, False, False),
    lambda p: torch.dropout(p, 0.3, False), lambda p: F.alpha_dropout(p, 0.3),  # (off by default)
    lambda p: F.dropout1d(p, training=False), lambda p: F.feature_alpha_dropout(p, 0.2, False),
], ids=["dropout-kw", "dropout-positional", "torch.dropout", "alpha_dropout", "dropout1d", "feature_alpha_dropout"])
def test_a_dropout_that_is_off_is_its_input_and_the_rules_see_through_it(drop):
    fn = lambda x: torch.cat([drop(p) for p in x.split(4, 2)], 2) * 2
    x = torch.randn(2, 3, 16)
    report, gm = check(fn, x)
    assert report.opaque_nodes == 0 and launches(gm, x) == 1 < launches(fn, x)


def test_an_eval_mode_dropout_module_is_its_input():
    linear, drop = torch.nn.Linear(16, 32), torch.nn.Dropout(0.5)
    fn = Fn(lambda x: torch.cat([drop(p) for p in linear(x).split(8, 1)], 1).relu())
    fn.linear, fn.drop = linear, drop
    x = torch.randn(4, 16)
    _, gm = check(fn.eval(), x)
    assert not any("dropout" in str(n.target) for n in gm.graph.nodes)
    assert launches(gm, x) == 2  # the linear and the relu


@pytest.mark.parametrize("drop", [lambda p: F.dropout(p, 0.3), lambda p: F.alpha_dropout(p, 0.3, True),
                                  lambda p: F.dropout(p, 0.0, True)], ids=["dropout", "alpha_dropout", "p=0"])
def test_a_dropout_that_draws_keeps_its_random_numbers(drop):
    """Each piece's dropout stays a call of its own, in order: the same seed gives eager's mask."""
    fn = Fn(lambda x: torch.cat([drop(p) for p in x.split(4, 1)], 1) * 2)
    x = torch.randn(8, 16)
    gm, _ = optimize(fn, (x,))
    assert sum("dropout" in str(n.target) for n in gm.graph.nodes) == 4
    torch.manual_seed(0)
    want = fn(x)
    torch.manual_seed(0)
    torch.testing.assert_close(gm(x), want)


def test_calls_that_write_arguments_besides_their_result_name_them():
    """The running statistics of a batch norm in training, an embedding's weight under
    ``max_norm``; nothing in evaluation or without ``max_norm`` (pinning those would keep every
    reader of a model's input in program order)."""
    x, ids, w, rm, rv = torch.randn(8, 4), torch.arange(3), torch.randn(5, 4), torch.zeros(4), torch.ones(4)

    def written(fn):
        gm = capture(Fn(fn), (x, ids, w, rm.clone(), rv.clone()))
        inputs = list(gm.graph.find_nodes(op="placeholder"))
        [call] = [n for n in gm.graph.nodes if n.op == "call_function"]
        return [inputs.index(a) for a in effects.written_arguments(call)], effects.is_inplace(call)

    assert written(lambda x, i, w, m, v: F.batch_norm(x, m, v, training=True)) == ([3, 4], True)
    assert written(lambda x, i, w, m, v: F.batch_norm(x, m, v)) == ([], False)
    assert written(lambda x, i, w, m, v: F.embedding(i, w, max_norm=2.0)) == ([2], True)
    assert written(lambda x, i, w, m, v: F.embedding(i, w)) == ([], False)
    assert effects.is_inplace(torch.fx.Graph().call_function(torch.ops.aten.add_, ()))  # an overload packet


def test_a_reorder_keeps_effects_in_order_and_reads_on_their_side_of_a_write():
    def fn(x, y):
        a = x * 2
        r = a.sin()  # reads a before the write
        a.add_(1)
        return r + a, y.cos()

    gm = capture(Fn(fn), (torch.randn(4), torch.randn(4)))
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    sin = next(n for n in calls if "sin" in str(n.target))
    write = next(n for n in calls if effects.is_inplace(n))
    cos = next(n for n in calls if "cos" in str(n.target))
    assert effects.order_kept(calls, calls)
    moved_cos = [cos, *(n for n in calls if n is not cos)]  # touches nothing written
    assert effects.order_kept(calls, moved_cos)
    late_read = [n for n in calls if n is not sin]
    late_read.insert(late_read.index(write) + 1, sin)  # sin now reads a after the write
    assert not effects.order_kept(calls, late_read)


def test_a_graph_that_writes_is_emitted_in_the_programs_order():
    """Emission writes each output's operands depth first; Inductor fuses along the order it is
    given (T5, whose relative-position buckets are summed in place, had its decoder emitted
    before its encoder). Where no effect moves, the program's order is kept."""
    def fn(x, y):
        t = x * 2
        t += 1
        a = torch.cat(torch.split(t.sin(), 4, 1), 1) * 3
        return y.cos(), a

    report, gm = check(fn, torch.randn(4, 8), torch.randn(4, 8), cost_model="eager")
    assert report.rules_fired and not report.kept
    calls = [n for n in gm.graph.nodes if n.op == "call_method" or n.op == "call_function"]
    names = [str(n.target) for n in calls]
    assert names.index("cos") > max(i for i, n in enumerate(calls) if "mul" in str(n.target)), gm.code
