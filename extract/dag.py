"""Concrete term DAGs for the cost models: the graph as translated, and the graph as extracted.

A cost model reports a figure for a concrete DAG, not for an e-graph: before optimization it is
the translated term DAG, after it the DAG the extractor chose. Both are :class:`~optimus_egg.ir.Term`
DAGs here, with the shape and dtype of every term that can be known (``Facts``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

from optimus_egg.egraph import ENode, Frozen
from optimus_egg.ir import CONSTRUCTORS, Term

#: A term's (or class's) static shape (None for a symbolic size) and dtype name ("float32").
Fact = tuple[tuple[int | None, ...], str]
Facts = dict[Term, Fact]


def topo(roots: Iterable[Term]) -> list[Term]:
    """Every term reachable from ``roots``, children before parents, each once."""
    out: list[Term] = []
    seen: set[Term] = set()
    stack: list[tuple[Term, bool]] = [(r, False) for r in roots]
    while stack:
        term, ready = stack.pop()
        if ready:
            out.append(term)
            continue
        if term in seen:
            continue
        seen.add(term)
        stack.append((term, True))
        stack.extend((a, False) for a in term.args if isinstance(a, Term) and a not in seen)
    return out


def items(lst: Term) -> tuple[list[Term], int]:
    """The elements of a cons-list term and its dim."""
    out, dim = [], -1
    while lst.op == "Cons":
        head, lst, dim = lst.args
        out.append(head)
    return out, dim


def tensor_args(term: Term) -> list[Term]:
    """The tensors a term reads: its T arguments, and the elements of an Op's or Cat's list."""
    if term.op in ("Op", "Cat"):
        return items(term.args[-1])[0]
    return [a for a, s in zip(term.args, CONSTRUCTORS[term.op]) if s == "T"]


def infer(term: Term, facts: Facts) -> Fact | None:
    """A term's fact from its arguments' facts, for the constructors whose shape rule is known
    (the same rules as ``rewrites/analysis``); ``Op`` terms only have the facts FX gave them."""
    def listed(lst: Term) -> tuple[list[Fact | None], int]:
        parts, dim = items(lst)
        return [facts.get(p) for p in parts], dim

    return _infer(term.op, term.args, facts.get, listed)


def _infer(op: str, args: tuple[Any, ...], fact_of: Callable[[Any], Fact | None],
           listed: Callable[[Any], tuple[list[Fact | None], int]]) -> Fact | None:
    """:func:`infer` on a constructor's arguments, whatever stands for them: ``fact_of`` gives a
    tensor argument's fact, ``listed`` a list argument's items' facts and its dim."""
    if op in ("Sl", "Squeeze", "Unsqueeze", "Unary", "Binary"):
        src = fact_of(args[1] if op in ("Unary", "Binary") else args[0])
        if src is None:
            return None
        shape, dtype = list(src[0]), src[1]
        if op == "Sl":
            if args[1] >= len(shape):
                return None
            shape[args[1]] = args[3]
        elif op == "Squeeze":
            del shape[args[1]:args[1] + 1]
        elif op == "Unsqueeze":
            shape.insert(args[1], 1)
        return tuple(shape), dtype
    if op == "Move":
        src = fact_of(args[0])
        if src is None or not (0 <= args[1] < len(src[0]) and 0 <= args[2] < len(src[0])):
            return None
        shape = list(src[0])
        shape.insert(args[2], shape.pop(args[1]))
        return tuple(shape), src[1]
    if op == "Cat":
        got, dim = listed(args[0])
        if not got or any(f is None for f in got) or not 0 <= dim < len(got[0][0]):  # type: ignore[index]
            return None
        shape = list(got[0][0])  # type: ignore[index]
        sizes = [f[0][dim] for f in got]  # type: ignore[index]
        shape[dim] = None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[arg-type]
        return tuple(shape), got[0][1]  # type: ignore[index]
    return None


class Dag:
    """A concrete term DAG to cost: its roots, its terms children first, and their facts
    (completed by :func:`infer`). Built once and shared by every cost model. ``copies``: the
    terms a graph as written computes more than once, and how many times (the node-local cost
    models charge each copy)."""

    def __init__(self, roots: list[Term], facts: Facts, copies: dict[Term, int] | None = None) -> None:
        self.roots = roots
        self.order = topo(roots)
        self.facts = complete(self.order, facts)
        self.copies = copies or {}


def complete(order: list[Term], facts: Facts) -> Facts:
    """``facts`` plus whatever :func:`infer` derives along ``order`` (children first)."""
    out = dict(facts)
    for term in order:
        if term not in out:
            got = infer(term, out)
            if got is not None:
                out[term] = got
    return out


def extracted(graph: Frozen, choice: dict[int, int], roots: list[int]) -> dict[int, Term]:
    """The term each class reachable from ``roots`` stands for under ``choice``."""
    made: dict[int, Term] = {}
    open_: set[int] = set()  # classes whose children are being made
    stack: list[tuple[int, bool]] = [(r, False) for r in roots]
    while stack:
        cls, ready = stack.pop()
        if cls in made:
            continue
        node = graph.nodes[choice[cls]]
        kids = [c for c, s in zip(node.children, CONSTRUCTORS[node.op]) if s in ("T", "TList")]
        pending = [k for k in kids if k not in made]
        if pending and not ready:
            if cls in open_:
                raise RuntimeError(f"the extraction is cyclic (class {cls} reaches itself)")
            open_.add(cls)
            stack.append((cls, True))
            stack.extend((k, False) for k in pending)
            continue
        args = tuple(made[c] if s in ("T", "TList") else c for c, s in zip(node.children, CONSTRUCTORS[node.op]))
        made[cls] = Term(node.op, args)
    return made


def class_facts(graph: Frozen, seed: dict[int, Fact]) -> dict[int, Fact]:
    """A fact for every class that has one: ``seed`` (classes of translated terms) plus what
    the shape rules derive through the e-nodes, propagated with a worklist (linear in nodes).
    A list class stands for the facts of its items and its dim, from its first cons cell whose
    head has a fact and whose tail is known."""
    out = dict(seed)
    parents: dict[int, list[int]] = defaultdict(list)
    for n, node in enumerate(graph.nodes):
        for c, s in zip(node.children, CONSTRUCTORS[node.op]):
            if s in ("T", "TList"):
                parents[c].append(n)
    lists: dict[int, tuple[list[Fact], int]] = {}  # a TList class -> its items' facts, its dim

    def listed(cls: int) -> tuple[list[Fact], int]:
        return lists[cls]

    work = list(range(len(graph.nodes)))
    while work:
        n = work.pop()
        node = graph.nodes[n]
        if node.eclass in out or node.op in ("Cons", "Nil", "Input", "Op"):
            if node.op in ("Cons", "Nil") and node.eclass not in lists:
                got = _list_facts(node, out, lists)
                if got is not None:
                    lists[node.eclass] = got
                    work.extend(parents[node.eclass])
            continue
        if not all(c in (out if s == "T" else lists) for c, s in zip(node.children, CONSTRUCTORS[node.op])
                   if s in ("T", "TList")):
            continue
        fact = _infer(node.op, node.children, out.get, listed)
        if fact is not None:
            out[node.eclass] = fact
            work.extend(parents[node.eclass])
    return out


def _list_facts(node: ENode, facts: dict[int, Fact], lists: dict[int, tuple[list[Fact], int]]
                ) -> tuple[list[Fact], int] | None:
    """A list node's items' facts and dim (that of its last cell, as :func:`items` reads it), once
    its head has a fact and its tail's are known."""
    if node.op == "Nil":
        return [], -1
    head, tail, dim = node.children
    if head not in facts or tail not in lists:
        return None
    rest, last = lists[tail]
    return [facts[head], *rest], last if rest else dim
