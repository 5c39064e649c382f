"""Cost models: what a graph costs, and what one e-node costs on its own.

Three models, chosen by the ``cost_model`` option:

``inductor`` (:class:`InductorCost`, the default)
    What Inductor will build after fusion: pointwise chains fuse, views are free, matmuls and
    other extern calls are one each, reductions and cat have their own rules (see the class).
``eager`` (:class:`KernelCost`)
    Eager launches: every op that launches a kernel costs 1, views cost 0. What a GPU pays per
    step in eager mode, and what launch-bound recommendation models lose their time to.
``memory`` (:class:`MemoryCost`)
    Bytes read and written by every op that launches a kernel, from the shapes and dtypes the
    graph's metadata and the e-graph's shape rules know.

Every model has two faces. ``bind(graph, facts)`` gives the node-local cost the extractors
minimize (an e-node's own cost, children excluded; a function of the node and the classes it
reads). ``total(dag)`` gives the figure reported for a concrete term DAG: the graph as
translated (``kernels_before``) and as extracted (``kernels_after``). For ``eager`` and ``memory``
the total is the sum of the node-local costs over the DAG, so extraction minimizes exactly what
is reported; Inductor's fusion depends on who consumes a value, which a node-local cost cannot
see, so ``inductor`` extracts with a sound local approximation and reports a fusion simulation.

Weights per op category (:data:`CATEGORIES`) scale every model's kernel costs; ``1`` each by
default, or fitted on the current device by :mod:`optimus_egg.tune` (``cost_profile``).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from optimus_egg.calls import Call, Registry
from optimus_egg.egraph import ENode, Frozen
from optimus_egg.extract.dag import Dag, Fact, tensor_args
from optimus_egg.ir import CONSTRUCTORS, from_list
from optimus_egg.optable import CATS, CONTRACTIONS, FREE_CONSTRUCTORS, LOOP_OPS, OPS, REDUCTIONS, Kind, functional_name

#: Op categories, each with its own weight. ``copy`` is a kernel that only moves data (a cat
#: piece written into its slot); ``extern`` is any other call Inductor hands to a library or falls
#: back to ATen for.
CATEGORIES = ("pointwise", "reduction", "matmul", "cat", "copy", "extern")

#: What Inductor writes as pointwise loops, which fuse with their neighbours.
_POINTWISE = frozenset(op.name for op in OPS if op.kind in (Kind.POINTWISE, Kind.RANDOM)) | LOOP_OPS


def category(call: Call) -> str:
    """The category of a registry call; ``view`` for calls that never launch a kernel."""
    if call.cost == 0:
        return "view"
    if call.constructor in ("Unary", "Binary") or call.name in _POINTWISE or functional_name(call.name) in _POINTWISE:
        return "pointwise"
    if call.name in REDUCTIONS:
        return "reduction"
    if call.name in CONTRACTIONS:
        return "matmul"
    if call.name in CATS:
        return "cat"
    return call.lowered or "extern"


#: What the extractors minimize: an e-node's own cost, children excluded.
NodeCost = Callable[[ENode], float]


class CostModel(Protocol):
    """What the pipeline and the extractors need from a cost model."""

    name: str

    def bind(self, graph: Frozen, facts: dict[int, Fact]) -> NodeCost: ...

    def total(self, dag: Dag) -> float: ...


def _weights(weights: dict[str, float] | None) -> dict[str, float]:
    out = dict.fromkeys(CATEGORIES, 1.0)
    for key, value in (weights or {}).items():
        if key not in out:
            raise ValueError(f"unknown cost weight {key!r}; valid: {', '.join(CATEGORIES)}")
        out[key] = float(value)
    return out


class KernelCost:
    """Eager launches: every op that launches a kernel costs its category's weight (1 by
    default), views cost 0. Node-local and exact: ``total`` is the sum over the DAG."""

    name = "eager"

    def __init__(self, registry: Registry, weights: dict[str, float] | None = None) -> None:
        self.registry = registry
        self.weights = _weights(weights)

    def __call__(self, node: ENode) -> float:
        return self.of(node.op, node.children)

    def of(self, op: str, args: tuple[Any, ...]) -> float:
        if op in FREE_CONSTRUCTORS:
            return 0.0
        if op == "Cat":
            return self.weights["cat"]
        if op == "Move":  # one copy, in the moved order
            return self.weights["copy"]
        call = self.registry.calls[args[0]]  # Unary / Binary / Op: by key
        cat = category(call)  # (a call that launches several kernels costs each: call.cost)
        return 0.0 if cat == "view" else self.weights[cat] * call.cost

    def bind(self, graph: Frozen, facts: dict[int, Fact]) -> NodeCost:
        return self

    def total(self, dag: Dag) -> float:
        """The cost of a term DAG, each term as many times as it is computed."""
        return sum(self.of(t.op, t.args) * dag.copies.get(t, 1) for t in dag.order)


def _itemsize(dtype: str) -> int:
    got = getattr(torch, dtype, None)
    return got.itemsize if isinstance(got, torch.dtype) else 4


def nbytes(fact: Fact | None) -> float:
    """Bytes of a tensor with this fact; 0 when a size is symbolic or unknown."""
    if fact is None or any(s is None for s in fact[0]):
        return 0.0
    n = 1
    for s in fact[0]:
        n *= s  # type: ignore[operator]
    return float(n * _itemsize(fact[1]))


class MemoryCost:
    """Bytes moved: an op that launches a kernel reads its tensor arguments and writes its
    result; a cat piece is read and written into its slot (charged on its list cell, so that
    two cats sharing a list tail share its cost); views move nothing. A tensor whose shape is
    symbolic or unknown counts 0 bytes. Node-local and exact, like :class:`KernelCost`."""

    name = "memory"

    def __init__(self, registry: Registry, weights: dict[str, float] | None = None) -> None:
        self.registry = registry

    def _moves(self, op: str, key: Any) -> bool:
        if op in FREE_CONSTRUCTORS or op == "Cat":
            return False
        if op == "Move":
            return True
        return category(self.registry.calls[key]) != "view"

    def bind(self, graph: Frozen, facts: dict[int, Fact]) -> NodeCost:
        def cost(node: ENode) -> float:
            if node.op == "Cons":
                return 2 * nbytes(facts.get(node.children[0])) if node.children[2] >= 0 else 0.0
            if not self._moves(node.op, node.children[0] if node.children else None):
                return 0.0
            reads = [c for c, s in zip(node.children, CONSTRUCTORS[node.op]) if s == "T"]
            listed = list_classes(graph, node.children[1]) if node.op == "Op" else []
            return nbytes(facts.get(node.eclass)) + sum(nbytes(facts.get(c)) for c in reads + listed)
        return cost

    def total(self, dag: Dag) -> float:
        facts, total = dag.facts, 0.0
        for t in dag.order:
            if t.op == "Cons" and t.args[2] >= 0:
                total += 2 * nbytes(facts.get(t.args[0]))
            elif t.op not in ("Cons", "Nil") and self._moves(t.op, t.args[0] if t.args else None):
                total += (nbytes(facts.get(t)) + sum(nbytes(facts.get(a)) for a in tensor_args(t))) * dag.copies.get(t, 1)
            elif t.op == "Cat":  # (its cells are charged once above; a copy of the cat writes them again)
                total += 2 * sum(nbytes(facts.get(p)) for p in from_list(t.args[0])[0]) * (dag.copies.get(t, 1) - 1)
        return total


def list_classes(graph: Frozen, lst: int) -> list[int]:
    """The element classes of an ``Op`` argument list (argument lists are never rewritten, so
    each list class has one cons-chain)."""
    out = []
    seen = set()
    while lst not in seen:
        seen.add(lst)
        node = next((graph.nodes[n] for n in graph.classes[lst] if graph.nodes[n].op == "Cons"), None)
        if node is None:
            break
        out.append(node.children[0])
        lst = node.children[1]
    return out
