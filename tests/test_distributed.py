"""DistributedDataParallel training compiled with ``backend="optimus_egg"``: 2 processes, gloo, CPU.

Dynamo's DDP optimizer splits the captured graph at gradient-bucket boundaries and compiles each
piece with the backend separately; the optimizer must run on every piece, and training must match
eager DDP step for step.
"""

from __future__ import annotations

import copy
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2
STEPS = 3
BLOCKS = 3
WIDTH = 512  # a Linear holds 1 MiB: one gradient bucket each with bucket_cap_mb=1 (DDP's minimum)


class CruftMLP(nn.Module):
    """Blocks of split → ReLU per piece → cat, each followed by a Linear (one gradient bucket each),
    so every graph piece has cruft to remove."""

    def __init__(self) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.linears:
            x = torch.cat([torch.relu(p) for p in torch.split(x, WIDTH // 4, dim=1)], dim=1)
            x = linear(torch.cat(x.chunk(4, dim=1), dim=1))
        return x


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OPTIMUS_EGG_STRICT="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from optimus_egg.backend import REPORTS

        torch.manual_seed(0)
        model = CruftMLP()
        eager = DDP(copy.deepcopy(model), bucket_cap_mb=1)
        ddp = DDP(copy.deepcopy(model), bucket_cap_mb=1)
        compiled = torch.compile(ddp, backend="optimus_egg")
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, ddp)]
        losses, grad_diffs = [], []
        for step in range(STEPS):
            gen = torch.Generator().manual_seed(100 * step + rank)  # each rank its own data
            x = torch.randn(16, WIDTH, generator=gen)
            pair = []
            for m, opt in zip((eager, compiled), opts):
                opt.zero_grad(set_to_none=True)
                loss = m(x).square().mean()
                loss.backward()
                pair.append(loss.detach())
            losses.append(torch.stack(pair))
            grad_diffs.append(max((a.grad - b.grad).abs().max().item()
                                  for a, b in zip(eager.parameters(), ddp.parameters())))
            for opt in opts:
                opt.step()
        torch.save({"losses": losses, "grad_diffs": grad_diffs,
                    "grads": [p.grad for p in ddp.parameters()],
                    "reports": [(r.fallback, r.fx_nodes, r.kernels_before, r.kernels_after, dict(r.rules_fired))
                                for r in REPORTS]}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_ddp_trains_like_eager_ddp_and_every_bucket_graph_is_optimized(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for res in results:
        for pair in res["losses"]:
            torch.testing.assert_close(pair[1], pair[0], rtol=1e-5, atol=1e-6)
        assert max(res["grad_diffs"]) < 1e-5, res["grad_diffs"]
        reports = res["reports"]
        assert len(reports) >= BLOCKS, reports  # Dynamo split the graph at bucket boundaries
        assert all(fallback is None for fallback, *_ in reports), reports
        # Each piece was optimized: together they reach the clean model's floor, a ReLU and a Linear
        # per block, and more than one piece had cruft removed.
        assert sum(after for *_, after, _ in reports) == 2 * BLOCKS, reports
        assert sum(1 for *_, before, after, fired in reports if fired and after < before) >= 2, reports
    # DDP averaged the gradients: both ranks hold the same ones, though their data differed.
    assert not torch.equal(results[0]["losses"][0], results[1]["losses"][0])
    for a, b in zip(results[0]["grads"], results[1]["grads"]):
        torch.testing.assert_close(a, b)
