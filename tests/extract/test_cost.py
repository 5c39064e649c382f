"""Cost models: eager launches, Inductor's fused kernels (checked against Inductor itself), bytes."""

import pytest
import torch
import torch.nn.functional as F

from optimus_egg.bench.models import chain
from optimus_egg.counting import eager_launches
from optimus_egg.extract import select
from optimus_egg.extract.cost import KernelCost, MemoryCost
from optimus_egg.extract.inductor import InductorCost
from optimus_egg.frontend import translate
from optimus_egg.pipeline import capture
from tests.helpers import INDUCTOR_2_13, Fn, check

W = torch.randn(8, 8)
W3 = [torch.randn(16, 16) for _ in range(3)]


def _dag(fn, *inputs):
    tr = translate(capture(Fn(fn), inputs))
    return tr.registry, select.translated(tr)


def predict(fn, *inputs, device="cpu"):
    registry, dag = _dag(fn, *inputs)
    return InductorCost(registry, device=device).predict(dag)


def test_inductor_model_fuses_pointwise_and_keeps_externs_apart():
    x = torch.randn(4, 8)
    chain3 = predict(lambda x: torch.sigmoid(torch.tanh(torch.relu(x))), x)
    assert (chain3.kernels, chain3.extern) == (1, 0)
    around = predict(lambda x: torch.relu(F.linear(torch.relu(x), W)), x)
    assert (around.kernels, around.extern) == (2, 1)  # a kernel cannot run before and after the mm
    branches = predict(lambda x: (torch.relu(x), torch.tanh(x)), x)
    assert branches.kernels == 1  # same input, same size: fused horizontally
    reduction = predict(lambda x: torch.relu(x).sum(1), x)
    assert (reduction.kernels, reduction.extern) == (1, 0)  # the pointwise producer fuses in


def test_inductor_model_cat_rules_per_device():
    x = torch.randn(4, 8)

    def pieces(x):
        return torch.cat([torch.relu(p) for p in x.split(2, 1)], 1)

    def copies(x):
        return torch.cat(x.split(2, 1), 1) * 2

    assert predict(pieces, x).kernels == 4  # CPU: each piece's kernel writes its slot
    assert predict(copies, x).kernels == 5  # four copies, then the multiply
    assert predict(pieces, x, device="cuda").kernels == 1  # CUDA: a pointwise cat, fused
    registry, dag = _dag(pieces, x)
    assert KernelCost(registry).total(dag) == 5  # eager: 4 relus and the cat


def _batched(x, a, b, c):  # a batched layer's stack of weights: the backend scatters it, one kernel
    return torch.bmm(x, torch.stack([a, b, c]).transpose(1, 2))


def _batched_and_returned(x, a, b, c):  # the stack is an output too: one copy per piece
    s = torch.stack([a, b, c])
    return torch.bmm(x, s.transpose(1, 2)), s


def _concatenated(x, a, b, c):  # weights scattered; the biases are slices, copied
    return F.linear(x[0], torch.cat([a, b, c]), torch.cat([a[0], b[0], c[0]]))


def _widths(x, a, b, c):  # linears of different widths: their weights are scattered too
    return F.linear(x[0], torch.cat([a, b, c]))


def _one_piece_two_stacks(x):  # each piece is copied into both stacks by one loop (zoo ple)
    y = torch.relu(x @ W3[0])
    a, b = y[:, :8], y[:, 8:]
    return torch.stack([a, b], 1).sum(1) * 2, torch.stack([b, a], 2).sum(2) * 3


def _accumulated(x):
    out = F.linear(x, W3[0], W3[0][0])
    out += F.linear(x, W3[1], W3[1][0])
    out += F.linear(x, W3[2], W3[2][0])
    return out


@INDUCTOR_2_13
def test_inductor_model_matches_inductor_on_cpu():
    """The prediction is Inductor's own count: kernel objects and extern calls, compiled as the
    backend compiles (its post-grad pass scatters stacks of weights; ``calibrate.measure``)."""
    x = torch.randn(8, 16)
    w = torch.randn(16, 16)
    x3, ws = torch.randn(3, 4, 8), [torch.randn(8, 8) for _ in range(3)]
    cases = [(lambda x: torch.cat([torch.tanh(p) for p in x.split(4, 1)], 1) + 1, (x,), 5),
             (lambda x: torch.relu(torch.relu(x) @ w).mean(1), (x,), None),
             (lambda x: torch.stack([torch.relu(x), x * 2], 1), (x,), None),
             (_batched, (x3, *ws), 1), (_batched_and_returned, (x3, *ws), 3), (_concatenated, (x3, *ws), 4),
             (_widths, (x3, *(torch.randn(n, 8) for n in (3, 5, 2))), 1),
             # reductions of fewer than 8 elements are unrolled into pointwise loops
             (lambda x: torch.softmax(x, -1) * 2, (torch.randn(64, 4),), 2),  # exponentials stored
             (lambda x: torch.softmax(x, -1) * 2, (torch.randn(64, 16),), 4),  # not unrolled
             (lambda x: x.sum(1) + 1, (torch.randn(64, 4, 16),), 1),
             (lambda x: torch.relu(x).mean(-1), (torch.randn(64, 3),), 1),
             (lambda x: F.layer_norm(x, (4,)), (torch.randn(64, 4),), 3),
             (lambda x: torch.log_softmax(x, 1) + x, (torch.randn(64, 5),), 4),
             # matmuls write their slots of a stack, and the relu reads it whole; of a cat along
             # dim 1, each slot gets the relu of its own piece
             (lambda x: torch.relu(torch.stack([x @ w for w in W3], 1)), (x,), 1),
             (lambda x: torch.relu(torch.cat([x @ w for w in W3], 1)), (x,), 3),
             (_one_piece_two_stacks, (x,), 4),
             # a 3-D linear with bias: on a reshape one addmm of its rows, bias included; on a
             # transpose a bmm, and the bias added after it (here in the sum's kernel)
             (lambda x: F.linear(x.unflatten(1, (2, 8)), W, W[0]).flatten(1), (x,), 0),
             (lambda x: F.linear(x.unflatten(1, (2, 8)).transpose(0, 1), W, W[0]).sum(0), (x,), 1)]
    _assert_predicted(cases)


@pytest.mark.skipif(not torch.__version__.startswith("2.13"), reason="calibrated on torch 2.13's Inductor")
def test_inductor_model_matches_inductor_on_cat_slots_shared_reads_and_in_place_adds():
    x = torch.randn(8, 16)
    cases = [  # a constant is written into each of its slots by a loop of its own (it reads
             # nothing another loop shares); copies that read one region fuse, whatever view or
             # element-by-element op they read it through
             (lambda x: torch.cat([torch.ones(8, 2), x, torch.ones(8, 2)], 1), (x,), 3),
             (lambda x, y: (torch.stack([x, y], 1), x * y), (x, x + 1), 1),
             (lambda x: torch.stack([x[:, :8].clone(), x[:, :8], x.clone()[:, 8:], x[:, 8:]], 1), (x,), 2),
             # an in-place add on a matmul's result is an add (Inductor functionalizes it)
             (_accumulated, (x,), 1),
             # a sigmoid several ops read is stored, a loop of its own where they read slices;
             # a relu is recomputed in each reader (a GRU's gates taken before the sigmoid: 1)
             (_gates_after_sigmoid, (torch.randn(8, 48), x), 2), (_gates_before_sigmoid, (torch.randn(8, 48), x), 1),
             (lambda g: _halves(torch.sigmoid(g)), (x,), 3), (lambda g: _halves(torch.relu(g)), (x,), 2),
             # so is a tanh or a log (the CPU backend's heavy ops), not an abs
             (lambda g: _halves(torch.tanh(g)), (x,), 3), (lambda g: _halves(torch.log1p(g.abs())), (x,), 3),
             (lambda g: _halves(torch.abs(g)), (x,), 2),
             # ... and read by two slots of one cat: a loop, and one for each slot
             (lambda g: _alternating(torch.sigmoid(g), g), (x,), 4), (lambda g: _alternating(g.abs(), g), (x,), 3),
             # a result whose code loads more than four tensors is stored too, on any device
             (lambda *t: _alternating(t[0] * t[1] + t[2] * t[3] - t[4], t[0]), _distinct(5), 4),
             (lambda *t: _alternating(t[0] * t[1] + t[2] - t[3], t[0]), _distinct(4), 3),
             # a layer norm over the rows of another's output: two reductions over other ranges
             (lambda x: F.layer_norm(F.layer_norm(x, (10,), W3[0][0, :10], W3[0][1, :10]), (5, 10)), (torch.randn(4, 5, 10),), 16),
             # layer norms of rows whose scale and shift a later kernel applies (batched norms:
             # the stacked parameters are read there): the statistics keep their loops
             (_rows_normed_then_scaled, (torch.randn(8, 30),), 13)]
    _assert_predicted(cases)


def _rows_normed_then_scaled(x):
    normed = F.layer_norm(x.unflatten(1, (3, 10)), (10,))
    return torch.addcmul(torch.stack(list(W3[1][:3, :10])), normed, torch.stack(list(W3[2][:3, :10])))


def _distinct(n):
    return tuple(torch.randn(8, 16) for _ in range(n))


def _alternating(s, x):
    return torch.cat([s[:2], -x[2:4], s[4:6]], 0)


def _halves(s):
    return s[:, :8] * 2, s[:, 8:] + 1


def _gates_before_sigmoid(g, h):
    r, z, n = g.chunk(3, 1)
    r, z = torch.sigmoid(r), torch.sigmoid(z)
    return (1 - z) * torch.tanh(n * r) + z * h


def _gates_after_sigmoid(g, h):
    s = torch.sigmoid(g)
    return (1 - s)[:, 16:32] * torch.tanh(g[:, 32:] * s[:, :16]) + s[:, 16:32] * h


def _assert_predicted(cases: list) -> None:
    from optimus_egg.bench.calibrate import measure

    for fn, inputs, objects in cases:
        measured = measure(Fn(fn), inputs)
        got = predict(fn, *inputs)
        assert (got.objects, got.extern) == (measured["objects"], measured["extern"])
        assert objects is None or got.objects == objects  # (the cases mean what they say)


def test_memory_model_counts_bytes_read_and_written():
    x = torch.randn(4, 8)
    registry, dag = _dag(lambda x: torch.relu(x), x)
    assert MemoryCost(registry).total(dag) == 2 * 4 * 8 * 4
    registry, dag = _dag(lambda x, y: torch.cat([x, y], 0), x, x.clone())
    assert MemoryCost(registry).total(dag) == 2 * 2 * 4 * 8 * 4  # read and write both pieces
    registry, dag = _dag(lambda x: x.double().sum(), x)
    assert MemoryCost(registry).total(dag) == (4 * 8 * 4 + 4 * 8 * 8) + (4 * 8 * 8 + 8)


def test_weights_scale_each_category():
    x = torch.randn(4, 8)
    registry, dag = _dag(lambda x: torch.relu(F.linear(x, W)), x)
    assert KernelCost(registry).total(dag) == 2
    assert KernelCost(registry, {"matmul": 5, "pointwise": 0.5}).total(dag) == 5.5
    assert InductorCost(registry, {"matmul": 5}).total(dag) == 6
    with pytest.raises(ValueError, match="valid: pointwise"):
        KernelCost(registry, {"matmull": 2})


@pytest.mark.parametrize("cost_model", ["inductor", "memory"])
def test_every_cost_model_extracts_the_clean_chain(cost_model):
    model, inputs = chain(6)()
    with torch.no_grad():  # (eager launches: an inference figure, nothing saved for a backward)
        report, gm = check(model, *inputs, cost_model=cost_model)
    clean, _ = chain(6, clean=True)()
    assert eager_launches(gm, *inputs) == eager_launches(clean, *inputs)  # the floor
    assert report.cost_model == cost_model and set(report.costs) == {"eager", "inductor", "memory"}
    assert report.kernels_after < report.kernels_before
    assert (report.kernels_before, report.kernels_after) == report.costs[cost_model]


def test_unknown_cost_model_or_extractor_is_a_clear_error():
    from optimus_egg import optimize

    with pytest.raises(ValueError, match="valid: eager, inductor, memory"):
        optimize(Fn(lambda x: x + 1), (torch.randn(2),), cost_model="fast")
    with pytest.raises(ValueError, match="valid: greedy, ilp, compare"):
        optimize(Fn(lambda x: x + 1), (torch.randn(2),), extractor="best")


LINEARS = [(torch.randn(4, 8), torch.randn(4)) for _ in range(4)]


def test_inductor_model_prices_stacked_weights_as_the_backend_writes_them():
    """Linears on one input become one linear on their concatenated weights when the
    ``inductor`` model counts the concatenation as the one scatter the backend writes (it
    counted a copy per weight and per bias, and kept the four linears)."""
    def fn(x):
        return torch.cat([F.linear(x, w, b) for w, b in LINEARS], 1)

    report, gm = check(fn, torch.randn(6, 8), cost_model="inductor")
    assert sum(n.target is F.linear for n in gm.graph.nodes) == 1
    assert report.costs["inductor"][1] < report.costs["inductor"][0]


@pytest.mark.parametrize("ids, weights", [
    (torch.randint(0, 10, (6, 4, 3))[:, 1], None),  # 2-D, not contiguous: offsets and a flat copy
    (torch.randint(0, 10, (6, 3)), None),  # 2-D: offsets, a flat view
    (torch.randint(0, 10, (6, 3)), torch.rand(4, 6).t()),  # and weights flattened by a copy
])
def test_eager_model_counts_every_kernel_of_an_embedding_bag(ids, weights):
    """``F.embedding_bag`` of a 2-D input makes its offsets and flattens it in Python: the
    demo model was priced 31 → 15 where eager runs 39 → 23."""
    table = torch.randn(10, 4)
    mode = "mean" if weights is None else "sum"

    def fn(ids):
        weights_ = None if weights is None else weights[:, :3]
        return F.embedding_bag(ids, table, per_sample_weights=weights_, mode=mode).relu()

    report, _ = check(fn, ids, cost_model="eager")
    assert report.kernels_before == eager_launches(Fn(fn), ids)


def test_eager_and_memory_models_charge_each_copy_of_a_computation_written_twice():
    """The e-graph holds one term for calls that compute alike (``mmoe`` stacks the same
    experts three times: priced 66 where eager runs 68); the graph as written pays each. A call
    that returns its input as it is (``contiguous``) is no copy of the op that made the input."""

    def twice(x, y):
        return (torch.stack([x, y]).relu() + torch.stack([x, y]).sigmoid() + torch.relu(x).contiguous()
                + x.relu() + F.relu(x))

    def once(x, y):
        s, r = torch.stack([x, y]), torch.relu(x)
        return s.relu() + s.sigmoid() + r + r + r

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    (registry, dag), (registry1, dag1) = _dag(twice, x, y), _dag(once, x, y)
    assert KernelCost(registry).total(dag) == eager_launches(Fn(twice), x, y) == 11
    assert KernelCost(registry1).total(dag1) == eager_launches(Fn(once), x, y) == 8
    stack, relu = (MemoryCost(r).total(d) for r, d in (_dag(torch.stack, [x, y]), _dag(torch.relu, x)))
    assert MemoryCost(registry).total(dag) == MemoryCost(registry1).total(dag1) + stack + 2 * relu
    report, gm = check(twice, x, y, cost_model="eager")  # computed once
    assert (report.kernels_before, report.kernels_after) == (11, 8) == (11, eager_launches(gm, x, y))
