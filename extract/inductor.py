"""The Inductor-aware cost model: the kernels Inductor will generate for a graph, after fusion.

The reported figure is :func:`optimus_egg.extract.fusion.predict`, a simulation of Inductor's
fusion run on the DAG the extractor chose. A node-local cost cannot see fusion, which depends on
who consumes a value, so the extractors get a sound approximation (:meth:`InductorCost.bind`):
a pointwise e-node costs nothing when one of the classes it reads can be computed by a fusible
kernel (it joins that kernel) or when a reduction reads its class (it fuses in as the reduction's
prologue), otherwise one kernel; a cat piece costs a copy unless its class can be written in
place (a pointwise or extern result) or is a graph input (a cat with such pieces costs one
kernel: the scatter of a stack of weights); extern calls and reductions cost one each, and an
extern call in a class that a fusible kernel can also compute (an einsum and its sum of products)
one more when pointwise ops read that class (priced as fused, they need their own kernel after
an extern call).
"""

from __future__ import annotations

from typing import Callable

from optimus_egg.calls import Registry
from optimus_egg.egraph import ENode, Frozen
from optimus_egg.extract.cost import _weights, list_classes
from optimus_egg.extract.dag import Dag, Fact
from optimus_egg.extract.fusion import predict
from optimus_egg.extract.kernels import Prediction, kind_of
from optimus_egg.ir import CONSTRUCTORS


class InductorCost:
    name = "inductor"

    def __init__(self, registry: Registry, weights: dict[str, float] | None = None, device: str = "cpu") -> None:
        self.registry = registry
        self.weights = _weights(weights)
        self.unit = all(w == 1 for w in self.weights.values())
        self.device = device

    # -- the node-local approximation for the extractors ---------------------------------------

    def bind(self, graph: Frozen, facts: dict[int, Fact]) -> Callable[[ENode], float]:
        kinds = [kind_of(self.registry, n.op, n.children[0] if n.op in ("Unary", "Binary", "Op") else None)
                 for n in graph.nodes]
        fusible = _fusible_classes(graph, kinds, self.device)
        direct = {n.eclass for n, k in zip(graph.nodes, kinds) if k in ("pointwise", "reduction", "matmul")}
        prologue = {c for n, k in zip(graph.nodes, kinds) if k == "reduction" for c in _reads(graph, n)}
        read_pointwise = {c for n, k in zip(graph.nodes, kinds) if k == "pointwise" for c in _reads(graph, n)}
        scattered = _input_pieces(graph, kinds)
        w = self.weights

        def own(node: ENode, k: str) -> float:
            if k in ("view", "input") or (k == "list" and (node.op == "Nil" or node.children[2] < 0)):
                return 0.0
            if k == "list":  # a cat piece: written in place by its own kernel, scattered, or copied
                return 0.0 if self.device == "cuda" or node.children[0] in direct | scattered else w["copy"]
            if k == "cat" and node.op == "Cat":  # on CPU its pieces carry the cost, but for a stack of inputs
                if self.device == "cuda":
                    return w["pointwise"]
                return w["copy"] if any(c in scattered for c in list_classes(graph, node.children[0])) else 0.0
            if k == "pointwise":
                fuses = node.eclass in prologue or any(c in fusible for c in _reads(graph, node))
                return 0.0 if fuses else w["pointwise"]
            if k in ("matmul", "extern") and node.eclass in fusible and node.eclass in read_pointwise:
                # (an einsum equal to a sum of products): its pointwise readers, priced as fused
                # into the class's fusible form, need a kernel of their own after this one
                return w[k] + w["pointwise"]
            return w[k]

        costs = {id(n): own(n, k) for n, k in zip(graph.nodes, kinds)}

        def cost(node: ENode) -> float:
            return costs[id(node)]

        return cost

    # -- the figure reported: the simulation on a concrete DAG -----------------------------------

    def total(self, dag: Dag) -> float:
        """Kernel objects + extern calls on CPU; weighted launches elsewhere, or under a cost
        profile's weights (what they were fitted to)."""
        prediction = self.predict(dag)
        return prediction.figure(self.device) if self.unit else prediction.weighted

    def predict(self, dag: Dag) -> Prediction:
        return predict(dag, self.registry, self.weights, self.device)


def _reads(graph: Frozen, node: ENode) -> list[int]:
    if node.op == "Op":
        return list_classes(graph, node.children[1])
    return [c for c, s in zip(node.children, CONSTRUCTORS[node.op]) if s == "T"]


def _input_pieces(graph: Frozen, kinds: list[str]) -> set[int]:
    """Classes of graph inputs, as they are or unsqueezed at 0: as the pieces of a cat that only
    matmuls read (a batched layer's weights), the backend scatters them all in one kernel
    (priced on the cat; node-locally, whoever reads the cat is not known, so every such cat)."""
    inputs = {n.eclass for n, k in zip(graph.nodes, kinds) if k == "input"}
    return inputs | {n.eclass for n in graph.nodes if n.op == "Unsqueeze" and n.children[0] in inputs
                     and n.children[1] == 0}


def _fusible_classes(graph: Frozen, kinds: list[str], device: str) -> set[int]:
    """Classes one of whose nodes a fusible kernel can compute: a pointwise op or a reduction,
    or a view of such a class (fixpoint over views)."""
    out = {n.eclass for n, k in zip(graph.nodes, kinds) if k in ("pointwise", "reduction")
           or (device == "cuda" and k == "cat")}
    views = [(n.eclass, n.children[0]) for n, k in zip(graph.nodes, kinds) if k == "view" and n.op != "Op"]
    views += [(n.eclass, c) for n, k in zip(graph.nodes, kinds) if k == "view" and n.op == "Op"
              for c in _reads(graph, n)[:1]]
    changed = True
    while changed:
        changed = False
        for cls, src in views:
            if src in out and cls not in out:
                out.add(cls)
                changed = True
    return out
