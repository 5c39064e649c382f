"""``optimus-egg``: see what the optimizer does to a model."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Sequence

import torch


def _inductor_step(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], backend: str,
                   train: bool) -> dict[str, Any]:
    """Compile ``model`` with ``backend``, run one step, count what Inductor generated."""
    from torch._inductor import metrics
    from torch._inductor.utils import run_and_get_code

    from optimus_egg.counting import wrapper_launches

    torch._dynamo.reset()
    metrics.reset()
    compiled = torch.compile(model, backend=backend)
    model.zero_grad(set_to_none=True)

    def step() -> Any:
        out = compiled(*inputs)
        if train:
            out.float().sum().backward()
        return out

    start = time.perf_counter()
    with torch._inductor.config.patch(fx_graph_cache=False), torch.set_grad_enabled(train):
        out, codes = run_and_get_code(step)
    seconds = time.perf_counter() - start
    grads = [p.grad.clone() if p.grad is not None else None for p in model.parameters()]
    return {"out": out.detach(), "grads": grads, "compile_s": seconds,
            "launches": sum(wrapper_launches(c) for c in codes), "kernels": metrics.generated_kernel_count}


def _eager(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], train: bool) -> dict[str, Any]:
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(train):
        out = model(*inputs)
    if train:
        out.float().sum().backward()
    return {"out": out.detach(), "grads": [p.grad.clone() if p.grad is not None else None
                                           for p in model.parameters()]}


def _results_match(a: dict[str, Any], b: dict[str, Any], train: bool) -> bool:
    """Equal outputs (and, training, gradients) of two runs, to float tolerance."""
    ok = torch.allclose(a["out"], b["out"], rtol=1e-4, atol=1e-5)
    if train:
        ok = ok and all((x is None and y is None) or torch.allclose(x, y, rtol=1e-4, atol=1e-5)
                        for x, y in zip(a["grads"], b["grads"]))
    return ok


def demo(args: argparse.Namespace) -> int:
    from optimus_egg import optimize
    from optimus_egg.backend import REPORTS
    from optimus_egg.bench.models import rec_demo
    from optimus_egg.counting import eager_launches

    model, inputs = rec_demo()()
    print("optimus_egg demo: RecDemo (split dense features → per-feature towers, pooled "
          "embeddings stacked and unbound, split/cat cruft)\n")
    gm, report = optimize(model, inputs)
    before, after = eager_launches(model, *inputs), eager_launches(gm, *inputs)
    print(f"eager-equivalent kernel launches (inference): {before} before, {after} after "
          f"(cost model: {report.kernels_before:g} → {report.kernels_after:g})")
    print(f"optimization: {report.total_seconds * 1e3:.0f} ms, e-graph {report.enodes} e-nodes, "
          f"{report.iterations} iterations ({report.stop_reason})")
    print("rules fired: " + ", ".join(f"{k}×{v}" for k, v in sorted(report.rules_fired.items())) + "\n")

    rows = []
    for train in (False, True):
        ref = _eager(model, inputs, train)
        for backend in ("inductor", "optimus_egg"):
            REPORTS.clear()
            got = _inductor_step(model, inputs, backend, train)
            opt_ms = sum(r.total_seconds for r in REPORTS) * 1e3 if backend == "optimus_egg" else None
            fell_back = any(r.fallback for r in REPORTS)
            rows.append(("training" if train else "inference", backend, got["launches"], got["kernels"],
                         f"{got['compile_s']:.1f}", "-" if opt_ms is None else f"{opt_ms:.0f}",
                         "yes" if _results_match(got, ref, train) else "NO", "FELL BACK" if fell_back else ""))
    header = ("mode", "backend", "launches/step", "kernel objects", "compile s", "optimize ms",
              "equal to eager", "")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    print("\nlaunches/step: kernel calls in Inductor's generated wrappers (forward + backward); "
          "kernel objects: torch._inductor.metrics.generated_kernel_count.")
    return 0 if all(r[6] == "yes" for r in rows) else 1


def rules(args: argparse.Namespace) -> int:
    from optimus_egg.egraph import check_rules
    from optimus_egg.rewrites import Rule, all_family_names, families

    try:  # a module of one's own is checked as the optimizer would (egglog errors, clashing names)
        loaded = families([*all_family_names(), *args.families])
        if args.families:
            check_rules(loaded)
    except ValueError as exc:
        print(f"optimus-egg rules: {exc}", file=sys.stderr)
        return 2
    rows = []
    for fam in loaded:
        for r in fam.rules:
            shape = f"{r.lhs} → {r.rhs}" if isinstance(r, Rule) else f"{' '.join(r.query)} ⇒ {' '.join(r.actions)}"
            when = f"  if {' '.join(r.when)}" if isinstance(r, Rule) and r.when else ""
            rows.append((r.name, fam.name, r.stage, r.covers, shape + when))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]  # the last column runs on
    for row in rows:
        print(" ".join([*(c.ljust(w) for c, w in zip(row, widths)), row[4]]))
    return 0


def tune(args: argparse.Namespace) -> int:
    from optimus_egg import tune as tuning

    print(tuning.run(args))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="optimus-egg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from optimus_egg import explain

    commands: dict[str, Callable[[argparse.Namespace], int]] = {"demo": demo, "rules": rules,
                                                                "explain": explain.main}
    sub.add_parser("demo", help="optimize the shipped recommendation model and compare with inductor")
    sub.add_parser("rules", help="list every rule: name, family, stage, Optimus pass covered, before → after"
                   ).add_argument("families", nargs="*", metavar="MODULE",
                                  help="also list your own rule modules (import path or .py file)")
    explain.configure(sub.add_parser("explain", help="what the optimizer does to your model: kernels, "
                                      "rules, e-graph, rewritten regions before → after"))
    from optimus_egg.bench import harness

    harness.add_arguments(sub.add_parser("bench", help="the benchmark zoo under eager, inductor, inductor "
                                         "+ Optimus and optimus_egg, side by side"))
    commands["bench"] = harness.main
    from optimus_egg import tune as tuning

    tuning.add_arguments(sub.add_parser("tune", help="time each op category on this device and write a "
                                        "cost profile (cost_profile=PATH)"))
    commands["tune"] = tune
    from optimus_egg import discover

    discover.configure(sub.add_parser("discover", help="enumerate small programs and list the equalities "
                                      "the rules do not prove, with candidate rules"))
    commands["discover"] = discover.main
    args = parser.parse_args(argv)
    try:
        with explain.on_path(os.getcwd()):  # `mypkg.models:f`, `--families mypkg.rules` from here, as `python -m`
            return commands[args.command](args)
    except BrokenPipeError:  # `optimus-egg rules | head`: the reader is gone, and so is a traceback's
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit
        return 1


if __name__ == "__main__":
    sys.exit(main())
