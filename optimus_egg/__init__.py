"""optimus_egg: split/cat cleanup and fusion for PyTorch 2 graphs by equality saturation."""

from optimus_egg.pipeline import Options, OptimizerFallback, Report, optimize, optimize_graph

__all__ = ["optimize", "optimize_graph", "Options", "Report", "OptimizerFallback"]
