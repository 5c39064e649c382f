"""The e-graph engine: egglog's low-level bindings driven with program text.

Building through egglog's high-level Python API goes quadratic on shared subterms; one text
program parsed and run in Rust is linear. This module is the only one that drives
``egglog.bindings`` (loaded by :mod:`optimus_egg.egglog_bindings`).
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

from optimus_egg.egglog_bindings import bindings
from optimus_egg.ir import CONSTRUCTORS, CONSTRUCTORS_SORT, DECLARATIONS, Term
from optimus_egg.rewrites import STAGES, Family, Written, all_family_names

_LOAD = "load"
#: Rulesets: one per rule stage (optimus_egg.rewrites.STAGES).
_ANALYSIS, _SEED, _SIMPLIFY, _EXPAND = STAGES


def _loaders() -> dict[str, str]:
    """Per constructor ``C``: a relation ``C-row`` (the term's id, then its arguments with terms
    as ids) and a rule that makes ``(Ref id)`` equal to ``C`` applied to them. Plus fact rows."""
    out = {}
    for op, sorts in CONSTRUCTORS.items():
        ref = "LRef" if CONSTRUCTORS_SORT[op] == "TList" else "Ref"
        out[f"{op}-row"] = _staging(op, sorts, lambda term: f"(union ({ref} i) {term})", own_id=True)
    for fact, (cols, action) in _FACTS.items():
        vars_ = " ".join(f"a{k}" for k in range(len(cols.split())))
        out[f"{fact}-row"] = (f"(relation {fact}-row (i64 {cols}))\n"
                              f"(rule (({fact}-row i {vars_})) ({action}) :ruleset {_LOAD})")
    return out


def _staging(name: str, sorts: Sequence[str], action: Callable[[str], str], own_id: bool = False) -> str:
    """A relation ``name-row`` of ``sorts`` with terms as ids (after an id of the row's own term
    when ``own_id``: ``i``), and a rule that performs ``action`` on ``(name args)`` for each row."""
    cols = ["i64"] * own_id + ["i64" if s in ("T", "TList") else s for s in sorts]
    vars_ = [f"a{k}" for k in range(len(sorts))]
    args = " ".join(f"({'LRef' if s == 'TList' else 'Ref'} {v})" if s in ("T", "TList") else v
                    for s, v in zip(sorts, vars_))
    term = f"({name} {args})" if args else f"({name})"
    return (f"(relation {name}-row ({' '.join(cols)}))\n"
            f"(rule (({name}-row {' '.join(['i'] * own_id + vars_)})) ({action(term)}) :ruleset {_LOAD})")


def _written_loaders(families: Sequence[Family]) -> list[str]:
    """Each written relation's staging table and loader (see :class:`optimus_egg.rewrites.Written`)."""
    return [_staging(name, sorts, lambda atom: atom) for fam in families if fam.written
            for name, sorts in fam.written.relations.items()]


#: Fact tables: the columns after the term's id, and how a row sets the fact (a0, a1: columns).
#: ``place`` is every T term's: its position (its id), ``height`` and ``depth``, not an output.
_FACTS = {"size": ("i64 i64", "(set (size (Ref i) a0) a1)"),
          "meta": ("i64 String", "(set (rank (Ref i)) a0) (set (dtype (Ref i)) a1)"),
          "place": ("i64 i64", "(set (pos (Ref i)) i) (set (output (Ref i)) 0) (set (height (Ref i)) a0) "
                               "(set (depth (Ref i)) a1)"),
          "output": ("", "(set (output (Ref i)) 1)")}


_LOADERS = _loaders()


def _count(report: Any, matches: dict[str, int]) -> None:
    """Add an egglog run report's matches per rule to ``matches``."""
    for rule, n in report.num_matches_per_rule.items():
        matches[rule] = matches.get(rule, 0) + n


def _field(value: Any) -> str:
    """A literal as a tab-separated field (egglog's ``input`` reads strings unquoted)."""
    if type(value) is int:  # most literals (dims, offsets): nothing to check
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"not an IR literal: {value!r}")
    text = str(value)
    if "\t" in text or "\n" in text or "\r" in text:
        raise ValueError(f"unsupported character in IR string {value!r}")
    return text


#: Iterations of the seed or analysis rules between two readings of the clock.
_CHUNK = 256


@dataclass(frozen=True)
class Budget:
    """Where saturation stops. Extraction always runs on whatever the e-graph holds then."""

    max_iterations: int = 100  # rounds: a simplify round, or an expand round
    max_enodes: int = 200_000
    max_seconds: float = 10.0


class _Clock:
    """Saturation's deadline, and the time the next round is expected to take: the last one's,
    scaled by how much the e-graph grew since (a round's time grows with the e-graph)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._last: tuple[float, int] | None = None  # (seconds, e-nodes before it) of the last round

    def overruns(self, enodes: int) -> bool:
        """Whether a round started now on ``enodes`` e-nodes is expected to end past the deadline."""
        ahead = 0.0
        if self._last is not None:
            seconds, then = self._last
            ahead = seconds * max(1.0, enodes / max(then, 1))
        return time.perf_counter() + ahead > self.deadline

    def ran(self, seconds: float, enodes: int) -> None:
        self._last = (seconds, enodes)


@dataclass
class SaturationStats:
    iterations: int = 0
    saturated: bool = False
    stop_reason: str = ""
    seconds: float = 0.0
    enodes: int = 0
    rule_matches: dict[str, int] = field(default_factory=dict)


class ENode(NamedTuple):
    """One e-node (a tuple rather than a dataclass: ``freeze`` builds them by the thousand)."""

    op: str
    children: tuple[Any, ...]  # class ids (int) for T/TList arguments, Python values for literals
    eclass: int


@dataclass
class Frozen:
    """A snapshot of the e-graph: classes of e-nodes over our constructors."""

    nodes: list[ENode]
    classes: dict[int, Sequence[int]]
    refs: dict[int, int]  # Ref id (see rows) -> class id


#: Idle engines per thread, by program (see _lend); a thread keeps the last few programs it ran.
_IDLE = threading.local()
_IDLE_PROGRAMS = 4


def _idle() -> OrderedDict[str, Any]:
    if not hasattr(_IDLE, "engines"):
        _IDLE.engines = OrderedDict()
    return _IDLE.engines


def _lend(program: str) -> Any:
    """An egglog engine that has run ``program`` (sorts, functions, rules), with ``(push)`` taken.

    Running the declarations and rules costs the same for every compile (egglog compiles every
    rule), so an engine is reused: ``(pop)`` when its EGraph is collected (``_give_back``) restores the whole database as
    it was after the program (tables, union-find, id counters: the next graph is numbered as in a
    fresh engine). Per thread: ``bindings.EGraph`` is unsendable (pyo3 panics on another thread).
    """
    engine = _idle().pop(program, None)
    if engine is None:
        engine = bindings.EGraph()
        engine.run_program(*engine.parse_program(program))
    engine.run_program(*engine.parse_program("(push)"))
    return engine


def _give_back(program: str, engine: Any, thread: int) -> None:
    """Return a lent engine to its thread's idle ones (an EGraph's finalizer)."""
    if threading.get_ident() != thread:
        return  # unsendable: let it go
    try:
        engine.run_program(*engine.parse_program("(pop)"))
    except Exception:  # noqa: BLE001 - an engine that cannot restore is not reused
        return
    idle = _idle()
    idle[program] = engine
    while len(idle) > _IDLE_PROGRAMS:
        idle.popitem(last=False)


_REFS = ("(constructor Ref (i64) T)", "(constructor LRef (i64) TList)")  # see EGraph.add
_RULESETS = tuple(f"(ruleset {name})" for name in (*STAGES, _LOAD))


def check_rules(families: list[Family]) -> None:
    """Raise ``ValueError`` naming the rule, or the family's ``DECLARATIONS``, that egglog rejects.

    A rule module of one's own with an egglog error (a typo, an unknown constructor, a type
    error) otherwise failed inside every compile, each graph falling back with egglog's message
    about a line of a generated program. Runs the program a compile runs (its engine is then
    reused by the compiles, see ``_lend``); only when egglog rejects it, each declaration and
    rule again on its own to find which, so that egglog's position is within that text.
    """
    try:
        EGraph(families)
        return
    except bindings.EggSmolError as exc:
        whole = str(exc)

    def rejects(setup: str, text: str) -> str | None:
        engine = bindings.EGraph()
        engine.run_program(*engine.parse_program(setup))
        try:
            engine.run_program(*engine.parse_program(text))
        except bindings.EggSmolError as exc:
            return " ".join(str(exc).split())
        return None

    setup = "\n".join((DECLARATIONS, *_REFS))
    for fam in families:
        for what, text in (("DECLARATIONS", fam.declarations), ("WRITTEN", fam.written and fam.written.declarations())):
            if not text:
                continue
            if why := rejects(setup, text):
                raise ValueError(f"{what} of rule family {fam.name!r} are not valid egglog: {why}")
            setup += "\n" + text
    setup = "\n".join((setup, *_RULESETS))
    builtin = {"analysis", *all_family_names()}
    # a built-in rule rejected: a name the others declare clashes with its (relation a: variable a)
    declared = [f.name for f in families if f.declared() and f.name not in builtin]
    for fam in families:
        for rule in fam.rules:
            if why := rejects(setup, rule.egglog()):
                after = f" after the DECLARATIONS of {declared}" if fam.name in builtin and declared else ""
                raise ValueError(f"rule {rule.name!r} of family {fam.name!r} is not valid egglog{after}: {why}\n"
                                 f"  {rule.egglog()}")
    raise ValueError(f"egglog rejects the rules of families {[f.name for f in families]}: {whole}")


@dataclass
class Rows:
    """A term DAG as the e-graph's table rows. Terms are numbered (their Ref ids) operands first,
    from the roots in order, then the facts' terms; a row names terms by these numbers alone, so
    two graphs of equal rows are one search (the cache's key, :mod:`optimus_egg.cache`)."""

    ids: dict[Term, int]
    tables: dict[str, list[str]]
    counts: dict[str, int]  # terms per constructor (see EGraph._check_rows)


def rows(roots: Sequence[Term], facts: Sequence[tuple[Term, list[int | None], str]],
         outputs: Sequence[Term] = (), written: Sequence[Written] = ()) -> Rows:
    """The rows of ``roots`` (and their subterms), their shape/dtype facts, and the ``written``
    relations of the families in use. ``outputs``: the terms the graph returns as tensors of
    their own (``output`` is 1)."""
    out = Rows({}, {name: [] for name in _LOADERS}, {op: 0 for op in CONSTRUCTORS})
    heights: dict[Term, int] = {}
    for root in roots:
        _number(root, out, heights)
    meta, size = out.tables["meta-row"], out.tables["size-row"]
    for term, shape, dtype in facts:
        i = _number(term, out, heights)
        meta.append(f"{i}\t{len(shape)}\t{_field(dtype)}")
        size.extend(f"{i}\t{d}\t{n}" for d, n in enumerate(shape) if n is not None)
    depths = _depths(out.ids)
    out.tables["place-row"].extend(f"{out.ids[t]}\t{h}\t{depths.get(t, 0)}" for t, h in heights.items()
                                   if CONSTRUCTORS_SORT[t.op] == "T")
    out.tables["output-row"].extend(str(out.ids[t]) for t in outputs)
    shapes = {term: shape for term, shape, _ in facts}
    for relations in written:
        for name, found in relations.rows(out.ids, shapes).items():
            out.tables.setdefault(f"{name}-row", []).extend(
                "\t".join(str(out.ids[v]) if type(v) is Term else _field(v) for v in row) for row in found)
    return out


def _number(root: Term, out: Rows, heights: dict[Term, int]) -> int:
    """Give ``root`` and its subterms Ref ids and table rows (iteratively: graphs are deep).

    height: the longest chain of T terms down to an input (lists add nothing); a
    term never depends on one of equal height, so rules may group those as independent."""
    ids, tables, counts = out.ids, out.tables, out.counts
    if root in ids:
        return ids[root]
    stack = [root]
    while stack:
        term = stack[-1]
        if term in ids:
            stack.pop()
            continue
        kids = [a for a in term.args if type(a) is Term and a not in ids]
        if kids:
            stack.extend(kids)
            continue
        stack.pop()
        i = ids[term] = len(ids)
        cols, height = [str(i)], 0
        for a in term.args:
            if type(a) is Term:
                cols.append(str(ids[a]))
                if heights[a] > height:
                    height = heights[a]
            else:
                cols.append(_field(a))
        tables[term.op + "-row"].append("\t".join(cols))
        heights[term] = height + 1 if CONSTRUCTORS_SORT[term.op] == "T" else height
        counts[term.op] += 1
    return ids[root]


def _depths(ids: dict[Term, int]) -> dict[Term, int]:
    """depth: the longest chain of T terms up to an output (lists add nothing). Like height,
    a term never depends on one of equal depth; unlike height, the terms a graph only returns
    (a backward's weight gradients, computed at every height) share one."""
    depths: dict[Term, int] = {}
    for term in reversed(ids):  # ids number operands first: readers come first
        d = depths.get(term, 0) + (CONSTRUCTORS_SORT[term.op] == "T")
        for a in term.args:
            if type(a) is Term and depths.get(a, -1) < d:
                depths[a] = d
    return depths


class EGraph:
    def __init__(self, families: list[Family]) -> None:
        rules = [r.egglog() for fam in families for r in fam.rules]
        decls = [fam.declared() for fam in families]
        program = "\n".join((DECLARATIONS, *_REFS, *decls, *_RULESETS, *rules, *_LOADERS.values(),
                             *_written_loaders(families)))
        self._eg = _lend(program)
        weakref.finalize(self, _give_back, program, self._eg, threading.get_ident()).atexit = False
        self._seed_matches: dict[str, int] = {}  # reported with saturation's
        self._deadline = math.inf  # the search's time limit, from the seed stage on (see add)
        self._seed_cut = False  # the seed stage ran out of time
        self._load_seconds = 0.0  # what the first round is expected to take (see saturate)

    def _run(self, *texts: str) -> list[Any]:
        program = "\n".join(texts)
        return self._eg.run_program(*self._eg.parse_program(program))

    def add(self, rows: Rows, max_seconds: float = math.inf) -> None:
        """Insert a term DAG's rows (:func:`rows`) and run the seed rules to a fixpoint, or for
        ``max_seconds``, the time limit of the whole search (:meth:`saturate` ends there too; out
        of time in the seed stage, it runs no round).

        Rows go in as tables, not commands: each top-level egglog command costs time that grows
        with the e-graph, while
        ``input`` of a tab-separated file plus one loader rule per constructor (``_LOADERS``)
        inserts every row in one set-at-a-time step.
        """
        with tempfile.TemporaryDirectory(prefix="optimus_egg_") as tmp:
            inputs = []
            for name, table in rows.tables.items():
                if table:
                    path = os.path.join(tmp, f"{name}.tsv")
                    with open(path, "w") as f:
                        f.write("\n".join(table) + "\n")
                    inputs.append(f'(input {name} "{path}")')
            began = time.perf_counter()
            self._run(*inputs, f"(run {_LOAD} 1)")
            self._load_seconds += time.perf_counter() - began
        self._check_rows(rows.counts)
        self._deadline = time.perf_counter() + max_seconds
        self._seed_cut = not self._fixpoint(_SEED, self._deadline, self._seed_matches)

    def _fixpoint(self, ruleset: str, deadline: float, matches: dict[str, int]) -> bool:
        """Run ``ruleset`` until an iteration changes nothing, reading the clock every
        :data:`_CHUNK` iterations: whether the fixpoint was reached before ``deadline``. A
        fixpoint cut short is sound: every state it passes through is one the whole run passes
        through, and the seed and analysis rules' facts are never wrong, only missing (a list
        takes an iteration per cell to walk)."""
        while True:
            report = self._run(f"(run {ruleset} {_CHUNK})")[0].report
            _count(report, matches)
            if not report.iterations[-1].rule_set_report.changed:
                return True
            if time.perf_counter() >= deadline:
                return False

    def _sizes(self) -> dict[str, int]:
        """Rows per table."""
        return dict(self._run("(print-size)")[0].sizes)

    def _check_rows(self, counts: dict[str, int]) -> None:
        """egglog can silently merge distinct terms that differ in literals (an engine bug); never
        optimize on a graph that lost one."""
        sizes = self._sizes()
        for op, expected in counts.items():
            if sizes.get(op, 0) != expected:
                raise RuntimeError(f"egglog kept {sizes.get(op, 0)} {op} rows for {expected} distinct "
                                   "terms (engine bug); refusing to optimize this graph")

    def enode_count(self) -> int:
        sizes = self._sizes()
        return sum(sizes.get(op, 0) for op in CONSTRUCTORS)

    def saturate(self, budget: Budget) -> SaturationStats:
        """Simplify to a fixpoint (facts settled before every round), then one expand round, and
        again, until nothing changes or the budget is spent. Each round is an iteration. The time
        limit is ``budget.max_seconds`` from now, or the one :meth:`add` was given if earlier.

        egglog cannot interrupt a command (one round), so a round is not started when the last
        one, scaled by the e-graph's growth since, would end past the time limit: what is left of
        an overrun is a round that takes longer than predicted. The facts of every loaded term
        settle first, in chunks (:meth:`_fixpoint`: they walk every list as written, a cell per
        iteration). The first round, the first to see every term, is expected to take what
        loading them took."""
        stats = SaturationStats(rule_matches=dict(self._seed_matches))
        start = time.perf_counter()
        clock = _Clock(min(start + budget.max_seconds, self._deadline))
        stats.enodes = self.enode_count()
        if self._seed_cut or not self._fixpoint(_ANALYSIS, clock.deadline, stats.rule_matches):
            where = "in the seed stage" if self._seed_cut else "settling the first facts"
            stats.stop_reason = f"time limit ({budget.max_seconds} s) {where}"
            stats.seconds = time.perf_counter() - start
            return stats
        clock.ran(self._load_seconds, stats.enodes)
        settled = True
        while True:
            if stats.iterations >= budget.max_iterations:
                stats.stop_reason = f"iteration limit ({budget.max_iterations})"
                break
            updated = self._round(_SIMPLIFY, stats, clock, settled)
            if updated is False:  # nothing changed, facts included: they are still settled
                updated = self._round(_EXPAND, stats, clock, True)
            settled = False
            stats.enodes = self.enode_count()
            if updated is None:
                stats.stop_reason = f"time limit ({budget.max_seconds} s)"
                break
            if not updated:
                stats.saturated, stats.stop_reason = True, "saturated"
                break
            if stats.enodes > budget.max_enodes:
                stats.stop_reason = f"e-node limit ({budget.max_enodes})"
                break
        stats.seconds = time.perf_counter() - start
        return stats

    def _round(self, ruleset: str, stats: SaturationStats, clock: "_Clock", settled: bool) -> bool | None:
        """Settle the facts (unless ``settled``: an analysis iteration that finds nothing still
        costs time that grows with the e-graph), run ``ruleset`` once; whether anything changed
        (None: no time left). One command: the analysis run from Python an iteration at a time,
        to read the clock in between, is slower."""
        if clock.overruns(stats.enodes):
            return None
        began = time.perf_counter()
        run = f"(run {ruleset})" if settled else f"(seq (saturate (run {_ANALYSIS})) (run {ruleset}))"
        report = self._run(f"(run-schedule {run})")[0].report
        clock.ran(time.perf_counter() - began, stats.enodes)
        stats.iterations += 1
        _count(report, stats.rule_matches)
        return report.updated

    def freeze(self) -> Frozen:
        """The e-graph's classes and e-nodes, class ids numbered in the order rows name them."""
        functions = self._eg.freeze().functions  # each read converts every table: read once
        ids: dict[Any, int] = {}
        cid = ids.setdefault  # cid(value, len(ids)): the class id of an egglog value
        to_i64, to_str = self._eg.value_to_i64, self._eg.value_to_string
        nodes: list[ENode] = []
        classes: dict[int, list[int]] = {}
        refs: dict[int, int] = {}
        for ref in ("Ref", "LRef"):
            for row in functions[ref].rows:
                refs[to_i64(row.inputs[0])] = cid(row.output, len(ids))
        for name, fn in functions.items():
            sorts = CONSTRUCTORS.get(name)
            if sorts is None:
                continue
            kinds = [1 if s == "i64" else 2 if s == "String" else 0 for s in sorts]  # 0: a class
            for row in fn.rows:
                if row.subsumed:
                    continue
                children = tuple([cid(v, len(ids)) if k == 0 else to_i64(v) if k == 1 else to_str(v)
                                  for k, v in zip(kinds, row.inputs)])
                eclass = cid(row.output, len(ids))
                members = classes.get(eclass)
                if members is None:
                    classes[eclass] = [len(nodes)]
                else:
                    members.append(len(nodes))
                nodes.append(ENode(name, children, eclass))
        # tuples of ints: the collector stops tracking them, and the cache keeps snapshots for long
        return Frozen(nodes, {c: tuple(members) for c, members in classes.items()}, refs)
