"""One model's step under one backend: build it, count its eager-equivalent launches, compile it
with Inductor's metrics on, compare it with eager, time it.

The pieces :mod:`optimus_egg.bench.harness` (the suite) and :mod:`optimus_egg.bench.chain` (one
model, many sizes) measure with.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch

from optimus_egg.backend import REPORTS
from optimus_egg.bench.backends import Backend
from optimus_egg.bench.device import Device
from optimus_egg.counting import eager_launches, wrapper_extern_calls, wrapper_launches

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
    extern_calls: int | None = None  # per step: extern calls in the wrappers (CPU) / profiled non-Triton (CUDA)
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
    of the outputs as loss, backward (where any output carries a gradient)."""

    def step() -> Any:
        if not train:
            with torch.no_grad():
                return fn(*inputs)
        clear_grads(model, inputs)
        out = fn(*inputs)
        loss = sum(t.float().sum() for t in _leaves(out))
        if isinstance(loss, torch.Tensor) and loss.requires_grad:  # outputs all detached: no backward to run
            loss.backward()
        return out

    return step


def clear_grads(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> None:
    """Drop the gradients of the model and of the inputs (their memory is freed, not zeroed)."""
    model.zero_grad(set_to_none=True)
    for t in inputs:
        t.grad = None


@dataclass
class Result:
    outputs: list[torch.Tensor]
    grads: list[torch.Tensor | None]


def snapshot(out: Any, model: torch.nn.Module, train: bool, inputs: Sequence[torch.Tensor] = ()) -> Result:
    """What a step computed: its outputs and, in training, the gradients of the parameters and of
    the inputs that require grad."""
    trained = [*model.parameters(), *(t for t in inputs if t.requires_grad)] if train else []
    grads = [t.grad.detach().clone() if t.grad is not None else None for t in trained]
    return Result([t.detach().clone() for t in _leaves(out)], grads)


def training_inputs(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A training step's inputs: as given, or, for a model with no parameters to train (a pattern
    written as a function), its floating-point inputs as leaves that require grad, so that the
    step has a backward to run."""
    if any(p.requires_grad for p in model.parameters()):
        return tuple(inputs)
    return tuple(t.detach().requires_grad_() if t.is_floating_point() else t for t in inputs)


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

    REPORTS.clear()
    before = dict(counters["inductor"])
    graphs_before = counters["stats"]["unique_graphs"]
    with measured_compile(cold) as codes:
        step = make_step(backend.compile(model), model, inputs, train)
        start = time.perf_counter()
        out = step()
        device.sync()
        seconds = time.perf_counter() - start
    if backend.compiler is not None:
        row.compile_s = seconds
        if not codes and counters["stats"]["unique_graphs"] == graphs_before:
            raise RuntimeError("no Inductor code was generated (did Dynamo fall back to eager?)")
        # A graph with nothing to compute (its outputs views of its inputs) gets no code: 0 kernels.
        row.kernels = metrics.generated_kernel_count
        row.bytes_accessed = metrics.num_bytes_accessed
        if not device.is_cuda:
            row.launches = sum(wrapper_launches(c) for c in codes)
            row.extern_calls = sum(wrapper_extern_calls(c) for c in codes)
    if backend.optimus:
        ran = {k: v - before.get(k, 0) for k, v in counters["inductor"].items() if v != before.get(k, 0)}
        row.details["optimus_passes"] = ran
        storages = {t.untyped_storage().data_ptr() for t in inputs}
        row.details["aliased_outputs"] = sum(t.untyped_storage().data_ptr() in storages for t in _leaves(out))
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
    return step, snapshot(out, model, train, inputs)


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
