"""The op table: every op family survives the round trip FX → IR → FX with its values, unknown
ops stay opaque, and every spelling of an op computes the same."""

import torch
import torch.nn.functional as F

from optimus_egg import optable
from optimus_egg.frontend import translate
from optimus_egg.pipeline import capture
from tests.helpers import Fn, check


def _ops_model(x, w, b):
    y = F.linear(x, w, b) + torch.addmm(b, x, w.t()) - torch.mm(x, w) * 0.5
    z = torch.bmm(y.view(2, 2, 8), y.view(2, 8, 2)).flatten(1) + (x @ w)[:2, :4] + x.matmul(w)[2:, 4:]
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


def test_every_table_target_is_unique_and_known_kinds():
    seen = {}
    for op in optable.OPS:
        assert isinstance(op.kind, optable.Kind)
        for t in op.targets:
            seen.setdefault(t, op.name)
    assert seen[torch.relu] == "relu" and seen["split"] == "split" and seen[torch.cat] == "cat"


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
