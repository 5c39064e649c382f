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
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from optimus_egg.bench.backends import INDUCTOR, OPTIMUS_EGG, STANDARD, Backend, backends, ensure_registered
from optimus_egg.bench.device import Device, pick
from optimus_egg.bench.models import Factory
from optimus_egg.bench.zoo import zoo
from optimus_egg.cli_options import add_option_args, options_from_args, positive_int
from optimus_egg.counting import eager_launches, wrapper_launches

MODES = ("inference", "training")


@dataclass
class Row:
    """One model × mode × backend. ``None`` means not applicable or not measured."""

    model: str
    mode: str
    backend: str
    eager_launches: int | None = None  # ATen ops that run a kernel, of the graph handed to Inductor
    launches: int | None = None  # per step: wrapper kernel calls (CPU) / profiled kernels (CUDA)
    triton_launches: int | None = None  # CUDA only
    kernels: int | None = None  # torch._inductor.metrics.generated_kernel_count
    bytes_accessed: int | None = None  # torch._inductor.metrics.num_bytes_accessed
    compile_s: float | None = None  # compile + first step
    optimize_s: float | None = None  # optimus_egg's own time (backend.REPORTS)
    step_s: float | None = None  # median of interleaved repetitions
    step_ratio: float | None = None  # step_s / inductor's step_s
    peak_bytes: int | None = None
    equal: bool | None = None  # outputs (and gradients) equal to eager
    max_error: float | None = None
    fallback: str | None = None  # optimus_egg left a graph unchanged
    error: str | None = None  # compiling or running failed
    details: dict[str, Any] = field(default_factory=dict)  # rules fired / Optimus passes run


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


@dataclass(frozen=True)
class Settings:
    reps: int  # interleaved timing rounds
    modes: tuple[str, ...] = MODES
    cold_compiles: bool = True  # a fresh Inductor cache per compile (else one per run)
    warmup: int = 2
    target_sample_s: float = 0.01  # a timing sample repeats the step until it takes about this
    rtol: float = 1e-4
    atol: float = 1e-5

    @classmethod
    def make(cls, quick: bool, device: Device, reps: int | None = None, modes: Sequence[str] = MODES
             ) -> Settings:
        loose = device.is_cuda  # Triton reduces in other orders than ATen's CUDA kernels
        return cls(reps=reps or (10 if quick else 30), modes=tuple(modes), cold_compiles=not quick,
                   rtol=1e-3 if loose else 1e-4, atol=1e-4 if loose else 1e-5)


# ---------------------------------------------------------------------------------------------
# one step


def _leaves(out: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def make_step(fn: Callable[..., Any], model: torch.nn.Module, inputs: Sequence[torch.Tensor],
              train: bool) -> Callable[[], Any]:
    """One inference call under ``no_grad``, or one training step: clear the gradients (the
    model's and any input's, so that no step accumulates into an earlier one's), forward, the sum
    of the outputs as loss, backward."""

    def step() -> Any:
        if not train:
            with torch.no_grad():
                return fn(*inputs)
        model.zero_grad(set_to_none=True)
        for t in inputs:
            t.grad = None
        out = fn(*inputs)
        sum(t.float().sum() for t in _leaves(out)).backward()
        return out

    return step


@dataclass
class Result:
    outputs: list[torch.Tensor]
    grads: list[torch.Tensor | None]


def snapshot(out: Any, model: torch.nn.Module, train: bool) -> Result:
    grads = [p.grad.detach().clone() if p.grad is not None else None
             for p in model.parameters()] if train else []
    return Result([t.detach().clone() for t in _leaves(out)], grads)


def compare(got: Result, ref: Result, rtol: float, atol: float) -> tuple[bool, float | None]:
    """Equal within tolerance, and the largest absolute difference (None: shapes differ)."""
    pairs = list(zip(got.outputs, ref.outputs)) + list(zip(got.grads, ref.grads))
    if len(got.outputs) != len(ref.outputs) or len(got.grads) != len(ref.grads):
        return False, None
    ok, worst = True, 0.0
    for a, b in pairs:
        if a is None or b is None:
            ok = ok and a is None and b is None
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, None
        if a.numel():
            worst = max(worst, (a.float() - b.float()).abs().max().item())
        ok = ok and torch.allclose(a, b, rtol=rtol, atol=atol)
    return ok, worst


# ---------------------------------------------------------------------------------------------
# eager-equivalent launches


def dynamo_graph(model: torch.nn.Module, inputs: Sequence[torch.Tensor], train: bool
                 ) -> tuple[torch.fx.GraphModule, list[Any]]:
    """The graph and example inputs Dynamo hands a backend under ``torch.compile``."""
    captured: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        captured.append((gm, list(example_inputs)))
        return gm.forward

    with torch.set_grad_enabled(train):
        torch.compile(model, backend=record, fullgraph=True)(*inputs)
    return captured[0]


def eager_equivalent(backend: Backend, model: torch.nn.Module, inputs: Sequence[torch.Tensor],
                     train: bool) -> int:
    if backend.compiler is None:
        return eager_launches(make_step(model, model, inputs, train))
    gm, example_inputs = dynamo_graph(model, inputs, train)
    with torch.set_grad_enabled(train):  # the grad mode a backend is called in under torch.compile
        graph = backend.handed_to_inductor(gm, example_inputs)
    count = eager_launches(make_step(graph, model, example_inputs, train))
    model.zero_grad(set_to_none=True)
    return count


# ---------------------------------------------------------------------------------------------
# compile + first step


def fresh_cache() -> contextlib.AbstractContextManager[None]:
    """Inductor's fresh cache directory context (``fresh_inductor_cache`` before torch 2.8)."""
    from torch._inductor import utils

    return (getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache)()


def recompile_limits() -> contextlib.AbstractContextManager[None]:
    """Room for every column's Dynamo cache entry on the same model (one per backend and grad
    mode); the option names changed in torch 2.7."""
    cfg = torch._dynamo.config
    if hasattr(cfg, "recompile_limit"):
        return cfg.patch(recompile_limit=64, accumulated_recompile_limit=4096)
    return cfg.patch(cache_size_limit=64, accumulated_cache_size_limit=4096)


@contextlib.contextmanager
def measured_compile(cold: bool = True) -> Iterator[list[str]]:
    """Compile with Inductor's metrics on; yields the generated wrapper sources.

    ``cold``: a fresh Inductor cache directory for this compile, so kernels built by one column
    are not reused by the next (``--quick`` shares one cache per run instead: compile times then
    favour later columns where they generate the same kernels). Always: FX-graph and
    AOTAutograd caches off (pre-grad passes only run on a miss), and the ``inductor_metrics``
    log enabled (Inductor only counts bytes accessed when it is).
    """
    from torch._inductor import metrics
    from torch._inductor.graph import GraphLowering

    # torch._inductor.compile_fx's artifact logger, by name (the attribute is not API)
    inductor_metrics_log = logging.getLogger("torch._inductor.compile_fx.__inductor_metrics")
    codes: list[str] = []
    level, propagate = inductor_metrics_log.level, inductor_metrics_log.propagate
    inductor_metrics_log.setLevel(logging.INFO)
    inductor_metrics_log.propagate = False  # counted, not printed
    handler = logging.NullHandler()
    inductor_metrics_log.addHandler(handler)
    metrics.reset()
    try:
        with fresh_cache() if cold else contextlib.nullcontext(), \
                torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False), \
                mock.patch.object(GraphLowering, "save_output_code", codes.append):
            yield codes
    finally:
        inductor_metrics_log.removeHandler(handler)
        inductor_metrics_log.setLevel(level)
        inductor_metrics_log.propagate = propagate


def compile_first_step(backend: Backend, model: torch.nn.Module, inputs: Sequence[torch.Tensor], train: bool,
                       device: Device, row: Row, cold: bool = True) -> tuple[Callable[[], Any], Result]:
    """Compile, run the first step, fill the compile columns of ``row``; return the step and
    what the first step computed."""
    from torch._dynamo.utils import counters
    from torch._inductor import metrics

    from optimus_egg.backend import REPORTS

    REPORTS.clear()
    before = dict(counters["inductor"])
    with measured_compile(cold) as codes:
        step = make_step(backend.compile(model), model, inputs, train)
        start = time.perf_counter()
        out = step()
        device.sync()
        seconds = time.perf_counter() - start
    if backend.compiler is not None:
        row.compile_s = seconds
        if not codes:
            raise RuntimeError("no Inductor code was generated (did Dynamo fall back to eager?)")
        row.kernels = metrics.generated_kernel_count
        row.bytes_accessed = metrics.num_bytes_accessed
        if not device.is_cuda:
            row.launches = sum(wrapper_launches(c) for c in codes)
    if backend.optimus:
        ran = {k: v - before.get(k, 0) for k, v in counters["inductor"].items() if v != before.get(k, 0)}
        row.details["optimus_passes"] = ran
    if backend.is_optimus_egg:
        reports = list(REPORTS)
        row.optimize_s = sum(r.total_seconds for r in reports)
        fired: dict[str, int] = {}
        for r in reports:
            for k, v in r.rules_fired.items():
                fired[k] = fired.get(k, 0) + v
        row.details["rules_fired"] = fired
        row.details["enodes"] = [r.enodes for r in reports]
        fallbacks = [r.fallback for r in reports if r.fallback]
        row.fallback = "; ".join(fallbacks) or None
    return step, snapshot(out, model, train)


# ---------------------------------------------------------------------------------------------
# timing


def interleaved_times(steps: Mapping[str, Callable[[], Any]], device: Device, settings: Settings
                      ) -> dict[str, float]:
    """Median seconds per step of each backend over rounds that run every backend once, the
    starting backend rotating each round."""
    labels = list(steps)
    for label in labels:
        for _ in range(settings.warmup):
            steps[label]()
    device.sync()
    slowest = max(device.seconds(steps[label]) for label in labels)
    calls = max(1, min(100, int(settings.target_sample_s / max(slowest, 1e-9))))
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(settings.reps):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            samples[label].append(device.seconds(steps[label], calls))
    return {label: statistics.median(s) for label, s in samples.items()}


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
    for mode in settings.modes:
        train = mode == "training"
        ref = snapshot(make_step(model, model, inputs, train)(), model, train)
        by_label = {b.label: Row(name, mode, b.label) for b in columns}
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
                    row.equal, row.max_error = compare(first, ref, settings.rtol, settings.atol)
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
            row.peak_bytes = device.peak_bytes(step)
            profiled = device.kernel_launches(step)
            if profiled is not None:
                row.launches, row.triton_launches = profiled["total"], profiled["triton"]
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


def warm_up(device: Device) -> None:
    """Bring Inductor's compile machinery up once, so the first measured compile pays no
    import or worker start-up."""
    lin = torch.nn.Linear(4, 4).to(device.type)
    x = torch.randn(2, 4, device=device.type)
    with measured_compile():
        for train in (False, True):
            make_step(torch.compile(lin), lin, (x,), train)()
    torch._dynamo.reset()


def cpu_seconds() -> float:
    """CPU time of this process and all its descendants (Inductor's compile workers and the C++
    compilers they run), finished or not: on a machine shared with other work, wall time
    overstates what the run costs; this does not. Linux reads /proc; elsewhere only this
    process and its finished children are counted."""
    import resource

    try:
        stats = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
                stats[int(pid)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))  # ppid, times
    except OSError:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, (ppid, _) in stats.items() if ppid == parent and pid not in tree]
        tree.update(kids)
        frontier += kids
    return sum(stats[pid][1] for pid in tree if pid in stats) / os.sysconf("SC_CLK_TCK")


def revision() -> str | None:
    """``git describe`` of the checkout this package runs from (``-dirty``: uncommitted edits), or
    ``$OPTIMUS_EGG_REVISION`` where it runs from a copy without git (bench/gpu.sh sets it)."""
    import subprocess

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
        from importlib.metadata import version

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
    parser.add_argument("--out", type=Path, help="write results.json, results.md and PNG plots here")
    parser.add_argument("--suite", default="zoo", choices=SUITES,
                        help="the models run when --models is not given: the zoo (default), one "
                             "model per Optimus pass family (family_*), or all")
    parser.add_argument("--models", action="append", metavar="NAMES",
                        help=f"comma-separated subset of: {', '.join(zoo())}, and the family_* models "
                             "of --suite families (repeatable)")
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


SUITES = ("zoo", "families", "all")


def suite(name: str, quick: bool) -> dict[str, Factory]:
    """A suite's models in table order: the zoo, the Optimus pass families
    (:mod:`optimus_egg.bench.families`), or both."""
    from optimus_egg.bench.families import families

    suites = {"zoo": zoo(quick), "families": families()}
    return suites[name] if name in suites else {**suites["zoo"], **suites["families"]}


def select_models(names: Sequence[str] | None, quick: bool, suite_name: str = "zoo") -> dict[str, Factory]:
    """The models named (from any suite), else the whole suite."""
    available = suite("all", quick)
    wanted = _split(names) or list(suite(suite_name, quick))
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
    from optimus_egg.bench.report import markdown, write

    try:
        models = select_models(args.models, args.quick, args.suite)
        columns = backends(_split(args.backends) or STANDARD, args.rules, options_from_args(args))
        modes = select_modes(args.modes)
        device = pick(args.device)
    except (ValueError, RuntimeError) as exc:
        print(f"optimus-egg bench: {exc}", file=sys.stderr)
        return 2
    settings = Settings.make(args.quick, device, args.reps, modes)
    if args.threads:
        torch.set_num_threads(args.threads)
    partial = (lambda res: write(res, args.out, plots=False)) if args.out else None
    results = run(models, columns, device, settings, command=command_line(args), quick=args.quick,
                  after_each=partial)
    print(markdown(results))
    if args.out:
        for path in write(results, args.out):
            print(f"wrote {path}", file=sys.stderr)
    bad = [r for r in results["rows"] if r["backend"].startswith(OPTIMUS_EGG)
           and (r["error"] or r["equal"] is False)]
    return 1 if bad else 0
