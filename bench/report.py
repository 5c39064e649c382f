"""The benchmark's outputs: results JSON, a Markdown table per mode, PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optimus_egg.bench import families, optimus_cases
from optimus_egg.bench.plots import plot

#: Model name → the Optimus passes (``counters["inductor"]`` keys) its pattern is for.
TARGETS = {**families.TARGETS, **optimus_cases.TARGETS}

COLUMNS = ("model", "backend", "eager launches", "launches/step", "kernel objects", "extern calls",
           "bytes accessed", "compile s", "optimize s", "step ms", "vs inductor", "peak mem", "equal to eager")

NOTES = """\
- eager launches: ATen ops that run a kernel (one each when run eagerly: not views, `_unsafe_view`
  or allocations) of the graph the backend hands to Inductor, i.e. after its torch-level rewrite
  and Inductor's pre-grad passes; training counts forward + backward.
- launches/step: {launches}
- kernel objects: `torch._inductor.metrics.generated_kernel_count`; extern calls: library and
  ATen calls per step (the default cost model's figure is the two added); bytes accessed:
  `torch._inductor.metrics.num_bytes_accessed` (Inductor's estimate over its kernels).
- compile s: compile + first step ({caches}). optimize s: optimus_egg's own share of it.
- step ms: median of {reps} interleaved rounds; vs inductor: ratio to the `inductor` column (< 1 is faster).
- peak mem: peak bytes allocated during one step above what was live before it (a training step
  starts with no gradients, so its own gradients count).
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
            _num(r.get("extern_calls")), _size(r["bytes_accessed"]), _num(r["compile_s"], "{:.1f}"),
            _num(r["optimize_s"], "{:.2f}"), _num(step_ms, "{:.3f}"), _num(r["step_ratio"], "{:.2f}"),
            _size(r["peak_bytes"]), equal]


#: The backends compared side by side, in column order.
_COMPARED = ("inductor", "inductor+optimus", "optimus_egg")
_METRICS = (("eager_launches", "eager launches"), ("launches", "launches/step"), ("kernels", "kernel objects"),
            ("figure", "kernel objects + extern"))


def _metric(row: dict[str, Any], key: str) -> Any:
    """A row's figure by name; ``figure`` is the default cost model's, kernel objects + extern
    calls (None where either is unknown, as in results written before extern calls were kept)."""
    if key != "figure":
        return row[key]
    kernels, extern = row["kernels"], row.get("extern_calls")
    return None if kernels is None or extern is None else kernels + extern


def _verdict(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["error"]:
        return f"**fails** ({r['error'].split(':')[0]})"
    return {True: "yes", False: "**WRONG**", None: "-"}[r["equal"]]


def _floor(row: dict[str, Any], key: str) -> Any:
    """A peer's figure as optimus_egg is held to it: an output the peer returns as an alias of an
    input counts one copy, since eager returns a fresh tensor there (None stays None)."""
    value = _metric(row, key)
    return None if value is None else value + row.get("details", {}).get("aliased_outputs", 0)


def side_by_side(results: dict[str, Any]) -> str:
    """One line per model and mode: eager launches, launches/step and kernel objects of
    ``inductor`` / ``inductor+optimus`` / ``optimus_egg`` (eager launches lead with eager's),
    whether Optimus's passes for the model fired and it stayed correct, and every figure where
    optimus_egg is above either (flagged). A peer's output that aliases an input counts as one
    copy: optimus_egg never returns an input's alias where eager returns a fresh tensor."""
    rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in results["rows"]:
        rows.setdefault((r["model"], r["mode"]), {})[r["backend"]] = r
    head = ["model", "mode", "eager launches (eager / ind / +Opt / egg)", "launches/step (ind / +Opt / egg)",
            "kernel objects (ind / +Opt / egg)", "kernel objects + extern (ind / +Opt / egg)",
            "Optimus pass fired", "Optimus correct", "egg correct", "optimus_egg above"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, mode), by in rows.items():
        egg = by.get("optimus_egg")
        cells = [model, mode]
        above = []
        for key, label in _METRICS:
            labels = (("eager",) if key == "eager_launches" else ()) + _COMPARED
            values = [_metric(by[b], key) if b in by else None for b in labels]
            cells.append(" / ".join(_num(v) for v in values))
            mine = _metric(egg, key) if egg else None
            for b in ("inductor", "inductor+optimus"):
                theirs = _floor(by[b], key) if b in by else None
                if mine is not None and theirs is not None and mine > theirs:
                    above.append(f"{label} > {'Optimus' if b != 'inductor' else b}")
        optimus = by.get("inductor+optimus")
        passes = (optimus or {}).get("details", {}).get("optimus_passes", {})
        fired = [p for p in TARGETS.get(model, ()) if passes.get(p)]
        matched = model in TARGETS and optimus and not optimus["error"]  # a failed compile counts nothing
        cells.append(", ".join(fired) if fired else ("**none**" if matched else "-"))
        cells += [_verdict(optimus), _verdict(egg), "**" + "; ".join(above) + "**" if above else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The cases of each of PyTorch's test files, by name prefix (:mod:`optimus_egg.bench.optimus_cases`).
_TEST_FILES = (("split_cat_", "split/cat"), ("group_batch_", "group/batch"))


def by_test_file(results: dict[str, Any]) -> str:
    """Per test file and mode: the cases, the launches and kernel objects each backend adds up to,
    and the cases where optimus_egg's kernel objects are above the better peer's (a peer's output
    that aliases an input counts one copy) or above plain Inductor's, or where it failed or was
    wrong."""
    rows = {(r["model"], r["mode"], r["backend"]): r for r in results["rows"]}
    backends = ("inductor", "inductor+optimus", "optimus_egg")
    lines = ["| file, mode | cases | launches / kernel objects: inductor | + Optimus | optimus_egg "
             "| above the better peer | above inductor | failed or wrong |", "|" + "---|" * 8]
    for prefix, label in _TEST_FILES:
        for mode in ("inference", "training"):
            models = [m for m, md, b in rows if md == mode and b == "optimus_egg" and m.startswith(prefix)]
            if not models:
                continue
            totals = {b: [0, 0] for b in backends}
            above_peer = above_inductor = bad = 0
            for model in models:
                by = {b: rows.get((model, mode, b)) for b in backends}
                for b, row in by.items():
                    totals[b][0] += (row or {}).get("launches") or 0
                    totals[b][1] += (row or {}).get("kernels") or 0
                egg = by["optimus_egg"]
                if egg["kernels"] is None or egg["error"] or egg["equal"] is False:
                    bad += 1
                    continue
                floors = {b: _floor(row, "kernels") for b, row in by.items() if b != "optimus_egg" and row
                          and row["kernels"] is not None and not row["error"] and row["equal"] is not False}
                above_peer += bool(floors) and egg["kernels"] > min(floors.values())
                above_inductor += "inductor" in floors and egg["kernels"] > floors["inductor"]
            cells = [f"{label}, {mode}", str(len(models)), *(f"{t[0]} / {t[1]:,}" for t in totals.values()),
                     str(above_peer), str(above_inductor), str(bad)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    m = meta["machine"]
    lines = [f"Command: `{meta['command']}` (revision {meta.get('revision') or 'unknown'})  ",
             (f"Machine: {m['name']} ({m['device']}), {m['platform']}, Python {m['python']}, "
             f"torch {m['torch']} ({m['threads']} CPU threads), egglog {m.get('egglog')}  "),
             (f"Date: {meta['date']}; wall time {meta['wall_s'] / 60:.1f} min, CPU time "
             f"{meta['cpu_s'] / 60:.1f} min (this process and the compilers it ran)"), ""]
    if {"inductor", "optimus_egg"} <= set(meta["backends"]):
        lines += ["### Side by side", "", side_by_side(results), ""]
        if "inductor+optimus" in meta["backends"] and any(r["model"].startswith(p)
                                                          for r in results["rows"] for p, _ in _TEST_FILES):
            lines += ["### PyTorch's Optimus test patterns", "", by_test_file(results), ""]
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
        paths += plot(results, out)
    return paths
