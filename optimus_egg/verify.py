"""``verify=True``: the rewritten graph is run against the graph as written, on random inputs,
before it is used.

For rule sets of one's own. A rule whose side condition is wrong (``relu(x) → x``) changes values
without any error: the e-graph, the extractor and the emitter all see a valid graph. Checked
here, once per compile, such a graph falls back with the usual one warning, which names the rules
that fired and the family each came from, instead of giving wrong answers at run time. The
check costs one run of each graph on the CPU or GPU the graph names, so it is off by default;
the built-in rules are tested the same way by the test suite and the fuzzer.

Random inputs are drawn from each input's fake value: floats from a normal distribution, integers
and booleans zero (an index that is always in range). Each graph runs on its own copy of the
inputs under one seed, and what it returns and what it writes to its inputs are compared. The
random inputs are one more copy of every input, a model's parameters included (Dynamo passes them
as inputs); an input the graph writes to is copied again for each run.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from optimus_egg import optable
from optimus_egg.frontend import mutated_storages

#: (rtol, atol) per dtype: a batched matmul or a fused op may sum in another order.
TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}
DEFAULT_TOLERANCE = (1e-3, 1e-4)


class Mismatch(RuntimeError):
    """The rewritten graph computes something else than the graph as written."""


def check(old: fx.GraphModule, new: fx.GraphModule, fired: str, batch_random: bool) -> str:
    """Raise :class:`Mismatch` where ``new`` differs from ``old`` on random inputs; return
    "passed", or why nothing was compared ("skipped: ...")."""
    with _disable_current_modes():  # (a post-grad pass may run under Inductor's fake mode)
        return _check(old, new, fired, batch_random)


def _check(old: fx.GraphModule, new: fx.GraphModule, fired: str, batch_random: bool) -> str:
    inputs = random_inputs(old)
    if isinstance(inputs, str):
        return f"skipped: {inputs}"
    if batch_random and any(optable.draws_random(n) for n in old.graph.nodes):
        return "skipped: batch_random draws other masks"
    placeholders = old.graph.find_nodes(op="placeholder")
    storages = mutated_storages(old.graph)
    written = {i for i, n in enumerate(placeholders) if optable.storage_key(optable.val(n)) in storages}
    try:
        want = _run(old, inputs, written)
    except Exception as exc:  # noqa: BLE001 - e.g. an assert on data the random inputs break
        return f"skipped: the graph as written raised on random inputs ({type(exc).__name__}: {exc})"
    try:
        got = _run(new, inputs, written)
    except Exception as exc:  # noqa: BLE001 - the rewritten graph fails where the original runs
        raise Mismatch(f"verify: the rewritten graph raised {type(exc).__name__}: {exc}; rules fired: {fired}") from exc
    for (what, a), (_, b) in zip(want, got):
        if (diff := _differs(a, b)) is not None:
            raise Mismatch(f"verify: {what} differs from the graph as written on random inputs ({diff}); "
                           f"rules fired: {fired}")
    return "passed"


def random_inputs(gm: fx.GraphModule) -> list[Any] | str:
    """A random tensor for each placeholder, or why none can be made."""
    out = []
    for node in gm.graph.find_nodes(op="placeholder"):
        v = optable.val(node)
        if not isinstance(v, torch.Tensor):
            if isinstance(v, (int, float, bool)) and not isinstance(v, torch.SymInt):
                out.append(v)
                continue
            return f"input {node.name} is not a tensor of known value"
        sizes = [optable.static_int(s) for s in (*v.shape, *v.stride(), v.storage_offset())]
        if None in sizes:
            return f"input {node.name} has symbolic sizes"
        out.append(_tensor(v))
    return out


def _tensor(v: torch.Tensor) -> torch.Tensor:
    """A tensor laid out as ``v`` (any strides, an expanded one included), random where it can be."""
    extent = 1 + v.storage_offset() + sum((s - 1) * st for s, st in zip(v.shape, v.stride()) if s > 0)
    if any(s == 0 for s in v.shape):
        extent = v.storage_offset()
    if v.dtype.is_floating_point or v.dtype.is_complex:
        base = torch.randn(extent, dtype=v.dtype, device=v.device)
    else:
        base = torch.zeros(extent, dtype=v.dtype, device=v.device)
    return base.as_strided(v.shape, v.stride(), v.storage_offset())


def _run(gm: fx.GraphModule, inputs: Sequence[Any], written: set[int]) -> list[tuple[str, Any]]:
    """What ``gm`` returns and the inputs it writes to (positions ``written``) afterwards, each
    named. Only those are copied: the others (a model's parameters among them) are shared."""
    mine = [x.clone() if i in written else x for i, x in enumerate(inputs)]
    devices = sorted({x.device.index or 0 for x in mine if isinstance(x, torch.Tensor) and x.is_cuda})
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(0)
        out = gm(*mine)
    results = [(f"output {i}", x) for i, x in enumerate(pytree.tree_leaves(out))]
    return results + [(f"input {i} after the call", mine[i]) for i in sorted(written)]


def _differs(a: Any, b: Any) -> str | None:
    """How ``b`` differs from ``a``, or None."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return None if type(a) is type(b) and a == b else f"{b!r} against {a!r}"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{b.dtype}{list(b.shape)} against {a.dtype}{list(a.shape)}"
    a, b = a.detach(), b.detach()
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return None if torch.equal(a, b) else "values differ"
    rtol, atol = TOLERANCE.get(a.dtype, DEFAULT_TOLERANCE)
    if torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return None
    return f"largest difference {(a - b).abs().nan_to_num(nan=float('inf')).max().item():.3g}"
