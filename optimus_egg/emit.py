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
from optimus_egg.ir import CONSTRUCTORS
from optimus_egg.optable import storage_key, val


class Emitter:
    def __init__(self, gm: fx.GraphModule, tr: Translation, eg: Frozen, ex: Extraction) -> None:
        self.gm, self.tr, self.eg, self.ex = gm, tr, eg, ex
        self.graph = fx.Graph()
        self.graph._codegen = copy.copy(gm.graph._codegen)
        self.done: dict[int, fx.Node] = {}

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

    def deps(self, cls: int) -> list[int]:
        node = self.node_of(cls)
        out = []
        for sort, child in zip(CONSTRUCTORS[node.op], node.children):
            if sort == "T":
                out.append(child)
            elif sort == "TList":
                out.extend(self.list_items(child)[0])
        return out

    def emit_class(self, root: int) -> fx.Node:
        stack = [(root, False)]
        while stack:
            cls, ready = stack.pop()
            if cls in self.done:
                continue
            pending = [d for d in self.deps(cls) if d not in self.done]
            if pending and not ready:
                stack.append((cls, True))
                stack.extend((d, False) for d in reversed(pending))
                continue
            self.done[cls] = self._emit_one(cls)
        return self.done[root]

    def _emit_one(self, cls: int) -> fx.Node:
        node = self.node_of(cls)
        op, kids = node.op, node.children
        g, done = self.graph, self.done
        if op == "Input":
            return self.inputs[kids[0]]
        if op == "Sl":
            return optable.emit_structural(g, "Sl", (done[kids[0]], *kids[1:]))
        if op == "Squeeze":
            inner = self.node_of(kids[0])
            if inner.op == "Sl" and inner.children[1] == kids[1] and inner.children[3] == 1:
                src = self.emit_class(inner.children[0])
                return optable.emit_structural(g, "Select", (src, kids[1], inner.children[2]))
            return optable.emit_structural(g, "Squeeze", (done[kids[0]], kids[1]))
        if op == "Unsqueeze":
            return optable.emit_structural(g, "Unsqueeze", (done[kids[0]], kids[1]))
        if op == "Cat":
            items, dim = self.list_items(kids[0])
            inner = [self.node_of(i) for i in items]
            if all(n.op == "Unsqueeze" and n.children[1] == dim for n in inner):
                parts = [self.emit_class(n.children[0]) for n in inner]
                return optable.emit_structural(g, "Cat", (parts, dim, True))
            return optable.emit_structural(g, "Cat", ([done[i] for i in items], dim, False))
        call = self.tr.registry.calls[kids[0]]
        if op == "Op":
            args = [done[i] for i in self.list_items(kids[1])[0]]
        else:
            args = [done[k] for k in kids[1:]]
        n_slots = sum(isinstance(x, optable.Slot) for x in call.leaves)
        return call.emit(g, args[:n_slots])  # anything after the slots is an effect token

    def run(self, root_classes: list[int], effect_class: int | None) -> fx.GraphModule:
        self.inputs = []
        for old in self.tr.inputs:
            new = self.graph.node_copy(old, lambda n: n)
            new.meta = dict(old.meta)
            self.inputs.append(new)
        if effect_class is not None:
            self.emit_class(effect_class)
        outs = iter(self.emit_class(c) for c in root_classes)
        leaves = [next(outs) if isinstance(x, optable.Term) else x for x in self.tr.outputs]
        _propagate_meta(self.graph)
        leaves = _keep_aliasing(self.graph, self.tr, leaves)
        self.graph.output(pytree.tree_unflatten(leaves, self.tr.output_spec))
        new_gm = fx.GraphModule(self.gm, self.graph)
        new_gm.meta = dict(self.gm.meta)
        return new_gm


def _propagate_meta(graph: fx.Graph) -> None:
    """Fake-run every new node so that it carries ``val``/``example_value`` like Dynamo's."""
    default = None
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method") or "val" in node.meta:
            continue
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), val)
        fakes = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, FakeTensor)]
        if fakes:
            mode = fakes[0].fake_mode
        else:
            default = default or FakeTensorMode(allow_non_fake_inputs=True)
            mode = default
        with mode:
            if node.op == "call_method":
                out = getattr(args[0], node.target)(*args[1:], **kwargs)
            else:
                out = node.target(*args, **kwargs)
        node.meta["val"] = node.meta["example_value"] = out


def _keep_aliasing(graph: fx.Graph, tr: Translation, leaves: list[Any]) -> list[Any]:
    """An output that was a fresh tensor must not become an alias of an input or another output
    (``cat(split(x)) → x`` returned to the user): copy it. The reverse cannot be repaired."""
    old_out = [val(tr.origin.get(x)) if isinstance(x, optable.Term) else None for x in tr.outputs]
    inputs = {storage_key(val(n)) for n in graph.nodes if n.op in ("placeholder", "get_attr")} - {None}
    old_inputs = {storage_key(val(n)) for n in tr.inputs} - {None}
    seen: set[Any] = set()
    old_seen: set[Any] = set()
    out = []
    for old, new in zip(old_out, leaves):
        if not isinstance(new, fx.Node) or not isinstance(val(new), torch.Tensor):
            out.append(new)
            continue
        was = storage_key(old) if old is not None else None
        was_alias = was is not None and (was in old_inputs or was in old_seen)
        key = storage_key(val(new))
        if not was_alias and (key in inputs or key in seen):
            new = graph.call_function(torch.clone, (new,))
            _propagate_meta(graph)
            key = storage_key(val(new))
        old_seen.add(was)
        seen.add(key)
        out.append(new)
    return out
