"""The IR: egglog sorts for tensors, and the Python-side terms that are fed into them.

Every tensor value is a ``T``. Splits, chunks, unbinds, narrows and slices all become ``Sl``
views of their input, so that "pieces of one tensor" is visible to every rule without a
multi-output projection. ``cat`` and ``stack`` are one constructor, ``Cat`` over a cons-list that
carries the dim (a stack is a cat of unsqueezed pieces). ``Move`` is the one copy among the
layout forms: a dim moved, written out in order. Everything else is ``Unary``/``Binary``
(elementwise, shape-preserving: rules may move them through slices and cats) or ``Op`` (any
other call, kept exactly; its key names an entry of a :class:`~optimus_egg.calls.Registry`).
"""

from __future__ import annotations

import weakref
from typing import Union

DECLARATIONS = """
(datatype*
  (T
    (Input i64)
    (Sl T i64 i64 i64)
    (Squeeze T i64)
    (Unsqueeze T i64)
    (Flat T i64)
    (Unflat T i64 i64)
    (Move T i64 i64)
    (Cat TList)
    (Unary String T)
    (Binary String T T)
    (Op String TList))
  (TList
    (Cons T TList i64)
    (Nil)))
(function size (T i64) i64 :merge (min old new))
(function rank (T) i64 :merge (min old new))
(function dtype (T) String :merge old)
(function lsize (TList) i64 :merge (min old new))
(function pos (T) i64 :merge (min old new))  ; order in the program as translated (operands first)
(function height (T) i64 :merge (max old new))  ; longest chain of terms down to an input, as translated
(function depth (T) i64 :merge (max old new))  ; longest chain of terms up to an output, as translated
(function output (T) i64 :merge (max old new))  ; 1: returned, and must stay a tensor of its own; else 0
"""

#: Constructors and the sorts of their arguments, as declared above.
CONSTRUCTORS: dict[str, tuple[str, ...]] = {
    "Input": ("i64",),
    "Sl": ("T", "i64", "i64", "i64"),
    "Squeeze": ("T", "i64"),
    "Unsqueeze": ("T", "i64"),
    "Flat": ("T", "i64"),  # dims d and d+1 as one
    "Unflat": ("T", "i64", "i64"),  # Unflat(x, d, n): dim d as (n, size/n)
    "Move": ("T", "i64", "i64"),  # Move(x, a, b): movedim(x, a, b) written out in order (a copy)
    "Cat": ("TList",),
    "Unary": ("String", "T"),
    "Binary": ("String", "T", "T"),
    "Op": ("String", "TList"),
    "Cons": ("T", "TList", "i64"),
    "Nil": (),
}

#: The sort each constructor builds.
CONSTRUCTORS_SORT: dict[str, str] = {op: "TList" if op in ("Cons", "Nil") else "T" for op in CONSTRUCTORS}

#: The list dim used for argument lists of ``Op`` (never a real cat dim, so no cat rule applies).
ARGS = -1

Arg = Union["Term", int, str]


class Term:
    """An interned IR term: a constructor applied to terms and literals.

    Terms are shared DAGs that get deep (a model of many blocks is a chain of thousands), so each
    is built once, hashes in O(1) and compares by identity.
    """

    __slots__ = ("op", "args", "_hash", "__weakref__")
    _interned: "weakref.WeakValueDictionary[tuple[str, tuple[Arg, ...]], Term]" = weakref.WeakValueDictionary()
    op: str
    args: tuple[Arg, ...]

    def __new__(cls, op: str, args: tuple[Arg, ...]) -> "Term":
        key = (op, args)
        term = cls._interned.get(key)
        if term is None:
            term = object.__new__(cls)
            term.op, term.args, term._hash = op, args, hash(key)
            cls._interned[key] = term
        return term

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other

    def __reduce__(self) -> tuple[object, ...]:
        return (Term, (self.op, self.args))

    def __repr__(self) -> str:
        return f"({self.op} {' '.join(map(repr, self.args))})" if self.args else f"({self.op})"


def nil() -> Term:
    return Term("Nil", ())


def as_list(items: list[Term], dim: int) -> Term:
    """A cons-list of ``items`` along ``dim`` (``ARGS`` for argument lists)."""
    out = nil()
    for item in reversed(items):
        out = Term("Cons", (item, out, dim))
    return out


def from_list(lst: Term) -> tuple[list[Term], int]:
    items, dim = [], ARGS
    while lst.op == "Cons":
        head, lst, dim = lst.args
        items.append(head)
    return items, dim
