"""Exact extraction: an integer linear program over the e-graph, solved by HiGHS (scipy).

Greedy DAG extraction picks each class's best node given its children's best choices, so it
misses optima that come from sharing: three matmuls on one input cost 3 separately, but 2 as one
matmul on concatenated weights and its slices; to each class on its own the separate matmul
looks cheaper. The ILP sees the whole DAG at once:

- a binary ``x[n]`` per e-node (chosen or not); minimize ``sum cost[n] * x[n]`` (the cost of
  the chosen DAG, each shared node paid once, plus the greedy extractor's tie-breaking epsilon);
- every output class has exactly one chosen node, every class at most one;
- a chosen node's every child class has a chosen node;
- acyclicity: classes in a strongly connected component of the class graph get an order
  variable ``t[c]``, and a chosen node must sit strictly above each child class of its own
  component (``t[parent] >= t[child] + 1 - K * (1 - x[n])``); edges between components can
  never close a cycle, so the program stays small where the e-graph has few cycles.

Its optimum is at most the greedy cost (greedy's acyclic choice is a feasible point). HiGHS
runs under a time limit; if it stops without a solution at least as good as greedy's, greedy's
is used, so the result is never worse and never cyclic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from optimus_egg.egraph import Frozen
from optimus_egg.extract.cost import NodeCost
from optimus_egg.extract.greedy_dag import EPSILON, Extraction, _class_kids, _has_cycle, dag_cost

#: Default HiGHS time limit (seconds) before falling back to the greedy extraction.
TIME_LIMIT = 10.0


@dataclass
class IlpResult:
    choice: dict[int, int] | None  # None: no solution within the limit
    status: str  # "optimal" | "time limit" | ...
    seconds: float
    variables: int
    constraints: int


def _scipy():
    try:
        import numpy
        from scipy import optimize, sparse
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("extractor='ilp' needs scipy (HiGHS): pip install 'optimus_egg[ilp]'") from exc
    return numpy, optimize, sparse


def solve(graph: Frozen, roots: list[int], cost: NodeCost, time_limit: float = TIME_LIMIT,
          bound: float | None = None) -> IlpResult:
    """The cheapest acyclic choice of one node per class needed by ``roots`` (``bound``: a
    known solution's objective, which lets the solver prune everything worse)."""
    start = time.perf_counter()
    np, optimize, sparse = _scipy()
    kids = [_class_kids(graph, n) for n in range(len(graph.nodes))]
    nodes = _candidates(graph, roots, kids)
    index = {n: i for i, n in enumerate(nodes)}
    by_class: dict[int, list[int]] = {}
    for n in nodes:
        by_class.setdefault(graph.nodes[n].eclass, []).append(n)
    comp = _components(by_class, kids)
    ordered = sorted({c for c in by_class if comp[c][1]})
    t_index = {c: len(nodes) + i for i, c in enumerate(ordered)}
    n_vars = len(nodes) + len(ordered)
    # The order of a class only matters inside its component: t ranges over [0, size - 1] and
    # the big-M is the component's size (a much tighter relaxation than the whole graph's).
    size: dict[int, int] = {}
    for c in ordered:
        size[comp[c][0]] = size.get(comp[c][0], 0) + 1

    rows, cols, vals, lo, hi = [], [], [], [], []

    def row(entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    for cls, members in by_class.items():
        must = 1.0 if cls in roots else 0.0
        row([(index[n], 1.0) for n in members], must, 1.0)
    for n in nodes:
        parent = graph.nodes[n].eclass
        for child in set(kids[n]):
            row([(index[n], 1.0)] + [(index[m], -1.0) for m in by_class[child]], -float("inf"), 0.0)
            if comp[parent][0] == comp[child][0] and comp[parent][1]:
                big = float(size[comp[parent][0]])  # t[parent] - t[child] - big * x[n] >= 1 - big
                row([(t_index[parent], 1.0), (t_index[child], -1.0), (index[n], -big)], 1.0 - big, float("inf"))
    objective = np.zeros(n_vars)
    for n in nodes:
        objective[index[n]] = cost(graph.nodes[n]) + EPSILON
    if bound is not None:
        row([(index[n], float(objective[index[n]])) for n in nodes], -float("inf"), bound * (1 + 1e-9) + 1e-9)
    integrality = np.zeros(n_vars)
    integrality[: len(nodes)] = 1
    upper = np.ones(n_vars)
    for c in ordered:
        upper[t_index[c]] = size[comp[c][0]] - 1
    matrix = sparse.csr_array((vals, (rows, cols)), shape=(len(lo), n_vars))
    remaining = max(time_limit - (time.perf_counter() - start), 0.1)
    res = optimize.milp(objective, integrality=integrality, bounds=optimize.Bounds(np.zeros(n_vars), upper),
                        constraints=optimize.LinearConstraint(matrix, lo, hi),
                        options={"time_limit": remaining, "mip_rel_gap": 1e-9})
    status = {0: "optimal", 1: "time limit", 2: "infeasible", 3: "unbounded"}.get(res.status, res.message)
    choice = None
    if res.x is not None:
        choice = {}
        for cls, members in by_class.items():
            best = max(members, key=lambda n: res.x[index[n]])
            if res.x[index[best]] > 0.5:
                choice[cls] = best
    return IlpResult(choice, status, time.perf_counter() - start, n_vars, len(lo))


def extract(graph: Frozen, roots: list[int], cost: NodeCost, greedy: Extraction,
            time_limit: float = TIME_LIMIT) -> tuple[Extraction, IlpResult]:
    """The ILP's extraction, or ``greedy`` when the ILP found nothing cheaper in time. On a tie
    greedy's choice stands: it settles ties by bytes moved and by the program's order of
    materializations (:func:`greedy_dag.extract`), which the ILP's objective does not see."""
    kids = [_class_kids(graph, n) for n in range(len(graph.nodes))]
    used = _reachable(roots, greedy.choice, kids)
    bound = sum(cost(graph.nodes[greedy.choice[c]]) + EPSILON for c in used)
    result = solve(graph, roots, cost, time_limit, bound)
    choice = result.choice
    if choice is None or not all(r in choice for r in roots) or _has_cycle(roots, choice, kids):
        return greedy, result
    own = [cost(node) for node in graph.nodes]
    got = dag_cost(roots, choice, kids, own)
    if got > greedy.cost - 1e-9:
        return greedy, result
    method = "ilp" if result.status == "optimal" else f"ilp ({result.status}: best found)"
    return Extraction({c: choice[c] for c in _reachable(roots, choice, kids)}, got, method), result


def _reachable(roots: list[int], choice: dict[int, int], kids: list[list[int]]) -> set[int]:
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.add(cls)
            stack.extend(kids[choice[cls]])
    return seen


def _candidates(graph: Frozen, roots: list[int], kids: list[list[int]]) -> list[int]:
    """Nodes that can appear in an extraction: no self-loop, every child class has a finite
    term (fixpoint from the leaves), reachable from the roots."""
    ok_class: set[int] = set()
    ok_node = [False] * len(graph.nodes)
    changed = True
    while changed:
        changed = False
        for n, node in enumerate(graph.nodes):
            if not ok_node[n] and node.eclass not in kids[n] and all(k in ok_class for k in kids[n]):
                ok_node[n] = True
                if node.eclass not in ok_class:
                    ok_class.add(node.eclass)
                changed = True
    reach: set[int] = set()
    stack = [r for r in roots if r in ok_class]
    while stack:
        cls = stack.pop()
        if cls in reach:
            continue
        reach.add(cls)
        for n in graph.classes[cls]:
            if ok_node[n]:
                stack.extend(k for k in kids[n] if k not in reach)
    return [n for n in range(len(graph.nodes)) if ok_node[n] and graph.nodes[n].eclass in reach]


def _components(by_class: dict[int, list[int]], kids: list[list[int]]) -> dict[int, tuple[int, bool]]:
    """class -> (its strongly connected component, whether that component has a cycle), by
    Tarjan's algorithm over the class graph (iterative: graphs are deep)."""
    succ = {c: sorted({k for n in members for k in kids[n]}) for c, members in by_class.items()}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: dict[int, tuple[int, bool]] = {}
    counter = 0
    for start in succ:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            for j in range(i, len(succ[v])):
                w = succ[v][j]
                if w not in index:
                    work.append((v, j + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    members.append(w)
                    if w == v:
                        break
                cyclic = len(members) > 1 or v in succ[v]
                for w in members:
                    out[w] = (v, cyclic)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out
