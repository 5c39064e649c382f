"""The report of one optimized graph (:class:`Report`) and its cost figures (:class:`Costs`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from optimus_egg.extract.cost import CostModel
from optimus_egg.extract.dag import Dag


class Costs(Mapping[str, tuple[float, float]]):
    """Every cost model's (before, after), each model's figured on its first read. The search
    needs only the chosen model's; the others are for whoever reads them (``explain``, the
    benchmarks), and figuring them on every compile would cost most of the cost phase. The
    graphs come from ``dags`` at the first read (a cached graph's are made again only if one is
    read) and are let go once every model is read. Read-only, so a copy is the object itself."""

    def __init__(self, models: Mapping[str, CostModel], dags: Callable[[], tuple[Dag, Dag]]) -> None:
        self._names = tuple(models)
        self._models: dict[str, CostModel] = dict(models)
        self._dags: Callable[[], tuple[Dag, Dag]] | tuple[Dag, Dag] | None = dags  # the graphs, once made
        self._figures: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> tuple[float, float]:
        with self._lock:
            if name not in self._figures:
                model = self._models[name]  # KeyError for a name that is not a model
                assert self._dags is not None  # dropped only once every figure is in
                if callable(self._dags):
                    self._dags = self._dags()
                before, after = self._dags
                self._figures[name] = (model.total(before), model.total(after))
                if len(self._figures) == len(self._names):
                    self._models, self._dags = {}, None
            return self._figures[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __deepcopy__(self, memo: dict[int, Any]) -> "Costs":
        return self

    def __repr__(self) -> str:
        return repr(dict(self))


class UnchangedCosts(Mapping[str, tuple[float, float]]):
    """The figures of a graph kept as it was after a failure: every cost model's "after" is its
    "before" (a search may have priced a graph it then dropped)."""

    def __init__(self, costs: Mapping[str, tuple[float, float]]) -> None:
        self._costs = costs

    def __getitem__(self, name: str) -> tuple[float, float]:
        before = self._costs[name][0]
        return (before, before)

    def __iter__(self) -> Iterator[str]:
        return iter(self._costs)

    def __len__(self) -> int:
        return len(self._costs)

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass
class Report:
    """What ``optimize`` did to one graph: the figures of the search, and why a graph was kept."""

    kernels_before: float = 0.0  # kernels predicted by the chosen cost model
    kernels_after: float = 0.0
    cost_model: str = ""
    costs: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # every cost model: (before, after)
    cat_inputs: tuple[int, int] = (0, 0)  # tensors that cats and stacks read, before and after
    extraction: dict[str, Any] = field(default_factory=dict)  # per extractor: cost, seconds (ILP: status)
    cache_hit: bool = False  # the search was served from the in-process cache (no saturation)
    enodes: int = 0
    eclasses: int = 0
    iterations: int = 0
    stop_reason: str = ""
    rules_fired: dict[str, int] = field(default_factory=dict)  # matches per rewrite rule
    seconds: dict[str, float] = field(default_factory=dict)  # per phase
    fx_nodes: int = 0
    opaque_nodes: int = 0
    extractor: str = ""
    fallback: str | None = None  # why the graph was left unchanged
    verified: str = ""  # with verify=True: "passed", "failed", or why nothing was compared ("skipped: ...")
    kept: bool = False  # the input graph is returned as it was (kept_reason says why)
    kept_reason: str = ""
    dropped: dict[str, str] = field(default_factory=dict)  # family → why the graph was optimized again without it
    zone_nodes: int = 0  # calls kept as written between mode switches, in no figure above
    segments: int = 0  # graphs optimized around such calls; their figures are added up here

    def add(self, part: "Report") -> None:
        """Add the figures of a segment optimized on its own (see ``zone_nodes``)."""
        first = not self.segments
        self.segments += 1
        for name in ("kernels_before", "kernels_after", "enodes", "eclasses", "fx_nodes", "opaque_nodes"):
            setattr(self, name, getattr(self, name) + getattr(part, name))
        self.costs = {m: tuple(a + b for a, b in zip(self.costs.get(m, (0.0, 0.0)), part.costs.get(m, (0.0, 0.0))))
                      for m in {*self.costs, *part.costs}}
        self.cat_inputs = tuple(a + b for a, b in zip(self.cat_inputs, part.cat_inputs))
        self.iterations = max(self.iterations, part.iterations)
        self.stop_reason = "; ".join(dict.fromkeys(r for r in (self.stop_reason, part.stop_reason) if r))
        for k, v in part.rules_fired.items():
            self.rules_fired[k] = self.rules_fired.get(k, 0) + v
        for k, v in part.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.dropped.update(part.dropped)
        self.cost_model, self.extractor = part.cost_model or self.cost_model, part.extractor or self.extractor
        self.cache_hit = part.cache_hit if first else self.cache_hit and part.cache_hit
        self.kept = part.kept if first else self.kept and part.kept
        self.kept_reason = "; ".join(r for r in (self.kept_reason, part.kept_reason) if r) if self.kept else ""

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def timings(self) -> str:
        return ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in self.seconds.items())

    def summary(self) -> str:
        if self.fallback:
            return f"optimus_egg: left the graph unchanged ({self.fallback})"
        fired = ", ".join(f"{k}×{v}" for k, v in sorted(self.rules_fired.items(), key=lambda kv: -kv[1]))
        kept = f" ({self.kept_reason or 'nothing cheaper'}: graph kept as it was)" if self.kept else ""
        kept += "".join(f" (without {name}: {why})" for name, why in self.dropped.items())
        if self.zone_nodes:
            kept += (f" (around {self.zone_nodes} calls kept as written between mode switches, not counted;"
                     f" {self.segments} graphs optimized)")
        return (f"optimus_egg: kernels {self.kernels_before:g} → {self.kernels_after:g}{kept}; "
                f"e-graph {self.enodes} nodes / {self.eclasses} classes after {self.iterations} "
                f"iterations ({self.stop_reason}); {self.total_seconds * 1e3:.0f} ms; rules: {fired or 'none'}")
