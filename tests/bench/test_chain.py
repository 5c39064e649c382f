"""The chain benchmark: compile phases add up, the optimizer's share is its own, and the command
prints the breakdown. Backends here are Dynamo's ``eager``/``aot_eager`` (no Inductor compile);
speed itself is measured by running the benchmark, not here."""

import pytest
import torch
from optimus_egg.bench import chain as bench
from optimus_egg.bench.models import chain


@pytest.mark.parametrize("train", [False, True])
def test_timed_compile_splits_the_whole_span(train):
    model, inputs = chain(2)()
    times, step, out, _ = bench.timed_compile(model, inputs, "aot_eager", train)
    assert times.capture > 0 and times.inductor > 0 and times.optimize == 0
    assert times.capture + times.inductor <= times.total
    assert times.first_run == pytest.approx(times.total - times.capture - times.inductor)
    torch.testing.assert_close(out, model(*inputs))
    step()  # the compiled step runs again


def test_the_collectors_seconds_are_counted():
    import gc

    def collecting(gm, example_inputs):  # a backend that runs a full collection
        gc.collect()
        return gm.forward

    model, inputs = chain(2)()
    times, *_ = bench.timed_compile(model, inputs, collecting, False)
    assert 0 < times.collector <= times.total


def test_median_is_per_phase():
    a, b, c = (bench.CompileTimes(x, 0, 2 * x, 0, 3 * x, x) for x in (1.0, 5.0, 2.0))
    assert bench.CompileTimes.median([a, b, c]) == c


def test_command_prints_launches_compile_phases_and_step_time(capsys, monkeypatch):
    backends, options = iter(["eager", "aot_eager"]), {}
    real = bench.Column

    def column(label, model, backend, given=None):  # keep Inductor out of the suite: cheap Dynamo backends
        options[label] = given
        return real(label, model, next(backends) if label != "cruft inductor" else "eager")

    monkeypatch.setattr(bench, "Column", column)
    monkeypatch.setattr(bench, "warm_up", lambda device: None)
    bench.main(["3", "--reps", "1", "--step-reps", "2", "--modes", "inference", "--option", "rewrite_backward=False"])
    assert options == {"twin inductor": None, "cruft optimus_egg": {"rewrite_backward": False}}
    out = capsys.readouterr().out
    # 3 blocks of 8 pointwise ops, 2 cats and a Linear; the twin: one op and a Linear per block
    assert f"eager launches {3 * (8 + 2 + 1)} → {3 * 2} (twin {3 * 2})" in out
    assert "median of 1 (" in out and "Dynamo's capture" in out and "× it" in out
    assert "capture  optimize  inductor" in out and "× twin" in out
    assert "cruft optimus_egg" in out and "equal to eager" in out and "DIFFERS" not in out
    assert "in CPU seconds: capture alone" in out and "with a free rewrite" in out
    assert "after Dynamo's capture (the backend's share" in out
    assert "step time, median of 2 interleaved rounds" in out


def test_timed_optimize_reports_the_median_of_searches(monkeypatch):
    model, inputs = chain(3)()
    gm = bench.capture(model, inputs)
    real, reports = bench.optimize_graph, []

    def recorded(*args, **kwargs):
        new_gm, report = real(*args, **kwargs)
        reports.append(report)
        return new_gm, report

    monkeypatch.setattr(bench, "optimize_graph", recorded)
    new_gm, report, totals = bench.timed_optimize(gm, 3)
    assert [r.cache_hit for r in reports] == [False] * 3  # each run searched: the cache was cleared
    assert totals == sorted(r.total_seconds for r in reports)
    assert report.total_seconds == totals[1] and report in reports
    assert new_gm is not gm and report.kernels_after < report.kernels_before
