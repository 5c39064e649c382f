"""Cost models: what one e-node costs on its own, children not included."""

from __future__ import annotations

from typing import Any, Protocol

from optimus_egg.egraph import ENode
from optimus_egg.ir import Term
from optimus_egg.optable import FREE_CONSTRUCTORS, Registry


class CostModel(Protocol):
    def __call__(self, node: ENode) -> float: ...


class KernelCost:
    """Eager-launch count: every op that launches a kernel costs 1, views cost 0.

    This is what a GPU pays per step in eager mode, and what launch-bound recommendation
    models lose their time to.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def __call__(self, node: ENode) -> float:
        return self.of(node.op, node.children)

    def of(self, op: str, args: tuple[Any, ...]) -> float:
        if op in FREE_CONSTRUCTORS:
            return 0.0
        if op == "Cat":
            return 1.0
        return self.registry.calls[args[0]].cost  # Unary / Binary / Op: by key

    def of_terms(self, roots: list[Term]) -> float:
        """The cost of a term DAG as the frontend built it (each distinct term once)."""
        seen: set[Term] = set()
        stack, total = list(roots), 0.0
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            total += self.of(t.op, t.args)
            stack.extend(a for a in t.args if isinstance(a, Term))
        return total
