"""Extracted e-graph → FX graph: the mirror image of :mod:`optimus_egg.frontend`.

Every node it creates carries ``meta["val"]`` (and ``example_value``), computed by running the
node's op on its inputs' fake values, so Inductor and its passes see shapes everywhere.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils import _pytree as pytree

from optimus_egg import optable
from optimus_egg.egraph import Frozen
from optimus_egg.extract import Extraction
from optimus_egg.frontend import Translation
from optimus_egg.optable import storage_key, val


#: ``node.meta`` key of an emitted node: the names of the original nodes it is equal to.
ORIGIN = "optimus_egg_origin"


class Emitter:
    def __init__(self, gm: fx.GraphModule, tr: Translation, eg: Frozen, ex: Extraction) -> None:
        self.gm, self.tr, self.eg, self.ex = gm, tr, eg, ex
        self.graph = fx.Graph()
        self.graph._codegen = copy.copy(gm.graph._codegen)
        self.done: dict[int, fx.Node] = {}
        self._forms: dict[int, tuple[str, list[int], tuple[Any, ...]]] = {}

    def node_of(self, cls: int) -> Any:
        return self.eg.nodes[self.ex.choice[cls]]

    def list_items(self, cls: int) -> tuple[list[int], int]:
        items, dim = [], -1
        node = self.node_of(cls)
        while node.op == "Cons":
            head, tail, dim = node.children
            items.append(head)
            node = self.node_of(tail)
        return items, dim

    def form(self, cls: int) -> tuple[str, list[int], tuple[Any, ...]]:
        """How a class is written back: (form, the classes it reads, literal arguments).

        Forms are the structural calls of ``optable.STRUCTURAL_CALLS``, ``Input`` and ``Call``
        (a registry key). ``Squeeze(Sl(x, d, i, 1), d)`` reads as ``select`` and a cat of pieces
        unsqueezed on its dim as ``stack``, so the inner view is never emitted on its own.
        """
        if cls in self._forms:
            return self._forms[cls]
        node = self.node_of(cls)
        op, kids = node.op, node.children
        if op == "Input":
            got: tuple[str, list[int], tuple[Any, ...]] = ("Input", [], kids)
        elif op in ("Sl", "Unsqueeze"):
            got = (op, [kids[0]], kids[1:])
        elif op == "Flat":
            got = (op, [kids[0]], (kids[1], kids[1] + 1))
        elif op == "Unflat":
            got = (op, [kids[0]], (kids[1], (kids[2], -1)))
        elif op == "Squeeze":
            inner = self.node_of(kids[0])
            if inner.op == "Sl" and inner.children[1] == kids[1] and inner.children[3] == 1:
                got = ("Select", [inner.children[0]], (kids[1], inner.children[2]))
            else:
                got = ("Squeeze", [kids[0]], kids[1:])
        elif op == "Cat":
            items, dim = self.list_items(kids[0])
            inner = [self.node_of(i) for i in items]
            if all(n.op == "Unsqueeze" and n.children[1] == dim for n in inner):
                got = ("Stack", [n.children[0] for n in inner], (dim,))
            else:
                got = ("Cat", items, (dim,))
        elif op == "Op":
            got = ("Call", self.list_items(kids[1])[0], kids[:1])
        else:  # Unary / Binary
            got = ("Call", list(kids[1:]), kids[:1])
        self._forms[cls] = got
        return got

    def emit_class(self, root: int) -> fx.Node:
        stack = [(root, False)]
        while stack:
            cls, ready = stack.pop()
            if cls in self.done:
                continue
            pending = [d for d in self.form(cls)[1] if d not in self.done]
            if pending and not ready:
                stack.append((cls, True))
                stack.extend((d, False) for d in reversed(pending))
                continue
            self.done[cls] = self._emit_one(cls)
        return self.done[root]

    def _emit_one(self, cls: int) -> fx.Node:
        form, reads, literals = self.form(cls)
        inputs = [self.done[c] for c in reads]
        if form == "Input":
            return self.inputs[literals[0]]
        if form == "Call":
            call = self.tr.registry.calls[literals[0]]
            n_slots = sum(isinstance(x, optable.Slot) for x in call.leaves)
            return call.emit(self.graph, inputs[:n_slots])  # anything after the slots is an effect token
        return optable.emit_structural(self.graph, form, inputs, literals)

    def run(self, root_classes: list[int], effect_class: int | None) -> fx.GraphModule:
        self.inputs = []
        for old in self.tr.inputs:
            new = self.graph.node_copy(old, lambda n: n)
            new.meta = dict(old.meta)
            self.inputs.append(new)
        if effect_class is not None:
            self.emit_class(effect_class)
        outs = iter([self.emit_class(c) for c in root_classes])
        leaves = [next(outs) if isinstance(x, optable.Term) else x for x in self.tr.outputs]
        _propagate_meta(self.graph)
        leaves = _keep_aliasing(self.graph, self.tr, leaves)
        self.graph.output(pytree.tree_unflatten(leaves, self.tr.output_spec))
        new_gm = fx.GraphModule(self.gm, self.graph)
        new_gm.meta = dict(self.gm.meta)
        return new_gm

    def mark_origins(self, classes: dict[optable.Term, int]) -> None:
        """Tag every emitted node with the names of the original nodes whose value it computes
        (their terms ended in its e-class), as ``meta[ORIGIN]``: ``explain`` diffs graphs by it."""
        same: dict[fx.Node, list[str]] = {}
        for term, node in self.tr.origin.items():
            new = self.done.get(classes.get(term, -1))
            if new is not None:
                same.setdefault(new, []).append(node.name)
        for new, names in same.items():
            new.meta[ORIGIN] = names  # a fresh list: copied input nodes share meta values with the original


def _propagate_meta(graph: fx.Graph) -> None:
    """Fake-run every new node so that it carries ``val``/``example_value`` like Dynamo's."""
    no_inputs_mode = FakeTensorMode(allow_non_fake_inputs=True)  # for nodes that read no fake value
    for node in graph.nodes:
        if node.op in ("call_function", "call_method") and "val" not in node.meta:
            _fake_run(node, no_inputs_mode)


def _fake_run(node: fx.Node, no_inputs_mode: FakeTensorMode | None = None) -> None:
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), val)
    fakes = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, FakeTensor)]
    with fakes[0].fake_mode if fakes else (no_inputs_mode or FakeTensorMode(allow_non_fake_inputs=True)):
        if node.op == "call_method":
            out = getattr(args[0], node.target)(*args[1:], **kwargs)
        else:
            out = node.target(*args, **kwargs)
    node.meta["val"] = node.meta["example_value"] = out


def _keep_aliasing(graph: fx.Graph, tr: Translation, leaves: list[Any]) -> list[Any]:
    """An output that was a fresh tensor must not become an alias of an input or another output
    (``cat(split(x)) → x`` returned to the user): copy it. The reverse cannot be repaired."""
    old_out = [val(tr.origin.get(x)) if isinstance(x, optable.Term) else None for x in tr.outputs]
    inputs = {storage_key(val(n)) for n in tr.inputs} - {None}  # the new placeholders share these values
    seen: set[Any] = set()
    old_seen: set[Any] = set()
    out = []
    for old, new in zip(old_out, leaves):
        if not isinstance(new, fx.Node) or not isinstance(val(new), torch.Tensor):
            out.append(new)
            continue
        was = storage_key(old) if old is not None else None
        was_alias = was is not None and (was in inputs or was in old_seen)
        key = storage_key(val(new))
        if not was_alias and (key in inputs or key in seen):
            new = graph.call_function(torch.clone, (new,))
            _fake_run(new)
            key = storage_key(val(new))
        old_seen.add(was)
        seen.add(key)
        out.append(new)
    return out
