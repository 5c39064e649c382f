"""The emitter: every node it writes gets a fake value (taken from the original where a call is
written back unchanged), a cat of pieces unsqueezed on its dim is written as a stack, and the new
module keeps what Dynamo put on the graph."""

import torch

from optimus_egg import optimize
from tests.helpers import calls_to, check


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


def _steps(x, p):
    """Each step of a history plus its position, transformed, stacked back (the zoo's sequence
    model): rewritten, one tanh of the pieces' sums unflattened to (1, n) and catted."""
    return (torch.stack([torch.tanh(s + q) for s, q in zip(torch.unbind(x, 1), torch.unbind(p, 0))], 1),)


def test_a_cat_of_pieces_unflattened_to_size_one_is_written_as_a_stack():
    from torch._inductor.fx_passes.pre_grad import pre_grad_passes

    x, p = torch.randn(4, 5, 3), torch.randn(5, 3)
    _, gm = check(_steps, x, p, cost_model="eager")
    assert calls_to(gm, torch.stack) == 1 and calls_to(gm, torch.cat) == 0 and calls_to(gm, torch.unflatten) == 0
    # Inductor's pre-grad sink_cat_after_pointwise splits a tanh of a cat into one per piece;
    # a stack it leaves alone
    assert calls_to(pre_grad_passes(gm, (x, p)), torch.tanh) == 1
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
    x = torch.randn(2, 8, requires_grad=True)  # (a leaf the caller cannot write: no copy of it to save)
    torch.compile(lambda x: lin(torch.cat(torch.split(x, 4, 1), 1)), backend=backend)(x)
    (old, new, report), = seen
    assert new is not old and not report.kept and hasattr(old, "_param_name_to_source")
    assert new._param_name_to_source == old._param_name_to_source
    sources = [[p._dynamo_source for p in g.graph.find_nodes(op="placeholder")] for g in (old, new)]
    assert sources[0] == sources[1] and len(sources[0]) == 3  # x, the weight, the bias


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
    new, report = optimize_graph(gm, Options(strict=True, cost_model="eager"), disjoint_outputs=True)
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
