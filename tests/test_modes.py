"""Graphs that switch modes inside: the calls between the switches are kept as written, the
calls around them optimized (optimus_egg.modes)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from optimus_egg import effects, modes, optimize
from optimus_egg.backend import REPORTS
from optimus_egg.counting import eager_launches
from optimus_egg.pipeline import capture
from tests.helpers import Fn


def _exp_of_pieces_one_without_grad(x):
    a, b = x.split(4, 1)
    with torch.no_grad():
        a = a.exp()
    return torch.cat([a, b.exp()], 1)  # was exp(x): a got a gradient


def _matmul_under_autocast(x):
    a, b = x.split(4, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        m = (a @ b.t()).float()
    return torch.cat([a.exp(), b.exp()], 1), m  # the matmul was written after the autocast ended


class _Layers(torch.nn.Module):
    """Cruft before and after a linear kept out of autocast and a statistic under no_grad."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.cat([p.relu() for p in x.split(4, 1)], 1)
        with torch.autocast("cpu", enabled=False):
            z = self.linear(y.float())
        with torch.no_grad():
            w = z.exp() * x.shape[0]  # a size read across the zone
        return torch.cat([q.sigmoid() for q in (z + w).split(2, 1)], 1)


def _zone(gm: fx.GraphModule) -> list[str]:
    """The calls from the first mode switch to the last, as written."""
    calls = [n for n in gm.graph.nodes if n.op == "call_function" or n.op == "call_method"]
    at = [i for i, n in enumerate(calls) if effects.switches_mode(n)]
    return [str(n.target) for n in calls[at[0]:at[-1] + 1]]


def _same(fn, gm, x: torch.Tensor) -> None:
    """Outputs and the input's gradient as eager's (to float32 rounding: a rewrite may reorder a
    sum, and the linear's library kernel may pick another blocking from one call to the next)."""
    xs = [x.clone().requires_grad_() for _ in range(2)]
    outs = []
    for f, arg in zip((fn, gm), xs):
        out = pytree.tree_leaves(f(arg))
        sum(o.float().sum() for o in out).backward()
        outs.append(out)
    for got, want in zip(*reversed(outs)):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(xs[1].grad, xs[0].grad)


@pytest.mark.parametrize("fn", [_exp_of_pieces_one_without_grad, _matmul_under_autocast])
def test_the_calls_between_mode_switches_stay_as_written(fn):
    """Calls on either side of a switch compute different things: a rewrite across it gave
    ``a`` a gradient (no_grad), or wrote the matmul after the autocast ended (float32)."""
    x = torch.randn(5, 8)
    gm, report = optimize(Fn(fn), (x.clone().requires_grad_(),))
    assert _zone(gm) == _zone(capture(Fn(fn), (x.clone().requires_grad_(),)))
    assert report.zone_nodes == len(_zone(gm))
    _same(fn, gm, x)


def test_calls_around_the_switches_are_optimized():
    model, x = _Layers(), torch.randn(4, 8)
    gm, report = optimize(model, (x,))
    assert _zone(gm) == _zone(capture(model, (x,)))
    assert report.segments == 2 and report.kernels_after < report.kernels_before
    assert eager_launches(gm, x) < eager_launches(model, x)
    _same(model, gm, x)


def test_through_torch_compile_in_training():
    model, x = _Layers(), torch.randn(4, 8)
    compiled = torch.compile(model, backend="optimus_egg", fullgraph=True)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    for f, arg in zip((model, compiled), xs):
        f(arg).sum().backward()
    assert REPORTS[-1].segments == 2 and REPORTS[-1].kernels_after < REPORTS[-1].kernels_before
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(xs[1].grad, xs[0].grad)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)


def _graph(*switches: tuple[object, tuple]) -> fx.GraphModule:
    """``relu`` of each piece of ``x`` (before), the switches, ``cat`` of the pieces (after)."""
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4, 8)
    split = g.call_function(torch.split, (x, 4, 1))
    pieces = [g.call_function(torch.relu, (g.call_function(operator.getitem, (split, i)),)) for i in range(2)]
    for target, args in switches:
        g.call_function(target, args)
    g.output(g.call_function(torch.cat, (pieces, 1)))
    gm = fx.GraphModule(torch.nn.Module(), g)
    return capture(gm, (torch.randn(4, 8),))


def test_a_zone_must_restore_the_modes_it_began_in():
    """After ``_set_grad_enabled(False)`` alone, the calls after it run under another mode than
    the ones before: a graph whose switches do not pair up is kept whole."""
    balanced = _graph((torch._C._set_grad_enabled, (False,)), (torch._C._set_grad_enabled, (True,)))
    assert modes.zone(balanced) is not None
    for switches in [((torch._C._set_grad_enabled, (False,)),),
                     ((torch._C._set_grad_enabled, (False,)), (torch._C._set_grad_enabled, (False,))),
                     ((torch.amp.autocast_mode._enter_autocast, ("cpu", None, False, None)),),
                     ((torch._C._set_grad_enabled, (True,)), (torch._functorch.predispatch._vmap_increment_nesting,
                                                              (2, "error")))]:
        gm = _graph(*switches)
        assert modes.zone(gm) is None
        _, report = optimize(gm, (torch.randn(4, 8),))
        assert report.kept and "switches modes" in report.kept_reason


def test_a_graph_that_writes_a_tensor_is_kept_whole():
    """Reads of a tensor written anywhere are pinned across the whole graph, which a segment
    alone does not see."""
    def fn(x):
        y = torch.cat([p.relu() for p in x.split(4, 1)], 1)
        with torch.no_grad():
            x.mul_(2)
        return y

    x = torch.randn(4, 8)
    gm = capture(Fn(fn), (x.clone(),))
    assert modes.zone(gm) is None
    out, report = optimize(Fn(fn), (x.clone(),))
    assert report.kept
