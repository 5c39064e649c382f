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
