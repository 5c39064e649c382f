"""``torch.compile(model, backend="optimus_egg")``: rewrite Dynamo's graph, then Inductor.

The rewrite runs on Dynamo's torch-level graph, before AOTAutograd: autograd then derives the
backward of the clean forward, so training loses the cruft on both passes. What autograd writes
that no forward rewrite reaches (the weight gradients of parallel or chained linears, one ``mm``
each) is rewritten once more in the backward graph, at Inductor's post-grad hook
(:class:`BackwardPass`, Inductor's ``post_grad_custom_post_pass``). Mutation is handled by the
frontend's effect chain, and every node carries Dynamo's fake ``example_value``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from optimus_egg import rewrites
from optimus_egg.cleanup import scatter_input_stacks
from optimus_egg.extract.profile import load_profile
from optimus_egg.extract.select import input_device
from optimus_egg.fake_values import call_key, propagate
from optimus_egg.options import Options
from optimus_egg.pipeline import optimize_graph
from optimus_egg.report import Report

#: Reports of the most recent graphs this backend optimized, newest last: Dynamo's graphs, and
#: (:class:`BackwardPass`) the backward graphs Inductor derived from them.
REPORTS: deque[Report] = deque(maxlen=64)
BACKWARD_REPORTS: deque[Report] = deque(maxlen=64)

#: AOTAutograd config for every graph this backend compiles. A backward may reuse the memory of a
#: tensor the forward saved for it (a "donated buffer"); torch 2.13 (to 2.15) donates a saved
#: tensor that shares storage with no input or output of either graph, but does not check it
#: against the other saved tensors. A forward that saves a tensor and views of it (softmax
#: weights and their ``split`` pieces, rewritten or written so by hand) then gets a backward that
#: overwrites the tensor while it still reads the views: wrong gradients. Off, such a backward
#: allocates its own buffers instead.
AOT_CONFIG: dict[str, Any] = {"donated_buffer": False}


class BackwardPass(CustomGraphPass):
    """The rules on a post-grad backward graph (ATen), in place. Its outputs are gradients, so
    they may become disjoint views of one tensor (``optimize_graph(disjoint_outputs=True)``).
    A forward graph is what the Dynamo-level rewrite already produced: only its stacks of
    weights that matmuls read are written as scatters (:func:`optimus_egg.cleanup.scatter_input_stacks`).
    Under ``rewrite_backward="auto"`` (the default) a CPU backward is rewritten without the
    ``horizontal`` family, whose rules there batch the weight gradients (see :func:`_for_backward`).
    """

    def __init__(self, options: Options) -> None:
        self.options = options

    def __call__(self, graph: fx.Graph) -> None:
        if not any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes):
            _scatter_input_stacks(graph)
            return
        options = _for_backward(self.options, graph)
        if options is None:
            return
        gm = graph.owning_module
        new_gm, report = optimize_graph(gm, options, disjoint_outputs=True)
        BACKWARD_REPORTS.append(report)
        if new_gm is not gm:
            _replace(graph, new_gm.graph)

    def uuid(self) -> str:
        """Covers what the pass computes from: this package's code, the rules (and what they
        declare), the options, and the weights of a cost profile (the options name its file,
        which ``optimus-egg tune --out`` rewrites; Inductor's caches outlive the process)."""
        fams = rewrites.families(self.options.families)
        rules = [(f.declared(), [r.egglog() for r in f.rules], f.written and _file_hash(f.written.rows))
                 for f in fams]
        weights = load_profile(self.options.cost_profile).weights if self.options.cost_profile else None
        return hashlib.sha256(f"{_source_hash()} {self.options!r} {rules} {weights}".encode()).hexdigest()


def _for_backward(options: Options, graph: fx.Graph) -> Options | None:
    """The options a backward graph is rewritten with, or None to leave it as autograd wrote it.

    ``rewrite_backward="auto"`` drops the ``horizontal`` family where no graph input is on a GPU.
    On a backward its rules batch the weight gradients, which saves launches where each costs
    microseconds; on CPU, where a launch is a function call, the batch costs a C++ kernel, a
    slower step and a slower compile. It drops the ``pointwise`` family there too: moved through
    the cats of a CPU backward, binary ops fuse worse than the model predicts (BENCHMARKS.md,
    "What autograd saves, and the CPU backward"). The other families' rewrites of a backward pay
    on both (BENCHMARKS.md)."""
    if not options.rewrite_backward:
        return None
    if options.rewrite_backward != "auto" or input_device(graph.find_nodes(op="placeholder")) != "cpu":
        return options
    kept = rewrites.without(options.families, rewrites.BATCHING_FAMILIES + rewrites.POINTWISE_FAMILIES)
    return dataclasses.replace(options, families=kept) if kept else None


def _scatter_input_stacks(graph: fx.Graph) -> None:
    """:func:`optimus_egg.cleanup.scatter_input_stacks` on a post-grad graph, each new call given
    its fake value."""
    if scatter_input_stacks(graph):
        propagate(graph, graph.owning_module)


def _sources() -> list[Path]:
    """The package's code, wherever its parts lie (an editable install keeps ``rewrites`` and
    ``extract`` outside ``optimus_egg/``)."""
    import optimus_egg
    from optimus_egg import extract

    return sorted({p.resolve() for pkg in (optimus_egg, extract, rewrites) for d in pkg.__path__
                   for p in Path(d).glob("*.py")})


def _file_hash(fn: Callable[..., Any]) -> str:
    """The hash of the file that defines ``fn`` (a rule module's written relations)."""
    return hashlib.sha256(Path(inspect.getfile(fn)).read_bytes()).hexdigest()


@functools.cache
def _source_hash() -> str:
    h = hashlib.sha256()
    for path in _sources():
        h.update(path.read_bytes())
    return h.hexdigest()


def _replace(graph: fx.Graph, new: fx.Graph) -> None:
    """``graph`` made to compute what ``new`` computes (Inductor holds ``graph``): ``new``'s calls
    in order before its output, reading its inputs, then the calls nothing reads any more erased.

    A call of ``new`` that is a call of ``graph`` (the same op on the same nodes and literals) is
    that node, moved, not a copy: Inductor's fake-tensor updater re-runs every node it has not
    seen after the post-grad passes, so a graph copied whole would be fake-run once more; and
    the node keeps AOTAutograd's metadata."""
    olds = [n for n in graph.nodes if n.op in ("placeholder", "get_attr")]
    news = [n for n in new.nodes if n.op in ("placeholder", "get_attr")]
    env = dict(zip(news, olds))
    calls: dict[Any, list[fx.Node]] = {}
    for n in reversed(graph.nodes):  # each list in graph order from its end: pop() takes the first
        if n.op == "call_function" and (key := call_key(n.op, n.target, n.args, n.kwargs, _itself)) is not None:
            calls.setdefault(key, []).append(n)
    output = next(iter(graph.find_nodes(op="output")))
    placed: set[fx.Node] = set()
    for n in new.nodes:
        if n.op == "output":
            output.args = fx.node.map_arg(n.args, env.__getitem__)
        elif n not in env:
            args, kwargs = fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
            same = calls.get(call_key(n.op, n.target, args, kwargs, _itself)) if n.op == "call_function" else None
            if same:
                env[n] = same.pop()
                output.prepend(env[n])
            else:
                with graph.inserting_before(output):
                    env[n] = graph.node_copy(n, env.__getitem__)
            placed.add(env[n])
    for n in reversed(list(graph.nodes)):
        if n.op == "call_function" and not n.users and n not in placed:
            graph.erase_node(n)


def _itself(node: fx.Node) -> fx.Node:
    """A node's key in :func:`_replace`'s call keys: the node (calls match on the same nodes)."""
    return node


def optimus_egg_backend(gm: fx.GraphModule, example_inputs: Sequence[Any],
                        options: dict[str, Any] | None = None, mode: str | None = None) -> Any:
    import torch._functorch.config as functorch_config
    from torch._inductor import config, list_mode_options
    from torch._inductor.compile_fx import compile_fx

    # torch.compile(mode=...) is Inductor's: its options (max-autotune, CUDA graphs) apply here
    modes = list_mode_options()
    if mode is not None and mode not in modes:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(modes)}")
    opts = Options.from_kwargs(**(options or {}))
    new_gm, report = optimize_graph(gm, opts)
    REPORTS.append(report)
    patches = dict(modes[mode]) if mode is not None else {}
    if config.post_grad_custom_post_pass is None:  # a pass of the user's own is left in place
        patches["post_grad_custom_post_pass"] = BackwardPass(opts)
    with functorch_config.patch(AOT_CONFIG):  # (AOTAutograd picks the donated buffers in here)
        return compile_fx(new_gm, example_inputs, config_patches=patches)
