"""The order a rewritten graph is given to Inductor in.

Emission writes each output's operands depth-first; Inductor fuses along the order it is given,
and on CPU writes every extern call between two C++ kernels. So a post-grad graph goes to Inductor
in the order autograd wrote it, and a forward graph that writes no tensor in the order the
program wrote it (depth-first, one head's q, k and v interleave, and the backward AOTAutograd
derives from that order fuses worse), with what is new placed where it costs no launch.
"""

from __future__ import annotations

import heapq

import torch.fx as fx

from optimus_egg import calls, optable
from optimus_egg.emit import ORIGIN
from optimus_egg.optable import CONTRACTIONS


def order_as_written(graph: fx.Graph, original: fx.Graph) -> None:
    """Reorder ``graph`` (emitted, origins marked) to follow ``original``, the program as
    written: a node that computes an original node's value goes where that node was, a new one
    just before its first reader. Emission writes each output's operands depth-first, and
    Inductor fuses along the order it is given: in emission order a backward graph fuses worse.

    A new matmul that only the output reads (through views: a bmm of weight gradients) goes
    last, with those views. Its first reader as written is the earliest of the gradients it
    batches, so it would go as soon as its operands were ready; but Inductor writes every
    extern call between two C++ kernels, and the kernels written after it that need not wait
    for it (the first layer's bias gradient) would be a launch of their own.

    A call that is ready when a matmul is written and reads only graph inputs and what the
    matmul reads (directly or through views, one of them computed since the matmul before), or
    what such calls compute, goes before it: on CPU it runs in the C++ kernel that computed what
    it reads instead of the next one, and makes no kernel of its own. A layer's bias gradient,
    the sum of the gradient its input-gradient matmul reads, is written after that matmul, and
    with the stack of saved inputs scattered rather than copied early
    (:func:`optimus_egg.cleanup.scatter_input_stacks`) Inductor's own reordering does not move
    it back: each sum would run in the next layer's kernel. A call that reads another view of
    what the matmul reads (another tower's slice of one gradient) stays: moved, such sums would
    be loops of their own."""
    where = {n.name: i for i, n in enumerate(original.nodes)}
    nodes = [n for n in graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    rank: dict[fx.Node, float] = {}
    returned: set[fx.Node] = set()  # only the output reads them, directly or through views
    for n in reversed(nodes):
        own = min((where[o] for o in n.meta.get(ORIGIN, ()) if o in where), default=None)
        later = min((rank[u] for u in n.users if u in rank), default=float("inf"))
        rank[n] = own if own is not None else later
        if all(u.op == "output" or (u in returned and calls.launches(u) == 0) for u in n.users):
            returned.add(n)
    last: set[fx.Node] = set()  # such matmuls and their views
    for n in nodes:
        view_of_last = calls.launches(n) == 0 and any(a in last for a in n.all_input_nodes)
        if n in returned and (_new_matmul(n) or view_of_last):
            last.add(n)
    index = {n: i for i, n in enumerate(nodes)}
    waiting = {n: sum(1 for a in n.all_input_nodes if a in index) for n in nodes}
    ready = [(n in last, rank[n], index[n], n) for n in nodes if not waiting[n]]
    heapq.heapify(ready)
    output = next(iter(graph.find_nodes(op="output")))
    kernel: set[fx.Node] = set()  # the calls written since the last matmul (CPU: the C++ kernel before it)

    def place(n: fx.Node) -> None:
        output.prepend(n)
        for u in n.users:
            if u in waiting:
                waiting[u] -= 1
                if not waiting[u]:
                    heapq.heappush(ready, (u in last, rank[u], index[u], u))

    while ready:
        n = heapq.heappop(ready)[-1]
        if _matmul(n):
            operands, joined = _read(n), set()
            while joining := sorted(e for e in ready if not e[0] and _joins(e[-1], operands, joined, kernel)):
                ready[:] = [e for e in ready if e not in joining]
                heapq.heapify(ready)
                for e in joining:
                    place(e[-1])
                    joined.add(e[-1])
            kernel = set()
        else:
            kernel.add(n)
        place(n)


def _matmul(n: fx.Node) -> bool:
    """A matmul (Inductor: an extern call, between two C++ kernels on CPU)."""
    op = optable.lookup(n)
    return op is not None and op.name in CONTRACTIONS


def _read(n: fx.Node) -> set[fx.Node]:
    """What ``n`` reads: its arguments, and what each is a view of."""
    stack, read = list(n.all_input_nodes), set()
    while stack:
        a = stack.pop()
        read.add(a)
        if a.op == "call_function" and not calls.launches(a):
            stack.extend(a.all_input_nodes)
    return read


def _joins(n: fx.Node, operands: set[fx.Node], joined: set[fx.Node], kernel: set[fx.Node]) -> bool:
    """Whether ``n`` goes before the matmul that reads ``operands`` (its arguments and what they
    are views of): it reads only graph inputs, ``operands`` and the calls ``joined`` before it,
    one of them a call of ``kernel`` or ``joined`` (a view: it reads calls ``joined`` alone)."""
    args = n.all_input_nodes
    if _matmul(n) or not args:
        return False
    if not calls.launches(n):
        return all(a in joined for a in args)
    return (all(a.op in ("placeholder", "get_attr") or a in operands or a in joined for a in args)
            and any(a in joined or (a in kernel and calls.launches(a)) for a in _read(n) & (operands | joined)))


def _new_matmul(n: fx.Node) -> bool:
    """An emitted matmul that computes no original node's value (Inductor: an extern call)."""
    return ORIGIN not in n.meta and _matmul(n)
