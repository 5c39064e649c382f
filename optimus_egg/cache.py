"""Recompiling an identical graph does not run saturation again.

Dynamo recompiles the same graph often (a guard failure, a second model instance, a new
process step that re-traces): the key is a canonical serialization of everything the search
depends on, i.e. the translated term DAG (terms are interned, so identical graphs give identical
terms: the DAG is named by its roots, see :func:`key`), the shape/dtype facts, the calls behind
the ``Op``/``Unary``/``Binary`` keys, the output structure, the device (the cost models count its
kernels) and the options. The value is the search's result (the
frozen e-graph, the extraction, the Ref names), kept in an in-process LRU; the FX graph is
emitted again from the new translation, so it reads the new graph's own placeholders.

A call whose constants are not plain values (a tensor, an arbitrary object: their ``repr`` does
not identify them) makes the graph uncacheable; it is then always searched.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

from optimus_egg.egraph import Frozen
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
    frozen: Frozen
    extraction: Extraction
    names: dict[Term, int]  # also keeps the interned terms alive, so a re-translation reuses them
    report: dict[str, Any] = field(default_factory=dict)  # the search's report fields


_entries: OrderedDict[str, Entry] = OrderedDict()
_lock = threading.Lock()


def _plain(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return all(_plain(y) for y in x)
    if isinstance(x, slice):
        return all(_plain(y) for y in (x.start, x.stop, x.step))
    return isinstance(x, _PLAIN)


def key(tr: Translation, options: Any, roots: list[Term]) -> str | None:
    """The cache key of a translated graph under ``options`` (None: not cacheable).

    Terms are named by identity. They are interned, so equal terms are one object while any of
    them lives, and an entry keeps every term its graph was built from alive (``Entry.names``):
    a live term at an address that a cached key names is that very term, with its whole DAG.
    (Serializing the DAG term by term took 3/4 of the key's time: ~8 ms for 4K terms.)"""
    h = hashlib.sha256()
    h.update(f"roots {[id(t) for t in roots]}\n".encode())
    h.update("".join(f"fact {id(term)} {shape} {dtype}\n" for term, shape, dtype in tr.facts).encode())
    for name, call in tr.registry.calls.items():
        if not _plain([x for x in call.leaves if type(x).__name__ != "Slot"]):
            return None
        h.update(f"call {name} {call.op} {call.target!r} {call.spec} {call.leaves!r} {call.constructor} "
                 f"{call.cost}\n".encode())
    outs = [f"@{id(x)}" if isinstance(x, Term) else repr(x) for x in tr.outputs]
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
