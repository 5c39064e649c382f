"""DAG-aware greedy extraction: a shared subterm is paid once.

Each class keeps the cheapest node found so far together with the set of classes its subgraph
uses; a node's cost is the cost of the union of its children's sets plus its own. Greedy can,
in rare cases, pick a cyclic combination as children improve after their
parents; then a tree-cost extraction with strictly positive costs (always acyclic) is used.
"""

from __future__ import annotations

import heapq
from collections import ChainMap, defaultdict
from collections.abc import Collection, Mapping, MutableMapping
from dataclasses import dataclass

from optimus_egg.egraph import Frozen
from optimus_egg.extract.cost import CostModel, NodeCost
from optimus_egg.ir import CONSTRUCTORS

#: Added to every node so that among equal kernel counts the smaller graph wins and zero-cost
#: cycles (x = Sl(x, d, 0, n)) are never chosen.
EPSILON = 1e-4


@dataclass
class Extraction:
    choice: Mapping[int, int]  # class -> node index
    cost: float  # kernel cost of the extracted DAG (epsilons excluded)
    method: str


def _class_kids(graph: Frozen, n: int) -> list[int]:
    node = graph.nodes[n]
    return [c for s, c in zip(CONSTRUCTORS[node.op], node.children) if s in ("T", "TList")]


def extract(graph: Frozen, roots: list[int], cost: CostModel, moved: NodeCost | None = None) -> Extraction:
    """``moved`` (bytes an e-node moves) settles ties: ``relu(x[:, :8])`` rather than
    ``relu(x)[:, :8]``, the same launches and a sixth of the work, forward and backward. Before
    the e-node count, a tie also keeps the program's order of materializations (:func:`_in_order`)."""
    kids, own, weights, choice, method = _greedy(graph, roots, cost, moved)
    return _finish(graph, roots, choice, method, kids, own, weights, apart=False)


def extract_apart(graph: Frozen, roots: list[int], cost: CostModel, moved: NodeCost | None = None
                  ) -> dict[int, Extraction]:
    """Each root extracted as if it were the graph's only output: one greedy pass, then each
    root's own sharing and fusing, which reuse only what that root's DAG extracts (``discover``
    prices many unrelated programs of one e-graph this way)."""
    kids, own, weights, choice, method = _greedy(graph, roots, cost, moved)
    return {r: _finish(graph, [r], choice, method, kids, own, weights, apart=True) for r in set(roots)}


def _greedy(graph: Frozen, roots: list[int], cost: CostModel, moved: NodeCost | None
            ) -> tuple[list[list[int]], list[float], list[float], dict[int, int], str]:
    kids = [_class_kids(graph, n) for n in range(len(graph.nodes))]
    own = [cost(node) for node in graph.nodes]
    weights = _in_order(graph, kids, own if moved is None else _with_bytes(graph, own, moved))
    choice = _greedy_dag(graph, kids, weights)
    method = "greedy-dag"
    if not all(r in choice for r in roots):
        raise RuntimeError("extraction found no finite term for a graph output")
    if _has_cycle(roots, choice, kids):
        choice, method = _tree(graph, kids, own), "tree (greedy-dag result was cyclic)"
    return kids, own, weights, choice, method


def _finish(graph: Frozen, roots: list[int], choice: dict[int, int], method: str, kids: list[list[int]],
            own: list[float], weights: list[float], apart: bool) -> Extraction:
    """Greedy's ``choice`` shared and fused for ``roots`` (``apart``: over a layer of its own, so
    that ``choice`` serves other roots after)."""
    shared: MutableMapping[int, int] = ChainMap({}, choice) if apart else dict(choice)
    _share(graph, roots, shared, kids, weights)
    _fuse(graph, roots, shared, kids, own)
    if not _has_cycle(roots, shared, kids):  # never expected; the unshared choice is acyclic
        choice = shared
    return Extraction(choice, dag_cost(roots, choice, kids, own), method)


def _with_bytes(graph: Frozen, own: list[float], moved: NodeCost) -> list[float]:
    """``own`` plus bytes on the nodes that cost something (a free node stays a view), scaled
    so that a whole graph's bytes weigh less than one e-node's EPSILON: the fewest kernels
    first, then the fewest nodes, then the fewest bytes."""
    nbytes = [moved(node) if o > 0 else 0.0 for node, o in zip(graph.nodes, own)]
    scale = EPSILON / 10 / max(sum(nbytes), 1.0)
    return [o + scale * b for o, b in zip(own, nbytes)]


def _in_order(graph: Frozen, kids: list[list[int]], own: list[float]) -> list[float]:
    """``own`` plus :data:`REVERSED` on each view that makes a tensor the program materializes
    a view of one the program computes later: where the kernels tie, the program's own
    materialization is kept. (``graph.refs`` numbers the written terms operands first; a written
    class counts as materialized when no free node computes it from classes written before it.)

    DeepFM writes ``v = stack(embs)`` and ``flat = cat(unbind(v))``. ``flat = v.flatten(1)`` and
    ``v = cat(embs).unflatten(1, ...)`` launch the same kernels forward, and the second has
    fewer e-nodes (a stack is a cat of unsqueezes), but with the linear reading the materialized
    ``flat`` its input gradient is ``add(mm, x)``, which CPU Inductor makes an ``addmm`` that
    splits the pointwise kernel around it: one launch more per training step.

    Slices are left alone: a piece the program computes that is a slice of a later tensor is
    what split/cat cleanup makes of per-piece work (``relu`` of each piece, then the cat: the
    pieces become slices of one ``relu``), which saves a kernel and is no tie; pricing those
    slices would only make the greedy pass revisit wide sub-DAG unions."""
    first: dict[int, int] = {}  # class -> the earliest written term in it
    for ref, cls in graph.refs.items():
        if ref < first.get(cls, ref + 1):
            first[cls] = ref
    free: set[int] = set()  # written classes that some free node computes from earlier ones
    reversed_views: list[int] = []
    for n, ks in enumerate(kids):
        mine = first.get(graph.nodes[n].eclass)
        if mine is None or own[n] != 0:
            continue
        if all(first.get(k, mine) < mine for k in ks):
            free.add(graph.nodes[n].eclass)
        elif len(ks) == 1 and first.get(ks[0], -1) > mine and graph.nodes[n].op != "Sl":
            reversed_views.append(n)
    out = list(own)
    for n in reversed_views:
        if graph.nodes[n].eclass not in free:
            out[n] += REVERSED
    return out


#: A fraction of a kernel that outweighs a hundred e-nodes' EPSILON.
REVERSED = 100 * EPSILON


def _greedy_dag(graph: Frozen, kids: list[list[int]], own: list[float]) -> dict[int, int]:
    """Each class's sub-DAG is a bitset of classes, so a union is one big-int OR (sets of
    classes are quadratic on long chains); its cost is the widest child's cost plus the classes
    the other children add (usually few: they share most of their past), or, where a child adds
    most of its sub-DAG, that child's cost less the classes it shares. The widest, not the
    costliest: a list cell whose head is a kernel and whose tail is N views would re-walk all N.

    A class priced for the first time passes its parents on at once (depth first); a class that
    gets cheaper passes them to a queue taken in the order their classes were first priced,
    operands before readers, once the first pricing is done: each improvement wave then walks
    a list once (depth first, every cell of a stack improving in turn would re-walk the cells
    above it).

    A union's price sums ``paid`` over the classes it adds or shares (:func:`_price`); a free
    class (a view, an input) pays exactly EPSILON, so those are counted in C (``bit_count``) and
    only the classes whose node weighs something (``costly``) are walked one by one: a list cell
    joining a batched member to a tail still written member by member adds and shares O(N)
    classes, nearly all free, and walked bit by bit N such cells are quadratic in the width."""
    parents: dict[int, list[int]] = defaultdict(list)
    kid_sets = [set(ks) for ks in kids]  # (a node is visited again whenever a child improves)
    for n, ks in enumerate(kid_sets):
        for k in ks:
            parents[k].append(n)
    eclass = [node.eclass for node in graph.nodes]
    total: dict[int, float] = {}  # class -> cost of its chosen sub-DAG
    mask: dict[int, int] = {}  # class -> the classes of that sub-DAG, itself included
    width: dict[int, int] = {}  # class -> how many (the bits set in its mask)
    paid: dict[int, float] = {}  # class -> own cost of the node it uses now
    choice: dict[int, int] = {}
    rank: dict[int, int] = {}  # class -> when it was first priced
    work = [n for n, ks in enumerate(kids) if not ks]
    again: list[tuple[int, int]] = []  # (rank of its class, node): readers of a class that got cheaper
    queued: set[int] = set()
    costly = 0  # classes whose chosen node weighs something (own > 0): the others pay EPSILON
    while work or again:
        if work:
            n = work.pop()
        else:
            n = heapq.heappop(again)[1]
            queued.discard(n)
        cls = eclass[n]
        ks = kid_sets[n]
        used, cost, size = 0, 0.0, 0
        if ks:
            if not mask.keys() >= ks:
                continue
            base = max(ks, key=width.__getitem__)
            used, cost, size = mask[base], total[base], width[base]
            for k in ks:
                extra = mask[k] & ~used
                if extra:
                    count = extra.bit_count()
                    cost += (total[k] - _price(mask[k] ^ extra, costly, paid) if 2 * count > width[k]
                             else _price(extra, costly, paid))
                    size += count
                    used |= extra
        bit = 1 << cls
        if used & bit:
            continue  # the node reaches its own class: a cycle
        cost += own[n] + EPSILON
        if cls not in total or cost < total[cls] - 1e-12:
            # a tie settled by bytes alone is not passed up: on a long chain every such tie
            # would re-walk all ancestors (quadratic; the parents' totals are off by bytes only)
            ties = cls in total and cost > total[cls] - EPSILON / 2
            total[cls], mask[cls], width[cls], paid[cls], choice[cls] = cost, used | bit, size + 1, own[n] + EPSILON, n
            costly = costly | bit if own[n] else costly & ~bit
            if cls not in rank:
                rank[cls] = len(rank)
                work.extend(parents[cls])
            elif not ties:
                for p in parents[cls]:
                    r = rank.get(eclass[p])
                    if r is None:
                        work.append(p)
                    elif p not in queued:
                        queued.add(p)
                        heapq.heappush(again, (r, p))
    return choice


def _price(classes: int, costly: int, paid: dict[int, float]) -> float:
    """``paid`` summed over ``classes``, where every class outside ``costly`` pays EPSILON."""
    some = classes & costly
    return EPSILON * (classes ^ some).bit_count() + sum([paid[c] for c in _bits(some)])


def _share(graph: Frozen, roots: list[int], choice: MutableMapping[int, int], kids: list[list[int]],
           own: list[float]) -> None:
    """Reuse what the extracted graph computes anyway: a class switches to a node whose operands
    are extracted already, or a few views away from extracted ones, where that costs less than
    the node it uses now and what only that node reads (a slice of a tensor computed for another
    use, instead of recomputing the op per piece; ``pow(x.view(...))`` where ``x.view(...)`` is
    extracted for another reader, not ``pow(x).view(...)``). Greedy misses these: it prices each
    class with its whole sub-DAG, as if nothing were shared."""
    order = _postorder(roots, choice, kids)
    readers = _readers(roots, order, choice, kids)
    for _ in range(_SHARE_PASSES):
        changed = False
        for cls in list(order):
            if cls not in order:
                continue
            for n in graph.classes[cls]:
                if n == choice[cls]:
                    continue
                plan: dict[int, int] = {}
                if not all(_by_views(k, order, graph, kids, own, plan, _VIEW_DEPTH) for k in kids[n]) or cls in plan:
                    continue
                added = own[n] + sum(own[m] + EPSILON for m in plan.values())
                kept = {k for m in (n, *plan.values()) for k in kids[m]}
                if added >= own[choice[cls]] + _only_read_by(cls, choice, kids, own, readers, kept) - 1e-12:
                    continue
                frontier = {k for k in kept if k in order}
                if _reaches([k for k in frontier if order[k] >= order[cls]], {cls}, choice, kids, order):
                    continue
                choice.update(plan)
                choice[cls], changed = n, True
                order = _postorder(roots, choice, kids)
                readers = _readers(roots, order, choice, kids)
                break
        if not changed:
            return


def _readers(roots: list[int], order: dict[int, int], choice: Mapping[int, int],
             kids: list[list[int]]) -> dict[int, int]:
    """How many extracted classes read each extracted class (a graph output counts as one)."""
    readers: dict[int, int] = defaultdict(int)
    for cls in order:
        for k in set(kids[choice[cls]]):
            readers[k] += 1
    for r in set(roots):
        readers[r] += 1
    return readers


def _only_read_by(cls: int, choice: Mapping[int, int], kids: list[list[int]], own: list[float],
                  readers: dict[int, int], kept: set[int]) -> float:
    """What the classes below ``cls``'s node that nothing else reads cost (each with its
    EPSILON): what switching that node drops, ``kept`` aside. At most :data:`_ONLY_READ_BY`
    classes are counted; a larger sub-DAG is not weighed in full, which only forgoes a switch."""
    dropped: dict[int, int] = defaultdict(int)  # class -> its readers that would be dropped
    stack, total, count = list(set(kids[choice[cls]])), 0.0, 0
    while stack and count < _ONLY_READ_BY:
        k = stack.pop()
        dropped[k] += 1
        if k in kept or dropped[k] < readers[k]:
            continue
        count += 1
        total += own[choice[k]] + EPSILON
        stack.extend(set(kids[choice[k]]))
    return total


_SHARE_PASSES = 4
_ONLY_READ_BY = 64
_VIEW_DEPTH = 3


def _by_views(cls: int, order: dict[int, int], graph: Frozen, kids: list[list[int]], own: list[float],
              plan: dict[int, int], depth: int) -> bool:
    """Whether ``cls`` is extracted or a chain of free single-operand nodes (views) over an
    extracted class, ``depth`` steps at most; the nodes of the chain go into ``plan``."""
    if cls in order or cls in plan:
        return True
    if depth == 0:
        return False
    for n in graph.classes[cls]:
        # (a view of a class already planned could close a cycle of views: A = view(B), B = view(A))
        if own[n] == 0 and len(kids[n]) == 1 and kids[n][0] != cls and kids[n][0] not in plan:
            plan[cls] = n
            if _by_views(kids[n][0], order, graph, kids, own, plan, depth - 1):
                return True
            del plan[cls]
    return False


def _fuse(graph: Frozen, roots: list[int], choice: MutableMapping[int, int], kids: list[list[int]],
          own: list[float]) -> None:
    """Build one op that several extracted classes are views of, when it costs less than what
    they cost now: N linears as slices of one linear on concatenated weights. Greedy never picks
    it: for each class alone the fused op (a linear and two cats) costs more than its own linear.

    Groups are taken largest first. Fused classes whose views cover the same classes are
    alternatives, and the cheapest to build of them wins, not the first found: eight linears of
    one weight on eight inputs are selects of a baddbmm over stacked weights, and of one linear
    over the stacked inputs."""
    order = _postorder(roots, choice, kids)
    groups: dict[int, dict[int, int]] = {}  # unextracted class -> {extracted class: its view of it}
    for cls in order:
        for n in graph.classes[cls]:
            if own[n] == 0 and len(kids[n]) == 1 and kids[n][0] not in order and kids[n][0] != cls:
                groups.setdefault(kids[n][0], {}).setdefault(cls, n)
    alternatives: dict[frozenset[int], list[int]] = {}  # the classes covered -> the fused classes
    for fused, members in groups.items():
        if len(members) > 1:
            alternatives.setdefault(frozenset(members), []).append(fused)
    tried = 0
    for _, fused_classes in sorted(alternatives.items(), key=lambda kv: -len(kv[0])):
        best: tuple[float, dict[int, int], dict[int, int]] | None = None
        for fused in fused_classes[:max(_FUSE_TRIES - tried, 0)]:
            tried += 1
            members = {c: n for c, n in groups[fused].items() if c in order and choice[c] != n}
            plan: dict[int, int] = {}
            # (never from the members themselves: they become views of what is built)
            cost = _build_cost(fused, order, graph, kids, own, plan, _BUILD_DEPTH, set(members))
            if cost >= sum(own[choice[c]] for c in members) - 1e-9 or any(c in plan for c in members):
                continue
            if best is not None and cost >= best[0] - 1e-9:
                continue
            frontier = {k for m in plan.values() for k in kids[m] if k in order}
            if not _reaches(frontier, members.keys(), choice, kids, order):
                best = (cost, plan, members)
        if best is not None:
            choice.update(best[1])
            choice.update(best[2])
            order = _postorder(roots, choice, kids)


_FUSE_TRIES = 200
_BUILD_DEPTH = 3  # ops (nodes that cost) on the way from the fused class to extracted ones


def _build_cost(cls: int, order: dict[int, int], graph: Frozen, kids: list[list[int]], own: list[float],
                plan: dict[int, int], depth: int, visiting: set[int], log: list[int] | None = None) -> float:
    """What computing ``cls`` adds to the extracted graph, built from extracted classes with at
    most ``depth`` ops; the nodes picked go into ``plan``. ``log``: the classes added to the plan,
    in order, so that a candidate that loses is taken out again without copying the plan (a
    copy per candidate is quadratic in a stack's width)."""
    if log is None:
        log = []
    if cls in visiting:  # on the way here (the plan holds those too), or excluded by the caller
        return float("inf")
    if cls in order or cls in plan:
        return 0.0
    visiting.add(cls)
    candidates = [n for n in sorted(graph.classes[cls], key=own.__getitem__)[:_BUILD_WIDTH]
                  if own[n] == 0 or depth > 0]
    best, best_plan, mark = float("inf"), None, len(log)
    for i, n in enumerate(candidates):
        plan[cls] = n
        log.append(cls)
        total = own[n]
        for k in kids[n]:
            total += _build_cost(k, order, graph, kids, own, plan, depth - (own[n] > 0), visiting, log)
            if total >= best:
                break
        if total < best and i == len(candidates) - 1:
            visiting.discard(cls)
            return total  # the last candidate, and the best: what it added stays
        if total < best:
            best, best_plan = total, [(c, plan[c]) for c in log[mark:]]
        while len(log) > mark:
            del plan[log.pop()]
    visiting.discard(cls)
    for c, m in best_plan or ():
        plan[c] = m
        log.append(c)
    return best


_BUILD_WIDTH = 4


def _postorder(roots: list[int], choice: Mapping[int, int], kids: list[list[int]]) -> dict[int, int]:
    """Each extracted class's position in a post-order of the extracted DAG (operands first)."""
    order: dict[int, int] = {}
    seen: set[int] = set()
    stack = [(r, False) for r in roots]
    while stack:
        cls, done = stack.pop()
        if done:
            order.setdefault(cls, len(order))
            continue
        if cls in seen:
            continue
        seen.add(cls)
        stack.append((cls, True))
        stack.extend((k, False) for k in kids[choice[cls]] if k not in seen)
    return order


def _reaches(starts: Collection[int], targets: Collection[int], choice: Mapping[int, int], kids: list[list[int]],
             order: dict[int, int]) -> bool:
    """Whether any of ``targets`` is below (or is) any of ``starts`` in the extracted DAG
    (``order``: its post-order), or may be: one walk from every start, which skips classes before
    every target in post-order (they cannot reach one) and answers yes after
    :data:`_REACH_VISITS` classes per start. A yes only forgoes a switch; exhaustive walks make
    ``_share`` quadratic on e-graphs cut short by a budget, and a walk per start and target
    makes ``_fuse`` quadratic in a stack's width."""
    seen, stack = set(starts), list(starts)
    floor, budget = min(order[t] for t in targets), _REACH_VISITS * len(stack)
    while stack:
        cls = stack.pop()
        if cls in targets or len(seen) > budget:
            return True
        for k in kids[choice[cls]]:
            if k not in seen and order.get(k, floor) >= floor:
                seen.add(k)
                stack.append(k)
    return False


_REACH_VISITS = 1024


def _bits(x: int) -> list[int]:
    """Positions of the set bits of ``x``."""
    if x.bit_count() < 64:
        out = []
        while x:
            low = x & -x
            out.append(low.bit_length() - 1)
            x ^= low
        return out
    # a long chain's sub-DAGs run to tens of thousands of bits: str.find skips the zeros in C
    digits = bin(x)[:1:-1]  # least significant first
    out, i = [], digits.find("1")
    while i >= 0:
        out.append(i)
        i = digits.find("1", i + 1)
    return out


def _tree(graph: Frozen, kids: list[list[int]], own: list[float]) -> dict[int, int]:
    best: dict[int, float] = {}
    choice: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for n, node in enumerate(graph.nodes):
            if all(k in best for k in kids[n]):
                total = own[n] + EPSILON + sum(best[k] for k in kids[n])
                if total < best.get(node.eclass, float("inf")) - 1e-12:
                    best[node.eclass], choice[node.eclass] = total, n
                    changed = True
    return choice


def _has_cycle(roots: list[int], choice: Mapping[int, int], kids: list[list[int]]) -> bool:
    state: dict[int, int] = {}  # 1 = on the stack, 2 = done
    for root in roots:
        stack = [(root, False)]
        while stack:
            cls, leaving = stack.pop()
            if leaving:
                state[cls] = 2
                continue
            if state.get(cls) == 2:
                continue
            if state.get(cls) == 1:
                return True
            state[cls] = 1
            stack.append((cls, True))
            for k in kids[choice[cls]]:
                if state.get(k) == 1:
                    return True
                if state.get(k) != 2:
                    stack.append((k, False))
    return False


def dag_cost(roots: list[int], choice: Mapping[int, int], kids: list[list[int]], own: list[float]) -> float:
    seen: set[int] = set()
    stack = list(roots)
    total = 0.0
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        total += own[choice[cls]]
        stack.extend(kids[choice[cls]])
    return total
