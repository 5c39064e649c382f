"""The e-graph engine: egglog's low-level bindings driven with program text.

Building through egglog's high-level Python API costs ~0.3–0.5 ms per node and goes quadratic on
shared subterms (see shared/reference/egglog.md); one text program parsed and run in Rust is
linear. This module is the only one that touches ``egglog.bindings``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from egglog import bindings

from optimus_egg.ir import CONSTRUCTORS, DECLARATIONS, Term, literal
from optimus_egg.rewrites import Family

RULESET = "opt"
_CHUNK = 200  # commands per parse: egglog keeps the source text per command


@dataclass(frozen=True)
class Budget:
    """Where saturation stops. Extraction always runs on whatever the e-graph holds then."""

    max_iterations: int = 30
    max_enodes: int = 200_000
    max_seconds: float = 10.0


@dataclass
class SaturationStats:
    iterations: int = 0
    saturated: bool = False
    stop_reason: str = ""
    seconds: float = 0.0
    enodes: int = 0
    rule_matches: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ENode:
    op: str
    children: tuple[Any, ...]  # class ids (int) for T/TList arguments, Python values for literals
    eclass: int


@dataclass
class Frozen:
    """A snapshot of the e-graph: classes of e-nodes over our constructors."""

    nodes: list[ENode]
    classes: dict[int, list[int]]
    refs: dict[int, int]  # Ref id (see EGraph.add) -> class id


def _ref(term: Term, i: int) -> str:
    return f"(LRef {i})" if term.op in ("Cons", "Nil") else f"(Ref {i})"


class EGraph:
    def __init__(self, families: list[Family]) -> None:
        self._eg = bindings.EGraph()
        rules = [r.egglog(RULESET) for fam in families for r in fam.rules]
        decls = [fam.declarations for fam in families if fam.declarations]
        refs = ("(constructor Ref (i64) T)", "(constructor LRef (i64) TList)")  # see add()
        self._run(DECLARATIONS, *refs, *decls, f"(ruleset {RULESET})", *rules)
        self._ids: dict[Term, int] = {}
        self._counts: dict[str, int] = {op: 0 for op in CONSTRUCTORS}

    def _run(self, *texts: str) -> list[Any]:
        program = "\n".join(texts)
        return self._eg.run_program(*self._eg.parse_program(program))

    def add(self, roots: list[Term], facts: list[tuple[Term, list[int | None], str]]) -> dict[Term, int]:
        """Insert terms (and their subterms) and their shape/dtype facts; return their Ref ids.

        Each term ``i`` is one ``(union (Ref i) (C ... (Ref j) ...))``: no global ``let`` (each is
        a new table in egglog, which makes building quadratic), and the text is parsed in chunks
        (egglog keeps the source text per command).
        """
        lines: list[str] = []
        for root in roots:
            self._emit(root, lines)
        for term, shape, dtype in facts:
            ref = _ref(term, self._emit(term, lines))
            lines.append(f"(set (rank {ref}) {len(shape)})")
            lines.extend(f"(set (size {ref} {i}) {n})" for i, n in enumerate(shape) if n is not None)
            lines.append(f"(set (dtype {ref}) {literal(dtype)})")
        for k in range(0, len(lines), _CHUNK):
            self._run(*lines[k:k + _CHUNK])
        self._check_rows()
        return self._ids

    def _emit(self, root: Term, lines: list[str]) -> int:
        """Give ``root`` and its subterms Ref ids, subterms first (iteratively: graphs are deep)."""
        stack: list[tuple[Term, bool]] = [(root, False)]
        while stack:
            term, ready = stack.pop()
            if term in self._ids:
                continue
            kids = [a for a in term.args if isinstance(a, Term) and a not in self._ids]
            if kids and not ready:
                stack.append((term, True))
                stack.extend((k, False) for k in kids)
                continue
            i = self._ids[term] = len(self._ids)
            args = " ".join(_ref(a, self._ids[a]) if isinstance(a, Term) else literal(a) for a in term.args)
            lines.append(f"(union {_ref(term, i)} ({term.op}{' ' + args if args else ''}))")
            self._counts[term.op] += 1
        return self._ids[root]

    def _sizes(self) -> dict[str, int]:
        """Rows per table."""
        return dict(self._run("(print-size)")[0].sizes)

    def _check_rows(self) -> None:
        """egglog 13.2 can silently merge distinct terms that differ in literals (seen with
        let-bound terms); never optimize on a graph that lost one."""
        sizes = self._sizes()
        for op, expected in self._counts.items():
            if sizes.get(op, 0) != expected:
                raise RuntimeError(f"egglog kept {sizes.get(op, 0)} {op} rows for {expected} distinct "
                                   "terms (engine bug); refusing to optimize this graph")

    def enode_count(self) -> int:
        sizes = self._sizes()
        return sum(sizes.get(op, 0) for op in CONSTRUCTORS)

    def saturate(self, budget: Budget) -> SaturationStats:
        stats = SaturationStats()
        start = time.perf_counter()
        while True:
            if stats.iterations >= budget.max_iterations:
                stats.stop_reason = f"iteration limit ({budget.max_iterations})"
                break
            report = self._run(f"(run {RULESET} 1)")[0].report
            stats.iterations += 1
            for rule, n in report.num_matches_per_rule.items():
                stats.rule_matches[rule] = stats.rule_matches.get(rule, 0) + n
            stats.enodes = self.enode_count()
            if not report.updated:
                stats.saturated, stats.stop_reason = True, "saturated"
                break
            if stats.enodes > budget.max_enodes:
                stats.stop_reason = f"e-node limit ({budget.max_enodes})"
                break
            if time.perf_counter() - start > budget.max_seconds:
                stats.stop_reason = f"time limit ({budget.max_seconds} s)"
                break
        stats.seconds = time.perf_counter() - start
        return stats

    def freeze(self) -> Frozen:
        frozen = self._eg.freeze()
        ids: dict[Any, int] = {}

        def cid(v: Any) -> int:
            return ids.setdefault(v, len(ids))

        convert = {"i64": self._eg.value_to_i64, "String": self._eg.value_to_string}
        nodes: list[ENode] = []
        classes: dict[int, list[int]] = {}
        refs: dict[int, int] = {}
        for ref in ("Ref", "LRef"):
            for row in frozen.functions[ref].rows:
                refs[self._eg.value_to_i64(row.inputs[0])] = cid(row.output)
        for name, fn in frozen.functions.items():
            sorts = CONSTRUCTORS.get(name)
            if sorts is None:
                continue
            for row in fn.rows:
                if row.subsumed:
                    continue
                kids = tuple(convert[s](v) if s in convert else cid(v) for s, v in zip(sorts, row.inputs))
                node = ENode(name, kids, cid(row.output))
                classes.setdefault(node.eclass, []).append(len(nodes))
                nodes.append(node)
        return Frozen(nodes, classes, refs)
