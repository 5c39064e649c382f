"""A rule module of the user's own, passed by file or import path, loads like a built-in family."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from optimus_egg import optimize, rewrites
from tests.helpers import EAGER, check, launches

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RULES_FILE = str(EXAMPLES / "clamp_rules.py")
WITH_MINE = ["split_cat", "pointwise", RULES_FILE]


def _towers():
    import importlib.util

    spec = importlib.util.spec_from_file_location("towers_example", EXAMPLES / "towers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.towers()


def test_rule_file_loads_like_a_family():
    fam = rewrites.family(RULES_FILE)
    assert fam.name == RULES_FILE and [r.name for r in fam.rules] == ["clamp-idempotent"]
    assert rewrites.family(RULES_FILE) is not None  # loaded once, reused


def test_worked_example_fires_and_keeps_values():
    model, inputs = _towers()
    # (eager launches: Inductor fuses relu6(relu6(x)) into one loop anyway, so under the default
    # model the rule only breaks a tie)
    report, gm = check(model, *inputs, families=WITH_MINE, **EAGER)
    assert report.rules_fired.get("clamp-idempotent", 0) > 0
    builtin_gm, builtin_only = optimize(model, inputs, families=WITH_MINE[:-1], **EAGER)  # less the user's
    assert launches(gm, *inputs) < launches(builtin_gm, *inputs)
    assert report.kernels_after < builtin_only.kernels_after


@pytest.mark.parametrize("op", [F.relu6, torch.nn.ReLU6(), lambda x: x.clamp(-1, 2), lambda x: torch.clip(x, max=0.5),
                                lambda x: F.hardtanh(x, -2, 3)])
def test_a_clamp_twice_is_the_clamp_once(op):
    x = 4 * torch.randn(4, 6)
    report, gm = check(lambda x: op(op(x)), x, families=[RULES_FILE])
    assert report.rules_fired["clamp-idempotent"] > 0 and launches(gm, x) == 1


@pytest.mark.parametrize("fn", [lambda x: torch.tanh(torch.tanh(x)), lambda x: torch.relu(torch.relu(x)),
                                lambda x: x.clamp(-1, 1).clamp(0, 2), lambda x: x.clamp(max=1).clamp(min=0)])
def test_other_ops_or_other_bounds_twice_do_not_fire(fn):
    """relu twice is a built-in rule's (pointwise's ``relu-of-nonneg``), not this file's."""
    x = 4 * torch.randn(4, 6)
    report, gm = check(fn, x, families=[RULES_FILE])
    assert "clamp-idempotent" not in report.rules_fired and launches(gm, x) == 2


def test_module_import_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    x = torch.randn(4, 6)
    report, _ = check(lambda x: F.relu6(F.relu6(x)), x, families=["clamp_rules"])
    assert report.rules_fired["clamp-idempotent"] > 0
    assert rewrites.family("clamp_rules").rules == rewrites.family(RULES_FILE).rules


def test_through_torch_compile():
    torch._dynamo.reset()
    x = torch.randn(4, 6)
    fn = torch.compile(lambda x: F.relu6(F.relu6(x)) * 2, backend="optimus_egg", options={"families": [RULES_FILE]})
    from optimus_egg.backend import REPORTS

    REPORTS.clear()
    torch.testing.assert_close(fn(x), F.relu6(x) * 2)
    assert REPORTS[-1].rules_fired.get("clamp-idempotent", 0) > 0


@pytest.mark.parametrize("name", ["pointwsie", "no_such_pkg.rules", "missing/rules.py"])
def test_unknown_family_says_how_to_pass_a_module(name):
    with pytest.raises(ValueError) as err:
        optimize(lambda x: x + 1, (torch.randn(2),), families=[name])
    msg = str(err.value)
    assert name in msg and "split_cat" in msg and "pointwise" in msg and "import path" in msg


def test_module_without_rules_is_an_error(tmp_path):
    path = tmp_path / "empty_rules.py"
    path.write_text("X = 1\n")
    with pytest.raises(ValueError, match="must define RULES"):
        rewrites.family(str(path))


def test_rule_name_clash_is_an_error(tmp_path):
    path = tmp_path / "clash.py"
    path.write_text("from optimus_egg.rewrites import Rule\n"
                    "RULES = [Rule('slice-full', '(Squeeze (Unsqueeze x 0) 0)', 'x')]\n")
    with pytest.raises(ValueError, match="slice-full"):
        rewrites.families(["split_cat", str(path)])


@pytest.mark.parametrize("source, why", [
    ("import no_such_pkg_xyz\nRULES = []\n", "ModuleNotFoundError: No module named 'no_such_pkg_xyz'"),
    ("from optimus_egg.rewrites import Rule\nRULES = [Rule('x', '(Unary f x)', 'x', foo=1)]\n",
     "TypeError: "),
    # a misspelt op matched nothing, and the rule never fired without a word
    ("from optimus_egg.rewrites import Rule, op_named\nRULES = [Rule('x', '(Unary f x)', 'x', (op_named('f', 'relux'),))]\n",
     "ValueError: op_named: no op 'relux' in the op table (optimus_egg.optable.OPS); did you mean relu"),
])
def test_a_module_that_fails_to_load_is_named_with_its_line(tmp_path, monkeypatch, source, why):
    """Its error was raised bare, as if it were the optimizer's, naming no rule module."""
    (tmp_path / "broken_rules.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (str(tmp_path / "broken_rules.py"), "broken_rules"):
        with pytest.raises(ValueError, match=f"rule module '{name}' failed to load") as err:
            rewrites.family(name)
        assert why in str(err.value) and "broken_rules.py:" in str(err.value)


def test_a_python_syntax_error_is_named(tmp_path):
    path = tmp_path / "syntax_rules.py"
    path.write_text("RULES = [\n")
    with pytest.raises(ValueError, match=r"rule module '.*syntax_rules.py' failed to load: SyntaxError"):
        rewrites.family(str(path))


WRITTEN_RULES = '''
from optimus_egg.rewrites import Derive, Written

def twice(terms, shapes):
    return {"relu-of-relu": [(t, t.args[1]) for t in terms if t.op == "Unary" and t.args[0].startswith("relu#")
                             and t.args[1].op == "Unary" and t.args[1].args[0].startswith("relu#")]}

WRITTEN = Written({"relu-of-relu": ("T", "T")}, twice)
RULES = [Derive("relu-of-relu-is-relu", ("(relu-of-relu t i)",), ("(union t i)",))]
'''


def test_a_rule_file_reads_relations_off_the_graph_as_written(tmp_path):
    rules = tmp_path / "written_rules.py"
    rules.write_text(WRITTEN_RULES)
    x = torch.randn(4, 6)
    report, gm = check(lambda x: torch.relu(torch.relu(x)) + torch.tanh(torch.tanh(x)), x, families=[str(rules)])
    assert report.rules_fired["relu-of-relu-is-relu"] > 0 and launches(gm, x) == 4  # relu, tanh, tanh, add


def test_a_written_relation_egglog_rejects_is_named(tmp_path):
    from optimus_egg.egraph import check_rules

    rules = tmp_path / "bad_written.py"
    rules.write_text(WRITTEN_RULES.replace('("T", "T")', '("T", "Tensor")'))
    with pytest.raises(ValueError, match="WRITTEN of rule family .*bad_written.py"):
        check_rules(rewrites.families([str(rules)]))
    rules = tmp_path / "not_written.py"
    rules.write_text("RULES = []\nWRITTEN = {'relu-of-relu': ('T', 'T')}\n")
    with pytest.raises(ValueError, match="WRITTEN must be an optimus_egg.rewrites.Written"):
        rewrites.family(str(rules))
