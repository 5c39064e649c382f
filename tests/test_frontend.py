"""optimus_egg.frontend: what the translation pins in program order."""

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from optimus_egg import optimize
from tests.helpers import EAGER, Fn


def _dropouts_in_and_out_of_a_checkpoint(x):
    a = torch.utils.checkpoint.checkpoint(lambda t: F.dropout(t, 0.5, True) * 2, x, use_reentrant=False)
    b = F.dropout(x, 0.5, True)
    return b, a, torch.cat([p.relu() for p in x.split(3, 1)], 1)


def test_a_subgraph_call_keeps_its_place_among_random_ops():
    """A checkpointed region is a higher-order op that may draw random numbers: it stays where it
    was among the random ops (the dropout after it was written before it: both masks changed)."""
    x = torch.randn(4, 6)
    gm, report = optimize(Fn(_dropouts_in_and_out_of_a_checkpoint), (x,))
    assert report.kernels_after < report.kernels_before  # the graph is rewritten, not kept
    outs = []
    for f in (_dropouts_in_and_out_of_a_checkpoint, gm):
        torch.manual_seed(0)
        outs.append(f(x))
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)


class _SharedTower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w, self.b = torch.randn(5, 3), torch.randn(5)  # plain tensors: a get_attr per read

    def forward(self, x):
        pieces = x.split(2, 0)  # (a traced split's pieces are not iterable: four of them)
        prepared = [pieces[i].relu() if i % 2 else pieces[i].tanh() for i in range(4)]
        return torch.cat([F.linear(p, self.w, self.b) for p in prepared], 0)


def test_every_read_of_one_attribute_is_one_input():
    """``fx.symbolic_trace`` writes a ``get_attr`` per read of a weight: as one term, the four
    linears are seen to share it (one linear of their stacked inputs), and the graph reads it once."""
    from optimus_egg.frontend import translate

    model, x = _SharedTower(), torch.randn(8, 3)
    traced = torch.fx.symbolic_trace(model)
    assert sum(n.op == "get_attr" for n in traced.graph.nodes) == 8
    assert len(translate(traced).inputs) == 1 + 2
    gm, report = optimize(traced, (x,), **EAGER)  # (batched, the pieces are stacked: memory_bound)
    assert report.rules_fired["batch-linear-as-select-of-shared"] == 4
    assert sum(n.op == "get_attr" for n in gm.graph.nodes) == 2
    torch.testing.assert_close(gm(x), model(x))


def _cruft(y):
    return torch.cat([torch.relu(p) for p in y.split(4, 1)], 1)


def _batch_norm(x, ids, w, rm, rv):
    s = rm.sum()
    y = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
    return _cruft(y) * rm.sum() + s


def _instance_norm(x, ids, w, rm, rv):
    s = rv.sum()
    y = F.instance_norm(torch.stack([x, x.exp()], 2), rm, rv, use_input_stats=True, momentum=0.5)[:, :, 0]
    return _cruft(y) * rv.sum() + s


def _embedding(x, ids, w, rm, rv):
    s = w.sum()
    y = F.embedding(ids, w, max_norm=1.0)
    return _cruft(y) * w.sum() + s


def _fake_quant(x, ids, w, rm, rv):
    """A builtin whose ATen op writes its observer's statistics (quantization-aware training)."""
    s = rm.sum()
    on, scale, zero = torch.ones(1, dtype=torch.long), torch.ones(1), torch.zeros(1, dtype=torch.int32)
    y = torch.fused_moving_avg_obs_fake_quant(x, on, on, rm[:1], rv[:1], scale, zero, 0.5, 0, 255, -1)
    return _cruft(y) * rm.sum() + s


def _native_batch_norm(x, ids, w, rm, rv):
    """The ATen op ``make_fx`` records for a batch norm in training: its schema declares no write."""
    s = rm.sum()
    y = torch.native_batch_norm(x, None, None, rm, rv, True, 0.5, 1e-5)[0]
    return _cruft(y) * rm.sum() + s


def _native_batch_norm_legit(x, ids, w, rm, rv):
    s = rv.sum()
    y = torch._native_batch_norm_legit(x, None, None, rm, rv, True, 0.5, 1e-5)[0]
    return _cruft(y) * rv.sum() + s


@pytest.mark.parametrize("fn", [_batch_norm, _instance_norm, _embedding, _fake_quant, _native_batch_norm,
                                _native_batch_norm_legit])
def test_reads_around_a_call_that_writes_its_arguments_stay_apart(fn):
    """A batch norm in training updates its running statistics, an embedding with ``max_norm``
    renormalizes its weight: no name or flag says "in place". A read before the call and one
    after were one term, computed after the write (a wrong answer, found at this stop)."""
    args = (torch.randn(8, 16), torch.arange(8) % 4, torch.randn(4, 16) * 3, torch.randn(16), torch.rand(16) + 1)
    gm, report = optimize(Fn(fn), tuple(a.clone() for a in args))
    assert report.kernels_after < report.kernels_before  # the cruft around the call still goes
    got, want = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(gm(*got), fn(*want))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_a_submodule_that_writes_its_input_keeps_the_reads_around_it_apart():
    """``fx.symbolic_trace`` keeps ``torch.nn`` modules whole (``call_module``): one with
    ``inplace=True`` writes its input."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ReLU(inplace=True)

        def forward(self, x, y):
            a = x.sum()
            self.act(x)
            p = y.split(4, 1)  # (a traced split cannot be iterated)
            return torch.cat([torch.relu(p[0]), torch.relu(p[1])], 1), a, x.sum()

    args = (torch.randn(4, 8), torch.randn(4, 8))
    gm, report = optimize(torch.fx.symbolic_trace(Model()), tuple(a.clone() for a in args))
    assert report.kernels_after < report.kernels_before
    got, want = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(gm(*got), Model()(*want))
    torch.testing.assert_close(got, want)


def test_the_translation_records_what_the_program_splits():
    """(tensor, dim) of every split, chunk and unbind read piece by piece, with its pieces (the
    emitter's tilings keep a trained tensor's slices unless the program split it into as many);
    an unbind of an empty dim has none."""
    from optimus_egg.frontend import translate
    from optimus_egg.pipeline import capture

    def fn(x, y):
        a, b = x.split(4, 1)
        return a.relu(), b, *torch.unbind(y, 0), *torch.chunk(x, 2, 0), x[:, :2]

    x, y = torch.randn(2, 8), torch.randn(0, 3)
    tr = translate(capture(fn, (x, y)))
    inputs = {tr.terms[n]: n.name for n in tr.inputs}
    assert sorted((inputs[t], d, n) for (t, d), n in tr.split.items()) == [("l_x_", 0, 2), ("l_x_", 1, 2)]
