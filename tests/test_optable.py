"""Every op family of the op table survives the round trip FX → IR → FX with its values."""

import pytest
import torch
import torch.nn.functional as F

from optimus_egg import aten, effects, optable, optimize
from optimus_egg.calls import BUILT, Call, Registry, Slot, _arguments, _plain_unary, built, generic_call, template
from optimus_egg.frontend import translate
from optimus_egg.pipeline import capture
from tests.helpers import Fn, check, launches


def _ops_model(x, w, b):
    y = F.linear(x, w, b) + torch.addmm(b, x, w.t()) - torch.mm(x, w) * 0.5
    z = torch.bmm(y.view(2, 2, 8), y.view(2, 8, 2)).flatten(1)
    s = F.layer_norm(y, (8,)).softmax(-1) + y.sum(-1, keepdim=True) / y.mean()
    v = s.reshape(2, 16).permute(1, 0).transpose(0, 1).unsqueeze(0).squeeze(0)
    u = torch.stack([x.select(1, 0), x[:, 1], x.narrow(1, 2, 1).squeeze(1)], -1)
    p = torch.cat([F.gelu(x[..., :4]), torch.sigmoid(x[:, 4:]).neg().exp()], -1)
    return v, z, u, p.div(2) + p / p.abs().clamp(min=1), x[None, :, 1:3]


def test_round_trip_of_every_op_family():
    x, w, b = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)
    report, _ = check(_ops_model, x, w, b)
    tr = translate(capture(Fn(_ops_model), (x, w, b)))
    assert tr.opaque == 0  # every op in this model is in the table


def test_unknown_ops_are_opaque_and_kept_exactly():
    fn = lambda x: torch.cat([torch.cumprod(x[:, :2], 1), torch.fft.fft(x).real[:, 2:]], 1)
    report, _ = check(fn, torch.randn(3, 5))
    assert report.opaque_nodes >= 2


def test_random_ops_keep_their_order():
    def fn(x):
        a = F.dropout(x, 0.5, training=True)
        b = torch.rand_like(x)
        return torch.cat([a[:, :2], a[:, 2:]], 1) + b

    torch.manual_seed(0)
    ref = Fn(fn)(torch.ones(4, 4))
    gm, _ = __import__("optimus_egg").optimize(Fn(fn), (torch.ones(4, 4),))
    torch.manual_seed(0)
    torch.testing.assert_close(gm(torch.ones(4, 4)), ref)


def test_every_table_target_is_unique_and_known_kinds():
    seen = {}
    for op in optable.OPS:
        assert isinstance(op.kind, optable.Kind)
        for t in op.targets:
            seen.setdefault(t, op.name)
    assert seen[torch.relu] == "relu" and seen["split"] == "split" and seen[torch.cat] == "cat"


def test_basic_indexing_forms():
    x = torch.randn(3, 4, 5)
    check(lambda x: x[..., 1:3] + x[:, None, 0, -2:].squeeze(1)[:, None].expand(3, 1, 2), x)
    check(lambda x: x[1] + x[-1, :, ::1], x)


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


def test_cat_leaves_out_pieces_empty_along_its_dim():
    # Found by the fuzzer: with the empty piece, cat(v1, v2) equals v1 and so contains itself;
    # cat-of-cat unrolled that into ever longer lists (20k e-nodes, 26 s over a 10 s budget).
    def fn(x):
        v1 = torch.div(x.narrow(0, 0, 1), x.narrow(0, 0, 1))
        v2 = torch.div(x.narrow(0, 1, 0), x.narrow(0, 1, 0))
        v4 = torch.cat([v1, v2], 0)
        return torch.cat([v4.narrow(0, 0, 1) + v4.narrow(0, 0, 1)], 0)

    x = torch.randn(1, 3, 2)
    report, _ = check(fn, x)
    assert report.stop_reason == "saturated" and report.enodes < 200, report.summary()
    cats = [t for t in translate(capture(Fn(fn), (x,))).origin if t.op == "Cat"]
    assert cats and all(t.args[0].args[1].op == "Nil" for t in cats)  # one piece each


def test_reshape_of_an_empty_tensor_stays_as_written():
    # Found by the fuzzer: unflatten(-2, (1, 7)) of a (7, 0, 7, 4) tensor also reads as splitting
    # dim 1 (0 = 0 * 1) into (0, 0 / 0); the size analysis then divided by zero (egglog panic).
    def fn(x):
        return x.narrow(1, 0, 0).unflatten(-2, (1, 7)) * 2

    x = torch.randn(7, 3, 7, 4)
    check(fn, x)
    assert not any(t.op in ("Flat", "Unflat") for t in translate(capture(Fn(fn), (x,))).origin)


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


def test_every_spelling_of_an_elementwise_op_computes_the_same():
    """Plain calls of one elementwise op share a key whatever their spelling (torch.relu,
    F.relu, Tensor.relu): they must compute the same, NaNs included."""
    x = torch.randn(64) * 3
    for op in optable.OPS:
        if op.kind is not optable.Kind.POINTWISE:
            continue
        outs = []
        for target in op.targets:
            try:
                outs.append(getattr(x, target)() if isinstance(target, str) else target(x))
            except (TypeError, RuntimeError):  # needs more arguments (binary ops, clamp without bounds)
                continue
        outs = [out for out in outs if isinstance(out, torch.Tensor)]  # (not NotImplemented)
        for out in outs[1:]:
            torch.testing.assert_close(out, outs[0], rtol=0, atol=0, equal_nan=True, msg=op.name)


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


def _aten(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*inputs)


def test_aten_slices_are_slices_and_aten_ops_are_the_table_ops():
    gm = _aten(lambda x: (x[:, 2:5], x[1:], x[:, 3:100], x[:, -3:], torch.relu(x), torch.cat([x, x], 1)),
               torch.randn(4, 8))
    tr = translate(gm)
    assert [t.op for t in tr.outputs] == ["Sl", "Sl", "Sl", "Sl", "Unary", "Cat"]
    assert [t.args[1:] for t in tr.outputs if t.op == "Sl"] == [(1, 2, 3), (0, 1, 3), (1, 3, 5), (1, 5, 3)]
    stepped = _aten(lambda x: (x[:, ::2],), torch.randn(4, 8))
    assert translate(stepped).outputs[0].op == "Op"  # a step other than 1: kept as written


@pytest.mark.parametrize("target", list(aten.ATEN_CALLS), ids=lambda t: t.__name__)
def test_every_torch_call_the_emitter_writes_has_an_aten_spelling(target):
    x, w = torch.randn(3, 4, 6), torch.randn(3, 6, 4)
    args = {torch.narrow: (x, 2, 1, 3), torch.select: (x, 1, 2), torch.squeeze: (x[:, :1], 1),
            torch.unsqueeze: (x, 1), torch.cat: ([x, x], 2), torch.stack: ([x, x], 1), torch.flatten: (x, 1, 2),
            torch.unflatten: (x, 2, (2, -1)), torch.split: (x, [2, 4], 2), torch.unbind: (x, 0),
            torch.clone: (x,), torch.bmm: (x, w), torch.baddbmm: (torch.randn(3, 4, 4), x, w),
            torch.transpose: (x, 1, 2), torch.movedim: (x, 2, 0), torch.addcmul: (x, x, x), torch.mul: (x, 2), torch.add: (x, x), torch.sum: (x, 2),
            torch.Tensor.contiguous: (x.transpose(1, 2),)}[target]
    graph = torch.fx.Graph()
    ins = {}

    def node(a):  # tensors become placeholders, anything else stays a constant
        if isinstance(a, list):
            return [node(b) for b in a]
        if isinstance(a, torch.Tensor):
            ins[id(a)] = ins.get(id(a)) or (a, graph.placeholder(f"x{len(ins)}"))
            return ins[id(a)][1]
        return a

    call = graph.call_function(target, tuple(node(a) for a in args))
    for t, p in ins.values():
        p.meta["val"] = t
    call.meta["val"] = target(*args)
    with graph.inserting_before(call):
        lowered = aten.ATEN_CALLS[target](graph, call)
    graph.output(lowered)
    got = torch.fx.GraphModule(torch.nn.Module(), graph)(*(t for t, _ in ins.values()))
    assert all(isinstance(n.target, torch._ops.OpOverload) for n in graph.nodes
               if n.op == "call_function" and n is not call)
    for a, b in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(target(*args))):
        torch.testing.assert_close(a, b)


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


def test_pieces_of_a_tensor_split_at_decreasing_indices_are_not_read_as_a_tiling():
    """x.tensor_split([4, 2], 1) is x[:, :4], x[:, 4:2] (empty), x[:, 2:]: the pieces overlap, so
    they are not consecutive slices (the last was read as x[:, 4:8] and the emission failed)."""
    fn = lambda x: (x.tensor_split([4, 2], 1)[2].sum(1), torch.cat([p.relu() for p in x.split(3, 1)], 1))  # noqa: E731
    report, _ = check(fn, torch.randn(4, 6))
    assert report.kernels_after < report.kernels_before


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
