"""``optimus-egg explain``: kernels, rules, e-graph figures and rewritten regions for a model."""

import io
import re
import sys
import stat
from pathlib import Path

import pytest
import torch

from optimus_egg import cli, explain, optimize
from optimus_egg.counting import eager_launches
from tests.helpers import Fn

ROOT = Path(__file__).resolve().parents[1]
TOWERS = f"{ROOT / 'examples' / 'towers.py'}:towers"
RULES = str(ROOT / "examples" / "clamp_rules.py")


def _kernels(out: str, row: str) -> tuple[float, float]:
    m = re.search(rf"^{re.escape(row)}\s+(\S+)\s+(\S+)$", out, re.M)
    assert m, out
    return float(m[1].replace(",", "")), float(m[2].replace(",", ""))


def _dot_is_well_formed(text: str) -> None:
    lines = text.strip().splitlines()
    assert lines[0].startswith("digraph ") and lines[0].endswith("{") and lines[-1] == "}"
    nodes = set()
    for line in lines[1:-1]:
        node = re.fullmatch(r'  "([^"]+)" \[label="[^"]*"(, style=filled, fillcolor="#\w+")?\];', line)
        edge = re.fullmatch(r'  "([^"]+)" -> "([^"]+)";', line)
        if node:
            nodes.add(node[1])
        elif edge:
            assert edge[1] in nodes and edge[2] in nodes, line  # inputs are declared first
        else:
            assert line in ("  rankdir=TB;", '  node [shape=box, fontname="monospace", fontsize=10];'), line


def test_explain_a_model_file(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(explain.shutil, "which", lambda name: None)  # as on a machine without Graphviz
    rc = cli.main(["explain", TOWERS, "--families", "split_cat", "pointwise", RULES, "--dot", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    model, inputs = explain.load_factory(TOWERS)
    measured = _kernels(out, "eager launches, measured")
    gm, report = optimize(model, inputs, families=["split_cat", "pointwise", RULES])
    assert measured == (eager_launches(model, *inputs), eager_launches(gm, *inputs))
    assert measured[1] < measured[0]
    assert report.costs  # every cost model: a row with its figures before and after
    for name, (before, after) in report.costs.items():
        row = f"cost model {name}" + (" (extracted by)" if name == report.cost_model else "")
        assert _kernels(out, row) == pytest.approx((before, after), abs=0.05)
    assert "outputs equal to the original on the example inputs: yes" in out
    assert f"clamp-idempotent {report.rules_fired['clamp-idempotent']}" in out
    assert f"{report.enodes} e-nodes" in out and "saturate" in out and "extract" in out
    # The split/sigmoid/cat cruft region: original split → one sigmoid of the input, then narrows.
    regions = out.split("\nregion ")[1:]
    assert len(regions) == int(re.search(r"rewritten regions: (\d+)", out)[1]) >= 2
    cruft = next(r for r in regions if "torch.functional.split" in r)
    before, after = cruft.split("  after:")
    # (in a step with gradients the input is read through one copy, a cat of two narrows, which
    # autograd may save where it saved the cat of the sigmoids: bounds.copy_saved_inputs)
    assert "torch.cat" in before and after.count("torch.cat") < before.count("torch.cat")
    # renamed (the original has a "sigmoid" too), of the input or of its copy
    assert re.search(r"sigmoid_new = torch\.sigmoid\((l_x_|cat_\d+)\)", after)
    relus = next(r for r in regions if "hardtanh(" in r.split("  after:")[0])  # nn.ReLU6 is a hardtanh
    assert relus.split("  after:")[1].count("hardtanh(") == 1  # two ReLU6s became one
    for name in ("before", "after"):
        _dot_is_well_formed((tmp_path / f"{name}.dot").read_text())
    assert "fillcolor" in (tmp_path / "before.dot").read_text()
    assert "PNGs skipped" in out and not list(tmp_path.glob("*.png"))


def test_png_when_dot_is_present(tmp_path, monkeypatch):
    """With a `dot` on PATH, each .dot file is rendered with `dot -Tpng FILE -o FILE.png`."""
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1" = -Tpng ] && [ "$3" = -o ] && grep -q digraph "$2" && echo png > "$4"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(fake.parent), prepend=":")
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    out_dir = tmp_path / "out"
    written = explain.write_dot(gm, gm, [], out_dir, io.StringIO())
    assert sorted(p.name for p in written) == ["after.dot", "after.png", "before.dot", "before.png"]
    assert (out_dir / "before.png").read_text() == "png\n"


def test_regions_of_a_pure_deletion():
    """cat(split(x)) + relu(y): the split/cat round trip is one region that becomes nothing; the
    add and the relu are unchanged."""
    model = Fn(lambda x, y: torch.cat(torch.split(x, 2, 1), 1) + torch.relu(y))
    inputs = (torch.randn(3, 6), torch.randn(3, 6))
    from optimus_egg.pipeline import capture

    gm = capture(model, inputs)
    new_gm, _ = optimize(gm, inputs)
    diff = explain.diff_regions(gm, new_gm)
    assert len(diff.regions) == 1 and diff.regions[0].after == []
    assert {n.op for n in diff.regions[0].before} == {"call_function"}
    targets = {explain.fx_line(n).split(" = ")[1].split("(")[0] for n in diff.regions[0].before}
    assert targets >= {"torch.functional.split", "torch.cat"}
    assert diff.unchanged == 2  # add, relu: shown under their original names
    add, relu = sorted((n for n in new_gm.graph.nodes if n.op == "call_function"), key=lambda n: n.name)
    originals = {n.name: n for n in gm.graph.nodes}
    assert originals[diff.name(relu)].target is torch.relu and originals[diff.name(add)].target is add.target


def test_nothing_to_do_has_no_regions(capsys):
    model = Fn(lambda x: torch.relu(x) + 1)
    explain.explain(model, (torch.randn(3),), {}, sys.stdout)
    out = capsys.readouterr().out
    assert "rewritten regions: 0" in out and _kernels(out, "eager launches, measured") == (2, 2)


def test_factory_from_a_module_returning_a_factory():
    model, inputs = explain.load_factory("optimus_egg.bench.models:rec_demo")
    assert isinstance(model, torch.nn.Module) and len(inputs) == 2


@pytest.mark.parametrize("target, message", [
    ("examples/towers.py", "PATH_OR_MODULE:FACTORY"),
    ("no/such/file.py:f", "no such file"),
    (f"{ROOT / 'examples' / 'towers.py'}:nope", "no function 'nope'"),
])
def test_bad_targets_are_clear_errors(capsys, target, message):
    assert cli.main(["explain", target]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("source, target, message", [
    ("def make(:\n", "{file}:make", "model_file.py failed to load: SyntaxError"),
    ("def make():\n    raise RuntimeError('boom')\n", "{file}:make", "model_file.py:2): RuntimeError: boom"),
    ("import torch\ndef make():\n    return torch.nn.Linear(4, 2), (torch.randn(3, 5),)\n", "{file}:make",
     "fails on its example inputs"),
    ("", "no_such_pkg.models:make", "no module named 'no_such_pkg.models'"),
])
def test_errors_in_the_users_code_are_one_clear_line(capsys, tmp_path, source, target, message):
    """Each was a traceback (a model that fails on its inputs: pages of Dynamo's internals)."""
    path = tmp_path / "model_file.py"
    path.write_text(source)
    assert cli.main(["explain", target.format(file=path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_module_in_the_working_directory_is_found(capsys, tmp_path, monkeypatch):
    """As ``python -m`` finds it; the console script's sys.path did not have it."""
    (tmp_path / "my_models.py").write_text("import torch\ndef make():\n"
                                           "    return torch.nn.Linear(4, 2), (torch.randn(3, 4),)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert cli.main(["explain", "my_models:make"]) == 0
    assert "outputs equal to the original on the example inputs: yes" in capsys.readouterr().out


def test_bad_option_is_a_clear_error(capsys):
    assert cli.main(["explain", TOWERS, "--option", "nope=1"]) == 2
    assert "valid" in capsys.readouterr().err


def test_a_fallback_is_shown_with_its_cause(lenient, monkeypatch, capsys):
    import warnings

    import optimus_egg.pipeline as pipeline

    monkeypatch.setattr(pipeline, "translate", lambda gm: (_ for _ in ()).throw(ValueError("injected")))
    model = Fn(lambda x: torch.cat(torch.split(x, 2, 1), 1) + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = explain.explain(model, (torch.randn(3, 4),), {}, sys.stdout)
    out = capsys.readouterr().out
    assert report.fallback and "FELL BACK" in out and "ValueError: injected" in out
    assert "cost model" not in out and "rewritten regions: 0" in out
    assert "outputs equal to the original on the example inputs: yes" in out


def test_each_extractor_run_is_shown_when_the_ilp_ran(capsys):
    """``--option extractor=ilp`` printed "extractor: greedy-dag" alone where greedy's graph was
    kept on a tie, as if the ILP had not run."""
    model = Fn(lambda x: torch.cat([p.relu() for p in torch.split(x, 2, 1)], 1))
    report = explain.explain(model, (torch.randn(3, 4),), {"extractor": "ilp"}, sys.stdout)
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("extractions: "))
    assert "greedy cost" in line and "ilp cost" in line and report.extraction["ilp"]["status"] in line
    assert ("its graph used" in line) == report.extraction["ilp"]["used"]
    explain.explain(model, (torch.randn(3, 4),), {}, sys.stdout)
    assert "extractions: " not in capsys.readouterr().out
