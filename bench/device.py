"""Where the benchmark runs, and how it times, counts and weighs one step there.

The harness asks a :class:`Device` for three things and never branches on CPU vs CUDA itself:
the time of one call, the kernels a call launched (CUDA only: the profiler sees every Triton and
extern kernel; on CPU Inductor's ``cpp_fused_*`` calls are counted from the generated code
instead), and the peak memory a call allocated on top of what was live before it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

#: Profiler kernel names that are copies or fills, not compute launches.
_NOT_KERNELS = ("Memcpy", "Memset", "[memory]")


@dataclass(frozen=True)
class Device:
    """One torch device: ``cpu`` or ``cuda``."""

    type: str

    @property
    def is_cuda(self) -> bool:
        return self.type == "cuda"

    def describe(self) -> str:
        if self.is_cuda:
            return torch.cuda.get_device_name()
        import platform

        name = platform.processor() or platform.machine()
        with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
            name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), name)
        return f"{name}, {os.cpu_count()} logical CPUs"

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize()

    def seconds(self, fn: Callable[[], Any], calls: int = 1) -> float:
        """Mean seconds of one of ``calls`` back-to-back calls (CUDA events on the GPU)."""
        if self.is_cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / calls
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - begin) / calls

    def kernel_launches(self, fn: Callable[[], Any]) -> dict[str, int] | None:
        """Triton and other (extern, ATen) kernels one call launched; None on CPU."""
        if not self.is_cuda:
            return None
        from torch.profiler import ProfilerActivity, profile

        self.sync()
        with _quiet_stderr(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            self.sync()
        events = prof.profiler.kineto_results.events()
        return count_kernels((e.name(), e.device_type()) for e in events)

    def peak_bytes(self, fn: Callable[[], Any]) -> int:
        """Peak bytes allocated during one call, above what was allocated when it started."""
        if self.is_cuda:
            self.sync()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fn()
            self.sync()
            return torch.cuda.max_memory_allocated() - base
        from torch.profiler import ProfilerActivity, profile

        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        events = prof.profiler.kineto_results.events()
        return peak_of((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")


def count_kernels(events: Iterable[tuple[str, Any]]) -> dict[str, int]:
    """Count profiler events that ran on the GPU: ``triton`` (Inductor's generated kernels,
    named ``triton_*``), ``extern`` (everything else: cuBLAS, ATen), and ``total``."""
    counts: Counter[str] = Counter(triton=0, extern=0)
    for name, device_type in events:
        if device_type != torch.autograd.DeviceType.CUDA or name.startswith(_NOT_KERNELS):
            continue
        counts["triton" if name.startswith("triton") else "extern"] += 1
    return {**counts, "total": counts["triton"] + counts["extern"]}


def peak_of(allocations: Iterable[tuple[int, int]]) -> int:
    """Peak of the running sum of (time, signed bytes) allocation events, taken in time order."""
    live = peak = 0
    for _, nbytes in sorted(allocations):
        live += nbytes
        peak = max(peak, live)
    return peak


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the profiler's native start/stop lines (written to fd 2, past Python)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def pick(name: str = "auto") -> Device:
    """``auto`` is CUDA when a GPU is visible, else CPU; ``cuda`` without a GPU is an error."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {name!r}; valid: auto, cpu, cuda")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    return Device(name)
