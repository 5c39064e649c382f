"""Call templates (optimus_egg.calls): a call's arguments as slots under a key, the calls rules
may build, and the calls read as another op (an elementwise einsum is a mul)."""

import pytest
import torch
import torch.nn.functional as F

from optimus_egg import effects, optable, optimize
from optimus_egg.calls import BUILT, Call, Registry, Slot, _arguments, _plain_unary, built, generic_call, template
from optimus_egg.frontend import translate
from optimus_egg.pipeline import capture
from tests.helpers import Fn, check, launches


def _einsum_node():
    gm = capture(Fn(lambda a, b: torch.einsum("bi,bi->bi", a, b)), (torch.randn(4, 6), torch.randn(4, 6)))
    return next(n for n in gm.graph.nodes if "einsum" in str(n.target))


def test_elementwise_einsum_is_a_mul_that_rules_can_move():
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    assert generic_call(_einsum_node(), optable.lookup(_einsum_node()))[0].target is torch.mul
    fn = lambda a, b: torch.cat([torch.einsum("bi, bi -> bi", p, q)  # noqa: E731
                                 for p, q in zip(a.split(3, 1), b.split(3, 1))], 1)
    report, gm = check(fn, a, b)
    assert report.rules_fired["binary-out-of-slice"] > 0 and launches(gm, a, b) == 1


def test_other_einsums_stay_einsums():
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    for eq in ("bi,bj->bij", "bi,bi->b", "bi,bi->ib"):
        report, gm = check(lambda x, y, eq=eq: torch.einsum(eq, x, y), a, b)
        assert not any(n.target is torch.mul for n in gm.graph.nodes)
    x, y = torch.randn(4, 6), torch.randn(1, 6)  # broadcast: not the output's shape
    report, gm = check(lambda x, y: torch.einsum("bi,bi->bi", x, y), x, y)
    assert not any(n.target is torch.mul for n in gm.graph.nodes)


def test_calls_share_a_key_only_on_one_device():
    reg = Registry()
    call = BUILT["bmm#"]
    on = {d: Call(call.name, call.op, call.target, call.spec, call.leaves, 1.0, "Op", d)
          for d in ("cpu", "cuda:0")}
    assert reg.key(on["cpu"], True) == reg.key(on["cpu"], True) != reg.key(on["cuda:0"], True)


def test_built_calls_are_in_every_registry_under_their_keys():
    reg = Registry()
    for name, constants in (("baddbmm", ()), ("bmm", ()), ("transpose", (1, 2))):
        key = built(name, *constants).strip('"')
        assert reg.calls[key] is BUILT[key] and reg.calls[key].name == name
    assert reg.key(BUILT["bmm#"], True) == "bmm#0"  # graph calls are numbered from 0
    with pytest.raises(KeyError):
        built("transpose", 0, 2)


def test_layer_norm_calls_come_with_their_normalization_alone():
    def fn(x, w, b):
        return F.layer_norm(x, (8,), w, b), torch.layer_norm(x, (8,), weight=w, bias=b, cudnn_enable=True)

    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    calls = translate(capture(Fn(fn), (x, w, b))).registry.calls
    plain = [k for k in calls if k.endswith("-plain")]
    assert len(plain) == 1  # of the positional call; the other is keyed as not a layer_norm rules know
    assert any(k.startswith("layer_norm-as-written#") for k in calls)
    graph = torch.fx.Graph()
    out = calls[plain[0]].emit(graph, [graph.placeholder("x")])
    graph.output(out)
    torch.testing.assert_close(torch.fx.GraphModule({}, graph)(x), F.layer_norm(x, (8,)))


def _template_model(x, y):
    a = torch.add(x, y, alpha=2) + F.relu(x, inplace=False) + torch.relu(x) + F.relu(x, False)
    b = x.clamp(min=0.0).to(torch.float64).float() + torch.cat([x, y], 1)[:, :8]
    return a, b + F.linear(y, torch.cat([x, y], 0), bias=None) + x.sum(dim=(0,), keepdim=True)


def test_a_calls_template_is_its_arguments_as_pytree_flattens_them():
    """``template`` flattens calls of plain arguments by hand (most calls of a graph); the spec
    and leaves must be pytree's, which the emitter unflattens and the registry keys by."""
    from torch.fx import Node
    from torch.utils import _pytree as pytree

    gm = capture(Fn(_template_model), (torch.randn(4, 8), torch.randn(4, 8)))
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    plain = []
    for node in calls:
        op = optable.lookup(node)
        spec, leaves, inputs = template(node, op)
        want, want_spec = pytree.tree_flatten(_arguments(node, op))
        assert (spec, [x for x in want if isinstance(x, Node)]) == (want_spec, inputs), node.format_node()
        assert [inputs[x.index] if isinstance(x, Slot) else x for x in leaves] == want, node.format_node()
        call, _ = generic_call(node, op)
        args, kwargs = pytree.tree_unflatten(list(call.leaves), call.spec)
        assert _plain_unary(call) == (call.constructor == "Unary" and args == [Slot(0)]
                                              and kwargs in ({}, {"inplace": False})), node.format_node()
        plain.append(_plain_unary(call))
    assert plain.count(True) == 2  # F.relu(x, inplace=False), torch.relu(x); not F.relu(x, False)


@pytest.mark.parametrize("fn", [
    lambda x: torch.stack(x.split(2, 1), 1).reshape(x.shape[0], -1),  # an output re-derived through the reshape
    lambda x: torch.cat([x.t().reshape(x.shape[0], -1), x[:, :3]], 1),  # a reshape that copies, priced
    lambda x: torch.cat([x[: x.shape[0] // 2].exp(), x[x.shape[0] // 2:].exp()], 0),  # a size in a slice
], ids=["output-view-chain", "copying-reshape", "slice-bound"])
def test_calls_reading_a_symbolic_size_are_optimized(fn):
    """A symbolic size is an argument without a storage: comparing storages with it raised
    (torch's StorageWeakRef compared with None), and the compile fell back. One inside a slice
    (``x[: s0 // 2]``) was a constant of the call, not an argument: the emitted call read a node
    of the old graph."""
    x = torch.randn(4, 6)
    graph = torch._dynamo.export(Fn(fn), assume_static_by_default=False)(x)[0]
    gm, report = optimize(graph, (x,))
    assert report.fallback is None
    other = torch.randn(7, 6)
    torch.testing.assert_close(gm(other), fn(other))
    assert effects.storage_key(x) == effects.storage_key(x[1:]) != None  # noqa: E711 - the comparison that raised
