"""Cost models and extractors over a frozen e-graph."""

from optimus_egg.extract.cost import CostModel, KernelCost
from optimus_egg.extract.greedy_dag import Extraction, extract

__all__ = ["CostModel", "KernelCost", "Extraction", "extract"]
