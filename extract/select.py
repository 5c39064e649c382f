"""The cost model and the extractor a pipeline run uses, by the names the options give.

``cost_model``: ``inductor`` (default) | ``eager`` | ``memory`` (see :mod:`optimus_egg.extract.cost`).
Under ``inductor`` greedy extracts twice, with eager launches and with its node-local
approximation, and keeps the graph its fusion simulation prices lower (eager launches, then
eager's graph, settle a tie): the approximation cannot see fusion, and eager launches are often
the better guide to a graph Inductor fuses well.
``extractor``: ``greedy`` (default; DAG-aware, fast) | ``ilp`` (exact, needs scipy; falls back to
greedy's result when HiGHS finds nothing better within its time limit, or when the model's own
figure says the ILP's optimum of the node-local costs is worse) | ``compare`` (runs both, keeps
the better, and reports what each cost and took).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx as fx

from optimus_egg.calls import Registry
from optimus_egg.egraph import Frozen
from optimus_egg.extract import greedy_dag, ilp
from optimus_egg.extract.cost import CostModel, KernelCost, MemoryCost
from optimus_egg.extract.dag import Dag, Fact, Facts, extracted
from optimus_egg.extract.greedy_dag import Extraction
from optimus_egg.extract.inductor import InductorCost
from optimus_egg.frontend import Translation
from optimus_egg.ir import Term
from optimus_egg.nodes import val

COST_MODELS = {"eager": KernelCost, "inductor": InductorCost, "memory": MemoryCost}
EXTRACTORS = ("greedy", "ilp", "compare")


def check_name(kind: str, name: str, valid: Any) -> str:
    if name not in valid:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")
    return name


def cost_model(name: str, registry: Registry, weights: dict[str, float] | None = None,
               device: str = "cpu") -> CostModel:
    cls = COST_MODELS[check_name("cost_model", name, COST_MODELS)]
    if cls is InductorCost:
        return InductorCost(registry, weights, device)
    return cls(registry, weights)


def input_device(inputs: Iterable[fx.Node]) -> str:
    """The device type of the first of a graph's inputs that is not on the CPU, else ``cpu``."""
    for node in inputs:
        v = val(node)
        if isinstance(v, torch.Tensor) and v.device.type != "cpu":
            return v.device.type
    return "cpu"


def device_of(tr: Translation) -> str:
    """``cuda`` when the graph's inputs live on a CUDA device, else ``cpu``: the devices whose
    kernels the cost models count."""
    return "cuda" if input_device(tr.inputs) == "cuda" else "cpu"


def term_facts(tr: Translation) -> Facts:
    return {t: (tuple(shape), dtype) for t, shape, dtype in tr.facts}


def translated(tr: Translation) -> Dag:
    """The graph as translated (outputs and the effect chain), to cost before optimization."""
    roots = [t for t in tr.outputs if isinstance(t, Term)] + ([tr.effects] if tr.effects is not None else [])
    return Dag(roots, term_facts(tr), tr.copies())


def seed_facts(tr: Translation, names: dict[Term, int], graph: Frozen) -> dict[int, Fact]:
    """The facts of the classes that translated terms landed in."""
    out: dict[int, Fact] = {}
    for t, shape, dtype in tr.facts:
        ref = names.get(t)
        if ref is not None and ref in graph.refs:
            out[graph.refs[ref]] = (tuple(shape), dtype)
    return out


def extract(graph: Frozen, roots: list[int], model: CostModel, facts: dict[int, Fact], extractor: str = "greedy",
            time_limit: float = ilp.TIME_LIMIT, registry: Registry | None = None
            ) -> tuple[Extraction, dict[str, Any]]:
    """Extract with ``extractor`` under ``model`` (``facts``: every class's shape, from
    :func:`~optimus_egg.extract.dag.class_facts`); the dict says what each extractor run cost and took (for
    ``compare``: both, and how many classes they chose differently). With the graph's ``registry``,
    greedy settles ties by the bytes each op moves (see :func:`greedy_dag.extract`)."""
    check_name("extractor", extractor, EXTRACTORS)
    cost = model.bind(graph, facts)
    moved = MemoryCost(registry).bind(graph, facts) if registry is not None else None
    start = time.perf_counter()
    greedy = greedy_dag.extract(graph, roots, cost, moved)
    if isinstance(model, InductorCost):  # (eager's first: on a full tie it stands)
        greedy = _simulated_best(graph, roots, model, facts, [greedy_dag.extract(
            graph, roots, KernelCost(model.registry).bind(graph, facts), moved), greedy])
    info: dict[str, Any] = {"greedy": {"cost": greedy.cost, "seconds": time.perf_counter() - start}}
    if extractor == "greedy":
        return greedy, info
    solved, result = ilp.extract(graph, roots, cost, greedy, time_limit)
    totals = {"greedy": model.total(extracted_dag(graph, greedy, roots, facts))}
    totals["ilp"] = totals["greedy"] if solved is greedy else model.total(extracted_dag(graph, solved, roots, facts))
    # The node-local costs the ILP minimizes only approximate the model's own figure where the
    # model simulates fusion (inductor): by that figure, extraction never returns worse than greedy.
    ex = solved if totals["ilp"] <= totals["greedy"] else greedy
    info["ilp"] = {"cost": solved.cost if solved is not greedy else _cost_of(graph, roots, cost, result.choice),
                   "seconds": result.seconds, "status": result.status, "variables": result.variables,
                   "constraints": result.constraints, "used": ex is not greedy}
    if extractor == "compare":
        info["greedy"]["kernels"], info["ilp"]["kernels"] = totals["greedy"], totals["ilp"]
        mine = reachable(graph, roots, greedy.choice)
        theirs = reachable(graph, roots, solved.choice)
        info["differing_classes"] = sum(1 for c in mine | theirs if greedy.choice.get(c) != solved.choice.get(c))
        info["greedy_worse_by"] = greedy.cost - solved.cost
    return ex, info


def _simulated_best(graph: Frozen, roots: list[int], model: InductorCost, facts: dict[int, Fact],
                    candidates: list[Extraction]) -> Extraction:
    """The candidate ``model`` simulates cheapest, fewer eager launches first among equals, the
    first of equal ones (the forward's simulation does not see the backward a graph gets).
    Candidates that chose alike are one (most graphs: simulated once, not once each)."""
    candidates = [ex for i, ex in enumerate(candidates) if all(ex.choice != c.choice for c in candidates[:i])]
    if len(candidates) == 1:
        return candidates[0]
    eager = KernelCost(model.registry)

    def rank(ex: Extraction) -> tuple[float, float]:
        dag = extracted_dag(graph, ex, roots, facts)
        return model.total(dag), eager.total(dag)

    return min(candidates, key=rank)


def _cost_of(graph: Frozen, roots: list[int], cost: Any, choice: dict[int, int] | None) -> float | None:
    """The DAG cost of an ILP choice that was not used (None: it had none, or it is unusable)."""
    if choice is None or not all(r in choice for r in roots):
        return None
    kids = [greedy_dag._class_kids(graph, n) for n in range(len(graph.nodes))]
    if greedy_dag._has_cycle(roots, choice, kids):
        return None
    return greedy_dag.dag_cost(roots, choice, kids, [cost(n) for n in graph.nodes])


def reachable(graph: Frozen, roots: list[int], choice: dict[int, int]) -> set[int]:
    return set(extracted(graph, choice, roots))


def extracted_dag(graph: Frozen, ex: Extraction, roots: list[int], facts: dict[int, Fact]) -> Dag:
    """The graph as extracted, to cost after optimization."""
    terms = extracted(graph, ex.choice, roots)
    return Dag([terms[r] for r in roots], {t: facts[c] for c, t in terms.items() if c in facts})
