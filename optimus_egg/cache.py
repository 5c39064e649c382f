"""Recompiling an identical graph does not run saturation again.

Dynamo recompiles the same graph often (a guard failure, a second model instance, a new
process step that re-traces): the key is a digest of everything the search depends on, i.e. the
translated term DAG and its shape/dtype facts as the e-graph's rows (:func:`egraph.rows`: terms
numbered by their place in the DAG, so identical graphs give identical rows), the roots, the
calls behind the ``Op``/``Unary``/``Binary`` keys, the output structure, the device (the cost
models count its kernels) and the options. The value is the search's result (the frozen
e-graph, the extraction), kept in an in-process LRU; the FX graph is emitted again from the new
translation, so it reads the new graph's own placeholders, and its terms get the same numbers.
An entry holds ints, strings and tuples of them, not terms: the cyclic collector stops tracking
them, so cached graphs add nothing to its passes over the heap.

A call whose constants are not plain values (a tensor, an arbitrary object: their ``repr`` does
not identify them) makes the graph uncacheable; it is then always searched.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from optimus_egg.egraph import ENode, Frozen, Rows
from optimus_egg.extract.greedy_dag import Extraction
from optimus_egg.extract.select import device_of
from optimus_egg.frontend import Translation
from optimus_egg.ir import Term

#: Graphs kept; each holds its frozen e-graph (tens of thousands of nodes for large models).
MAX_ENTRIES = 16

_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format,
          type(Ellipsis))


@dataclass
class Entry:
    """A search's result. E-nodes are kept as plain tuples: the collector stops tracking a tuple
    of ints and strings, not a NamedTuple (``ENode``)."""

    nodes: tuple[tuple[Any, ...], ...]
    classes: dict[int, Sequence[int]]
    refs: dict[int, int]
    extraction: Extraction
    report: dict[str, Any] = field(default_factory=dict)  # the search's report fields

    @classmethod
    def of(cls, frozen: Frozen, extraction: Extraction, report: dict[str, Any]) -> "Entry":
        return cls(tuple(tuple(n) for n in frozen.nodes), frozen.classes, frozen.refs, extraction, report)

    def frozen(self) -> Frozen:
        return Frozen([ENode._make(n) for n in self.nodes], self.classes, self.refs)


_entries: OrderedDict[str, Entry] = OrderedDict()
_lock = threading.Lock()


def _plain(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return all(_plain(y) for y in x)
    if isinstance(x, slice):
        return all(_plain(y) for y in (x.start, x.stop, x.step))
    return isinstance(x, _PLAIN)


def key(tr: Translation, dag: Rows, options: Any, roots: list[Term]) -> str | None:
    """The cache key of a translated graph, its rows ``dag``, under ``options`` (None: not cacheable)."""
    h = hashlib.sha256()
    for name, table in dag.tables.items():
        h.update(f"{name} {len(table)}\n".encode())
        h.update("\n".join(table).encode())
    h.update(f"\nroots {[dag.ids[t] for t in roots]}\n".encode())
    for name, call in tr.registry.calls.items():
        if not _plain([x for x in call.leaves if type(x).__name__ != "Slot"]):
            return None
        h.update(f"call {name} {call.op} {call.target!r} {call.spec} {call.leaves!r} {call.constructor} "
                 f"{call.cost}\n".encode())
    outs = [f"@{dag.ids[x]}" if isinstance(x, Term) else repr(x) for x in tr.outputs]
    if not _plain([x for x in tr.outputs if not isinstance(x, Term)]):
        return None
    h.update(f"out {outs} {tr.output_spec} {len(tr.inputs)}\n".encode())
    h.update(f"device {device_of(tr)}\n".encode())  # whose kernels the cost models count
    h.update(f"options {options!r}\n".encode())
    return h.hexdigest()


def get(k: str | None) -> Entry | None:
    if k is None:
        return None
    with _lock:
        entry = _entries.get(k)
        if entry is not None:
            _entries.move_to_end(k)
        return entry


def put(k: str | None, entry: Entry) -> None:
    if k is None:
        return
    with _lock:
        _entries[k] = entry
        _entries.move_to_end(k)
        while len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)


def clear() -> None:
    with _lock:
        _entries.clear()
