"""Fit the cost model's weights to the current device: ``optimus-egg tune`` and :func:`tune`.

The cost models count kernels by category (:data:`~optimus_egg.extract.cost.CATEGORIES`), one
each by default. How much a launch of each category really costs depends on the device and the
shapes: a small matmul on a GPU costs a few pointwise launches, a layer norm on a CPU several.
:func:`tune` times one representative op per category at a set of shapes (a standard set, or
the shapes of a model's graph), fits each category's weight as its time relative to a
pointwise launch (geometric mean over the shapes), and returns a
:class:`~optimus_egg.extract.profile.Profile`; ``save`` writes it as JSON, and
``optimize(..., cost_profile=PATH)`` loads it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from optimus_egg.bench import models
from optimus_egg.bench.zoo import zoo
from optimus_egg.cli_options import positive_int
from optimus_egg.extract.cost import CATEGORIES
from optimus_egg.extract.profile import Profile
from optimus_egg.nodes import val
from optimus_egg.pipeline import capture

#: (rows, cols) of the tensors the representatives run on when no model is given: launch-bound
#: (recommendation-sized) up to bandwidth-bound.
STANDARD_SHAPES = ((64, 64), (256, 256), (1024, 1024))


def representatives(rows: int, cols: int, device: str) -> dict[str, Callable[[], Any]]:
    """One op per category on (rows, cols) float32 tensors; each call is one launch in eager."""
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(rows, cols, generator=g).to(device)
    y = torch.randn(rows, cols, generator=g).to(device)
    w = torch.randn(cols, cols, generator=g).to(device)
    half = cols // 2 or 1
    return {
        "pointwise": lambda: torch.relu(x),
        "reduction": lambda: F.layer_norm(x, (cols,)),
        "matmul": lambda: torch.mm(x, w),
        "cat": lambda: torch.cat([x, y], 1),
        "copy": lambda: x[:, :half].contiguous(),
        "extern": lambda: torch.cumsum(x, 1),
    }


def _time(fn: Callable[[], Any], device: str, repeats: int, inner: int) -> float:
    """Seconds per call: the fastest of ``repeats`` runs of ``inner`` back-to-back calls (the
    minimum, not the median: on a shared machine every disturbance only adds time)."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / inner)
        else:
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t) / inner)
    return min(samples)


def measure(shapes: list[tuple[int, int]], device: str, repeats: int = 5, inner: int = 20
            ) -> dict[str, list[float]]:
    """Seconds per launch of each category's representative, per shape."""
    out: dict[str, list[float]] = {c: [] for c in CATEGORIES}
    with torch.no_grad():
        for rows, cols in shapes:
            for cat, fn in representatives(rows, cols, device).items():
                out[cat].append(_time(fn, device, repeats, inner))
    return out


def fit(seconds: dict[str, list[float]]) -> dict[str, float]:
    """Each category's weight: its time relative to a pointwise launch at the same shape,
    averaged geometrically over the shapes (so that no one shape dominates), in pointwise
    launches: pointwise is 1."""
    base = seconds["pointwise"]
    if not base or any(b <= 0 for b in base):
        raise ValueError("pointwise timings must be positive to fit weights")
    return {c: round(math.exp(statistics.fmean(math.log(max(t, 1e-12) / b) for t, b in zip(ts, base))), 4)
            for c, ts in seconds.items()}


def model_shapes(model: torch.nn.Module, example_inputs: tuple[Any, ...], limit: int = 3) -> list[tuple[int, int]]:
    """The most common tensor shapes in a model's graph, as (rows, cols) with the leading
    dims folded into rows."""
    gm = capture(model, example_inputs)
    counts: Counter[tuple[int, int]] = Counter()
    for node in gm.graph.nodes:
        v = val(node)
        if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.is_floating_point():
            try:
                shape = [int(s) for s in v.shape]
            except TypeError:  # a symbolic size
                continue
            cols = shape[-1]
            rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
            if rows * cols > 1:
                counts[(rows, cols)] += 1
    return [s for s, _ in counts.most_common(limit)] or list(STANDARD_SHAPES)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def tune(shapes: list[tuple[int, int]] | None = None, device: str | None = None, repeats: int = 5,
         inner: int = 20) -> Profile:
    """Measure and fit on ``device`` (default: CUDA when present, else CPU)."""
    device = device or default_device()
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; valid: cpu, cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
    shapes = list(shapes or STANDARD_SHAPES)
    seconds = measure(shapes, device, repeats, inner)
    return Profile(device=device, weights=fit(seconds), seconds=seconds, shapes=[list(s) for s in shapes])


# ---------------------------------------------------------------------------------------------
# ``optimus-egg tune``


def _benchmark_models() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]]:
    return {"chain": models.chain(12), "rec_demo": models.rec_demo(), **zoo(quick=True)}


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``"64x64,256x512"`` -> ``[(64, 64), (256, 512)]``."""
    out = []
    for item in text.split(","):
        rows, sep, cols = item.strip().lower().partition("x")
        if not sep or not rows.isdigit() or not cols.isdigit() or int(rows) < 1 or int(cols) < 1:
            raise ValueError(f"bad shape {item!r}: want ROWSxCOLS, e.g. 64x64")
        out.append((int(rows), int(cols)))
    return out


def add_arguments(parser: Any) -> None:
    parser.add_argument("--out", default="optimus_egg_profile.json", help="where to write the profile (JSON; default: %(default)s)")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when present, else cpu")
    parser.add_argument("--shapes", help="ROWSxCOLS,... to time at (default: "
                        + ",".join(f"{r}x{c}" for r, c in STANDARD_SHAPES) + ")")
    parser.add_argument("--model", help="time at the most common shapes of this benchmark model "
                        "(chain, rec_demo or a zoo model)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per op (median)")
    parser.add_argument("--inner", type=positive_int, default=20, help="back-to-back launches per timed run")


def run(args: Any) -> str:
    """The ``optimus-egg tune`` command: measure, fit, write the profile; returns what to print."""
    if args.shapes and args.model:
        raise SystemExit("optimus-egg tune: give --shapes or --model, not both")
    if not Path(args.out).resolve().parent.is_dir():  # found out only after the timing, as a traceback
        raise SystemExit(f"optimus-egg tune: no such directory for --out {args.out!r}")
    try:
        shapes = parse_shapes(args.shapes) if args.shapes else None
    except ValueError as exc:
        raise SystemExit(f"optimus-egg tune: {exc}") from None
    if args.model:
        factories = _benchmark_models()
        if args.model not in factories:
            raise SystemExit(f"optimus-egg tune: unknown model {args.model!r}; valid: {', '.join(factories)}")
        shapes = model_shapes(*factories[args.model]())
    try:
        profile = tune(shapes, args.device, args.repeats, args.inner)
    except ValueError as exc:  # --device cuda without CUDA
        raise SystemExit(f"optimus-egg tune: {exc}") from None
    lines = [f"device {profile.device}, shapes {' '.join(f'{r}x{c}' for r, c in profile.shapes)}",
             f"{'category':10} {'weight':>8}  µs per launch, per shape"]
    for cat in CATEGORIES:
        times = " ".join(f"{t * 1e6:9.1f}" for t in profile.seconds[cat])
        lines.append(f"{cat:10} {profile.weights[cat]:8.3g}  {times}")
    profile.save(args.out)
    lines.append(f"\nwrote {args.out}; use it with optimize(..., cost_profile={args.out!r}) or "
                 f"torch.compile(..., options={{'cost_profile': {args.out!r}}})")
    return "\n".join(lines)
