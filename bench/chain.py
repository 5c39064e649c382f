"""Measure the cruft chain against its clean twin: ``python -m optimus_egg.bench.chain 100``.

Prints eager launches before/after ``optimize`` (and the twin's floor), the optimizer's phases,
and Inductor kernel objects and compile time for ``inductor`` vs ``optimus_egg`` in inference
and one training step (FX graph cache off, so every compile is real).
"""

from __future__ import annotations

import argparse
import time

import torch

from optimus_egg.backend import REPORTS
from optimus_egg.bench.models import chain
from optimus_egg.counting import eager_launches
from optimus_egg.pipeline import Options, capture, optimize_graph


def compile_step(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], backend: str, train: bool
                 ) -> tuple[int, float, bool]:
    from torch._inductor import metrics

    torch._dynamo.reset()
    metrics.reset()
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    with torch._inductor.config.patch(fx_graph_cache=False), torch.set_grad_enabled(train):
        out = torch.compile(model, backend=backend)(*inputs)
        if train:
            out.sum().backward()
    seconds = time.perf_counter() - start
    grads = [p.grad for p in model.parameters()] if train else []
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(train):
        ref = model(*inputs)
        if train:
            ref.sum().backward()
    ok = torch.allclose(out, ref, atol=1e-5) and all(
        torch.allclose(g, p.grad, atol=1e-5) for g, p in zip(grads, model.parameters()))
    return metrics.generated_kernel_count, seconds, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("blocks", type=int, nargs="+")
    parser.add_argument("--no-compile", action="store_true", help="only time optimize()")
    args = parser.parse_args()
    for n in args.blocks:
        model, inputs = chain(n)()
        twin, _ = chain(n, clean=True)()
        gm, report = optimize_graph(capture(model, inputs), Options(strict=True))
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in report.seconds.items())
        print(f"N={n}: eager launches {eager_launches(model, *inputs)} → {eager_launches(gm, *inputs)} "
              f"(twin {eager_launches(twin, *inputs)}); {report.enodes} e-nodes, {report.iterations} "
              f"iterations ({report.stop_reason}); optimize {report.total_seconds:.2f}s ({phases})")
        if args.no_compile:
            continue
        for train in (False, True):
            for name, m, backend in (("cruft", model, "inductor"), ("cruft", model, "optimus_egg"),
                                     ("twin", twin, "inductor")):
                REPORTS.clear()
                kernels, seconds, ok = compile_step(m, inputs, backend, train)
                opt = sum(r.total_seconds for r in REPORTS)
                print(f"  {'training' if train else 'inference':9} {name:5} {backend:11}: kernel objects "
                      f"{kernels}, compile+step {seconds:.1f}s (optimize {opt:.2f}s), equal to eager {ok}")


if __name__ == "__main__":
    main()
