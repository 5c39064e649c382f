"""The e-graph engine: building is faithful, budgets stop saturation, extraction still works."""

from types import SimpleNamespace

import pytest
import torch

from optimus_egg import cache, rewrites
from optimus_egg.egraph import Budget, EGraph, check_rules, rows
from optimus_egg.ir import Term, as_list
from optimus_egg.pipeline import Options, optimize_graph, capture
from tests.helpers import Fn


def test_build_keeps_every_distinct_term():
    """egglog 13.2 could merge let-bound terms that differ only in literals (see egglog.md)."""
    x = Term("Input", (0,))
    pieces = [Term("Unary", ("tanh#0", Term("Sl", (x, 1, s, 8)))) for s in range(0, 64, 8)]
    root = Term("Cat", (as_list(pieces, 1),))
    eg = EGraph(rewrites.families([]))
    eg.add(rows([root], [(x, [4, 64], "float32")]))
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
    eg.add(rows([x], facts))
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


@pytest.mark.parametrize("stage, reason", [("seed", "in the seed stage"), ("analysis", "settling the first facts")])
def test_time_budget_cuts_the_fixpoints_that_walk_lists(monkeypatch, stage, reason):
    """The seed rules build a group's stacks, and the first facts walk every list as written, a
    cell per iteration: 800 towers took 800 of each. The clock is read every ``_CHUNK``
    iterations; out of time there, the search runs no round and extracts what the e-graph holds
    (a fixpoint cut short only misses facts and equalities, so that graph is valid)."""
    import optimus_egg.egraph as engine
    from optimus_egg.bench.models import wide

    now = [0.0]
    run = EGraph._run

    def slow_run(self, *texts):
        if f"(run {stage} " in texts[-1]:
            now[0] += 1.0
        return run(self, *texts)

    monkeypatch.setattr(engine, "_CHUNK", 2)
    monkeypatch.setattr(EGraph, "_run", slow_run)
    monkeypatch.setattr(engine, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    model, (x,) = wide(8, batch=2)()  # 8 linears to stack, a cat of 8 relu'd pieces to walk
    cache.clear()  # (the other stage's search of this graph)
    gm, report = optimize_graph(capture(model, (x,)), Options(budget=Budget(max_seconds=2.5)))
    assert report.stop_reason == f"time limit (2.5 s) {reason}" and report.iterations == 0
    assert now[0] == 3.0  # cut at the first chunk that ended past the limit
    torch.testing.assert_close(gm(x), model(x))


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
    eg.add(rows([Term("Unary", ("relu#0", x))], [(x, [4, 8], "torch.float32")]))
    assert {n.children[0] for n in eg.freeze().nodes if n.op == "Unary"} == {"relu#0"}
    with pytest.raises(ValueError, match="unsupported character"):
        EGraph(rewrites.families([])).add(rows([Term("Unary", ("re\tlu", x))], []))


def test_a_rule_with_an_unknown_stage_is_refused(tmp_path):
    mod = tmp_path / "bad_stage.py"
    mod.write_text("from optimus_egg.rewrites import Rule\n"
                   "RULES = [Rule('x', '(Unary f x)', 'x', stage='later')]\n")
    with pytest.raises(ValueError, match="unknown stage 'later'"):
        rewrites.family(str(mod))


@pytest.mark.parametrize("rule", ["Rule('x', '(Unary f x)', 'x', stage='analysis')",
                                  "Derive('x', ('(= t (Unary f x))',), ('(union t x)',), stage='analysis')"])
def test_an_analysis_rule_that_makes_terms_equal_is_refused(tmp_path, rule):
    mod = tmp_path / "bad_analysis.py"
    mod.write_text(f"from optimus_egg.rewrites import Derive, Rule\nRULES = [{rule}]\n")
    with pytest.raises(ValueError, match="never makes two terms equal"):
        rewrites.family(str(mod))


@pytest.mark.parametrize("rule, why", [
    ("Rule('mine', '(Unary f (Unary g x)', '(Unary g x)')", "parse error"),
    ("Rule('mine', '(Frob f x)', 'x')", "Unbound function Frob"),
    ("Rule('mine', '(Unary f x)', 'y')", "Unbound symbol y"),
    ("Rule('mine', '(Sl x \"a\" 0 1)', 'x')", "type i64"),
    ("Rule('mine', '(Unary f x)', 'x', ('(= n (sizee x 0))',))", "Unbound function sizee"),
    ("Derive('mine', ('(= t (Sl x d s n))',), ('(union t 1)',))", "type T"),
])
def test_check_rules_names_the_rule_egglog_rejects(rule, why):
    """Such a rule failed inside every compile, each graph falling back with egglog's message
    about a line of a generated program that named no rule."""
    fam = rewrites.Family("my_rules.py", (eval(rule, vars(rewrites)),))
    with pytest.raises(ValueError, match=r"rule 'mine' of family 'my_rules.py' is not valid egglog") as err:
        check_rules([*rewrites.families(["split_cat"]), fam])
    assert why in str(err.value)


def test_check_rules_names_declarations_egglog_rejects():
    fam = rewrites.Family("my_rules.py", (), "(relation seen (T)")
    with pytest.raises(ValueError, match="DECLARATIONS of rule family 'my_rules.py'.*parse error"):
        check_rules([*rewrites.families(["split_cat"]), fam])
    redeclared = rewrites.Family("my_rules.py", (), "(sort T)")
    with pytest.raises(ValueError, match="DECLARATIONS of rule family 'my_rules.py'.*Sort T already declared"):
        check_rules([*rewrites.families([]), redeclared])
    shadowing = rewrites.Family("my_rules.py", (), "(relation a (i64))")  # the analysis rules' variable a
    with pytest.raises(ValueError, match=r"family 'analysis' is not valid egglog after the DECLARATIONS of "
                                         r"\['my_rules.py'\].*Shadowing"):
        check_rules([*rewrites.families([]), shadowing])


def test_check_rules_passes_valid_families():
    check_rules(rewrites.families(None))  # every built-in family: nothing raised


def test_an_engine_is_reused_as_it_was_after_the_program():
    """A collected EGraph's engine serves the next one with the same rules: ``(pop)`` restores it
    as it was after the declarations and rules ran, so the next graph's e-graph holds none of the
    last one's terms and is the one a fresh engine builds."""
    import optimus_egg.egraph as engine

    x = Term("Input", (0,))
    first = Term("Unary", ("relu#0", Term("Sl", (x, 1, 0, 8))))
    second = Term("Unary", ("tanh#0", Term("Sl", (x, 1, 8, 8))))
    fams = rewrites.families()
    eg = EGraph(fams)
    eg.add(rows([first], [(x, [4, 64], "float32")]))
    eg.saturate(Budget())
    used = eg._eg
    del eg
    reused = EGraph(fams)
    assert reused._eg is used
    reused.add(rows([second], [(x, [4, 64], "float32")]))
    reused.saturate(Budget())
    engine._idle().clear()  # the next EGraph gets a fresh engine
    fresh = EGraph(fams)
    assert fresh._eg is not used
    fresh.add(rows([second], [(x, [4, 64], "float32")]))
    fresh.saturate(Budget())
    a, b = reused.freeze(), fresh.freeze()
    assert {n.children[0] for n in a.nodes if n.op == "Unary"} == {"tanh#0"}
    assert (a.nodes, a.classes, a.refs) == (b.nodes, b.classes, b.refs)


def test_engines_stay_in_their_thread():
    """bindings.EGraph is unsendable: an EGraph built in another thread gets its own engine."""
    import threading

    x = Term("Input", (0,))
    fams = rewrites.families([])
    EGraph(fams)  # leaves an idle engine in this thread
    out = []

    def build():
        eg = EGraph(fams)
        eg.add(rows([Term("Unary", ("relu#0", x))], [(x, [4, 8], "float32")]))
        out.append({n.op for n in eg.freeze().nodes})

    worker = threading.Thread(target=build)
    worker.start()
    worker.join()
    assert out == [{"Input", "Unary"}]


def test_egglog_package_imports_after_the_engine():
    """The engine loads egglog's compiled bindings without the package (whose high-level API costs
    0.1-0.3 s to import); a later ``import egglog`` still works and shares the same module (under
    egglog 14 a second initialization of the extension panicked: ``SetLoggerError``)."""
    import subprocess
    import sys

    code = ("import sys, optimus_egg.egraph, optimus_egg.egglog_bindings as loader\n"
            "assert 'egglog' not in sys.modules\n"
            "import egglog, egglog.bindings\n"
            "from egglog import bindings\n"
            "assert egglog.bindings is bindings is loader.bindings\n"
            "assert str(egglog.EGraph().extract(egglog.i64(1) + 2)) == 'i64(3)'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
