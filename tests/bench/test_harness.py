"""The harness: argument parsing, progress, one tiny end-to-end run that writes JSON, Markdown
and PNG plots, and ``--out`` without matplotlib."""

import argparse
import io
import json
import sys

import pytest
import torch
from optimus_egg.bench import harness, optimus_cases
from optimus_egg.bench.backends import backends
from optimus_egg.bench.device import Device
from optimus_egg.bench.harness import Progress
from optimus_egg.bench.steps import MODES, Settings
from optimus_egg.bench.zoo import zoo

from optimus_egg import cli
from tests.helpers import Fn


def parse(*argv):
    parser = argparse.ArgumentParser()
    harness.add_arguments(parser)
    return parser.parse_args(argv)


def test_arguments_repeat_and_split_on_commas():
    args = parse("--quick", "--models", "dlrm,mmoe", "--models", "ple", "--rules", "split_cat",
                 "--rules", "split_cat,pointwise", "--backends", "inductor,optimus_egg", "--modes", "training")
    assert list(harness.select_models(args.models, args.quick)) == ["dlrm", "mmoe", "ple"]
    assert args.rules == ["split_cat", "split_cat,pointwise"]
    assert harness.select_modes(args.modes) == ("training",)
    assert harness.command_line(args) == ("optimus-egg bench --quick --models dlrm,mmoe,ple "
                                          "--backends inductor,optimus_egg --rules split_cat "
                                          "--rules split_cat,pointwise --modes training")
    defaults = parse()
    assert list(harness.select_models(defaults.models, False)) == list(zoo())
    assert harness.select_modes(defaults.modes) == MODES
    assert harness.command_line(defaults) == "optimus-egg bench"
    realistic = parse("--size", "realistic", "--models", "dlrm")
    assert harness.command_line(realistic) == "optimus-egg bench --size realistic --models dlrm"
    _, inputs = harness.select_models(realistic.models, False, size=realistic.size)["dlrm"]()
    assert inputs[0].shape[0] > harness.select_models(defaults.models, False)["dlrm"]()[1][0].shape[0]


@pytest.mark.parametrize("argv, message", [
    (["--models", "dlrm,resnet"], "resnet"),
    (["--rules", "no_such_family"], "no_such_family"),
    (["--backends", "tvm"], "tvm"),
    (["--modes", "serving"], "serving"),
])
def test_bad_values_exit_2_before_compiling_anything(argv, message, capsys):
    assert cli.main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_progress_counts_steps_in_plain_lines():
    stream = io.StringIO()
    progress = Progress(4, stream)
    progress.advance("one")
    progress.advance("two")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "1/4" in lines[0] and lines[1].endswith("two") and "2/4" in lines[1]


def cruft(x):
    x = torch.cat([torch.relu(p) for p in torch.split(x, 4, dim=1)], dim=1)
    return torch.cat(torch.chunk(x, 2, dim=1), dim=1)


def tiny():
    torch.manual_seed(0)
    return Fn(cruft), (torch.randn(8, 16, requires_grad=False),)


def test_end_to_end_writes_json_markdown_and_plots(tmp_path):
    from optimus_egg.bench.report import write

    columns = backends(["eager", "inductor", "optimus_egg"])
    settings = Settings(reps=2, modes=("inference",), cold_compiles=False)
    results = harness.run({"tiny": tiny}, columns, Device("cpu"), settings, command="test",
                          stream=io.StringIO())
    rows = {r["backend"]: r for r in results["rows"]}
    assert set(rows) == {"eager", "inductor", "optimus_egg"}
    assert all(r["equal"] and r["error"] is None and r["step_s"] > 0 for r in rows.values())
    assert rows["optimus_egg"]["eager_launches"] < rows["inductor"]["eager_launches"]
    assert rows["inductor"]["kernels"] >= 1 and rows["inductor"]["compile_s"] > 0
    assert rows["optimus_egg"]["optimize_s"] > 0 and rows["inductor"]["optimize_s"] is None
    assert rows["inductor"]["step_ratio"] == 1.0

    paths = write(results, tmp_path)
    assert {p.name for p in paths} == {"results.json", "results.md", "kernels.png", "step_time.png"}
    assert json.loads((tmp_path / "results.json").read_text())["rows"] == results["rows"]
    md = (tmp_path / "results.md").read_text()
    assert "| tiny | optimus_egg |" in md and "Command: `test`" in md
    import matplotlib.image

    for name in ("kernels.png", "step_time.png"):
        assert matplotlib.image.imread(tmp_path / name).shape[2] in (3, 4)


def test_revision_comes_from_the_environment_where_there_is_no_git(monkeypatch):
    monkeypatch.setenv("OPTIMUS_EGG_REVISION", "abc1234")
    assert harness.revision() == "abc1234"
    monkeypatch.delenv("OPTIMUS_EGG_REVISION")
    assert harness.revision() != "abc1234"


def test_a_model_that_draws_is_measured_but_not_compared():
    """No column equals eager on a model with dropouts (Inductor's generator is its own): its
    rows say so instead of failing the run."""
    from optimus_egg.bench.families import families

    settings = Settings(reps=1, modes=("inference",), cold_compiles=False)
    results = harness.run({"d": families()["family_batch_dropout"]}, backends(["eager"]), Device("cpu"), settings,
                          command="test", stream=io.StringIO())
    (row,) = results["rows"]
    assert row["equal"] is None and row["error"] is None and row["details"]["not compared"]


def test_out_without_matplotlib_says_so_before_the_run_and_writes_the_tables(tmp_path, monkeypatch, capsys):
    """The plots were drawn after the whole suite: without matplotlib the run died there, lost."""
    from tests.bench.test_report import _results, _row

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails, as uninstalled
    said_before_the_run = []

    def run(*args, **kwargs):  # the suite, not run: its results, as measured
        said_before_the_run.append(capsys.readouterr().err)
        return _results(_row("inductor", 6, 3, 10), _row("optimus_egg", 5, 3, 9))

    monkeypatch.setattr(harness, "run", run)
    assert harness.main(parse("--models", "dlrm", "--backends", "inductor,optimus_egg", "--out", str(tmp_path))) == 0
    (said,) = said_before_the_run
    assert "matplotlib is not installed" in said and "pip install 'optimus_egg[bench]'" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "results.md"]


def test_the_optimus_suite_is_pytorchs_test_patterns_without_the_ones_that_write_their_inputs():
    models = harness.select_models(None, quick=True, suite_name="optimus")
    assert list(models) == [n for n in optimus_cases.cases() if n not in optimus_cases.MUTATES_INPUTS]
    assert optimus_cases.MUTATES_INPUTS and not optimus_cases.MUTATES_INPUTS & set(models)
    every = harness.select_models(None, quick=True, suite_name="all")
    assert set(models) | set(zoo(True)) <= set(every)
    assert harness.select_models(["split_cat_identity"], quick=True)  # any suite's model by name


def test_a_model_eager_cannot_run_is_a_row_with_its_error_and_the_suite_goes_on():
    def broken(x):
        raise ValueError("no such feature")

    columns = backends(["inductor"])
    settings = Settings.make(quick=True, device=Device("cpu"), modes=MODES)
    progress = Progress(2 * (3 + len(columns)), io.StringIO())
    rows = harness.measure("broken", lambda: (Fn(broken), (torch.randn(2),)), columns, Device("cpu"), settings,
                           progress)
    assert [r.mode for r in rows] == list(MODES)
    assert all(r.error == "eager: ValueError: no such feature" for r in rows)
    assert progress.done == progress.total
