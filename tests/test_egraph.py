"""The e-graph engine: building is faithful, budgets stop saturation, extraction still works."""

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
