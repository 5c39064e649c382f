"""Graphs that switch modes inside (``no_grad``, ``autocast(enabled=False)``, ``inference_mode``).

A call computes another value or gradient on either side of a switch (``x @ y`` in bfloat16
under autocast; ``p.exp()`` without a gradient under ``no_grad``), and neither the rules nor the
emitter know the sides. So the calls from the first switch to the last (the *zone*) are kept as
written, and the calls before it and after it are optimized as graphs of their own: each
segment runs under one mode, and nothing moves between segments. A model that keeps one layer
out of autocast, or computes a statistic under ``no_grad``, keeps the rest of its graph
optimized.

Only a zone that leaves the modes as it found them: the calls after it then run under the
modes the calls before it ran under, the ones Dynamo traced them under. Not in graphs that
write to a tensor: the frontend pins reads of a written tensor across the whole graph, which a
segment alone cannot see.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Callable

import torch.fx as fx

from optimus_egg import effects
from optimus_egg.emit import copy_input, graph_module
from optimus_egg.frontend import mutated_storages

#: The switches whose zone can be seen to end in the modes it began in: paired enters and exits,
#: and ``_set_grad_enabled(b) ... _set_grad_enabled(not b)`` (Dynamo's ``no_grad`` and
#: ``enable_grad`` blocks).
_PAIRS = {"_enter_autocast": "_exit_autocast", "_enter_inference_mode": "_exit_inference_mode"}

Segment = list[fx.Node]


def zone(gm: fx.GraphModule) -> tuple[Segment, Segment, Segment] | None:
    """The calls before the first switch, from it to the last, and after: None where the zone
    does not restore the modes, a switch is not one of :data:`_PAIRS` or ``_set_grad_enabled``,
    or the graph writes to a tensor."""
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    switches = [i for i, n in enumerate(calls) if effects.switches_mode(n)]
    if not switches or mutated_storages(gm.graph):
        return None
    names = Counter(calls[i].target.__name__ for i in switches)
    grads = [calls[i].args for i in switches if calls[i].target.__name__ == "_set_grad_enabled"]
    if (set(names) - {"_set_grad_enabled", *_PAIRS, *_PAIRS.values()}
            or any(names[enter] != names[exit] for enter, exit in _PAIRS.items())
            or (grads and (grads[0] == grads[-1] or any(len(a) != 1 or type(a[0]) is not bool for a in grads)))):
        return None
    first, last = switches[0], switches[-1]
    return calls[:first], calls[first:last + 1], calls[last + 1:]


def optimize_around(gm: fx.GraphModule, segments: tuple[Segment, Segment, Segment],
                    optimize: Callable[[fx.GraphModule], fx.GraphModule]) -> fx.GraphModule:
    """``gm`` with the segments before and after the zone replaced by what ``optimize`` makes of
    each as a graph of its own (its inputs: what it reads from outside; its outputs: what
    is read outside it)."""
    before, kept, after = segments
    graph = fx.Graph()
    graph._codegen = copy.copy(gm.graph._codegen)  # Dynamo's: the arguments' and result's pytree
    env: dict[fx.Node, fx.Node] = {}
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            env[n] = copy_input(graph, n)
    for segment, optimized in ((before, True), (kept, False), (after, True)):
        if not optimized or not segment:
            for n in segment:
                env[n] = graph.node_copy(n, env.__getitem__)
            continue
        sub, reads, results = _subgraph(gm, segment)
        new = optimize(sub)
        outputs = _inline(graph, new.graph, [env[r] for r in reads])
        env.update(zip(results, outputs))
    output = next(iter(gm.graph.find_nodes(op="output")))
    graph.node_copy(output, env.__getitem__)
    return graph_module(gm, graph)


def _subgraph(gm: fx.GraphModule, segment: Segment) -> tuple[fx.GraphModule, list[fx.Node], list[fx.Node]]:
    """``segment`` as a graph: a placeholder for each node outside it that it reads (with that
    node's fake value), and as outputs, its nodes read outside it. Returns the graph, the nodes
    its placeholders stand for, and those its outputs compute."""
    inside = set(segment)
    graph = fx.Graph()
    reads: list[fx.Node] = []
    env: dict[fx.Node, fx.Node] = {}

    def arg(a: fx.Node) -> fx.Node:
        if a not in env:
            if a.op == "get_attr":
                env[a] = copy_input(graph, a)
            else:
                env[a] = graph.placeholder(a.name)
                env[a].meta = dict(a.meta)
                reads.append(a)
        return env[a]

    for n in segment:
        env[n] = graph.node_copy(n, arg)
    results = [n for n in segment if any(u not in inside for u in n.users)]
    graph.output(tuple(env[n] for n in results))
    return graph_module(gm, graph), reads, results


def _inline(graph: fx.Graph, sub: fx.Graph, inputs: list[fx.Node]) -> list[fx.Node]:
    """Copy ``sub``'s calls into ``graph``, its placeholders read as ``inputs`` (in order);
    return what its output tuple holds."""
    holders = iter(inputs)
    env: dict[fx.Node, fx.Node] = {}
    for n in sub.nodes:
        if n.op == "placeholder":
            env[n] = next(holders)
        elif n.op == "output":
            return list(fx.node.map_arg(n.args[0], env.__getitem__))
        else:
            env[n] = graph.node_copy(n, env.__getitem__)
    raise AssertionError("a graph without an output")
