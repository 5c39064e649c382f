"""Measure the cruft chain against its clean twin: ``python -m optimus_egg.bench.chain 100``.

Prints eager launches before/after ``optimize`` (and the twin's floor) and the optimizer's
phases (the median of ``--reps`` searches), and how long Dynamo took to capture the model. A
shared machine's speed drifts, so a time in seconds needs a yardstick from the same run: the capture is
Python work on the same model that every backend waits for. Then, in inference and one training
step (forward, ``sum`` of the output, backward), ``inductor`` on the twin against
``optimus_egg`` on the cruft chain (``--cruft-inductor`` adds ``inductor`` on the cruft chain,
whose compiles are slow):

- compile time, split into Dynamo's capture of the model (tracing and guards: not the
  optimizer's, but the user waits for it), ``optimus_egg``'s rewrite, Inductor (AOTAutograd,
  lowering, C++ codegen; in training with the backward Inductor compiles lazily at the first
  backward), and the rest of the first step (running it). Phases come from Dynamo's own timers
  (``torch._dynamo.utils.compilation_time_metrics``) and the backend's reports. Every compile is
  real (FX-graph and AOTAutograd caches off, the optimizer's cache cleared); C++ kernels are
  built once in a warm-up round and reused from Inductor's on-disk cache by both columns
  (``--cold``: a fresh cache per compile, so each pays its C++ builds). Median of ``--reps``
  rounds, each compiling every column once in a rotating order; also the seconds after the
  capture (the backend's share: Dynamo traces the model as written whatever the backend), the
  CPU seconds (this process and its compile workers), which machine load disturbs less than
  wall time, and the seconds Python's cyclic collector ran (inside the phases above). Each
  compile starts from a collected heap: a full collection walks every object the process holds
  once enough new ones outlive younger collections, and without it a column paid for the
  objects the column before it left;
- step time: the median of interleaved repetitions (:func:`optimus_egg.bench.steps.interleaved_times`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from optimus_egg import cache
from optimus_egg.backend import REPORTS
from optimus_egg.bench.device import Device
from optimus_egg.bench.steps import (
    Settings,
    compare,
    cpu_seconds,
    interleaved_times,
    make_step,
    measured_compile,
    snapshot,
    warm_up,
)
from optimus_egg.bench.models import chain
from optimus_egg.cli_options import add_option_args, options_from_args, positive_int
from optimus_egg.counting import eager_launches
from optimus_egg.pipeline import Options, Report, capture, optimize_graph

CPU = Device("cpu")


@dataclass(frozen=True)
class CompileTimes:
    """Seconds from ``torch.compile`` to the end of the first step, by who spent them."""

    capture: float  # Dynamo: tracing the model, building guards
    optimize: float  # optimus_egg's rewrite of Dynamo's graph (0 for plain Inductor)
    inductor: float  # AOTAutograd + Inductor, forward and (training) the lazy backward compile
    first_run: float  # the rest: running the first step
    total: float
    cpu: float  # CPU seconds of this process and its compile workers over the same span
    collector: float = 0.0  # seconds in Python's cyclic garbage collector, within the phases above

    @classmethod
    def median(cls, samples: Sequence[CompileTimes]) -> CompileTimes:
        return cls(**{f.name: statistics.median(getattr(s, f.name) for s in samples) for f in fields(cls)})


@dataclass(frozen=True)
class Column:
    label: str
    model: torch.nn.Module
    backend: str
    options: dict[str, Any] | None = None  # the backend's (``torch.compile(options=...)``)


def timed_compile(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], backend: str, train: bool,
                  cold: bool = False, options: dict[str, Any] | None = None
                  ) -> tuple[CompileTimes, Callable[[], Any], Any, int]:
    """Compile ``model`` with ``backend`` and run its first step (``steps.make_step``).

    Returns the phases, the step, what the first step returned and Inductor's kernel objects.
    """
    from torch._dynamo.utils import compilation_time_metrics as timers
    from torch._inductor import metrics

    torch._dynamo.reset()
    cache.clear()
    REPORTS.clear()
    timers.clear()
    model.zero_grad(set_to_none=True)
    gc.collect()
    with measured_compile(cold), _collector_seconds() as collector:
        cpu, start = cpu_seconds(), time.perf_counter()
        step = make_step(torch.compile(model, backend=backend, fullgraph=True, options=options), model, inputs,
                         train)
        out = step()
        total, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        kernels = metrics.generated_kernel_count

    def spent(name: str) -> float:
        return sum(timers.get(name, ()))

    dynamo, backend_call = spent("_compile.compile_inner"), spent("OutputGraph.call_user_compiler")
    optimize = sum(r.total_seconds for r in REPORTS)
    inductor = backend_call - optimize + spent("backward._backward_impl")
    capture_s = dynamo - backend_call
    times = CompileTimes(capture_s, optimize, inductor, total - capture_s - optimize - inductor, total, cpu,
                         sum(collector))
    return times, step, out, kernels


@contextlib.contextmanager
def _collector_seconds() -> Iterator[list[float]]:
    """The wall seconds of each run of Python's cyclic garbage collector while inside."""
    runs: list[float] = []
    began = [0.0]

    def timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            runs.append(time.perf_counter() - began[0])

    gc.callbacks.append(timer)
    try:
        yield runs
    finally:
        gc.callbacks.remove(timer)


def capture_cpu(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], train: bool) -> float:
    """CPU seconds of Dynamo's capture alone (a backend that runs the captured graph as it is):
    the part of every backend's compile no graph rewrite can shorten. CPU time, because on a
    loaded machine wall time of the same capture varied 2× between runs."""
    torch._dynamo.reset()
    gc.collect()
    start = time.process_time()
    with torch.set_grad_enabled(train):
        torch.compile(model, backend=lambda gm, example_inputs: gm.forward, fullgraph=True)(*inputs)
    return time.process_time() - start


def compile_table(columns: Sequence[Column], inputs: tuple[torch.Tensor, ...], train: bool, reps: int,
                  cold: bool) -> tuple[dict[str, CompileTimes], dict[str, Callable[[], Any]], dict[str, str],
                                       dict[str, float], dict[str, float]]:
    """Median compile phases per column over ``reps`` rounds (after one warm-up round that
    builds every column's C++ kernels, unless ``cold``), the last round's steps (the bench's
    warm-up recompiles those Dynamo has dropped since), per column its kernel objects and
    whether its first step matched eager, the median CPU seconds of its capture alone, and the
    median seconds after the capture (each round's total less its capture)."""
    refs = {c.label: snapshot(make_step(c.model, c.model, inputs, train)(), c.model, train) for c in columns}
    samples: dict[str, list[CompileTimes]] = {c.label: [] for c in columns}
    captures: dict[str, list[float]] = {c.label: [] for c in columns}
    steps: dict[str, Callable[[], Any]] = {}
    notes: dict[str, str] = {}
    for r in range(reps + (0 if cold else 1)):
        for c in columns[r % len(columns):] + columns[:r % len(columns)]:
            times, steps[c.label], out, kernels = timed_compile(c.model, inputs, c.backend, train, cold, c.options)
            ok, _ = compare(snapshot(out, c.model, train), refs[c.label], rtol=1e-4, atol=1e-5)
            notes[c.label] = f"{kernels} kernel objects, {'equal to' if ok else 'DIFFERS from'} eager"
            if cold or r > 0:
                samples[c.label].append(times)
                captures[c.label].append(capture_cpu(c.model, inputs, train))
    return ({k: CompileTimes.median(v) for k, v in samples.items()}, steps, notes,
            {k: statistics.median(v) for k, v in captures.items()},
            {k: statistics.median(t.total - t.capture for t in v) for k, v in samples.items()})


def print_mode(n: int, columns: Sequence[Column], inputs: tuple[torch.Tensor, ...], train: bool, reps: int,
               step_reps: int, cold: bool) -> None:
    mode = "training" if train else "inference"
    times, steps, notes, captures, after_capture = compile_table(columns, inputs, train, reps, cold)
    cache_note = "fresh Inductor cache per compile" if cold else "C++ kernels cached by a warm-up round"
    print(f"N={n} {mode}: compile + first step, median of {reps} rounds ({cache_note}; FX-graph and "
          f"AOTAutograd caches off; {torch.get_num_threads()} threads), seconds")
    print(f"  {'column':24} {'capture':>8} {'optimize':>9} {'inductor':>9} {'1st run':>8} {'total':>7} "
          f"{'× twin':>7} {'cpu s':>6} {'gc s':>5}")
    base = times[columns[0].label]
    for c in columns:
        t = times[c.label]
        print(f"  {c.label:24} {t.capture:8.2f} {t.optimize:9.2f} {t.inductor:9.2f} {t.first_run:8.2f} "
              f"{t.total:7.2f} {t.total / base.total:7.2f} {t.cpu:6.2f} {t.collector:5.2f}   {notes[c.label]}")
    twin, cruft = (columns[0].label, times[columns[0].label]), (columns[1].label, times[columns[1].label])
    floor = cruft[1].capture + twin[1].inductor + twin[1].first_run
    print(f"  {cruft[0]} if the rewrite took no time and Inductor as long as on the twin: {floor:.2f}s = "
          f"{floor / twin[1].total:.2f}× twin (Dynamo's capture of the cruft chain alone: "
          f"{cruft[1].capture / twin[1].total:.2f}× the twin's whole compile)")
    print(f"  after Dynamo's capture (the backend's share: rewrite, Inductor, first run): {after_capture[cruft[0]]:.2f}s "
          f"= {after_capture[cruft[0]] / after_capture[twin[0]]:.2f}× the twin's {after_capture[twin[0]]:.2f}s")
    cpu_floor = captures[cruft[0]] - captures[twin[0]] + twin[1].cpu
    print(f"  in CPU seconds: capture alone {captures[cruft[0]]:.2f} ({cruft[0]}) vs {captures[twin[0]]:.2f} "
          f"({twin[0]}); with a free rewrite {cpu_floor:.2f} = {cpu_floor / twin[1].cpu:.2f}× the twin's "
          f"{twin[1].cpu:.2f}")
    step_s = interleaved_times(steps, CPU, Settings(reps=step_reps))
    base_s = step_s[columns[0].label]
    print(f"  step time, median of {step_reps} interleaved rounds: " + ", ".join(
        f"{label} {s * 1e3:.3f} ms ({s / base_s:.2f}× twin)" for label, s in step_s.items()))
    for c in columns:
        c.model.zero_grad(set_to_none=True)
    torch._dynamo.reset()


#: What a benchmark searches with: a failure raises, it is not timed as a fallback.
STRICT = Options(strict=True)


def timed_optimize(gm: torch.fx.GraphModule, reps: int, options: Options = STRICT
                   ) -> tuple[torch.fx.GraphModule, Report, list[float]]:
    """``optimize_graph`` on ``gm`` ``reps`` times, each a search (the cache cleared) from a
    collected heap: the median run's graph and report, and every run's seconds (one run is not
    a figure on a shared machine: see the module's docstring)."""
    runs = []
    for _ in range(max(reps, 1)):
        cache.clear()
        gc.collect()
        runs.append(optimize_graph(gm, options))
    runs.sort(key=lambda run: run[1].total_seconds)
    new_gm, report = runs[len(runs) // 2]
    return new_gm, report, [r.total_seconds for _, r in runs]


def searched(n: int, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], reps: int, floor: str = "",
             options: Options = STRICT) -> str:
    """Capture an ``n``-block ``model`` as Dynamo does and :func:`timed_optimize` it: one line on
    the searches, with the capture's seconds as the yardstick (``floor``: what to compare with)."""
    with torch.no_grad():  # (eager launches are an inference figure: nothing saved for a backward)
        began = time.perf_counter()
        captured = capture(model, inputs)
        capture_s = time.perf_counter() - began
        gm, report, totals = timed_optimize(captured, reps, options)
    phases = ", ".join(f"{k} {v:.2f}s" for k, v in report.seconds.items())
    return (f"N={n}: eager launches {eager_launches(model, *inputs)} → {eager_launches(gm, *inputs)}{floor}; "
            f"{report.enodes} e-nodes, {report.iterations} "
            f"iterations ({report.stop_reason}); optimize {report.total_seconds:.2f}s, median of {len(totals)} "
            f"({min(totals):.2f}–{max(totals):.2f}s; the median run: {phases}); Dynamo's capture "
            f"{capture_s:.2f}s, the optimizer {report.total_seconds / capture_s:.2f}× it")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("blocks", type=positive_int, nargs="+")
    parser.add_argument("--no-compile", action="store_true", help="only time optimize()")
    parser.add_argument("--reps", type=positive_int, default=3, help="optimize runs and compile rounds (median)")
    parser.add_argument("--step-reps", type=positive_int, default=30, help="interleaved step-timing rounds (median)")
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--cruft-inductor", action="store_true", help="also plain inductor on the cruft chain")
    parser.add_argument("--cold", action="store_true", help="a fresh Inductor cache per compile")
    parser.add_argument("--threads", type=positive_int, help="torch.set_num_threads (on a loaded machine, 1 avoids "
                        "OpenMP threads waiting on each other in every C++ kernel)")
    add_option_args(parser)
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    search_options = Options.from_kwargs(**{"strict": True, **options})
    if args.threads:
        torch.set_num_threads(args.threads)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"inference", "training"}:
        parser.error("--modes takes inference and/or training")
    for n in args.blocks:
        model, inputs = chain(n)()
        twin, _ = chain(n, clean=True)()
        print(searched(n, model, inputs, args.reps, f" (twin {eager_launches(twin, *inputs)})", search_options))
        if args.no_compile:
            continue
        warm_up(CPU)
        columns = [Column("twin inductor", twin, "inductor"),
                   Column("cruft optimus_egg", model, "optimus_egg", options)]
        if args.cruft_inductor:
            columns.append(Column("cruft inductor", model, "inductor"))
        for mode in modes:
            print_mode(n, columns, inputs, mode == "training", args.reps, args.step_reps, args.cold)


if __name__ == "__main__":
    main()
