"""A training step's kernels: the forward and backward graphs AOTAutograd derives from a Dynamo
graph, priced by a cost model.

A forward rewrite can tie in kernels and still change the backward autograd writes for it:
``relu`` pulled out of a cat saves its mask over the whole cat, and a clone's gradient is added
to the pieces' gradients one loop later. The forward's figure cannot see that; the pipeline
settles such ties with this one (:func:`optimus_egg.pipeline._settle_tie`).

Tracing costs about as much as AOTAutograd's own trace of the graph, so only the part of each
graph where the two differ is traced (:func:`changed`), with the nodes next to it, which the
kernels of its backward fuse with.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from optimus_egg.emit import ORIGIN
from optimus_egg.extract import select
from optimus_egg.frontend import translate
from optimus_egg.logger import log_debug
from optimus_egg.nodes import val


#: The most nodes of the two graphs' changed parts that are traced; a larger change is not priced
#: (tracing takes milliseconds a node).
MAX_TRACED = 60
_CALLS = ("call_function", "call_method", "call_module")


def changed(gm: fx.GraphModule, new_gm: fx.GraphModule, cost_model: str = "inductor",
            weights: dict[str, float] | None = None) -> tuple[float, float] | None:
    """The step's figure (:func:`step_kernels`) of the part of ``gm`` that ``new_gm`` computes
    otherwise, before and after; None where it cannot be figured."""
    old_part, new_part = _differing(gm, new_gm)
    if not old_part and not new_part or len(old_part) + len(new_part) > MAX_TRACED:
        return None
    before = step_kernels(_subgraph(gm, _with_neighbours(old_part)), cost_model, weights)
    after = step_kernels(_subgraph(new_gm, _with_neighbours(new_part)), cost_model, weights)
    return None if before is None or after is None else (before, after)


def _differing(gm: fx.GraphModule, new_gm: fx.GraphModule) -> tuple[set[fx.Node], set[fx.Node]]:
    """The calls of each graph that the other does not make: a call of ``new_gm`` is also made in
    ``gm`` where it computes what a call there computed (the emitter's ``ORIGIN``), with the same
    function, on operands that compute the same values."""
    old_by_name = {n.name: n for n in gm.graph.nodes}
    inputs = {n.target: n for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")}
    same: dict[fx.Node, fx.Node] = {}  # new node → the old node computing the same
    for node in new_gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            if node.target in inputs:
                same[node] = inputs[node.target]
            continue
        for name in node.meta.get(ORIGIN, ()):
            old = old_by_name.get(name)
            if old is not None and _same_call(node, old, same):
                same[node] = old
                break
    kept = set(same.values())
    return ({n for n in gm.graph.nodes if n.op in _CALLS and n not in kept},
            {n for n in new_gm.graph.nodes if n.op in _CALLS and n not in same})


def _same_call(node: fx.Node, old: fx.Node, same: dict[fx.Node, fx.Node]) -> bool:
    if (node.op, node.target) != (old.op, old.target):
        return False
    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    old_leaves, old_spec = pytree.tree_flatten((old.args, old.kwargs))
    if spec != old_spec:
        return False
    for a, b in zip(leaves, old_leaves):
        if isinstance(a, fx.Node) or isinstance(b, fx.Node):
            if not isinstance(a, fx.Node) or same.get(a) is not b:
                return False
        elif type(a) is not type(b) or a != b:
            return False
    return True


def _with_neighbours(part: set[fx.Node]) -> set[fx.Node]:
    """``part`` with the calls that read from it or that it reads (where its backward kernels
    fuse), and whole multi-output calls: a split with all the pieces taken of it."""
    out = part | {m for n in part for m in (*n.all_input_nodes, *n.users) if m.op in _CALLS}
    stack = list(out)
    while stack:
        node = stack.pop()
        more = [*node.users] if isinstance(val(node), (tuple, list)) else []
        if node.target is operator.getitem and node.args[0].op in _CALLS:
            more.append(node.args[0])
        for m in more:
            if m not in out and m.op in _CALLS:
                out.add(m)
                stack.append(m)
    return out


def _subgraph(gm: fx.GraphModule, part: set[fx.Node]) -> fx.GraphModule:
    """The calls ``part`` of ``gm`` as a graph of their own: what they read from elsewhere are its
    inputs (with their fake values), what is read from them elsewhere its outputs."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}

    def operand(node: fx.Node) -> fx.Node:
        if node not in env:
            env[node] = graph.placeholder(f"in_{len(env)}")
            env[node].meta["example_value"] = val(node)
        return env[node]

    outputs = []
    for node in gm.graph.nodes:
        if node not in part:
            continue
        env[node] = graph.node_copy(node, lambda n: env[n] if n in part else operand(n))
        if isinstance(val(node), torch.Tensor) and any(u not in part for u in node.users):
            outputs.append(env[node])
    graph.output(tuple(outputs))
    return fx.GraphModule(gm, graph)


def step_kernels(gm: fx.GraphModule, cost_model: str = "inductor", weights: dict[str, float] | None = None
                 ) -> float | None:
    """``cost_model``'s figure (:data:`optimus_egg.extract.select.COST_MODELS`) for the forward
    plus the backward that AOTAutograd partitions ``gm`` into (Inductor's decompositions, its
    min-cut partitioner, neither graph rewritten by the backend); None where they cannot be
    derived."""
    try:
        graphs = _partitioned(gm)
    except Exception as exc:  # noqa: BLE001 - a graph AOTAutograd cannot trace here is priced as before
        log_debug("no backward to price (%s: %s)", type(exc).__name__, exc)
        return None
    if len(graphs) != 2:  # (no backward: nothing requires grad after all)
        return None
    device = select.input_device(gm.graph.find_nodes(op="placeholder"))
    total = 0.0
    for graph in graphs:
        tr = translate(graph)
        total += select.cost_model(cost_model, tr.registry, weights, device).total(select.translated(tr))
    return total


def _partitioned(gm: fx.GraphModule) -> list[fx.GraphModule]:
    """The forward and backward graphs of ``gm``, traced on its placeholders' fake values in a
    tracing context of their own (the caller's, Dynamo's, stays as it was)."""
    import torch._functorch.config as functorch_config
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._guards import TracingContext, detect_fake_mode, tracing
    from torch._inductor.decomposition import select_decomp_table

    args = [val(n) for n in gm.graph.find_nodes(op="placeholder")]
    graphs: list[fx.GraphModule] = []

    def keep(graph: fx.GraphModule, _inputs: Any) -> Any:
        graphs.append(graph)
        return make_boxed_func(graph.forward)

    module = fx.GraphModule(gm, copy.deepcopy(gm.graph))  # (AOTAutograd may rewrite the graph it traces)
    with (tracing(TracingContext(detect_fake_mode(args))),
          functorch_config.patch(force_non_lazy_backward_lowering=True, donated_buffer=False)):
        aot_module_simplified(module, args, fw_compiler=keep, bw_compiler=keep,
                              partition_fn=min_cut_rematerialization_partition,
                              decompositions=select_decomp_table())
    return graphs
