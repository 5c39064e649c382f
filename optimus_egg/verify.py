"""``verify=True``: the rewritten graph is run against the graph as written, on random inputs,
before it is used.

For rule sets of one's own. A rule whose side condition is wrong (``relu(x) → x``) changes values
without any error: the e-graph, the extractor and the emitter all see a valid graph. Checked
here, once per compile, such a graph falls back with the usual one warning, which names the rules
that fired and the module each came from, instead of giving wrong answers at run time. The check
costs one run of each graph on the device the graph names, so it is off by default; the built-in
rules are tested the same way by the test suite and the fuzzer.

Random inputs are drawn from each input's fake value: floats from a normal distribution, integers
and booleans zero (an index that is always in range). Each graph runs on its own copy of the
inputs either graph writes to, under one seed, and what it returns and what it writes are
compared, relative to the size of each value (random weights make large activations). The random
inputs are one more copy of every input, a model's parameters included where they are inputs (as
under ``torch.compile``). A tensor the graph holds as an attribute (``optimize``'s parameters and
buffers) is the model's own: the buffers are put back as they were before each run and after.
Random-number generators are left as they were.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from optimus_egg import effects, nodes
from optimus_egg.frontend import mutated_storages

#: (rtol, atol) per dtype, against the largest magnitude of each value: a batched matmul or a
#: fused op may sum in another order.
TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}
DEFAULT_TOLERANCE = (1e-4, 1e-5)


class Mismatch(RuntimeError):
    """The rewritten graph computes something else than the graph as written."""


def check(old: fx.GraphModule, new: fx.GraphModule, fired: str, batch_random: bool) -> str:
    """Raise :class:`Mismatch` where ``new`` differs from ``old`` on random inputs; return
    "passed", or why nothing was compared ("skipped: ...")."""
    with _disable_current_modes():  # (a post-grad pass may run under Inductor's fake mode)
        return _check(old, new, fired, batch_random)


def _check(old: fx.GraphModule, new: fx.GraphModule, fired: str, batch_random: bool) -> str:
    if batch_random and any(effects.draws_random(n) for n in old.graph.nodes):
        return "skipped: batch_random draws other masks"
    placeholders = old.graph.find_nodes(op="placeholder")
    devices = {v.device for n in placeholders if isinstance(v := nodes.val(n), torch.Tensor)}
    buffers = _Buffers(old, new)
    with _rng_as_it_was(devices), _restored(buffers):
        try:
            inputs = random_inputs(old)
        except Exception as exc:  # noqa: BLE001 - a dtype with no random numbers, a sparse layout
            return f"skipped: no random inputs ({type(exc).__name__}: {exc})"
        if isinstance(inputs, str):
            return f"skipped: {inputs}"
        if any(x.is_cuda and not (x.is_floating_point() or x.is_complex()) for x in inputs if isinstance(x, torch.Tensor)):
            # (an index computed from a zero, emb(i - 1), is a device-side assert no one can catch)
            return "skipped: integer inputs on a GPU"
        storages = mutated_storages(old.graph) | mutated_storages(new.graph)
        written = {i for i, n in enumerate(placeholders) if effects.storage_key(nodes.val(n)) in storages}
        try:
            want = _run(old, inputs, written, devices, buffers)
        except Exception as exc:  # noqa: BLE001 - e.g. an assert on data the random inputs break
            return f"skipped: the graph as written raised on random inputs ({type(exc).__name__}: {exc})"
        try:
            got = _run(new, inputs, written, devices, buffers)
        except torch.OutOfMemoryError:
            return "skipped: out of memory"
        except Exception as exc:  # noqa: BLE001 - the rewritten graph fails where the original runs
            raise Mismatch(f"verify: the rewritten graph raised {type(exc).__name__}: {exc}; "
                           f"rules fired: {fired}") from exc
    if len(want) != len(got):
        raise Mismatch(f"verify: the rewritten graph returns {len(got)} values, the graph as written "
                       f"{len(want)}; rules fired: {fired}")
    for (what, a), (_, b) in zip(want, got):
        if (diff := _differs(a, b)) is not None:
            raise Mismatch(f"verify: {what} differs from the graph as written on random inputs ({diff}); "
                           f"rules fired: {fired}")
    return "passed"


def random_inputs(gm: fx.GraphModule) -> list[Any] | str:
    """A random tensor for each placeholder, or why none can be made."""
    out = []
    for node in gm.graph.find_nodes(op="placeholder"):
        v = nodes.val(node)
        if not isinstance(v, torch.Tensor):
            if isinstance(v, (int, float, bool)):
                out.append(v)
                continue
            return f"input {node.name} is not a tensor of known value (a symbolic size?)"
        sizes = [nodes.static_int(s) for s in (*v.shape, *v.stride(), v.storage_offset())]
        if None in sizes:
            return f"input {node.name} has symbolic sizes"
        out.append(_tensor(v))
    return out


def _tensor(v: torch.Tensor) -> torch.Tensor:
    """A tensor laid out as ``v`` (any strides, an expanded one included), random where it can be."""
    extent = 1 + v.storage_offset() + sum((s - 1) * st for s, st in zip(v.shape, v.stride()) if s > 0)
    if any(s == 0 for s in v.shape):
        extent = v.storage_offset()
    if v.dtype.is_floating_point or v.dtype.is_complex:  # (drawn in a dtype that has a sampler, then cast)
        drawn = torch.complex64 if v.dtype.is_complex else torch.float32
        base = torch.randn(extent, dtype=drawn, device=v.device).to(v.dtype)
    else:
        base = torch.zeros(extent, dtype=v.dtype, device=v.device)
    return base.as_strided(v.shape, v.stride(), v.storage_offset())


def _run(gm: fx.GraphModule, inputs: Sequence[Any], written: set[int], devices: set[torch.device],
         buffers: _Buffers) -> list[tuple[str, Any]]:
    """What ``gm`` returns and the inputs it writes to (positions ``written``) afterwards, each
    named. Only those are copied: the others (a model's parameters among them) are shared. The
    graph is interpreted: the code a post-grad graph's module holds predates Inductor's passes."""
    mine = [x.clone() if i in written else x for i, x in enumerate(inputs)]
    buffers.put_back()
    _seed(devices)
    with torch.no_grad():
        out = fx.Interpreter(gm).run(*mine)
    results = [(f"output {i}", x) for i, x in enumerate(pytree.tree_leaves(out))]
    return results + [(f"input {i} after the call", mine[i]) for i in sorted(written)] + buffers.after()


def _seed(devices: set[torch.device]) -> None:
    """The same seed for both runs, on the generators :func:`_rng_as_it_was` restores only."""
    torch.default_generator.manual_seed(0)
    for d in devices:
        if d.type == "cuda":
            torch.cuda.default_generators[d.index or 0].manual_seed(0)


@contextlib.contextmanager
def _restored(buffers: _Buffers) -> Iterator[None]:
    try:
        yield
    finally:
        buffers.put_back()


@contextlib.contextmanager
def _rng_as_it_was(devices: set[torch.device]) -> Iterator[None]:
    cuda = sorted({d.index or 0 for d in devices if d.type == "cuda"})
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        yield


class _Buffers:
    """The tensors the graphs hold as attributes that are not parameters (a batch norm's running
    statistics, a step counter): the model's own. Put back as they were before each run and after
    the check (it must not train the model), and compared after each run."""

    def __init__(self, *gms: fx.GraphModule) -> None:
        held: dict[int, tuple[str, torch.Tensor]] = {}
        for gm in gms:
            for node in gm.graph.find_nodes(op="get_attr"):
                t = functools.reduce(getattr, node.target.split("."), gm)
                if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter):
                    held.setdefault(id(t), (node.target, t))
        self.held = [(name, t, t.detach().clone()) for name, t in held.values()]

    def put_back(self) -> None:
        with torch.no_grad():
            for _, t, saved in self.held:
                t.copy_(saved)

    def after(self) -> list[tuple[str, torch.Tensor]]:
        return [(f"buffer {name} after the call", t.detach().clone()) for name, t, _ in self.held]


def _differs(a: Any, b: Any) -> str | None:
    """How ``b`` differs from ``a``, or None."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return None if type(a) is type(b) and a == b else f"{b!r} against {a!r}"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{b.dtype}{list(b.shape)} against {a.dtype}{list(a.shape)}"
    a, b = a.detach(), b.detach()
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return None if torch.equal(a, b) else "values differ"
    if a.numel() == 0:
        return None
    rtol, atol = TOLERANCE.get(a.dtype, DEFAULT_TOLERANCE)
    a, b = a.to(torch.complex128 if a.is_complex() else torch.float64), b.to(torch.complex128 if b.is_complex() else torch.float64)
    if not torch.equal(a.isnan(), b.isnan()):
        return "NaNs in other places"
    finite = ~a.isnan()
    scale = a[finite].abs().max().item() if finite.any() else 0.0
    worst = (a - b)[finite].abs().max().item() if finite.any() else 0.0
    return None if worst <= atol + rtol * scale else f"largest difference {worst:.3g}, largest value {scale:.3g}"
