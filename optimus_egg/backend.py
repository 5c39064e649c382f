"""``torch.compile(model, backend="optimus_egg")``: rewrite Dynamo's graph, then Inductor.

The rewrite runs on Dynamo's torch-level graph, before AOTAutograd: autograd then derives the
backward of the clean forward, so training loses the cruft on both passes (a joint-graph pass
would have to match backward patterns too; see shared/reference/inductor-hooks.md). Mutation is
handled by the frontend's effect chain, and every node carries Dynamo's fake ``example_value``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import torch.fx as fx

from optimus_egg.pipeline import Options, Report, optimize_graph

#: Reports of the most recent graphs this backend optimized, newest last.
REPORTS: deque[Report] = deque(maxlen=64)

#: Inductor config for a rewritten graph. In-place buffer reuse miscompiled the backward of the
#: zoo's sequence model as rewritten (embedding and position-table gradients off by 0.06 on CPU,
#: torch 2.13; exact under ``aot_eager`` and with this off); an unchanged graph keeps Inductor's
#: defaults.
REWRITTEN_CONFIG: dict[str, Any] = {"inplace_buffers": False}


def optimus_egg_backend(gm: fx.GraphModule, example_inputs: Sequence[Any],
                        options: dict[str, Any] | None = None, mode: str | None = None) -> Any:
    from torch._inductor.compile_fx import compile_fx

    opts = Options.from_kwargs(**(options or {}))
    new_gm, report = optimize_graph(gm, opts)
    REPORTS.append(report)
    return compile_fx(new_gm, example_inputs, config_patches=REWRITTEN_CONFIG if new_gm is not gm else None)
