"""Extracted e-graph → FX graph: the mirror image of :mod:`optimus_egg.frontend`.

Every node it creates carries ``meta["val"]`` (and ``example_value``), computed by running the
node's op on its inputs' fake values, so Inductor and its passes see shapes everywhere.
"""

from __future__ import annotations

import bisect
import copy
import operator
from typing import Any

import torch
import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.utils import _pytree as pytree

from optimus_egg import draws, fake_values, optable
from optimus_egg.egraph import Frozen
from optimus_egg.extract import Extraction
from optimus_egg.extract.fusion import MAX_SCATTERED
from optimus_egg.frontend import Translation, mutated_storages
from optimus_egg.optable import static_int, storage_key, val

#: The positional arity of the slicing calls :meth:`Emitter.split_tilings` groups.
_VIEW_ARITY = {torch.narrow: 4, torch.select: 3}

#: Ops that copy their inputs into one new tensor: :meth:`Emitter.sink_input_stacks` moves them.
_STACKING = frozenset({"cat", "concat", "concatenate", "stack"})

#: What AOTAutograd reads off a Dynamo graph (with each placeholder's ``_dynamo_source``) to know
#: which inputs are parameters, static for the whole run. A graph without them is taken for an
#: exported one whose inputs are all ordinary: the min-cut partitioner then saved views of the
#: weights for the backward instead of the weights (CPU Inductor: 45 vs 39 launches per training
#: step on the cruft chain, whose rewritten graph is the twin's node for node), and CUDA graphs
#: would copy every parameter on each replay.
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
    Python code is generated when first read or called, as in Dynamo's own graphs: the backward
    pass only copies the graph (6 ms on the 100-block chain's backward)."""
    new_gm = _LazyGraphModule(gm, graph)
    new_gm.meta = dict(gm.meta)
    for attr in _DYNAMO_ATTRS:
        if hasattr(gm, attr):
            setattr(new_gm, attr, getattr(gm, attr))
    return new_gm


class Emitter:
    def __init__(self, gm: fx.GraphModule, tr: Translation, eg: Frozen, ex: Extraction,
                 disjoint_outputs: bool = False) -> None:
        self.gm, self.tr, self.eg, self.ex = gm, tr, eg, ex
        self.disjoint_outputs = disjoint_outputs  # see keep_aliasing
        self.copies: list[fx.Node] = []  # kernels keep_aliasing added, which no cost model saw
        self.graph = fx.Graph()
        self.graph._codegen = copy.copy(gm.graph._codegen)
        self.done: dict[int, fx.Node] = {}
        self._original: dict[int, int] = {}  # classes the extraction left out: their original e-node
        self._forms: dict[int, tuple[str, list[int], tuple[Any, ...]]] = {}
        # the values of an ATen graph's calls (fake_values.propagate): a post-grad backward is
        # mostly written back unchanged; a Dynamo graph, which the rules rewrite nearly whole, is not
        # indexed (the 100-block chain's forward: 13 ms to index it, no value taken)
        self.known = fake_values.known_values(gm.graph) if optable.is_aten(gm.graph) else None

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

        Forms are the structural calls of ``optable.STRUCTURAL_CALLS``, ``Input`` and ``Call``
        (a registry key). ``Squeeze(Sl(x, d, i, 1), d)`` reads as ``select`` and a cat of pieces
        unsqueezed on its dim as ``stack``, so the inner view is never emitted on its own. A
        piece unflattened to ``(1, n)`` there is unsqueezed: ``cat([a.unflatten(1, (1, -1)),
        ...], 1)`` is ``stack([a, ...], 1)`` (the zoo's sequence model, whose ``tanh`` of such a
        cat Inductor's pre-grad ``sink_cat_after_pointwise`` split into a tanh per piece again).
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
            n_slots = sum(isinstance(x, optable.Slot) for x in call.leaves)
            return call.emit(self.graph, inputs[:n_slots])  # anything after the slots is an effect token
        return optable.emit_structural(self.graph, form, inputs, literals)

    def run(self, root_classes: list[int], effect_class: int | None, classes: dict[optable.Term, int]
            ) -> fx.GraphModule:
        """The extracted graph; ``classes`` gives each term's e-class (``keep_aliasing`` needs it)."""
        self.inputs = [copy_input(self.graph, old) for old in self.tr.inputs]
        if effect_class is not None:
            self.emit_class(effect_class)
        roots = [self.emit_class(c) for c in root_classes]
        fake_values.propagate(self.graph, self.gm, self.known)
        self.cut_cat_slices(set(roots))
        regrouped = self.split_tilings()
        regrouped.update(self.doubled_sums())
        self.sink_input_stacks()
        outs = iter([regrouped.get(n, n) for n in roots])
        leaves = [next(outs) if isinstance(x, optable.Term) else x for x in self.tr.outputs]
        before = set(self.graph.nodes)
        leaves = self.keep_aliasing(leaves, classes)
        self.copies = [n for n in self.graph.nodes if n not in before and optable.launches(n)]
        if optable.is_aten(self.gm.graph):
            leaves = self.to_aten(leaves)
        self.graph.output(pytree.tree_unflatten(leaves, self.tr.output_spec))
        return graph_module(self.gm, self.graph)

    def cut_cat_slices(self, keep: set[fx.Node]) -> None:
        """Slices of a tensor that requires grad, which together cover it along one dim but
        overlap, are cut at every slice's ends where only cats on that dim read them:
        ``cat([x[:, 24:], tanh(x[:, :2]), x[:, :24]])`` reads ``x[:, :2]`` and ``x[:, 2:24]`` in
        place of ``x[:, :24]``, so that :meth:`split_tilings` makes the slices one split.

        Forward, a cat input more (one more copy loop on CPU Inductor); backward, the split's
        gradient is one cat where each overlapping slice's is a zero-filled copy, added up
        (family split_cat_to_slices training: 18 → 15 eager launches, as the original's split;
        CPU Inductor kernel objects 6 → 8, the original's 50). ``keep``: nodes not to replace
        (the graph's outputs)."""
        groups: dict[tuple[fx.Node, int], list[fx.Node]] = {}
        for n in self.graph.nodes:
            if n.op != "call_function" or n.target is not torch.narrow or len(n.args) != 4 or n.kwargs:
                continue
            v = val(n.args[0])
            if (isinstance(v, torch.Tensor) and v.requires_grad
                    and all(type(a) is int and a >= 0 for a in n.args[1:])):
                groups.setdefault((n.args[0], n.args[1] % v.dim()), []).append(n)
        for (base, d), nodes in groups.items():
            size = static_int(val(base).shape[d])
            spans = {n: (n.args[2], n.args[2] + n.args[3]) for n in nodes}
            cuts = sorted({0, *(s for s, _ in spans.values()), *(e for _, e in spans.values())})
            cells = list(zip(cuts, cuts[1:]))
            if size is None or cuts[-1] != size or _gap(sorted(spans.values())):
                continue  # no split tiles the tensor
            wide = [n for n in nodes if bisect.bisect_left(cuts, spans[n][1]) > bisect.bisect_right(cuts, spans[n][0])]
            if not wide or any(n in keep or not all(_cat_reads(u, n, d) for u in n.users) for n in wide):
                continue
            for n in wide:
                with self.graph.inserting_before(n):
                    pieces = [self.graph.call_function(torch.narrow, (base, d, a, b - a))
                              for a, b in cells if spans[n][0] <= a and b <= spans[n][1]]
                for p in pieces:
                    fake_values.fake_run(p)
                for u in list(n.users):
                    u.args = ([q for t in u.args[0] for q in (pieces if t is n else [t])], *u.args[1:])
                self.graph.erase_node(n)
                # a class that this slice computed is emitted again if something asks for it
                self.done = {c: m for c, m in self.done.items() if m is not n}

    def split_tilings(self) -> dict[fx.Node, fx.Node]:
        """Slices that tile a tensor along one dim become one ``split``, and selects of every
        index one ``unbind``; returns what replaced each slice.

        The e-graph has no split: a piece is a slice (``Sl``). Forward, both are the same views;
        backward, autograd turns each slice into a zero-filled tensor with the slice's gradient
        copied in, then adds them up, where a split's gradient is one cat (the zoo's sequence
        model: 187 → 115 eager launches per training step)."""
        order = {n: i for i, n in enumerate(self.graph.nodes)}
        # the split goes before the first slice: of a tensor the graph writes (t_() between two
        # narrows changes what the later one reads), each slice stays where it was
        written = mutated_storages(self.graph)
        groups: dict[tuple[fx.Node, int, bool], list[fx.Node]] = {}
        for n in self.graph.nodes:
            arity = _VIEW_ARITY.get(n.target) if n.op == "call_function" else None
            if arity is None or len(n.args) != arity or n.kwargs:  # (an op kept as written: kwargs)
                continue
            v = val(n.args[0])
            if (isinstance(v, torch.Tensor) and storage_key(v) not in written
                    and all(type(a) is int and a >= 0 for a in n.args[1:])):
                groups.setdefault((n.args[0], n.args[1] % v.dim(), n.target is torch.select), []).append(n)
        replaced: dict[fx.Node, fx.Node] = {}
        for (base, d, select), nodes in groups.items():
            span = {n: (n.args[2], 1 if select else n.args[3]) for n in nodes}
            spans = sorted(set(span.values()))
            ends = [s + length for s, length in spans]
            size = static_int(val(base).shape[d])  # (a specialized size may be a SymInt)
            if len(spans) < 2 or size is None or [s for s, _ in spans] != [0, *ends[:-1]] or ends[-1] != size:
                continue
            base = replaced.get(base, base)  # itself a slice that an earlier group replaced
            with self.graph.inserting_before(min(nodes, key=order.__getitem__)):
                whole = (self.graph.call_function(torch.unbind, (base, d)) if select
                         else self.graph.call_function(torch.split, (base, [length for _, length in spans], d)))
                pieces = {sp: self.graph.call_function(operator.getitem, (whole, i)) for i, sp in enumerate(spans)}
            for n in nodes:
                new = pieces[span[n]]
                n.replace_all_uses_with(new)
                self.graph.erase_node(n)
                replaced[n] = new
        fake_values.propagate(self.graph, self.gm, self.known)
        self.done = {c: replaced.get(n, n) for c, n in self.done.items()}
        return replaced

    def doubled_sums(self) -> dict[fx.Node, fx.Node]:
        """``x + x`` becomes ``x * 2``; returns what replaced each sum.

        Simplification often proves both operands of an add one tensor. Forward, both are one
        kernel, and equal (doubling is exact, overflow included, in every non-bool dtype); backward,
        autograd accumulates the two gradients with an add of one ``mm`` result to itself, which
        Inductor's ``addmm`` pattern turns into a second matmul (family select_cat: one more extern
        call per step), where ``x * 2`` gives one pointwise op that fuses."""
        replaced: dict[fx.Node, fx.Node] = {}
        for n in list(self.graph.nodes):
            op = optable.lookup(n)
            v = val(n)
            if (op is None or op.name != "add" or len(n.args) != 2 or n.args[0] is not n.args[1] or n.kwargs
                    or not isinstance(n.args[0], fx.Node) or not isinstance(v, torch.Tensor)
                    or not isinstance(val(n.args[0]), torch.Tensor) or v.dtype == torch.bool):
                continue
            with self.graph.inserting_before(n):
                new = self.graph.call_function(torch.mul, (n.args[0], 2))
            n.replace_all_uses_with(new)
            self.graph.erase_node(n)
            replaced[n] = new
        # what reads a doubling reads a new tensor: its fake value (storage, for the aliasing
        # checks that follow) is derived again, like everything computed from it
        stale = set(replaced.values())
        for n in self.graph.nodes:
            if n not in stale and any(a in stale for a in n.all_input_nodes):
                stale.add(n)
                n.meta.pop("val", None)
                n.meta.pop("example_value", None)
        fake_values.propagate(self.graph, self.gm, self.known)
        self.done = {c: replaced.get(n, n) for c, n in self.done.items()}
        return replaced

    def sink_input_stacks(self) -> None:
        """Cats and stacks of the graph's inputs alone (the weights a fused op reads, stacked in
        every step), and the views around them, move down to just before their first reader.

        The emitter writes operands in argument order, so a fused op's weight stacks can land
        far above it (the biases of a fused layer norm's ``addcmul`` before the matmul that
        feeds the norm); on CPU, Inductor then copies them in a kernel of their own instead of
        in the consumer's (family batch_layernorm: 4 vs 3 forward launches). Only graphs where
        every call is a known op (or one the rules build, or an ATen op: its schema says what it
        writes) that writes nothing are reordered, so nothing an input is read from changes."""
        nodes = list(self.graph.nodes)
        built = {call.target for call in optable.BUILT.values()}
        if not all(n.op in ("placeholder", "get_attr", "output")
                   or ((n.target in built or optable.lookup(n) is not None
                        or isinstance(n.target, torch._ops.OpOverload)) and not optable.is_inplace(n))
                   for n in nodes):
            return
        inputs_only: set[fx.Node] = set()  # computed from the inputs by views, cats and stacks alone
        stacked: set[fx.Node] = set()  # ... and a cat or stack is among them
        for n in nodes:
            if n.op in ("placeholder", "get_attr"):
                inputs_only.add(n)
                continue
            op = optable.lookup(n)
            kind = None if op is None else ("stack" if op.name in _STACKING else op.kind)
            if kind in ("stack", optable.Kind.VIEW) and all(a in inputs_only for a in n.all_input_nodes):
                inputs_only.add(n)
                if kind == "stack" or any(a in stacked for a in n.all_input_nodes):
                    stacked.add(n)
        moving: set[fx.Node] = set()
        for n in reversed(nodes):
            if n.users and (n in stacked or (n in inputs_only and n.op not in ("placeholder", "get_attr")
                                             and all(u in moving for u in n.users))):
                moving.add(n)
                min(n.users).prepend(n)

    def to_aten(self, leaves: list[Any]) -> list[Any]:
        """Every torch-level call written here in its ATen spelling (``optable.ATEN_CALLS``): a
        graph that was ATen (Inductor's post-grad graphs) is lowered op by op, and a
        ``torch.narrow`` has no lowering. Returns the output leaves, replaced where they were."""
        replaced: dict[fx.Node, fx.Node] = {}
        for n in list(self.graph.nodes):
            lower = optable.ATEN_CALLS.get(n.target) if n.op == "call_function" else None
            if lower is None:
                continue
            with self.graph.inserting_before(n):
                new = lower(self.graph, n)
            n.replace_all_uses_with(new)
            self.graph.erase_node(n)
            replaced[n] = new
            for user in new.users:  # a tuple's projections read the new tuple's values
                if user.target is operator.getitem:
                    user.meta.pop("val", None)
        if not optable.is_aten(self.graph):
            raise RuntimeError("a call the emitter wrote has no ATen spelling (optable.ATEN_CALLS)")
        replaced.update(stack_untransposed(self.graph))
        replaced.update(scatter_input_stacks(self.graph))
        fake_values.propagate(self.graph, self.gm, self.known)
        self.done = {c: replaced.get(n, n) for c, n in self.done.items()}
        return [replaced.get(x, x) if isinstance(x, fx.Node) else x for x in leaves]

    def keep_aliasing(self, leaves: list[Any], classes: dict[optable.Term, int]) -> list[Any]:
        """Outputs alias the inputs and each other exactly as the original outputs did, and
        require grad exactly when they did.

        A rewrite can turn a fresh output into a view of an input (``cat(split(x)) → x``), make
        outputs that were distinct tensors share one, or split outputs that shared one tensor
        (``v`` and ``v[0]`` returned together, one of them simplified). It can also pick a piece
        of a cat that does not require grad where the cat, and so its slice, did. Outputs are
        grouped by the storage they shared originally; a group that no longer has a storage of
        its own (the input it aliased, or a fresh one no other group has), or whose grad flags
        changed, is re-derived: the original view chains from the group's base, re-applied to the
        base's new value (a copy of it if that is taken), so the group aliases exactly what it
        aliased before. What cannot be re-derived that way raises (the graph is left as it was).

        With ``disjoint_outputs`` (a backward graph, whose outputs are gradients, never views of
        each other) fresh outputs may share a storage where they touch none of each other's
        elements: a batched weight gradient is one ``bmm``, each parameter's a select of it."""
        old_leaves = pytree.tree_leaves(next(iter(self.gm.graph.find_nodes(op="output"))).args[0])
        inputs = {storage_key(val(n)) for n in self.tr.inputs} - {None}  # the new placeholders share these
        groups: dict[Any, list[int]] = {}
        for i, old in enumerate(old_leaves):
            was = _storage(val(old))
            if was is not None:
                groups.setdefault(was, []).append(i)
        claimed: dict[Any, list[tuple[int, int] | None]] = {}  # storage -> the spans outputs took
        broken = []
        for was, members in groups.items():
            now = {_storage(val(leaves[i])) for i in members}
            k = now.pop() if len(now) == 1 else None
            same_grad = all(_grad(val(old_leaves[i])) == _grad(val(leaves[i])) for i in members)
            spans = [_span(val(leaves[i])) for i in members]
            fresh = k not in inputs and (k not in claimed or self.disjoint_outputs and _disjoint(spans, claimed[k]))
            twins = k not in inputs and _detached_twins([val(leaves[i]) for i in members])
            if same_grad and k is not None and not twins and (k == was if was in inputs else fresh):
                claimed.setdefault(k, []).extend(spans)
            else:
                broken.append((was, members))
        out = list(leaves)
        for was, members in broken:
            old_base = _base(old_leaves[members[0]], was)
            if was in inputs:
                base = self.inputs[self.tr.inputs.index(old_base)]
            else:
                base = self.value_of(old_base, classes)
                if not isinstance(val(base), torch.Tensor):
                    raise RuntimeError(f"cannot keep output aliasing: {old_base.name} is not a tensor")
                if _grad(val(base)) != _grad(val(old_base)):
                    # equal values, not equal grad flags: cat([x.detach(), y[0:0]]) is x.detach()
                    # but requires grad through the empty piece; the base is computed as written
                    base = self.as_written(old_base, classes)
                if (storage_key(val(base)) in inputs or storage_key(val(base)) in claimed
                        or not _whole(val(base)) and _detached_twins([val(old_leaves[i]) for i in members],
                                                                     partial_only=False)):
                    base = self.graph.call_function(torch.clone, (base,))
                    fake_values.fake_run(base)
                claimed[storage_key(val(base))] = [None]
            copies = {old_base: base}
            for i in members:
                out[i] = self._copy_view_chain(old_leaves[i], was, copies, classes)
                if _grad(val(out[i])) != _grad(val(old_leaves[i])):
                    raise RuntimeError(f"output {old_leaves[i].name} would change whether it requires grad")
        _erase_unused_views(self.graph, [old for old, new in zip(leaves, out) if old is not new], out)
        return out

    def value_of(self, old: fx.Node, classes: dict[optable.Term, int]) -> fx.Node:
        """The new node that computes what ``old`` computed: its e-class, emitted if need be, as
        the original term wherever the extraction left a class out."""
        term = self.tr.terms.get(old)
        if term is None or term not in classes:
            raise RuntimeError(f"cannot re-derive an output: {old.name} has no e-class")
        self._choose_originals(term, classes)
        node = self.emit_class(classes[term])
        fake_values.propagate(self.graph, self.gm, self.known)
        return node

    def _choose_originals(self, term: optable.Term, classes: dict[optable.Term, int]) -> None:
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
            kids = tuple(classes.get(a, -1) if isinstance(a, optable.Term) else a for a in t.args)
            node = next((i for i in self.eg.classes[cls]
                         if self.eg.nodes[i].op == t.op and self.eg.nodes[i].children == kids), None)
            if node is None:
                raise RuntimeError(f"cannot re-derive an output: the original {t.op} e-node is gone")
            self._original[cls] = node
            stack.extend(a for a in t.args if isinstance(a, optable.Term))

    def as_written(self, old: fx.Node, classes: dict[optable.Term, int]) -> fx.Node:
        """``old`` computed as the program wrote it: its nodes, down to the inputs, copied. Only
        in graphs that write nothing (a copy would move a read past a write). A call that must
        run once (:func:`optimus_egg.optable.runs_once`) is not copied but read where it was
        emitted: a copied dropout drew a second mask, and the outputs computed from it no longer
        shared the others' (and the generator moved on twice)."""
        if any(optable.is_inplace(n) for n in self.gm.graph.nodes if n.op != "output"):
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
            if optable.runs_once(n):
                copies[n] = self.value_of(n, classes)
                continue
            copies[n] = self.graph.node_copy(n, copies.__getitem__)
            copies[n].meta = {}
            fake_values.fake_run(copies[n], root=self.gm)
        return copies[old]

    def _copy_view_chain(self, old: fx.Node, key: Any, copies: dict[fx.Node, fx.Node],
                         classes: dict[optable.Term, int]) -> fx.Node:
        """``old`` (a view, in storage ``key``) re-applied to the copied chain below it."""
        if old in copies:
            return copies[old]
        sources = _sources(old, key)
        if not sources or old.op not in ("call_function", "call_method") or optable.is_inplace(old):
            raise RuntimeError(f"cannot keep output aliasing: {old.name} is not a view of one base")
        new = self.graph.node_copy(old, lambda a: self._copy_view_chain(a, key, copies, classes)
                                   if a in sources else self.value_of(a, classes))
        new.meta = {}
        fake_values.fake_run(new)
        copies[old] = new
        return new

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


def _storage(v: Any) -> Any:
    """The storage a tensor, or every tensor of a tuple, lives in (None: none, or several)."""
    if isinstance(v, torch.Tensor):
        return storage_key(v)
    if isinstance(v, (tuple, list)) and v and all(isinstance(t, torch.Tensor) for t in v):
        keys = {storage_key(t) for t in v}
        return keys.pop() if len(keys) == 1 else None
    return None


def _layout(v: torch.Tensor) -> tuple[int, ...] | None:
    """A tensor's place in its storage: offset, sizes, strides (None: one of them is symbolic)."""
    ints = tuple(static_int(x) for x in (v.storage_offset(), *v.shape, *v.stride()))
    return None if None in ints else ints  # type: ignore[return-value]


def _span(v: Any) -> tuple[int, int] | None:
    """The elements of its storage a tensor can touch, as [first, last + 1) (None: unknown)."""
    ints = _layout(v) if isinstance(v, torch.Tensor) else None
    if ints is None:
        return None
    start, shape, strides = ints[0], ints[1:1 + v.dim()], ints[1 + v.dim():]
    if 0 in shape:
        return (start, start)
    return (start, start + 1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides)))


def _detached_twins(vals: list[Any], partial_only: bool = True) -> bool:
    """Whether two of these tensors are one view of one storage, one requiring grad and the other
    not (``v`` and ``v.detach()``), and (``partial_only``) that view is not the storage whole.

    AOTAutograd (torch 2.13 to 2.15) regenerates such a pair of outputs, where the view is a part
    or a transpose of a tensor the graph computes, by replaying the view on the other output,
    and fails ("incorrect out shape after application of ViewMeta sequence"). A rewrite makes
    them of ``y.detach(), y`` once ``y`` is a slice of a wider op (the fuzzer's, cut down in
    tests/test_emit.py); plain ``torch.compile`` fails the same on such outputs as written."""
    flags: dict[Any, set[bool]] = {}
    for v in vals:
        if isinstance(v, torch.Tensor) and not (partial_only and _whole(v)) and (layout := _layout(v)) is not None:
            flags.setdefault((storage_key(v), v.dim(), layout), set()).add(v.requires_grad)
    return any(len(f) == 2 for f in flags.values())


def _whole(v: torch.Tensor) -> bool:
    """Whether a tensor is its storage, all of it, in order."""
    nbytes = static_int(v.untyped_storage().nbytes())
    return (static_int(v.storage_offset()) == 0 and nbytes is not None and bool(v.is_contiguous())
            and static_int(v.numel()) == nbytes // v.element_size())


def _disjoint(spans: list[tuple[int, int] | None], taken: list[tuple[int, int] | None]) -> bool:
    return all(a is not None and b is not None and (a[1] <= b[0] or b[1] <= a[0]) for a in spans for b in taken)


def _grad(v: Any) -> Any:
    """Whether a tensor, or each tensor of a tuple, requires grad."""
    if isinstance(v, torch.Tensor):
        return v.requires_grad
    return tuple(_grad(t) for t in v) if isinstance(v, (tuple, list)) else None


def _sources(node: fx.Node, key: Any) -> list[fx.Node]:
    """The arguments ``node`` is a view of (those in storage ``key``)."""
    return [a for a in node.all_input_nodes if _storage(val(a)) == key]


def _erase_unused_views(graph: fx.Graph, nodes: list[Any], outputs: list[Any]) -> None:
    """Drop these nodes and the views below them that nothing (``outputs`` included) reads any more."""
    stack, erased = list(nodes), {n for n in outputs if isinstance(n, fx.Node)}
    while stack:
        n = stack.pop()
        op = optable.lookup(n) if isinstance(n, fx.Node) else None
        if (op is None or n in erased or n.users or optable.is_inplace(n)
                or op.kind not in (optable.Kind.VIEW, optable.Kind.MAYBE_VIEW)):
            continue
        stack.extend(n.all_input_nodes)
        graph.erase_node(n)
        erased.add(n)


def _base(node: fx.Node, key: Any) -> fx.Node:
    """Where storage ``key`` begins on ``node``'s view chain: an input, or the op that made it."""
    while sources := _sources(node, key):
        node = sources[0]
    return node


def _unsqueezed(node: Any, dim: int) -> bool:
    """Whether an e-node is its operand with a dim of size 1 inserted at ``dim``: ``Unsqueeze``,
    or ``Unflat`` of that dim into ``(1, n)``."""
    return node.op in ("Unsqueeze", "Unflat") and node.children[1] == dim and (
        node.op == "Unsqueeze" or node.children[2] == 1)


def _cat_reads(user: fx.Node, piece: fx.Node, d: int) -> bool:
    """Whether ``user`` is a cat along ``d`` that reads ``piece`` only as one of its tensors."""
    if (user.op != "call_function" or user.target is not torch.cat or len(user.args) != 2 or user.kwargs
            or type(user.args[1]) is not int or not isinstance(user.args[0], (list, tuple))):
        return False
    v = val(user)
    return isinstance(v, torch.Tensor) and user.args[1] % v.dim() == d and piece in user.args[0]


def _bmm_stacks(graph: fx.Graph) -> list[fx.Node]:
    """The ATen cats along dim 0 that only batched matmuls read: the stacked operands of a
    backward's ``bmm`` of weight gradients, whose layout :func:`stack_untransposed` chooses."""
    aten = torch.ops.aten
    return [cat for cat in graph.find_nodes(op="call_function", target=aten.cat.default)
            if not cat.kwargs and (len(cat.args) == 1 or cat.args[1] == 0) and cat.users
            and all(u.target in (aten.bmm.default, aten.baddbmm.default) for u in cat.users)]


def stack_untransposed(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """A stack that only batched matmuls read, of 2-D transposes ``g.T`` (a backward's
    ``bmm`` of weight gradients stacks ``grad.T`` of each layer), is written as the
    transpose of the stack of the ``g`` s (ATen: ``cat`` of ``unsqueeze`` s along dim 0, then
    ``permute [0, 2, 1]``): the same values, and a matmul reads either layout.

    Inductor copies each piece into the stack. A copy of ``g.T`` walks ``g`` column by
    column, as the column sum of a bias gradient ``sum(g, 0)`` does, so on CPU it fused the
    copies with those sums, all layers in one or two kernels, instead of each sum with the
    kernel that computes its ``g`` (as without the bmm): the layers' kernels stopped
    repeating and each was a C++ build of its own (100-block chain, training). A copy of
    ``g`` walks it in the order its kernel writes it and joins that kernel. Returns the
    stacks replaced (erased), each by its new transpose."""
    aten = torch.ops.aten
    replaced: dict[fx.Node, fx.Node] = {}
    for cat in _bmm_stacks(graph):
        pieces = [_transposed_2d(x.args[0]) if x.target == aten.unsqueeze.default and x.args[1] == 0 else None
                  for x in cat.args[0]]
        if None in pieces or all(p.op == "placeholder" for p in pieces):
            continue
        with graph.inserting_before(cat):
            new = graph.call_function(aten.permute.default, (optable.aten_stack(graph, pieces, 0), [0, 2, 1]))
        cat.replace_all_uses_with(new)
        unread = dict.fromkeys([*cat.args[0], *(x.args[0] for x in cat.args[0])])  # readers first
        graph.erase_node(cat)
        for n in unread:
            if not n.users:
                graph.erase_node(n)
        replaced[cat] = new
    return replaced


def _transposed_2d(node: Any) -> fx.Node | None:
    """``g`` where ``node`` is the ATen transpose of a 2-D ``g`` (``permute [1, 0]``, ``t``,
    ``transpose 0 1``) that a kernel computes or the graph takes as input, else None. Not a
    view (the slices of one gradient that a split of features gives, zoo mmoe): no kernel
    writes it that its copy could join; nor a transpose that moves no element (a dim of size
    1). An input (the tangent, when no activation follows the last layer) is a copy of its
    own in either layout; a stack of inputs alone is left as it is."""
    aten = torch.ops.aten
    if not isinstance(node, fx.Node) or node.op != "call_function" or node.kwargs:
        return None
    g = node.args[0] if node.args else None
    v = val(g) if isinstance(g, fx.Node) else None
    if v is None or v.dim() != 2 or 1 in v.shape or not (g.op == "placeholder" or optable.launches(g)):
        return None
    if (node.target == aten.t.default
            or node.target == aten.permute.default and [d % 2 for d in node.args[1]] == [1, 0]
            or node.target == aten.transpose.int and {d % 2 for d in node.args[1:]} == {0, 1}):
        return g
    return None


def scatter_input_stacks(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """A cat along dim 0 of graph inputs alone (each as it is, of one shape but maybe dim 0, or
    each ``unsqueeze(x, 0)``, of one shape), that only matmuls read (through views) is written
    as each input scattered into its rows of a zero tensor, in turn (ATen: ``slice_scatter``
    into ``full``): the same values, and Inductor writes one pointwise kernel for them. Such stacks are the weights a batched
    layer reads, stacked in every step (forward), and the saved inputs a backward's ``bmm`` of
    weight gradients stacks.

    Inductor (CPU) copies each piece of a cat in a loop of its own: a batched layer's weight
    stacks were one loop per member (zoo ple inference: 93 kernel objects, 63 scattered). In a
    backward, a copy of an input depends on nothing, and it fused with whichever kernel near it
    in the graph read the same input (the layer's activation backward), or with none: a few
    layers' kernels got a copy or several, the others none, and the layers' kernels stopped
    repeating, each a C++ build of its own (100-block chain, training: 6 distinct kernels where
    the twin has 4). One kernel, which Inductor computes where the matmul reads it (in the C++
    kernel before that extern call), changes only that kernel; each element of it tests which
    slot it is in, one compare per input. Returns the stacks replaced (erased), each by its
    last scatter."""
    aten = torch.ops.aten
    replaced: dict[fx.Node, fx.Node] = {}
    for cat in graph.find_nodes(op="call_function", target=aten.cat.default):
        pieces = cat.args[0]
        xs = [_input_piece(p) for p in pieces]
        unsqueezed = {x is not p for x, p in zip(xs, pieces)}
        v = val(xs[0]) if xs[0] is not None else None
        if (cat.kwargs or (len(cat.args) > 1 and cat.args[1] != 0) or None in xs or len(xs) > MAX_SCATTERED
                or len(unsqueezed) != 1 or not isinstance(v, torch.Tensor) or v.dim() == 0):
            continue
        stacked = unsqueezed.pop()  # each input a slot of its own, else each its rows
        same = slice(None) if stacked else slice(1, None)
        rows = [static_int(val(x).shape[0]) for x in xs]
        if (any((val(x).shape[same], val(x).dtype, val(x).device) != (v.shape[same], v.dtype, v.device) for x in xs)
                or None in (shape := [static_int(n) for n in v.shape]) or None in rows
                or not _only_extern_matmuls(cat)):
            continue
        starts = list(range(len(xs) + 1)) if stacked else [sum(rows[:i]) for i in range(len(xs) + 1)]
        sizes = [len(xs), *shape] if stacked else [starts[-1], *shape[1:]]
        with graph.inserting_before(cat):
            stack = graph.call_function(aten.full.default, (sizes, 0), {
                "dtype": v.dtype, "layout": torch.strided, "device": v.device, "pin_memory": False})
            for i, piece in enumerate(pieces):
                stack = graph.call_function(aten.slice_scatter.default, (stack, piece, 0, starts[i], starts[i + 1]))
        cat.replace_all_uses_with(stack)
        graph.erase_node(cat)
        replaced[cat] = stack
    return replaced


def _gap(spans: list[tuple[int, int]]) -> bool:
    """Whether the ``(start, end)`` spans, sorted, leave a gap between 0 and their last end."""
    covered = 0
    for start, end in spans:
        if start > covered:
            return True
        covered = max(covered, end)
    return False


def _input_piece(node: Any) -> fx.Node | None:
    """The graph input that ``node`` is, or is ``unsqueeze(., 0)`` of."""
    if isinstance(node, fx.Node) and node.target == torch.ops.aten.unsqueeze.default and node.args[1] == 0:
        node = node.args[0]
    return node if isinstance(node, fx.Node) and node.op in ("placeholder", "get_attr") else None


def _only_extern_matmuls(node: fx.Node) -> bool:
    """Is ``node`` read only by matmuls (Inductor's extern calls), through views?"""
    def matmul(u: fx.Node) -> bool:
        return (op := optable.lookup(u)) is not None and op.name in optable.MATMULS

    return bool(node.users) and all(
        matmul(u) or (u.op == "call_function" and not optable.launches(u) and _only_extern_matmuls(u))
        for u in node.users)
