"""optimus_egg.draws: dropouts that draw, batched under ``batch_random``.

A batched dropout draws other random numbers than eager's, so values are checked by what a
dropout may give: every element 0 or ``x / (1 - p)`` (inputs bounded away from 0, so a zero is
a dropped element), about a fraction ``p`` of them 0, and the gradient the mask actually used.
"""

from collections import namedtuple

import pytest
import torch
import torch.nn.functional as F

from optimus_egg import backend, draws, optimize
from optimus_egg.frontend import translate
from optimus_egg.ir import Term
from optimus_egg.pipeline import Options, capture
from tests.helpers import Fn, launches


def _x(*shape):
    torch.manual_seed(0)
    return torch.rand(*shape) + 0.5  # in [0.5, 1.5): a zero out of a dropout was dropped


def _dropouts(gm):
    return [n for n in gm.graph.nodes if "dropout" in str(n.target)]


def _assert_dropped(out, x, p):
    """``out`` is a dropout of ``x``: 0 or ``x / (1 - p)`` everywhere, a fraction near ``p`` zero."""
    assert out.shape == x.shape and out.dtype == x.dtype
    kept = out != 0
    torch.testing.assert_close(out[kept], (x / (1 - p))[kept])
    # 16k elements: the fraction's standard deviation is under 0.004, the bound 0.05
    assert abs((~kept).float().mean().item() - p) < 0.05


def _split_cat(x):
    return torch.cat([F.dropout(p, 0.5) for p in x.split(8, 1)], 1)


def test_dropouts_of_a_splits_pieces_glued_back_are_one_dropout_of_the_tensor():
    x = _x(256, 64)
    gm, report = optimize(Fn(_split_cat), (x,), batch_random=True)
    assert len(_dropouts(gm)) == 1 and _dropouts(gm)[0].args[0].op == "placeholder"
    assert launches(gm, x) < launches(_split_cat, x)
    assert report.kernels_after < report.kernels_before
    _assert_dropped(gm(x), x, 0.5)


def test_dropouts_of_a_splits_pieces_read_apart_are_one_dropout_before_the_split():
    fn = lambda x: [F.dropout(p, 0.3) * (i + 2) for i, p in enumerate(x.split(16, 1))]  # noqa: E731
    x = _x(256, 64)
    gm, _ = optimize(Fn(fn), (x,), batch_random=True, cost_model="eager")
    assert len(_dropouts(gm)) == 1
    assert launches(gm, x) < launches(fn, x)
    _assert_dropped(torch.cat([out / (i + 2) for i, out in enumerate(gm(x))], 1), x, 0.3)


def test_stacked_dropouts_are_one_dropout_of_the_stack():
    fn = lambda x: torch.stack([F.dropout(x + 1, 0.3), F.dropout(x * 2, 0.3), F.dropout(x - 0.25, 0.3)])  # noqa: E731
    x = _x(128, 64)
    gm, _ = optimize(Fn(fn), (x,), batch_random=True, cost_model="eager")
    assert len(_dropouts(gm)) == 1
    assert launches(gm, x) < launches(fn, x)
    _assert_dropped(gm(x), torch.stack([x + 1, x * 2, x - 0.25]), 0.3)


def test_dropouts_of_unbound_pieces_restacked_are_one_dropout():
    fn = lambda x: torch.stack([F.dropout(p, 0.5) for p in x.unbind(1)], 1)  # noqa: E731
    x = _x(512, 32)
    gm, _ = optimize(Fn(fn), (x,), batch_random=True)
    assert len(_dropouts(gm)) == 1
    _assert_dropped(gm(x), x, 0.5)


def test_dropouts_of_unbound_rows_read_apart_are_selects_of_one_dropout():
    fn = lambda x: [F.dropout(r, 0.5) * (i + 2) for i, r in enumerate(x.unbind(0))]  # noqa: E731
    x = _x(4, 4096)
    gm, report = optimize(Fn(fn), (x,), batch_random=True)
    assert report.rules_fired.get("draw-out-of-squeeze") and len(_dropouts(gm)) == 1
    _assert_dropped(torch.stack([out / (i + 2) for i, out in enumerate(gm(x))]), x, 0.5)


def test_the_draw_rule_fires_on_dropouts_that_draw_alone():
    """``draw-out-of-squeeze`` moves only dropouts that draw: products of unbound pieces are left
    to the rules of every elementwise op (Optimus's stack → op → unbind is not done). A stack of
    dropouts is one of a stack by the rule of every elementwise op."""
    x, y = _x(4, 64), _x(4, 64) * 2
    _, other = optimize(Fn(lambda x, y: [r * s for r, s in zip(x.unbind(0), y.unbind(0))]), (x, y),
                        batch_random=True)
    _, draws_ = optimize(Fn(lambda x: [F.dropout(p, 0.5) for p in x.unbind(0)]), (x,), batch_random=True)
    assert "draw-out-of-squeeze" not in other.rules_fired and draws_.rules_fired.get("draw-out-of-squeeze")


def _twice(p):
    return F.dropout(p, 0.5) + F.dropout(p, 0.5)


def _relu_pieces(x):  # x itself (x > 0), written so that the graph is rewritten, not kept
    return torch.cat([q.relu() for q in x.split(16, 1)], 1)


@pytest.mark.parametrize("fn", [lambda x: _twice(_relu_pieces(x)), lambda x: _twice(_relu_pieces(x).split(32, 1)[0])],
                         ids=["tensor", "split-piece"])
def test_two_draws_of_one_tensor_stay_independent(fn):
    """Same input, same p: two masks. With one mask every element would be 0 or 2x/(1-p); with
    two independent ones half of them are x/(1-p)."""
    x = _x(256, 64)
    gm, report = optimize(Fn(fn), (x,), batch_random=True)
    assert not report.kept and len(_dropouts(gm)) == 2
    out = gm(x)
    one = torch.isclose(out, 2 * x[:, :out.shape[1]])  # exactly one of the two kept (x / (1 - 0.5) = 2x)
    assert 0.4 < one.float().mean().item() < 0.6


def test_a_cat_of_two_dropouts_of_one_tensor_masks_its_halves_independently():
    fn = lambda x: torch.cat([F.dropout(x, 0.5), F.dropout(x, 0.5)], 1)  # noqa: E731
    x = _x(256, 64)
    gm, _ = optimize(Fn(fn), (x,), batch_random=True, cost_model="eager")
    assert len(_dropouts(gm)) == 1  # one dropout of cat([x, x])
    out = gm(x)
    _assert_dropped(out, torch.cat([x, x], 1), 0.5)
    same = (out[:, :64] != 0) == (out[:, 64:] != 0)
    assert 0.4 < same.float().mean().item() < 0.6  # one shared mask would agree everywhere


def test_the_gradient_is_the_mask_the_batched_dropout_used():
    x = _x(256, 64).requires_grad_()
    gm, _ = optimize(Fn(_split_cat), (x,), batch_random=True)
    out = gm(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, (out != 0).float() * 2)


def test_a_batched_dropout_and_what_else_reads_its_members_agree():
    """Values the program derives from one draw stay derived from one draw: a member read
    elsewhere too, a slice of the cat, the cat inside another cat."""
    def fn(x):
        a, b = x.split(32, 1)
        da = F.dropout(a, 0.5)
        y = torch.cat([da, F.dropout(b, 0.5)], 1)
        z = torch.cat([F.dropout(x + 1, 0.5), F.dropout(x * 2, 0.5)], 1)
        return y, da * 2, z, z[:, :64] * 3, torch.cat([z, x], 1)

    x = _x(256, 64)
    gm, report = optimize(Fn(fn), (x,), batch_random=True)
    assert report.kernels_after < report.kernels_before
    y, da2, z, z3, zx = gm(x)
    assert torch.equal(y[:, :32] * 2, da2)
    assert torch.equal(z[:, :64] * 3, z3) and torch.equal(zx[:, :128], z)
    _assert_dropped(y, x, 0.5)
    _assert_dropped(z, torch.cat([x + 1, x * 2], 1), 0.5)


class _Written:
    """Terms as written classes (each term its own class), for :func:`draws.consistent`."""

    Node = namedtuple("Node", "op children")

    def __init__(self, registry):
        self.registry, self.ids, self.graph = registry, {}, torch.fx.Graph()

    def node_of(self, cls):
        term = next(t for t, i in self.ids.items() if i == cls)
        return self.Node(term.op, tuple(self.ids.setdefault(c, len(self.ids)) if isinstance(c, Term) else c
                                        for c in term.args))

    def consistent(self, *terms):
        for t in terms:
            self.ids.setdefault(t, len(self.ids))
        written = {self.ids[t]: self.graph.placeholder(f"t{self.ids[t]}") for t in terms}
        return draws.consistent(written, self.node_of, self.registry, self.graph)


def _members(x):
    gm = capture(Fn(lambda x: torch.cat([F.dropout(x + 1, 0.5), F.dropout(x * 2, 0.5)], 1)), (x,))
    tr = translate(gm, batch_random=True)
    return tr.registry, [t for t in tr.origin if t.op == "Binary" and tr.registry.calls[t.args[0]].draws]


def test_consistent_refuses_a_dropout_written_beside_its_batched_form():
    """The check the pipeline runs on what the emitter wrote: a fused dropout and one of its
    members both written would give the member's elements two masks."""
    x = _x(8, 4)
    registry, members = _members(x)
    (key, a, ta), (_, b, tb) = (m.args for m in members)
    assert ta.op == tb.op == "Sl" and ta.args[0] is tb.args[0]  # disjoint slices of one atom
    fused = Term("Binary", (key, Term("Cat", (Term("Cons", (a, Term("Cons", (b, Term("Nil", ()), 1)), 1)),)),
                            ta.args[0]))
    written = _Written(registry)
    assert written.consistent(*members) and written.consistent(fused)
    assert not written.consistent(fused, members[1])
    x_node = written.graph.placeholder("x")
    drop = written.graph.call_function(F.dropout, (x_node, 0.5))  # a dropout no class wrote
    x_node.meta["val"] = drop.meta["val"] = x
    assert not written.consistent(fused)


def test_consistent_reads_selects_of_an_atom_apart_and_a_reshaped_one_whole():
    registry, members = _members(_x(8, 4))
    key, a, token = members[0].args
    atom = token.args[0]  # [8, 8]

    def draw(tok):
        return Term("Binary", (key, a, tok))

    rows = [draw(Term("Squeeze", (Term("Sl", (atom, 0, i, 1)), 0))) for i in range(2)]
    assert _Written(registry).consistent(*rows)
    assert not _Written(registry).consistent(rows[0], draw(Term("Sl", (atom, 0, 0, 1))))
    flat = draw(Term("Sl", (Term("Flat", (atom, 0)), 0, 0, 8)))  # the first row, read as all of it
    assert not _Written(registry).consistent(flat, rows[1])


@pytest.mark.parametrize("dtype, p", [(torch.float32, 0.3), (torch.half, 0.5)], ids=["different-p", "mixed-dtypes"])
def test_dropouts_of_another_kind_are_not_batched(dtype, p):
    fn = lambda x: torch.cat([F.dropout(x, 0.5), F.dropout(x.to(dtype), p)], 1)  # noqa: E731
    x = _x(256, 64)
    gm, _ = optimize(Fn(fn), (x,), batch_random=True)
    assert len(_dropouts(gm)) == 2
    out = gm(x)
    _assert_dropped(out[:, :64], x, 0.5)
    _assert_dropped(out[:, 64:].to(dtype), x.to(dtype), p)


@pytest.mark.parametrize("fn", [
    lambda x: torch.cat([F.dropout1d(p, 0.5) for p in x.unflatten(0, (8, 32)).split(16, 2)], 2),
    lambda x: torch.cat([F.dropout2d(p, 0.5) for p in x.view(4, 8, 8, 64).split(16, 3)], 3),
    lambda x: torch.cat([F.alpha_dropout(p, 0.5, True) for p in x.split(16, 1)], 1),
    lambda x: torch.cat([torch.rand_like(p) * p for p in x.split(16, 1)], 1),
    lambda x: torch.cat([F.dropout(p, 0.5, inplace=True) for p in (x * 1).split(16, 1)], 1),
], ids=["dropout1d", "dropout2d", "alpha_dropout", "rand_like", "in-place"])
def test_other_random_ops_stay_pinned_and_keep_eagers_numbers(fn):
    x = _x(256, 64)
    gm, _ = optimize(Fn(fn), (x,), batch_random=True)
    torch.manual_seed(1)
    want = fn(x)
    torch.manual_seed(1)
    torch.testing.assert_close(gm(x), want, rtol=0, atol=0)


@pytest.mark.parametrize("drop, draws_", [
    (lambda x: F.dropout(x, 0.3), True), (lambda x: F.dropout(x, p=0.3, training=True), True),
    (lambda x: torch.dropout(x, 0.3, True), True), (torch.nn.Dropout(0.3), True),
    (lambda x: F.dropout(x, 0.0), False),  # ATen returns the input itself
    (lambda x: F.dropout(x, 0.3, training=False), False), (lambda x: F.dropout(x * 1, 0.3, inplace=True), False),
    (lambda x: F.dropout2d(x, 0.3), False), (lambda x: F.alpha_dropout(x, 0.3, True), False),
], ids=["F.dropout", "keywords", "torch.dropout", "nn.Dropout", "p=0", "off", "in-place", "dropout2d", "alpha"])
def test_which_dropouts_draw_and_may_be_batched(drop, draws_):
    gm = capture(Fn(drop) if not isinstance(drop, torch.nn.Module) else drop, (_x(2, 3, 4),))
    assert any(draws.drawn_input(n) is not None for n in gm.graph.nodes) is draws_


def test_a_graph_that_reads_the_generators_state_is_not_batched():
    """``set_rng_state`` between two dropouts gives both one mask: their order is kept."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch.set_rng_state, (graph.call_function(torch.get_rng_state),))
    graph.output(graph.call_function(F.dropout, (x, 0.5)))
    assert draws.reseeds(graph)
    assert not draws.reseeds(capture(Fn(_split_cat), (_x(4, 32),)).graph)


def test_a_dropout_that_is_off_is_not_batched_with_one_that_draws():
    fn = lambda x: torch.cat([F.dropout(p, 0.5, training=i % 2 == 0) for i, p in enumerate(x.split(16, 1))], 1)  # noqa: E731
    x = _x(256, 64)
    gm, _ = optimize(Fn(fn), (x,), batch_random=True)
    out = gm(x)
    for i in (1, 3):
        assert torch.equal(out[:, 16 * i:16 * (i + 1)], x[:, 16 * i:16 * (i + 1)])
    for i in (0, 2):
        _assert_dropped(out[:, 16 * i:16 * (i + 1)], x[:, 16 * i:16 * (i + 1)], 0.5)


def test_off_by_default_the_same_seed_gives_eagers_mask():
    x = _x(64, 64)
    default, _ = optimize(Fn(_split_cat), (x,))
    off, _ = optimize(Fn(_split_cat), (x,), batch_random=False)
    assert default.code == off.code and len(_dropouts(off)) == 8
    torch.manual_seed(3)
    want = _split_cat(x)
    torch.manual_seed(3)
    torch.testing.assert_close(off(x), want, rtol=0, atol=0)


def test_the_option_takes_true_or_false():
    assert Options.from_kwargs(batch_random=True).batch_random
    assert not Options.from_kwargs().batch_random
    with pytest.raises(ValueError, match="batch_random"):
        Options.from_kwargs(batch_random="yes")


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 32)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        h = self.linear(x)
        return torch.cat([self.drop(p) for p in h.split(8, 1)], 1)


def test_torch_compile_trains_with_batched_dropouts():
    torch.manual_seed(0)
    model, x = _Tiny().train(), torch.randn(64, 8)
    backend.REPORTS.clear()
    compiled = torch.compile(model, backend="optimus_egg", options={"batch_random": True})
    out = compiled(x)
    report = backend.REPORTS[-1]
    assert report.kernels_after < report.kernels_before
    h = model.linear(x).detach()
    kept = out != 0
    torch.testing.assert_close(out[kept], (h / 0.5)[kept])
    assert 0.35 < (~kept).float().mean().item() < 0.65  # 2k elements
    out.sum().backward()
    torch.testing.assert_close(model.linear.weight.grad, (kept.float() * 2).T @ x)
