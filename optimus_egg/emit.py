"""Extracted e-graph → FX graph: the mirror image of :mod:`optimus_egg.frontend`.

The :class:`Emitter` writes each chosen e-node as one FX call, operands first, and nothing else:
the passes over what it wrote are :mod:`optimus_egg.cleanup`'s. Every node it creates carries
``meta["val"]`` (and ``example_value``), computed by running the node's op on its inputs' fake
values, so Inductor and its passes see shapes everywhere.
"""

from __future__ import annotations

import copy
from typing import Any

import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.utils import _pytree as pytree

from optimus_egg import aten, calls, draws, effects, fake_values, ir, structural
from optimus_egg.egraph import Frozen
from optimus_egg.extract import Extraction
from optimus_egg.frontend import Translation

#: What AOTAutograd reads off a Dynamo graph (with each placeholder's ``_dynamo_source``) to know
#: which inputs are parameters, static for the whole run. A graph without them is taken for an
#: exported one whose inputs are all ordinary: the min-cut partitioner then saves views of the
#: weights for the backward instead of the weights, and CUDA graphs copy every parameter on
#: each replay.
_DYNAMO_ATTRS = ("_param_name_to_source",)

#: ``node.meta`` key of an emitted node: the names of the original nodes it is equal to.
ORIGIN = "optimus_egg_origin"


def copy_input(graph: fx.Graph, old: fx.Node) -> fx.Node:
    """A placeholder or ``get_attr`` of another graph, with what Dynamo keeps on it."""
    new = graph.node_copy(old, lambda n: n)
    new.meta = dict(old.meta)
    if hasattr(old, "_dynamo_source"):  # see _DYNAMO_ATTRS
        new._dynamo_source = old._dynamo_source
    return new


def graph_module(gm: fx.GraphModule, graph: fx.Graph) -> fx.GraphModule:
    """``graph`` as the module to use in ``gm``'s place: its attributes, meta and Dynamo's.
    Python code is generated when first read or called, as in Dynamo's own graphs: a backward
    pass only needs the graph."""
    new_gm = _LazyGraphModule(gm, graph)
    new_gm.meta = dict(gm.meta)
    for attr in _DYNAMO_ATTRS:
        if hasattr(gm, attr):
            setattr(new_gm, attr, getattr(gm, attr))
    return new_gm


class Emitter:
    """Writes the classes an extraction chose as FX calls into a new graph (``graph``), each
    class once (``done``: class → its node). Passes that replace nodes tell it
    (:meth:`replaced`, :meth:`forget`), so that a class emitted later (the aliasing repair's)
    reads the nodes that are in the graph."""

    def __init__(self, gm: fx.GraphModule, tr: Translation, eg: Frozen, ex: Extraction) -> None:
        self.gm, self.tr, self.eg, self.ex = gm, tr, eg, ex
        self.graph = fx.Graph()
        self.graph._codegen = copy.copy(gm.graph._codegen)
        self.inputs: list[fx.Node] = []  # the copied placeholders and get_attrs, by Input index
        self.done: dict[int, fx.Node] = {}
        self._original: dict[int, int] = {}  # classes the extraction left out: their original e-node
        self._forms: dict[int, tuple[str, list[int], tuple[Any, ...]]] = {}
        # the values of an ATen graph's calls (fake_values.propagate): a post-grad backward is
        # mostly written back unchanged; a Dynamo graph, which the rules rewrite nearly whole, is
        # not indexed (indexing would cost more than it saves)
        self.known = fake_values.known_values(gm.graph) if aten.is_aten(gm.graph) else None

    def node_of(self, cls: int) -> Any:
        choice = self.ex.choice.get(cls)
        return self.eg.nodes[self._original[cls] if choice is None else choice]

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

        Forms are the structural calls of ``structural.STRUCTURAL_CALLS``, ``Input`` and ``Call``
        (a registry key). ``Squeeze(Sl(x, d, i, 1), d)`` reads as ``select`` and a cat of pieces
        unsqueezed on its dim as ``stack``, so the inner view is never emitted on its own. A
        piece unflattened to ``(1, n)`` there is unsqueezed: ``cat([a.unflatten(1, (1, -1)),
        ...], 1)`` is ``stack([a, ...], 1)`` (else Inductor's pre-grad ``sink_cat_after_pointwise``
        splits a pointwise op of such a cat into one per piece again).
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
        elif op == "Move":
            got = (op, [kids[0]], kids[1:])
        elif op == "Squeeze":
            inner = self.node_of(kids[0])
            if inner.op == "Sl" and inner.children[1] == kids[1] and inner.children[3] == 1:
                got = ("Select", [inner.children[0]], (kids[1], inner.children[2]))
            else:
                got = ("Squeeze", [kids[0]], kids[1:])
        elif op == "Cat":
            items, dim = self.list_items(kids[0])
            inner = [self.node_of(i) for i in items]
            if all(_unsqueezed(n, dim) for n in inner):
                got = ("Stack", [n.children[0] for n in inner], (dim,))
            else:
                got = ("Cat", items, (dim,))
        elif op == "Op":
            got = ("Call", self.list_items(kids[1])[0], kids[:1])
        elif draws.is_draw(node, self.tr.registry):  # its token stands for the numbers it draws
            got = ("Call", [kids[1]], kids[:1])
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
            n_slots = sum(isinstance(x, calls.Slot) for x in call.leaves)
            return call.emit(self.graph, inputs[:n_slots])  # anything after the slots is an effect token
        return structural.emit_structural(self.graph, form, inputs, literals)


    def emit(self, root_classes: list[int], effect_class: int | None) -> list[fx.Node]:
        """Write the graph's inputs, the effect chain's last class (it must run even if nothing
        reads it) and each output class; returns the output classes' nodes, every node with its
        fake value."""
        self.inputs = [copy_input(self.graph, old) for old in self.tr.inputs]
        if effect_class is not None:
            self.emit_class(effect_class)
        roots = [self.emit_class(c) for c in root_classes]
        fake_values.propagate(self.graph, self.gm, self.known)
        return roots

    def replaced(self, replaced: dict[fx.Node, fx.Node]) -> None:
        """A pass replaced these nodes (old → new): the new ones get fake values, and the classes
        they computed map to them."""
        fake_values.propagate(self.graph, self.gm, self.known)
        self.done = {c: replaced.get(n, n) for c, n in self.done.items()}

    def forget(self, erased: set[fx.Node]) -> None:
        """A pass erased these nodes: a class one of them computed is emitted again if asked for."""
        self.done = {c: m for c, m in self.done.items() if m not in erased}

    def module(self, leaves: list[Any]) -> fx.GraphModule:
        """The graph, returning ``leaves`` in the original output's structure, as a module."""
        self.graph.output(pytree.tree_unflatten(leaves, self.tr.output_spec))
        return graph_module(self.gm, self.graph)

    def value_of(self, old: fx.Node, classes: dict[ir.Term, int]) -> fx.Node:
        """The new node that computes what ``old`` computed: its e-class, emitted if need be, as
        the original term wherever the extraction left a class out."""
        term = self.tr.terms.get(old)
        if term is None or term not in classes:
            raise RuntimeError(f"cannot re-derive an output: {old.name} has no e-class")
        self._choose_originals(term, classes)
        node = self.emit_class(classes[term])
        fake_values.propagate(self.graph, self.gm, self.known)
        return node

    def _choose_originals(self, term: ir.Term, classes: dict[ir.Term, int]) -> None:
        """Every class below ``term`` that the extraction did not choose gets the e-node of the
        original term: nothing chosen reads such a class, so this stays acyclic."""
        stack = [term]
        while stack:
            t = stack.pop()
            cls = classes.get(t)
            if cls is None:
                raise RuntimeError(f"cannot re-derive an output: {t.op} term has no e-class")
            if cls in self.ex.choice or cls in self._original:
                continue
            kids = tuple(classes.get(a, -1) if isinstance(a, ir.Term) else a for a in t.args)
            node = next((i for i in self.eg.classes[cls]
                         if self.eg.nodes[i].op == t.op and self.eg.nodes[i].children == kids), None)
            if node is None:
                raise RuntimeError(f"cannot re-derive an output: the original {t.op} e-node is gone")
            self._original[cls] = node
            stack.extend(a for a in t.args if isinstance(a, ir.Term))

    def as_written(self, old: fx.Node, classes: dict[ir.Term, int]) -> fx.Node:
        """``old`` computed as the program wrote it: its nodes, down to the inputs, copied. Only
        in graphs that write nothing (a copy would move a read past a write). A call that must
        run once (:func:`optimus_egg.effects.runs_once`) is not copied but read where it was
        emitted: a copied dropout would draw a second mask, which the outputs computed from the
        first do not share (and move the generator on twice)."""
        if any(effects.is_inplace(n) for n in self.gm.graph.nodes if n.op != "output"):
            raise RuntimeError(f"cannot recompute {old.name} as written in a graph that writes")
        needed, stack = set(), [old]
        while stack:
            n = stack.pop()
            if n not in needed:
                needed.add(n)
                stack.extend(n.all_input_nodes)
        copies: dict[fx.Node, fx.Node] = {}
        for n in self.gm.graph.nodes:  # program order: operands first
            if n not in needed:
                continue
            if n in self.tr.inputs:
                copies[n] = self.inputs[self.tr.inputs.index(n)]
                continue
            if effects.runs_once(n):
                copies[n] = self.value_of(n, classes)
                continue
            copies[n] = self.graph.node_copy(n, copies.__getitem__)
            copies[n].meta = {}
            fake_values.fake_run(copies[n], root=self.gm)
        return copies[old]

    def mark_origins(self, classes: dict[ir.Term, int]) -> None:
        """Tag every emitted node with the names of the original nodes whose value it computes
        (their terms ended in its e-class), as ``meta[ORIGIN]``: ``explain`` diffs graphs by it,
        and :func:`optimus_egg.post_grad.order_as_written` orders a backward by it."""
        same: dict[fx.Node, list[str]] = {}
        for term, node in self.tr.origin.items():
            new = self.done.get(classes.get(term, -1))
            if new is not None:
                same.setdefault(new, []).append(node.name)
        for new, names in same.items():
            new.meta[ORIGIN] = names  # a fresh list: copied input nodes share meta values with the original


def _unsqueezed(node: Any, dim: int) -> bool:
    """Whether an e-node is its operand with a dim of size 1 inserted at ``dim``: ``Unsqueeze``,
    or ``Unflat`` of that dim into ``(1, n)``."""
    return node.op in ("Unsqueeze", "Unflat") and node.children[1] == dim and (
        node.op == "Unsqueeze" or node.children[2] == 1)

