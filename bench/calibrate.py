"""Predicted vs measured kernels per benchmark model: ``python -m optimus_egg.bench.calibrate``.

For every model, the graph as captured and the graph ``optimize`` returns under each cost model
are compiled by Inductor as the ``optimus_egg`` backend compiles them (inference, FX graph cache
off, the backend's post-grad pass: stacks of weights scattered in one kernel) and counted: kernel objects
(``torch._inductor.metrics.generated_kernel_count``), extern calls and launches in the
generated wrappers (``run_and_get_code``), and eager launches. Beside them, what each cost model
predicts for the same graph. The error column compares the Inductor-aware model's kernel objects +
extern calls with Inductor's, and the eager model's launches with the same measured figure (what
one would predict without modelling fusion).

``--extract`` instead times greedy against exact (ILP) extraction on each model's e-graph.

``--gpu-results results.json`` checks the CUDA variant of the Inductor-aware model against a GPU
run of ``optimus-egg bench`` (a GPU is rarely at hand; its figures are): for the ``inductor`` and
``optimus_egg`` inference rows, the Triton kernels and extern calls predicted for the graph,
captured and optimized here, against the Triton and extern launches the profiler saw there.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable

import torch

from optimus_egg.backend import BackwardPass
from optimus_egg.bench.models import Factory, chain, rec_demo
from optimus_egg.bench.harness import SUITES, suite
from optimus_egg.counting import eager_launches, wrapper_extern_calls, wrapper_launches
from optimus_egg.extract.cost import KernelCost
from optimus_egg.extract.kernels import Prediction
from optimus_egg.extract.inductor import InductorCost
from optimus_egg.extract.select import translated
from optimus_egg.frontend import translate
from optimus_egg.pipeline import Options, capture, optimize_graph

def models(names: list[str] | None = None, suite_name: str = "zoo") -> dict[str, Factory]:
    """The models of ``bench/models.py`` and a bench suite's (quick; the zoo by default, any
    model of any suite by name); ``chainN`` is the cruft chain with N blocks."""
    out: dict[str, Factory] = {"chain12": chain(12), "rec_demo": rec_demo()} if suite_name in ("zoo", "all") else {}
    for name in names or []:
        if re.fullmatch(r"chain\d+", name):
            out[name] = chain(int(name[5:]))
    out.update(suite("all" if names else suite_name, quick=True))
    if names:
        unknown = set(names) - set(out)
        if unknown:
            raise SystemExit(f"unknown models {sorted(unknown)}; valid: {', '.join(out)}")
        out = {k: out[k] for k in names}
    return out


def measure(model: Callable[..., Any], inputs: tuple[Any, ...]) -> dict[str, int]:
    """What Inductor generates for ``model`` in inference, with the backend's post-grad pass (the
    cost models predict what the backend runs; on a graph without stacks of weights the pass
    changes nothing)."""
    from torch._inductor import metrics
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    metrics.reset()
    with (torch._inductor.config.patch(fx_graph_cache=False, post_grad_custom_post_pass=BackwardPass(Options())),
          torch.no_grad()):
        _, codes = run_and_get_code(torch.compile(model, backend="inductor"), *inputs)
    return {"objects": metrics.generated_kernel_count, "extern": sum(wrapper_extern_calls(c) for c in codes),
            "launches": sum(wrapper_launches(c) for c in codes)}


def predict(gm: torch.fx.GraphModule) -> tuple[float, Prediction]:
    """(eager launches, Inductor prediction) for a captured graph."""
    tr = translate(gm)
    dag = translated(tr)
    return KernelCost(tr.registry).total(dag), InductorCost(tr.registry).predict(dag)


def _error(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured:+.0%}" if measured else ("0%" if predicted == 0 else "inf")


def calibrate(factories: dict[str, Factory], cost_models: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name, factory in factories.items():
        model, inputs = factory()
        model.eval()
        with torch.no_grad():  # measured in inference (:func:`measure`): nothing saved for a backward
            graphs = [("captured", capture(model, inputs))]
            for cm in cost_models:
                gm, report = optimize_graph(capture(model, inputs), Options(cost_model=cm, strict=True))
                graphs.append((f"optimized ({cm})", gm))
        for label, gm in graphs:
            eager, pred = predict(gm)
            got = measure(gm, inputs)
            rows.append({"model": name, "graph": label, "eager launches": eager_launches(gm, *inputs),
                         "eager model": eager, "kobj": got["objects"], "extern": got["extern"],
                         "launches": got["launches"], "pred kobj": pred.objects, "pred extern": pred.extern,
                         "pred kernels": pred.kernels})
            print(_format([rows[-1]], header=len(rows) == 1), flush=True)
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    """How often the Inductor-aware model's kernel objects + extern calls are exact, per graph."""
    errors = [r["pred kobj"] + r["pred extern"] - r["kobj"] - r["extern"] for r in rows]
    exact = sum(e == 0 for e in errors)
    return (f"\n{len(rows)} graphs: inductor model exact on {exact}, under on {sum(e < 0 for e in errors)}, "
            f"over on {sum(e > 0 for e in errors)}; total |error| {sum(map(abs, errors))} kernel objects + extern "
            f"calls of {sum(r['kobj'] + r['extern'] for r in rows)} measured")


_COLUMNS = ("model", "graph", "eager launches", "eager model", "Inductor kobj+extern", "inductor model",
            "error (inductor model)", "error (eager model)", "launches (CPU wrapper)", "pred fused kernels+extern")


def _format(rows: list[dict[str, Any]], header: bool = True) -> str:
    lines = []
    if header:
        lines += ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for r in rows:
        measured = r["kobj"] + r["extern"]
        predicted = r["pred kobj"] + r["pred extern"]
        cells = [r["model"], r["graph"], r["eager launches"], f"{r['eager model']:g}",
                 f"{measured} ({r['kobj']}+{r['extern']})", f"{predicted} ({r['pred kobj']}+{r['pred extern']})",
                 _error(predicted, measured), _error(r["eager model"], measured), r["launches"],
                 r["pred kernels"] + r["pred extern"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def compare_extractors(factories: dict[str, Factory], cost_models: list[str], seconds: float) -> None:
    print("| model | cost model | e-nodes | greedy cost | greedy s | ILP cost | ILP s | ILP status | "
          "ILP variables | greedy worse by |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, factory in factories.items():
        model, inputs = factory()
        for cm in cost_models:
            _, r = optimize_graph(capture(model, inputs), Options(cost_model=cm, extractor="compare",
                                                                  ilp_seconds=seconds, strict=True))
            g, i = r.extraction["greedy"], r.extraction["ilp"]
            ilp_cost = "-" if i["cost"] is None else f"{i['cost']:g}"
            print(f"| {name} | {cm} | {r.enodes} | {g['cost']:g} | {g['seconds']:.3f} | {ilp_cost} | "
                  f"{i['seconds']:.2f} | {i['status']} | {i['variables']} | {r.extraction['greedy_worse_by']:g} |",
                  flush=True)


def against_gpu(path: str, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Predicted (CUDA) vs profiled launches for each model of a GPU bench run's results."""
    import json
    from pathlib import Path

    measured = {(r["model"], r["backend"]): r for r in json.loads(Path(path).read_text())["rows"]
                if r["mode"] == "inference" and r["backend"] in ("inductor", "optimus_egg") and r.get("launches")}
    factories = models(names or sorted({m for m, _ in measured} & set(models())))
    print("| model | graph | Triton kernels (seen) | predicted | error | extern launches (seen) | extern calls "
          "predicted | launches per extern call |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name, factory in factories.items():
        model, inputs = factory()
        model.eval()
        for backend in ("inductor", "optimus_egg"):
            seen = measured.get((name, backend))
            if seen is None:
                continue
            gm = capture(model, inputs)
            if backend == "optimus_egg":
                gm, _ = optimize_graph(gm, Options(strict=True))
            tr = translate(gm)
            pred = InductorCost(tr.registry, device="cuda").predict(translated(tr))
            triton, extern = seen["triton_launches"], seen["launches"] - seen["triton_launches"]
            rows.append({"model": name, "graph": backend, "triton": triton, "pred kernels": pred.kernels,
                         "extern": extern, "pred extern": pred.extern})
            per_call = f"{extern / pred.extern:.2f}" if pred.extern else "-"
            print(f"| {name} | {backend} | {triton} | {pred.kernels} | {_error(pred.kernels, triton)} | {extern} | "
                  f"{pred.extern} | {per_call} |", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", help="model names, from any suite (default: the suite's)")
    parser.add_argument("--suite", default="zoo", choices=SUITES, help="the bench suite whose models to run")
    parser.add_argument("--cost-models", nargs="+", default=["eager", "inductor"])
    parser.add_argument("--extract", action="store_true", help="greedy vs exact extraction instead")
    parser.add_argument("--ilp-seconds", type=float, default=10.0)
    parser.add_argument("--gpu-results", metavar="JSON", help="a GPU bench run's results.json to check the "
                        "CUDA model against")
    args = parser.parse_args()
    if args.gpu_results:
        against_gpu(args.gpu_results, args.models)
        return
    factories = models(args.models, args.suite)
    if args.extract:
        compare_extractors(factories, args.cost_models, args.ilp_seconds)
    else:
        print(summary(calibrate(factories, args.cost_models)))


if __name__ == "__main__":
    main()
