"""The fuzzer's programs with dropouts that draw, batched (``batch_random``), against eager.

A batched dropout draws other random numbers than the program's dropouts, so the programs run
with a dropout whose mask is a function of each element's value (``_valued_dropout``: kept where
the value's scaled fraction is at least ``p``): a batched dropout then computes exactly what the
dropouts it replaces do, and any slip in what it reads, where its pieces go or how it scales is a
mismatch. (What a real mask's distribution and independence need is tested in tests/test_draws.py.)
"""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, reject, settings

import optimus_egg
from tests.fuzz import check, programs

_DROPOUTS = ["F.dropout({x}, 0.3)", "F.dropout({x}, p=0.3, training=True)", "F.dropout({x}, 0.5)"]


def _valued_dropout(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    if not train:
        return x
    return torch.where((x * 1013.0).frac().abs() >= p, x / (1 - p), torch.zeros_like(x))


def _optimize(*args, **kwargs):
    gm, report = optimus_egg.optimize(*args, batch_random=True, **kwargs)
    if report.stop_reason.startswith("iteration limit"):
        # (a 60-way unbind → op → stack takes over 100 rounds with relu as with dropout: not this test's)
        reject()
    return gm, report


def test_batched_dropouts_compute_what_the_programs_dropouts_do(monkeypatch, fuzz_examples: int) -> None:
    monkeypatch.setattr(torch._VF, "dropout", _valued_dropout)  # what F.dropout calls
    monkeypatch.setattr(programs._Builder, "UNARY", _DROPOUTS * 5 + programs._Builder.UNARY)
    monkeypatch.setattr(check, "optimize", _optimize)
    fused = []

    @settings(max_examples=max(1, fuzz_examples // 10), database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(programs.programs("split_cat"))
    def run(program: programs.Program) -> None:
        gm = check.check_program(program)
        fused.append(_dropouts(gm) < _dropouts(program.graph_module()))

    run()
    assert any(fused)  # the programs batched dropouts


def _dropouts(gm: torch.fx.GraphModule) -> int:
    return sum("dropout" in str(n.target) for n in gm.graph.nodes)

