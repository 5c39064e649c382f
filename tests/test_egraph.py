"""The e-graph engine: building is faithful, budgets stop saturation, extraction still works."""

from types import SimpleNamespace

import pytest
import torch

from optimus_egg import rewrites
from optimus_egg.egraph import Budget, EGraph
from optimus_egg.ir import Term, as_list
from optimus_egg.pipeline import Options, optimize_graph, capture
from tests.helpers import Fn


def test_build_keeps_every_distinct_term():
    """egglog 13.2 could merge let-bound terms that differ only in literals (see egglog.md)."""
    x = Term("Input", (0,))
    pieces = [Term("Unary", ("tanh#0", Term("Sl", (x, 1, s, 8)))) for s in range(0, 64, 8)]
    root = Term("Cat", (as_list(pieces, 1),))
    eg = EGraph(rewrites.families([]))
    eg.add([root], [(x, [4, 64], "float32")])
    frozen = eg.freeze()
    slices = {n.children for n in frozen.nodes if n.op == "Sl"}
    assert {c[2] for c in slices} == set(range(0, 64, 8))


def _chain(n):
    def fn(x):
        for i in range(n):
            x = torch.cat([torch.tanh(p) for p in torch.split(x, 2, 1)], 1)
        return x
    return Fn(fn)


def test_iteration_budget_still_extracts_a_valid_graph():
    x = torch.randn(2, 8)
    gm0 = capture(_chain(4), (x,))
    gm, report = optimize_graph(gm0, Options(budget=Budget(max_iterations=1)))
    assert report.iterations == 1 and report.stop_reason.startswith("iteration limit")
    torch.testing.assert_close(gm(x), _chain(4)(x))
    full, full_report = optimize_graph(gm0, Options())
    assert full_report.kernels_after <= report.kernels_after
    assert full_report.stop_reason == "saturated"


def test_node_and_time_budgets():
    x = torch.randn(2, 8)
    gm0 = capture(_chain(4), (x,))
    for budget, reason in ((Budget(max_enodes=10), "e-node limit"), (Budget(max_seconds=0.0), "time limit")):
        gm, report = optimize_graph(gm0, Options(budget=budget))
        assert report.stop_reason.startswith(reason)
        torch.testing.assert_close(gm(x), _chain(4)(x))


def _blocks(n):
    """An e-graph of n blocks x → cat([tanh(p) for p in split(x, 8, 1)], 1), every term with its
    shape fact (as a translated graph has them), without going through Dynamo."""
    x = Term("Input", (0,))
    facts = [(x, [4, 64], "float32")]
    for _ in range(n):
        pieces = [Term("Unary", ("tanh#0", Term("Sl", (x, 1, s, 8)))) for s in range(0, 64, 8)]
        facts += [(p, [4, 8], "float32") for p in pieces] + [(p.args[1], [4, 8], "float32") for p in pieces]
        x = Term("Cat", (as_list(pieces, 1),))
        facts.append((x, [4, 64], "float32"))
    eg = EGraph(rewrites.families())
    eg.add([x], facts)
    return eg


def test_time_budget_holds_when_every_round_is_slow(monkeypatch):
    """egglog cannot interrupt a round, so a round is not started when it would end past the
    limit: on a clock where every round takes 1 s, a 2.5 s budget runs two rounds and stops at
    2 s (checking only after each round, saturation ran a third and stopped at 3 s)."""
    import optimus_egg.egraph as engine

    now = [0.0]
    run = EGraph._run

    def slow_run(self, *texts):
        if "run-schedule" in texts[-1]:
            now[0] += 1.0
        return run(self, *texts)

    monkeypatch.setattr(EGraph, "_run", slow_run)
    monkeypatch.setattr(engine, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    stats = _blocks(40).saturate(Budget(max_seconds=2.5))
    assert stats.stop_reason.startswith("time limit") and stats.iterations == 2 and stats.seconds <= 2.5
    x = torch.randn(2, 8)
    gm, report = optimize_graph(capture(_chain(4), (x,)), Options(budget=Budget(max_seconds=2.5)))
    assert report.iterations == 2 and report.stop_reason.startswith("time limit")
    torch.testing.assert_close(gm(x), _chain(4)(x))  # what two rounds found is a valid graph


def test_tiny_time_budget_on_a_large_graph():
    """A round that would end past the limit is not started."""
    eg = _blocks(400)
    stats = eg.saturate(Budget(max_seconds=0.01))
    assert stats.stop_reason.startswith("time limit") and not stats.saturated
    assert stats.seconds < 0.5, stats  # a small multiple of 0.01 s on a loaded 2-core machine (a round: ~0.1 s)
    full = eg.saturate(Budget())
    assert full.saturated and full.iterations > 1  # there was work to do


def test_build_loads_string_literals_and_rejects_separators():
    x = Term("Input", (0,))
    eg = EGraph(rewrites.families([]))
    eg.add([Term("Unary", ("relu#0", x))], [(x, [4, 8], "torch.float32")])
    assert {n.children[0] for n in eg.freeze().nodes if n.op == "Unary"} == {"relu#0"}
    with pytest.raises(ValueError, match="unsupported character"):
        EGraph(rewrites.families([])).add([Term("Unary", ("re\tlu", x))], [])


def test_a_rule_with_an_unknown_stage_is_refused(tmp_path):
    mod = tmp_path / "bad_stage.py"
    mod.write_text("from optimus_egg.rewrites import Rule\n"
                   "RULES = [Rule('x', '(Unary f x)', 'x', stage='later')]\n")
    with pytest.raises(ValueError, match="unknown stage 'later'"):
        rewrites.family(str(mod))
