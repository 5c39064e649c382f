"""Recompiling an identical graph is served from the cache: no second saturation."""

import operator

import pytest
import torch

from optimus_egg import cache, optimize
from optimus_egg.bench.models import chain
from optimus_egg.egraph import EGraph
from tests.helpers import Fn


@pytest.fixture
def saturations(monkeypatch):
    cache.clear()
    calls = []
    real = EGraph.saturate

    def counted(self, budget):
        calls.append(budget)
        return real(self, budget)

    monkeypatch.setattr(EGraph, "saturate", counted)
    yield calls
    cache.clear()


def test_identical_graph_skips_saturation_and_is_still_correct(saturations):
    model, inputs = chain(6)()
    gm1, first = optimize(model, inputs)
    twin, _ = chain(6)()  # a second instance: a new graph with the same structure and shapes
    gm2, second = optimize(twin, inputs)
    assert len(saturations) == 1
    assert not first.cache_hit and second.cache_hit
    assert "saturate" not in second.seconds and "cache" in second.seconds
    assert (second.kernels_before, second.kernels_after, second.rules_fired) == (
        first.kernels_before, first.kernels_after, first.rules_fired)
    x = torch.randn_like(inputs[0])
    torch.testing.assert_close(gm2(x), twin(x))
    torch.testing.assert_close(gm1(x), model(x))


def test_a_different_shape_option_or_constant_is_searched_again(saturations):
    def fn(x):
        return torch.cat([torch.relu(p) for p in x.split(2, 1)], 1).clamp(min=0.5)

    optimize(Fn(fn), (torch.randn(4, 8),))
    optimize(Fn(fn), (torch.randn(4, 12),))  # other shapes
    optimize(Fn(fn), (torch.randn(4, 8),), max_iterations=5)  # other options
    gm, report = optimize(Fn(lambda x: fn(x).clamp(max=2.0)), (torch.randn(4, 8),))  # other constant
    assert len(saturations) == 4 and not report.cache_hit
    x = torch.randn(4, 8)
    torch.testing.assert_close(gm(x), fn(x).clamp(max=2.0))


def test_graphs_that_differ_in_one_place_are_searched_again(saturations):
    """The key is the graph's rows: a literal, the order of a cat's pieces, an op, an output or a
    dtype changes them."""
    def relu_cat(x):
        return torch.cat([p.relu() for p in x.split(2, 1)], 1)

    x = torch.randn(4, 8)
    cases = [(relu_cat, x),
             (lambda x: torch.cat([p.relu() for p in x.split(4, 1)], 1), x),
             (lambda x: torch.cat([p.relu() for p in reversed(x.split(2, 1))], 1), x),
             (lambda x: torch.cat([p.tanh() for p in x.split(2, 1)], 1), x),
             (lambda x: (relu_cat(x), x.split(2, 1)[1]), x),
             (relu_cat, x.double())]
    for fn, arg in cases:
        gm, report = optimize(Fn(fn), (arg,))
        assert not report.cache_hit
        for got, want in zip(torch.utils._pytree.tree_leaves(gm(arg)), torch.utils._pytree.tree_leaves(fn(arg))):
            torch.testing.assert_close(got, want)
    assert len(saturations) == len(cases)


class Scale:
    """An arbitrary object passed to a call: its repr does not identify it."""

    def __init__(self, k):
        self.k = k

    def __repr__(self):
        return "Scale"


def scaled(x, scale):
    return x * scale.k


def _graph(scale):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    pieces = graph.call_function(torch.split, (x, 4, 1))
    glued = graph.call_function(torch.cat, ([graph.call_function(operator.getitem, (pieces, i)) for i in range(2)], 1))
    graph.output(graph.call_function(scaled, (glued, scale)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_calls_with_arbitrary_constants_are_not_cached(saturations):
    x = torch.randn(2, 8)
    for k in (2.0, 3.0):  # same repr, different values: the key cannot tell them apart
        gm, report = optimize(_graph(Scale(k)), (x,))
        assert not report.cache_hit
        assert [n.args[1].k for n in gm.graph.nodes if n.target is scaled] == [k]
    assert len(saturations) == 2


def _on(device):
    """The same graph, its values (fake) on ``device``: split pieces glued back, and a cat."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    def fn(x, y):
        pieces = x.split(4, 1)
        glued = torch.cat([pieces[i].relu() for i in range(4)], 1)
        return torch.cat([glued, y.exp()], 1), glued.sum()

    gm, mode = torch.fx.symbolic_trace(fn), FakeTensorMode()
    with mode:
        inputs = [torch.empty(8, 16, device=device) for _ in range(2)]
    FakeTensorProp(gm, mode).propagate(*inputs)
    return gm


def test_a_graph_on_another_device_is_searched_again(saturations):
    """The cost models count a device's kernels (Inductor fuses a cat's pieces on CUDA, not on
    the CPU): a CUDA graph once got the extraction found for its CPU twin."""
    from optimus_egg.pipeline import Options, optimize_graph

    options = Options(cost_model="inductor")
    _, cuda_alone = optimize_graph(_on("cuda"), options)
    cache.clear()
    optimize_graph(_on("cpu"), options)
    _, cuda = optimize_graph(_on("cuda"), options)
    assert not cuda.cache_hit and len(saturations) == 3
    assert (cuda.kernels_before, cuda.kernels_after) == (cuda_alone.kernels_before, cuda_alone.kernels_after)


def test_a_cached_graph_holds_no_terms_and_nothing_the_collector_walks(saturations):
    """The key is the graph's rows, not its live terms: an entry is ints, strings and tuples,
    which the cyclic collector stops tracking, so cached graphs do not lengthen its passes over
    the heap (the 600-block chain's terms were 141K tracked objects per entry)."""
    import gc

    from optimus_egg.ir import Term

    model, inputs = chain(6)()
    optimize(model, inputs)
    gc.collect()
    [entry] = cache._entries.values()
    seen, todo = {id(entry)}, [entry]
    while todo:
        for ref in gc.get_referents(todo.pop()):
            if id(ref) not in seen and not isinstance(ref, type):
                seen.add(id(ref))
                todo.append(ref)
    tracked = [o for o in gc.get_objects() if id(o) in seen]
    assert len(tracked) < 16, sorted({type(o).__name__ for o in tracked})
    assert not any(isinstance(o, Term) for o in tracked)
