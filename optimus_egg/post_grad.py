"""The order a rewritten backward graph is given to Inductor in.

Emission writes each output's operands depth-first; Inductor fuses along the order it is given,
and on CPU writes every extern call between two C++ kernels. So a post-grad graph goes to Inductor
in the order autograd wrote it, with what is new placed where it costs no launch.
"""

from __future__ import annotations

import heapq

import torch.fx as fx

from optimus_egg import optable
from optimus_egg.emit import ORIGIN
from optimus_egg.extract.cost import MATMUL


def order_as_written(graph: fx.Graph, original: fx.Graph) -> None:
    """Reorder ``graph`` (emitted, origins marked) to follow ``original``, the program as
    written: a node that computes an original node's value goes where that node was, a new one
    just before its first reader. Emission writes each output's operands depth-first, and
    Inductor fuses along the order it is given: a backward graph emitted unchanged in that order
    got 6 more kernels per step on the zoo's ple model, 7 more on the cruft chain (CPU).

    A new matmul that only the output reads (through views: a bmm of weight gradients) goes
    last, with those views. Its first reader as written is the earliest of the gradients it
    batches, so it went as soon as its operands were ready; but Inductor writes every extern
    call between two C++ kernels, and the kernels written after it that need not wait for it
    (the first layer's bias gradient) were a launch of their own (cruft chain backward, CPU:
    16 launches, 15 with the bmm last, as Optimus's batch_linear_post_grad gets)."""
    where = {n.name: i for i, n in enumerate(original.nodes)}
    nodes = [n for n in graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    rank: dict[fx.Node, float] = {}
    returned: set[fx.Node] = set()  # only the output reads them, directly or through views
    for n in reversed(nodes):
        own = min((where[o] for o in n.meta.get(ORIGIN, ()) if o in where), default=None)
        later = min((rank[u] for u in n.users if u in rank), default=float("inf"))
        rank[n] = own if own is not None else later
        if all(u.op == "output" or (u in returned and optable.launches(u) == 0) for u in n.users):
            returned.add(n)
    last: set[fx.Node] = set()  # such matmuls and their views
    for n in nodes:
        view_of_last = optable.launches(n) == 0 and any(a in last for a in n.all_input_nodes)
        if n in returned and (_new_matmul(n) or view_of_last):
            last.add(n)
    index = {n: i for i, n in enumerate(nodes)}
    waiting = {n: sum(1 for a in n.all_input_nodes if a in index) for n in nodes}
    ready = [(n in last, rank[n], index[n], n) for n in nodes if not waiting[n]]
    heapq.heapify(ready)
    output = next(iter(graph.find_nodes(op="output")))
    while ready:
        n = heapq.heappop(ready)[-1]
        output.prepend(n)
        for u in n.users:
            if u in waiting:
                waiting[u] -= 1
                if not waiting[u]:
                    heapq.heappush(ready, (u in last, rank[u], index[u], u))


def _new_matmul(n: fx.Node) -> bool:
    """An emitted matmul that computes no original node's value (Inductor: an extern call)."""
    op = optable.lookup(n)
    return ORIGIN not in n.meta and op is not None and op.name in MATMUL
