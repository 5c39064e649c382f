"""Cost models: what one e-node costs on its own, children not included."""

from __future__ import annotations

from typing import Protocol

from optimus_egg.egraph import ENode
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
        if node.op in FREE_CONSTRUCTORS:
            return 0.0
        if node.op == "Cat":
            return 1.0
        return self.registry.calls[node.children[0]].cost  # Unary / Binary / Op: by key
