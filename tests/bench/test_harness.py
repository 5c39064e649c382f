"""The harness: argument parsing, comparison, timing rounds, progress, and one tiny end-to-end
run that writes JSON, Markdown and PNG plots."""

import argparse
import io
import json

import pytest
import torch
from optimus_egg.bench import harness
from optimus_egg.bench.backends import backends
from optimus_egg.bench.device import Device
from optimus_egg.bench.harness import (
    Progress,
    Result,
    Settings,
    compare,
    interleaved_times,
)
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
    assert harness.select_modes(defaults.modes) == harness.MODES
    assert harness.command_line(defaults) == "optimus-egg bench"


@pytest.mark.parametrize("argv, message", [
    (["--models", "dlrm,resnet"], "resnet"),
    (["--rules", "no_such_family"], "no_such_family"),
    (["--backends", "tvm"], "tvm"),
    (["--modes", "serving"], "serving"),
])
def test_bad_values_exit_2_before_compiling_anything(argv, message, capsys):
    assert cli.main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_compare_checks_values_shapes_and_missing_grads():
    a = Result([torch.ones(3)], [torch.zeros(2), None])
    assert compare(a, a, 1e-4, 1e-5) == (True, 0.0)
    off = Result([torch.ones(3) + 1e-3], [torch.zeros(2), None])
    ok, err = compare(off, a, 1e-4, 1e-5)
    assert not ok and err == pytest.approx(1e-3, rel=1e-3)
    assert compare(Result([torch.ones(4)], a.grads), a, 1e-4, 1e-5) == (False, None)
    assert not compare(Result(a.outputs, [torch.zeros(2), torch.zeros(1)]), a, 1e-4, 1e-5)[0]


def test_interleaved_rounds_rotate_and_take_medians():
    order = []
    steps = {k: (lambda k=k: order.append(k)) for k in "abc"}
    settings = Settings(reps=3, warmup=0, target_sample_s=0.0)
    times = interleaved_times(steps, Device("cpu"), settings)
    assert set(times) == set("abc") and all(t >= 0 for t in times.values())
    timed = order[3:]  # after one calibration call each
    assert timed == list("abc" "bca" "cab")


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
