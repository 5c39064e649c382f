"""PNG plots of a benchmark run: kernel objects and step time per model and backend.

One figure per quantity, one panel per mode, one bar group per model, one bar per backend.
Both use a log scale: the cruft chain has hundreds of kernels where clean models have a handful,
and step time is shown as the ratio to ``inductor`` (so models of different sizes share an axis,
and 2× slower sits as far from 1 as 2× faster). A backend keeps its colour in both figures.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

MODES = ("inference", "training")


def available() -> bool:
    """Whether matplotlib, which only the plots need (``pip install 'optimus_egg[bench]'``), is
    installed."""
    return importlib.util.find_spec("matplotlib") is not None


def _grouped(ax: Any, rows: list[dict[str, Any]], key: str, backends: list[str], models: list[str],
             colors: dict[str, str]) -> None:
    width = 0.8 / max(len(backends), 1)
    values = {(r["model"], r["backend"]): r[key] for r in rows}
    for i, backend in enumerate(backends):
        xs = [m + (i - (len(backends) - 1) / 2) * width for m in range(len(models))]
        ys = [values.get((model, backend)) for model in models]
        ax.bar([x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None],
               width, label=backend, color=colors[backend])
    ax.set_xticks(range(len(models)), models, rotation=30, ha="right", fontsize=8)


def plot(results: dict[str, Any], out: Path) -> list[Path]:
    """Write ``kernels.png`` and ``step_time.png`` into ``out``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    every = results["meta"]["backends"]
    colors = {b: f"C{i}" for i, b in enumerate(every)}
    figures = (
        ("kernels.png", "kernels", [b for b in every if b != "eager"], "Inductor kernel objects"),
        ("step_time.png", "step_ratio", every, "step time / inductor's"),
    )
    paths = []
    for filename, key, backends, ylabel in figures:
        fig, axes = plt.subplots(1, len(modes), figsize=(3 + 3 * len(modes) + len(models), 4.5), squeeze=False)
        for ax, mode in zip(axes[0], modes):
            _grouped(ax, [r for r in rows if r["mode"] == mode], key, backends, models, colors)
            ax.set_title(mode)
            ax.set_ylabel(ylabel)
            if ax.has_data():
                ax.set_yscale("log")
            if key == "step_ratio":
                ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        axes[0][-1].legend(fontsize=8)
        fig.suptitle(f"{results['meta']['machine']['name']} ({results['meta']['machine']['device']}), "
                     f"{results['meta']['date']}", fontsize=9)
        fig.tight_layout()
        path = out / filename
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
