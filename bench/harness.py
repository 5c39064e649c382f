"""``optimus-egg bench``: every zoo model under every backend, side by side in one process.

For each model, inference and one training step (forward, ``sum`` of the outputs, backward):

1. eager-equivalent launches: ATen ops that run a kernel of the graph each backend hands to
   Inductor, run eagerly (:mod:`optimus_egg.counting`);
2. compile + first step per backend, in a fresh Inductor cache (``--quick``: one per run) with
   the FX-graph and AOTAutograd caches off (Optimus's pre-grad passes only run on a cache miss):
   compile time,
   optimus_egg's optimization time, kernel objects and bytes accessed
   (``torch._inductor.metrics``), launches per step (CPU: kernel calls in the generated
   wrappers; CUDA: profiler), outputs and gradients against eager;
3. step time: the median of interleaved repetitions (one round runs every backend once, in a
   rotating order, so machine load hits all columns alike), and its ratio to ``inductor``;
4. peak memory of one step.

The command body lives here; :mod:`optimus_egg.cli` only wires the arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from optimus_egg.bench import optimus_cases, plots, real
from optimus_egg.bench.backends import INDUCTOR, OPTIMUS_EGG, STANDARD, Backend, backends, ensure_registered
from optimus_egg.bench.device import Device, pick
from optimus_egg.bench.families import families
from optimus_egg.bench.models import Factory
from optimus_egg.bench.report import markdown, write
from optimus_egg.bench.steps import (
    MODES,
    Row,
    Settings,
    clear_grads,
    compare,
    compile_first_step,
    cpu_seconds,
    eager_equivalent,
    fresh_cache,
    interleaved_times,
    make_step,
    recompile_limits,
    snapshot,
    training_inputs,
    warm_up,
)
from optimus_egg.bench.zoo import SIZES, zoo
from optimus_egg.cli_options import add_option_args, options_from_args, positive_int


class Progress:
    """A plain-text progress bar on stderr: redrawn in place on a terminal, a line per step
    otherwise (logs)."""

    def __init__(self, total: int, stream: Any = None, width: int = 24) -> None:
        self.total, self.done, self.width = max(total, 1), 0, width
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, what: str) -> str:
        filled = self.width * self.done // self.total
        elapsed = int(time.perf_counter() - self.start)
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done:>3}/{self.total} "
                f"{elapsed // 60:02d}:{elapsed % 60:02d} {what}")

    def show(self, what: str) -> None:
        text = self.line(what)
        self.stream.write(f"\r{text[:119]:<119}" if self.tty else text + "\n")
        self.stream.flush()

    def advance(self, what: str = "") -> None:
        self.done += 1
        if what:
            self.show(what)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()


# ---------------------------------------------------------------------------------------------
# the suite


def _error(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


def measure(name: str, factory: Factory, columns: Sequence[Backend], device: Device, settings: Settings,
            progress: Progress) -> list[Row]:
    """All rows of one model: every mode, every column."""
    model, inputs = factory()
    model = model.to(device.type)
    inputs = tuple(t.to(device.type) for t in inputs)
    rows: list[Row] = []
    given = inputs
    for mode in settings.modes:
        train = mode == "training"
        inputs = training_inputs(model, given) if train else given
        by_label = {b.label: Row(name, mode, b.label) for b in columns}
        try:
            ref = snapshot(make_step(model, model, inputs, train)(), model, train, inputs)
        except Exception as exc:  # noqa: BLE001 - a model eager cannot run is reported, not fatal
            for row in by_label.values():
                row.error = f"eager: {_error(exc)}"
            rows.extend(by_label.values())
            progress.done += units(1, 1, len(columns))  # the steps this mode would have taken
            continue
        progress.show(f"{name} {mode}: eager-equivalent launches")
        for b in columns:
            try:
                by_label[b.label].eager_launches = eager_equivalent(b, model, inputs, train)
            except Exception as exc:  # noqa: BLE001 - a failing column is reported, not fatal
                by_label[b.label].error = _error(exc)
        torch._dynamo.reset()
        progress.advance()
        steps: dict[str, Callable[[], Any]] = {}
        for b in columns:
            row = by_label[b.label]
            progress.show(f"{name} {mode}: compile {b.label}")
            try:
                steps[b.label], first = compile_first_step(b, model, inputs, train, device, row,
                                                                   settings.cold_compiles)
                if getattr(model, "draws", False):
                    # Inductor draws with a generator of its own, and batched dropouts (Optimus,
                    # optimus_egg's batch_random) draw in another order: no column can equal eager
                    row.details["not compared"] = "the model draws random numbers"
                else:
                    # a model may widen them (conv weight gradients sum over batch and pixels)
                    rtol, atol = getattr(model, "tolerance", (settings.rtol, settings.atol))
                    row.equal, row.max_error = compare(first, ref, rtol, atol)
            except Exception as exc:  # noqa: BLE001
                row.error = row.error or _error(exc)
            progress.advance()
        progress.show(f"{name} {mode}: timing {len(steps)} backends × {settings.reps} rounds")
        for label, seconds in interleaved_times(steps, device, settings).items():
            by_label[label].step_s = seconds
        progress.advance()
        progress.show(f"{name} {mode}: peak memory")
        for label, step in steps.items():
            row = by_label[label]
            # from no gradients, so that the figure holds this step's own, not less the last's
            clear_grads(model, inputs)
            row.peak_bytes = device.peak_bytes(step)
            profiled = device.kernel_launches(step)
            if profiled is not None:
                row.launches, row.triton_launches = profiled["total"], profiled["triton"]
                row.extern_calls = profiled["extern"]
        base = by_label.get(INDUCTOR)
        for row in by_label.values():
            if row.step_s is not None and base is not None and base.step_s:
                row.step_ratio = row.step_s / base.step_s
        steps.clear()
        torch._dynamo.reset()
        model.zero_grad(set_to_none=True)
        progress.advance()
        rows.extend(by_label.values())
    return rows


def units(models: int, modes: int, columns: int) -> int:
    """Progress steps: per model and mode, launches + one compile per column + timing + memory."""
    return models * modes * (columns + 3)


def revision() -> str | None:
    """``git describe`` of the checkout this package runs from (``-dirty``: uncommitted edits), or
    ``$OPTIMUS_EGG_REVISION`` where it runs from a copy without git (bench/gpu.sh sets it)."""
    if os.environ.get("OPTIMUS_EGG_REVISION"):
        return os.environ["OPTIMUS_EGG_REVISION"]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine(device: Device) -> dict[str, Any]:
    info = {"device": device.type, "name": device.describe(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "threads": torch.get_num_threads()}
    try:
        info["egglog"] = version("egglog")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        info["egglog"] = None
    if device.is_cuda:
        info["triton"] = getattr(__import__("triton"), "__version__", None)
    return info


def run(models: Mapping[str, Factory], columns: Sequence[Backend], device: Device, settings: Settings,
        command: str = "", quick: bool = False, stream: Any = None,
        after_each: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Measure every model under every column; the results as a JSON-ready dict.

    ``after_each`` gets the results so far after every model (to save partial results of a
    run that may be cut short, as on a time-limited GPU machine)."""
    ensure_registered()
    progress = Progress(units(len(models), len(settings.modes), len(columns)), stream)
    progress.show("warming up Inductor")
    started = datetime.datetime.now(datetime.UTC)
    wall, cpu_start = time.perf_counter(), cpu_seconds()
    rows: list[Row] = []

    def results() -> dict[str, Any]:
        caches = ("fresh Inductor cache per compile" if settings.cold_compiles
                  else "one fresh Inductor cache per run, shared by all columns")
        meta = {"command": command, "date": started.strftime("%Y-%m-%d %H:%M UTC"), "quick": quick,
                "revision": revision(),
                "machine": machine(device), "reps": settings.reps, "wall_s": time.perf_counter() - wall,
                "cpu_s": cpu_seconds() - cpu_start,
                "models": list(dict.fromkeys(r.model for r in rows)), "backends": [b.label for b in columns],
                "caches": caches + "; FX graph and AOTAutograd caches off"}
        return {"meta": meta, "rows": [asdict(r) for r in rows]}

    with recompile_limits(), contextlib.nullcontext() if settings.cold_compiles else fresh_cache():
        warm_up(device)
        for name, factory in models.items():
            rows.extend(measure(name, factory, columns, device, settings, progress))
            if after_each is not None:
                after_each(results())
    progress.close()
    return results()


# ---------------------------------------------------------------------------------------------
# command line


def _split(values: Sequence[str] | None) -> list[str]:
    return [v.strip() for value in values or () for v in value.split(",") if v.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench flags, and the optimizer's option flags for the optimus_egg columns."""
    add_option_args(parser)
    parser.add_argument("--quick", action="store_true",
                        help="small chain models and few timing rounds (under 5 minutes on 2 CPU cores)")
    parser.add_argument("--out", type=Path, help="write results.json, results.md and PNG plots (with matplotlib) here")
    parser.add_argument("--suite", default="zoo", choices=SUITES,
                        help="the models run when --models is not given: the zoo (default), one "
                             "model per Optimus pass family (family_*), the patterns of PyTorch's "
                             "tests of the Optimus passes (split_cat_*, group_batch_*), published "
                             "models from their public definitions (real_*), or all")
    parser.add_argument("--size", default="toy", choices=SIZES,
                        help="the zoo's sizes: toy (default) or realistic (batch 1024, layers 256 "
                             "wide or wider); the other suites have one size")
    parser.add_argument("--models", action="append", metavar="NAMES",
                        help=f"comma-separated subset of: {', '.join(zoo())}, and the models of the "
                             "other suites (repeatable)")
    parser.add_argument("--backends", action="append", metavar="NAMES",
                        help=f"comma-separated subset of: {', '.join(STANDARD)} (default: all)")
    parser.add_argument("--rules", action="append", default=[], metavar="FAMILIES",
                        help="an extra optimus_egg column using only these comma-separated rule "
                             "families (repeatable: one column each)")
    parser.add_argument("--modes", default=",".join(MODES), metavar="MODES",
                        help="comma-separated subset of: inference, training (default: both)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--reps", type=positive_int, help="interleaved timing rounds (default 10 quick, 30 full)")
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's). On a machine "
                        "shared with other work, 1 avoids OpenMP threads waiting on descheduled peers")


SUITES = ("zoo", "families", "optimus", "real", "all")


def suite(name: str, quick: bool, size: str = "toy") -> dict[str, Factory]:
    """A suite's models in table order: the zoo, the Optimus pass families
    (:mod:`optimus_egg.bench.families`), the patterns of PyTorch's own tests of those passes
    (:mod:`optimus_egg.bench.optimus_cases`; not the cases that write their inputs, which the
    backends share), published models written from their public definitions
    (:mod:`optimus_egg.bench.real`), or all of them."""
    cases = {name: make for name, make in optimus_cases.cases().items() if name not in optimus_cases.MUTATES_INPUTS}
    suites = {"zoo": zoo(quick, size), "families": families(), "optimus": cases, "real": real.models(quick)}
    return suites[name] if name in suites else {model: make for part in suites.values() for model, make in part.items()}


def select_models(names: Sequence[str] | None, quick: bool, suite_name: str = "zoo", size: str = "toy"
                  ) -> dict[str, Factory]:
    """The models named (from any suite), else the whole suite."""
    available = suite("all", quick, size)
    wanted = _split(names) or list(suite(suite_name, quick, size))
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; valid: {', '.join(available)}")
    return {n: available[n] for n in dict.fromkeys(wanted)}


def select_modes(value: str) -> tuple[str, ...]:
    modes = tuple(m for m in MODES if m in _split([value]))
    unknown = [m for m in _split([value]) if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"unknown mode(s) {unknown or value!r}; valid: {', '.join(MODES)}")
    return modes


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run, for the report."""
    parts = ["optimus-egg bench"]
    if args.quick:
        parts.append("--quick")
    if args.suite != "zoo":
        parts.append(f"--suite {args.suite}")
    if args.size != "toy":
        parts.append(f"--size {args.size}")
    for flag in ("models", "backends"):
        if getattr(args, flag):
            parts.append(f"--{flag} {','.join(_split(getattr(args, flag)))}")
    parts += [f"--rules {r}" for r in args.rules]
    if select_modes(args.modes) != MODES:
        parts.append(f"--modes {args.modes}")
    if args.device != "auto":
        parts.append(f"--device {args.device}")
    if args.reps:
        parts.append(f"--reps {args.reps}")
    if args.threads:
        parts.append(f"--threads {args.threads}")
    if args.out:
        parts.append(f"--out {args.out}")
    return " ".join(parts)


def main(args: argparse.Namespace) -> int:
    """``optimus-egg bench``: print the table; exit 1 when an optimus_egg column is wrong or
    failed (a wrong Optimus or Inductor column is a finding, reported in the table)."""
    try:
        models = select_models(args.models, args.quick, args.suite, args.size)
        columns = backends(_split(args.backends) or STANDARD, args.rules, options_from_args(args))
        modes = select_modes(args.modes)
        device = pick(args.device)
    except (ValueError, RuntimeError) as exc:
        print(f"optimus-egg bench: {exc}", file=sys.stderr)
        return 2
    settings = Settings.make(args.quick, device, args.reps, modes)
    plotting = args.out is not None and plots.available()
    if args.out and not plotting:  # said before the run, which can take hours, not after it
        print("optimus-egg bench: matplotlib is not installed: --out gets results.json and results.md, "
              "no plots (pip install 'optimus_egg[bench]')", file=sys.stderr)
    if args.threads:
        torch.set_num_threads(args.threads)
    partial = (lambda res: write(res, args.out, plots=False)) if args.out else None
    results = run(models, columns, device, settings, command=command_line(args), quick=args.quick,
                  after_each=partial)
    print(markdown(results))
    if args.out:
        for path in write(results, args.out, plots=plotting):
            print(f"wrote {path}", file=sys.stderr)
    bad = [r for r in results["rows"] if r["backend"].startswith(OPTIMUS_EGG)
           and (r["error"] or r["equal"] is False)]
    return 1 if bad else 0
