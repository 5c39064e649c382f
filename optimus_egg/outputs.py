"""The emitted graph's outputs made to look like the original's to the caller.

A rewrite keeps values, not what else a caller can see of an output: which tensors it aliases,
whether it requires grad, how it is laid out. :func:`keep_aliasing` repairs the first two while
the graph is cleaned (:mod:`optimus_egg.cleanup`); :func:`check_outputs` and
:func:`restride_outputs` run on the finished module, and the pipeline keeps the graph as written
where the layout cannot be repaired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils import _pytree as pytree

from optimus_egg import effects, fake_values, ir, optable
from optimus_egg.effects import storage_key
from optimus_egg.nodes import static_int, val

if TYPE_CHECKING:
    from optimus_egg.emit import Emitter


def keep_aliasing(emitter: Emitter, leaves: list[Any], classes: dict[ir.Term, int],
                  disjoint_outputs: bool) -> list[Any]:
    """The output ``leaves`` of what ``emitter`` wrote, made to alias the inputs and each other
    exactly as the original outputs did, and to require grad exactly when they did.

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
    tr, graph = emitter.tr, emitter.graph
    old_leaves = pytree.tree_leaves(next(iter(emitter.gm.graph.find_nodes(op="output"))).args[0])
    inputs = {storage_key(val(n)) for n in tr.inputs} - {None}  # the new placeholders share these
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
        fresh = k not in inputs and (k not in claimed or disjoint_outputs and _disjoint(spans, claimed[k]))
        twins = k not in inputs and _detached_twins([val(leaves[i]) for i in members])
        if same_grad and k is not None and not twins and (k == was if was in inputs else fresh):
            claimed.setdefault(k, []).extend(spans)
        else:
            broken.append((was, members))
    out = list(leaves)
    for was, members in broken:
        i = members[0]
        old_base = _base(old_leaves[i], was)
        if len(members) == 1 and was not in inputs and _copied_whole(emitter, old_base, classes, old_leaves[i],
                                                                     leaves[i]):
            # One fresh output that became a view (cat([x, x + y])[:3] → x[:3]): a copy of it
            # is what the caller could see, where the base re-derived would be computed whole.
            out[i] = graph.call_function(torch.clone, (leaves[i],))
            fake_values.fake_run(out[i])
            claimed[storage_key(val(out[i]))] = [None]
            continue
        if was in inputs:
            base = emitter.inputs[tr.inputs.index(old_base)]
        else:
            base = emitter.value_of(old_base, classes)
            if not isinstance(val(base), torch.Tensor):
                raise RuntimeError(f"cannot keep output aliasing: {old_base.name} is not a tensor")
            if _grad(val(base)) != _grad(val(old_base)):
                # equal values, not equal grad flags: cat([x.detach(), y[0:0]]) is x.detach()
                # but requires grad through the empty piece; the base is computed as written
                base = emitter.as_written(old_base, classes)
            if (storage_key(val(base)) in inputs or storage_key(val(base)) in claimed
                    or not _whole(val(base)) and _detached_twins([val(old_leaves[i]) for i in members],
                                                                 partial_only=False)):
                base = graph.call_function(torch.clone, (base,))
                fake_values.fake_run(base)
            claimed[storage_key(val(base))] = [None]
        copies = {old_base: base}
        for i in members:
            out[i] = _copy_view_chain(emitter, old_leaves[i], was, copies, classes)
            if _grad(val(out[i])) != _grad(val(old_leaves[i])):
                raise RuntimeError(f"output {old_leaves[i].name} would change whether it requires grad")
    _erase_unused_views(graph, [old for old, new in zip(leaves, out) if old is not new], out)
    return out


def _copied_whole(emitter: Emitter, old_base: fx.Node, classes: dict[ir.Term, int], old: fx.Node,
                  new: fx.Node) -> bool:
    """Whether a group's one output, fresh in the original, is copied as it is, not re-derived
    from its base: its grad flag is kept, and the base's class is not computed anyway (a view of
    it would cost nothing)."""
    term = emitter.tr.terms.get(old_base)
    return (isinstance(val(new), torch.Tensor) and _grad(val(new)) == _grad(val(old))
            and (term is None or classes.get(term) not in emitter.done))


def _copy_view_chain(emitter: Emitter, old: fx.Node, key: Any, copies: dict[fx.Node, fx.Node],
                     classes: dict[ir.Term, int]) -> fx.Node:
    """``old`` (a view, in storage ``key``) re-applied to the copied chain below it."""
    if old in copies:
        return copies[old]
    sources = _sources(old, key)
    if not sources or old.op not in ("call_function", "call_method") or effects.is_inplace(old):
        raise RuntimeError(f"cannot keep output aliasing: {old.name} is not a view of one base")
    new = emitter.graph.node_copy(old, lambda a: _copy_view_chain(emitter, a, key, copies, classes)
                                  if a in sources else emitter.value_of(a, classes))
    new.meta = {}
    fake_values.fake_run(new)
    copies[old] = new
    return new


def check_outputs(old: fx.GraphModule, new: fx.GraphModule) -> None:
    """Same output structure, shapes and dtypes, or the rewrite is rejected."""
    o_old, o_new = (list(g.graph.nodes)[-1].args[0] for g in (old, new))
    leaves_old, spec_old = pytree.tree_flatten(o_old)
    leaves_new, spec_new = pytree.tree_flatten(o_new)
    if str(spec_old) != str(spec_new):
        raise RuntimeError("rewritten graph has a different output structure")
    for a, b in zip(leaves_old, leaves_new):
        va, vb = val(a), val(b)
        if isinstance(va, torch.Tensor):
            if not isinstance(vb, torch.Tensor) or va.dtype != vb.dtype or va.dim() != vb.dim():
                raise RuntimeError(f"rewritten output differs: {va} vs {vb}")
            if not all(_same_size(x, y) for x, y in zip(va.shape, vb.shape)):
                raise RuntimeError(f"rewritten output shape {tuple(vb.shape)} != {tuple(va.shape)}")


def _same_size(x: Any, y: Any) -> bool:
    """Equal sizes: symbolic ones proven equal under the graph's guards. Dynamo may write a size
    as another that equals it there: ``stack([p])`` of a ``[s//2, 1]`` piece as ``[s//2, 1, 1]``
    once a guard bounds ``s//2 < 2``."""
    return str(x) == str(y) or statically_known_true(x == y)


def restride_outputs(old: fx.GraphModule, new: fx.GraphModule) -> list[fx.Node] | None:
    """Outputs laid out as the original's (eager's): returns the copies written, or None where
    one cannot be. ``cat([p.relu() for p in x.split(2, 1)], 1)`` is contiguous whatever ``x``'s
    layout, ``x.relu()`` has ``x``'s, and a caller's ``out.view(-1)`` may depend on it. A fresh
    output that eager lays out contiguously is made contiguous (one copy); any other change of
    layout (strides of dims of size 1 aside), or one of an output that shares its storage with
    an input or another output (a split's pieces included: ``v = cat([x[:, 1:2]]); return v,
    v.split(1)`` would return a copy of ``v`` and pieces of the original), is refused."""
    inputs = {storage_key(val(n)) for n in old.graph.nodes if n.op in ("placeholder", "get_attr")}
    out_old, out_new = (next(iter(g.graph.find_nodes(op="output"))) for g in (old, new))
    leaves_old = pytree.tree_leaves(out_old.args[0])
    leaves_new, spec = pytree.tree_flatten(out_new.args[0])
    keys = [{storage_key(t) for t in pytree.tree_leaves(val(n))} - {None} for n in leaves_new]
    copies: list[fx.Node] = []
    returned = {n for n in leaves_new if isinstance(n, fx.Node)}
    returned_old = {n for n in leaves_old if isinstance(n, fx.Node)}
    for i, (a, b) in enumerate(zip(leaves_old, leaves_new)):
        va, vb = val(a), val(b)
        if isinstance(va, (tuple, list)):  # a split's pieces, returned as they are: no copy fits
            pairs = list(zip(va, vb)) if isinstance(vb, (tuple, list)) and len(vb) == len(va) else None
            if pairs is None or any(isinstance(x, torch.Tensor) and visible_strides(x) != visible_strides(y)
                                    for x, y in pairs):
                return None
            continue
        if not isinstance(va, torch.Tensor):
            continue
        relaid = _relaid_by_inductor(b, returned) and not _relaid_by_inductor(a, returned_old)
        if visible_strides(va) == visible_strides(vb) and not relaid:
            continue
        shared = keys[i] & set().union(inputs, *(k for j, k in enumerate(keys) if j != i))
        if visible_strides(va) != visible_strides(va.new_empty(va.shape)) or shared:
            return None
        with new.graph.inserting_before(out_new):
            leaves_new[i] = new.graph.call_method("contiguous", (b,))
        fake_values.fake_run(leaves_new[i])
        copies.append(leaves_new[i])
    if copies:
        out_new.args = (pytree.tree_unflatten(leaves_new, spec),)
        new.recompile()
    return copies


def _relaid_by_inductor(node: fx.Node, returned: set[fx.Node]) -> bool:
    """Whether ``node`` is a view of a computed tensor that Inductor lays out otherwise than
    eager: it lays a buffer it does not return out row-major, so a slice of ``relu(x.t())`` does
    not have the strides eager gives it (Inductor copies the slice to give them back). An output
    the original returned the same way costs that copy in both."""
    key = storage_key(val(node))
    owner = node if key is None else effects.view_base(node, key)
    if owner is node or owner in returned or owner.op in ("placeholder", "get_attr"):
        return False
    base = val(owner)
    return isinstance(base, torch.Tensor) and not base.is_contiguous()


def visible_strides(v: torch.Tensor) -> Any:
    """A tensor's strides where they matter: along its dims of more than one element (none
    for a tensor without elements). Symbolic ones as written."""
    if static_int(v.numel()) == 0:
        return ()
    return tuple((str(n), str(s)) for n, s in zip(v.shape, v.stride()) if static_int(n) != 1)


def _storage(v: Any) -> Any:
    """The storage a tensor, or every tensor of a tuple, lives in (None: none, or several)."""
    if isinstance(v, torch.Tensor):
        return storage_key(v)
    if isinstance(v, (tuple, list)) and v and all(isinstance(t, torch.Tensor) for t in v):
        keys = {storage_key(t) for t in v}
        return keys.pop() if len(keys) == 1 else None
    return None


def _placement(v: torch.Tensor) -> tuple[int, ...] | None:
    """A tensor's place in its storage: offset, sizes, strides (None: one of them is symbolic)."""
    ints = tuple(static_int(x) for x in (v.storage_offset(), *v.shape, *v.stride()))
    return None if None in ints else ints  # type: ignore[return-value]


def _span(v: Any) -> tuple[int, int] | None:
    """The elements of its storage a tensor can touch, as [first, last + 1) (None: unknown)."""
    ints = _placement(v) if isinstance(v, torch.Tensor) else None
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
    them of ``y.detach(), y`` once ``y`` is a slice of a wider op (cut down in
    tests/test_emit.py); plain ``torch.compile`` fails the same on such outputs as written."""
    flags: dict[Any, set[bool]] = {}
    for v in vals:
        if isinstance(v, torch.Tensor) and not (partial_only and _whole(v)) and (place := _placement(v)) is not None:
            flags.setdefault((storage_key(v), v.dim(), place), set()).add(v.requires_grad)
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
        if (op is None or n in erased or n.users or effects.is_inplace(n)
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
