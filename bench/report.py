"""The benchmark's outputs: results JSON, a Markdown table per mode, PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = ("model", "backend", "eager launches", "launches/step", "kernel objects", "bytes accessed",
           "compile s", "optimize s", "step ms", "vs inductor", "peak mem", "equal to eager")

NOTES = """\
- eager launches: ATen non-view ops (one kernel each when run eagerly) of the graph the backend
  hands to Inductor, i.e. after its torch-level rewrite and Inductor's pre-grad passes; training
  counts forward + backward.
- launches/step: {launches}
- kernel objects: `torch._inductor.metrics.generated_kernel_count`; bytes accessed:
  `torch._inductor.metrics.num_bytes_accessed` (Inductor's estimate over its kernels).
- compile s: compile + first step ({caches}). optimize s: optimus_egg's own share of it.
- step ms: median of {reps} interleaved rounds; vs inductor: ratio to the `inductor` column (< 1 is faster).
- peak mem: peak bytes allocated during one step above what was live before it.
"""

_LAUNCHES = {
    "cpu": "kernel calls in Inductor's generated wrappers (forward + backward). On CPU each graph "
           "is a few `cpp_fused_*` calls whatever the rewrite; kernel objects show the difference.",
    "cuda": "CUDA kernels the profiler saw in one step (Triton + extern), eager included.",
}


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _num(x: float | None, fmt: str = "{}") -> str:
    return "-" if x is None else fmt.format(x)


def _cells(r: dict[str, Any], notes: list[str]) -> list[str]:
    if r["error"]:
        notes.append(f"{r['model']} {r['mode']} {r['backend']}: {r['error']}")
        equal = f"error ({len(notes)})"
    else:
        equal = {True: "yes", False: "**NO**", None: "-"}[r["equal"]]
        if r["fallback"]:
            notes.append(f"{r['model']} {r['mode']} {r['backend']}: fell back: {r['fallback']}")
            equal += f", fell back ({len(notes)})"
    step_ms = None if r["step_s"] is None else r["step_s"] * 1e3
    return [r["model"], r["backend"], _num(r["eager_launches"]), _num(r["launches"]), _num(r["kernels"]),
            _size(r["bytes_accessed"]), _num(r["compile_s"], "{:.1f}"), _num(r["optimize_s"], "{:.2f}"),
            _num(step_ms, "{:.3f}"), _num(r["step_ratio"], "{:.2f}"), _size(r["peak_bytes"]), equal]


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    m = meta["machine"]
    lines = [f"Command: `{meta['command']}` (revision {meta.get('revision') or 'unknown'})  ",
             (f"Machine: {m['name']} ({m['device']}), {m['platform']}, Python {m['python']}, "
             f"torch {m['torch']} ({m['threads']} CPU threads), egglog {m.get('egglog')}  "),
             (f"Date: {meta['date']}; wall time {meta['wall_s'] / 60:.1f} min, CPU time "
             f"{meta['cpu_s'] / 60:.1f} min (this process and the compilers it ran)"), ""]
    notes: list[str] = []
    for mode in ("inference", "training"):
        rows = [r for r in results["rows"] if r["mode"] == mode]
        if not rows:
            continue
        lines += [f"### {mode.capitalize()}{' (one step: forward, sum, backward)' if mode == 'training' else ''}",
                  "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(_cells(r, notes)) + " |" for r in rows]
        lines.append("")
    if notes:
        lines += ["Notes:", *[f"({i}) {n}" for i, n in enumerate(notes, 1)], ""]
    lines.append(NOTES.format(launches=_LAUNCHES[m["device"]], reps=meta["reps"], caches=meta["caches"]))
    return "\n".join(lines)


def write(results: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    """``results.json``, ``results.md`` and (with ``plots``) the PNG plots into ``out``; the
    paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "results.md"]
    paths[0].write_text(json.dumps(results, indent=1) + "\n")
    paths[1].write_text(markdown(results) + "\n")
    if plots:
        from optimus_egg.bench.plots import plot

        paths += plot(results, out)
    return paths
