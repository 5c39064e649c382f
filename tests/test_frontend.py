"""optimus_egg.frontend: what the translation pins in program order."""

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from optimus_egg import optimize
from tests.helpers import Fn


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
    gm, report = optimize(traced, (x,))
    assert report.rules_fired["batch-linear-as-select-of-shared"] == 4
    assert sum(n.op == "get_attr" for n in gm.graph.nodes) == 2
    torch.testing.assert_close(gm(x), model(x))
