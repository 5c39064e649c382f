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
