"""optimus_egg: split/cat cleanup and fusion for PyTorch 2 graphs by equality saturation."""

from optimus_egg.options import Options
from optimus_egg.pipeline import OptimizerFallback, optimize, optimize_graph
from optimus_egg.report import Report

__all__ = ["optimize", "optimize_graph", "Options", "Report", "OptimizerFallback"]
