"""What a rewrite adds to a step that the cost models do not price, from fake values: the bounds
the pipeline keeps a rewrite under, besides its cost.

The cost models count kernels, and batching buys fewer kernels with bytes (``memory_bound``):
- A matmul saves its operands for the backward, and Inductor's partitioner does not recompute a
  cat, so a cat or stack that a differentiated matmul reads is held from the forward into the
  backward, where the graph as written saves the weights and inputs themselves (live anyway);
  and a matmul of concatenated weights has the gradient of its whole result built in the
  backward, where the graph as written multiplies each piece's gradient alone.
  :func:`saved_copies` is the bytes of such copies.
- A stack of pieces of a computed result that a matmul reads (the windows of one linear on
  concatenated weights, stacked for a batched matmul: PLE's experts) is a copy of the result
  held at once with it, where the graph as written has one piece live at a time.
  :func:`restacked` is their bytes.
Neither is a peak: a batched graph's peak depends on the order Inductor's scheduler gives its
buffers, which a walk of the graph as written does not predict (BENCHMARKS.md, "Peak memory at
realistic sizes").

Backward work has the same blind spot. A pointwise op moved out of the cats of its results
(``cat(relu(a), relu(b)) → relu(cat(a, b))``) computes a piece once per cat that holds it: in a
forward Inductor fuses each into its cat for free, but each has a gradient of its own in the
backward, added up after (a shared expert in a PLE's gates). :func:`pointwise_elements` counts
the elements pointwise ops with gradients compute, and :func:`grad_pieces` the loops the
backward writes pieces' gradients in (a split's are a cat, a sliced tensor's one sum).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from optimus_egg import fake_values, optable
from optimus_egg.effects import StorageKey, storage_key, storage_keys, view_base
from optimus_egg.nodes import static_int, tensors, val, value_in


def saved_copies(gm: fx.GraphModule) -> int:
    """Bytes of cats and stacks that a matmul whose result requires grad reads (through views):
    it saves them for the backward. 0 where no input requires grad."""
    if not any(t.requires_grad for t in _inputs(gm)):
        return 0
    return sum(_bytes(val(cat)) for cat in _cats_matmuls_read(gm, differentiated=True))


def restacked(gm: fx.GraphModule) -> int:
    """Bytes of cats and stacks of views of computed tensors that a matmul reads (through views):
    a copy Inductor makes, where a pointwise reader would fuse it."""
    return sum(_bytes(val(cat)) for cat in _cats_matmuls_read(gm, differentiated=False)
               if cat.args and _views_of_results(cat.args[0]))


def _cats_matmuls_read(gm: fx.GraphModule, differentiated: bool) -> Iterator[fx.Node]:
    """The cats and stacks a matmul reads, through views (``differentiated``: a matmul whose
    result requires grad)."""
    for node in gm.graph.nodes:
        entry = optable.lookup(node)
        value = val(node)
        if entry is None or entry.name not in optable.CATS or not isinstance(value, torch.Tensor):
            continue
        if any(_contraction(r) and (not differentiated or _needs_grad(r))
               for r in _readers(node, storage_key(value))):
            yield node


def _views_of_results(pieces: object) -> bool:
    if not isinstance(pieces, (list, tuple)) or not pieces:
        return False
    bases = [_view_base(p) if isinstance(p, fx.Node) else None for p in pieces]
    return all(b is not None and b.op in ("call_function", "call_method") for b in bases)


def _view_base(node: fx.Node) -> fx.Node | None:
    """The node whose result ``node`` views (through views, split pieces), or None where ``node``
    is no view: its value shares no storage with its first argument."""
    key = storage_keys(node)
    base = None
    while node.args and isinstance(arg := node.args[0], fx.Node) and key and key[0] in storage_keys(arg):
        base = node = arg
    return base


def pointwise_elements(gm: fx.GraphModule) -> int:
    """Elements computed by pointwise calls whose results require grad: each has a gradient."""
    return sum(_elements(v) for n in gm.graph.nodes
               if (entry := optable.lookup(n)) is not None and entry.kind == optable.Kind.POINTWISE
               and isinstance(v := val(n), torch.Tensor) and v.requires_grad)


def grad_pieces(gm: fx.GraphModule) -> int:
    """The loops a backward writes pieces' gradients in, for tensors that require grad: one per
    split, chunk or unbind piece read (the pieces' gradients are a cat, and CPU Inductor writes
    each cat input in a loop of its own), and one for all the slices, selects and narrows of a
    tensor (their gradients are zero-filled copies that Inductor sums in one loop). A slice
    of every element (``k[:, None]``) passes its gradient on as it is."""
    pieces = 0
    sliced: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method") or node.target not in optable.SLICING or not node.args:
            continue
        whole, part = val(node.args[0]), val(node)
        if isinstance(whole, torch.Tensor):
            if whole.requires_grad and not _whole(node, whole, part):
                sliced.add(node.args[0])
        elif isinstance(part, torch.Tensor) and part.requires_grad and node.users:
            pieces += 1
    return pieces + len(sliced)


def _whole(node: fx.Node, whole: torch.Tensor, part: Any) -> bool:
    """``node`` (a slicing call of ``whole``, giving ``part``) views every element of its tensor:
    no tensor index (which gathers), as many elements, from the same offset (``x[:, None]``,
    ``x[:, :n]`` of ``n`` columns, a select of a dim of 1)."""
    if not isinstance(part, torch.Tensor) or any(isinstance(val(a), torch.Tensor) for a in node.all_input_nodes[1:]):
        return False
    sizes = [static_int(n) for n in (part.numel(), whole.numel(), part.storage_offset(), whole.storage_offset())]
    return None not in sizes and sizes[0] == sizes[1] and sizes[2] == sizes[3]


def saved_inputs(gm: fx.GraphModule) -> set[StorageKey]:
    """Storages of the graph's inputs that a caller may write between the step's forward and its
    backward (all but leaves that require grad: eager refuses to write those in place) and that
    autograd may save (:func:`_saved`). Where eager saved a copy of such an input (the cat of
    its pieces that a matmul read), a rewrite must not save the input instead."""
    return {key for node in gm.graph.nodes if node.op in ("placeholder", "get_attr")
            for key in _input_keys(gm, node, writable=True) if _saved(node, key)}


def copy_saved_inputs(old: fx.GraphModule, new: fx.GraphModule) -> list[fx.Node] | None:
    """Each input that ``new`` would have autograd save where ``old`` did not (:func:`saved_inputs`)
    copied once before any call reads it, every call reading the copy: what autograd saves is
    then the step's own tensor, as eager's cat was. Returns the copies written, or None where an
    output is such an input or a view of it (a copy would make it fresh), or one cannot be copied
    so that Inductor keeps the copy (:func:`_kept_copy`)."""
    added = saved_inputs(new) - saved_inputs(old)
    if not added:
        return []
    if any(k in added for n in _output_leaves(new) if isinstance(n, fx.Node) for k in storage_keys(n)):
        return None
    first_call = next(n for n in new.graph.nodes if n.op not in ("placeholder", "get_attr"))
    copies = []
    for node in list(new.graph.nodes):
        if node.op in ("placeholder", "get_attr") and added & _input_keys(new, node):
            with new.graph.inserting_before(first_call):
                copy = _kept_copy(new.graph, node)
            if copy is None:
                return None
            node.replace_all_uses_with(copy, delete_user_cb=lambda user, copy=copy: user not in copy.all_input_nodes)
            copies.append(copy)
    new.recompile()
    return copies


def _kept_copy(graph: fx.Graph, node: fx.Node) -> fx.Node | None:
    """A copy of ``node`` that Inductor keeps: the cat of two narrows of it along its longest
    dim; None where it has no dim of 2 elements or more. Inductor's joint-graph passes remove a
    clone as a no-op, and a cat of a ``split_with_sizes``'s pieces in order as the tensor split,
    before its partitioner picks what to save; it would then save the input itself (as plain
    Inductor does for ``x.clone() @ w``)."""
    shape = [static_int(s) for s in val(node).shape]
    dims = [d for d, n in enumerate(shape) if n is not None and n >= 2]
    if not dims:
        return None
    dim = max(dims, key=lambda d: shape[d])
    half = shape[dim] // 2
    pieces = [graph.call_function(torch.narrow, (node, dim, 0, half)),
              graph.call_function(torch.narrow, (node, dim, half, shape[dim] - half))]
    copy = graph.call_function(torch.cat, (pieces, dim))
    for n in (*pieces, copy):
        fake_values.fake_run(n)
    return copy


def saved_outputs(gm: fx.GraphModule) -> set[int]:
    """The outputs (by place) that autograd saves for the backward: results that require grad
    of an op whose gradient reads its result (a tanh), and outputs whose storage an op saves
    (:func:`_saved`: the output of a neg that a mul also reads, or one computed once for two
    equal expressions). Written in place by the caller, they fail the backward or change its
    gradients, where eager's were a cat of such results, or another tensor, saved apart."""
    places = set()
    for i, node in enumerate(_output_leaves(gm)):
        if not isinstance(node, fx.Node):
            continue
        entry = optable.lookup(node)
        if _needs_grad(node) and entry is not None and entry.name in optable.GRADIENT_OF_RESULT:
            places.add(i)
        elif any(_saved(*_storage_root(node, key)) for key in storage_keys(node)):
            places.add(i)
    return places


def _saved(node: fx.Node, key: StorageKey) -> bool:
    """Whether autograd may save ``node``'s storage ``key`` for the backward: an op whose result
    requires grad and whose gradient reads its operands reads it, through views, through copies
    Inductor removes (:func:`_no_op_copy`), or through ops Inductor's partitioner may recompute
    in the backward from their operands, which it then saves (:func:`_recomputable`: the
    ``neg`` or the ``softmax`` of an input that a ``mul`` reads)."""
    stack, seen = list(node.users), set()
    while stack:
        user = stack.pop()
        if user in seen or user.op == "output":
            continue
        seen.add(user)
        through = key in storage_keys(user) or _no_op_copy(user)
        if not through and not _reshape(user) and _needs_grad(user) and _reads_operands(user):
            return True
        if through or _recomputable(user):
            stack.extend(user.users)
    return False


def _reshape(node: fx.Node) -> bool:
    """A view or a reshape that copies (of a strided view): its gradient reads no operand."""
    entry = optable.lookup(node)
    return entry is not None and entry.kind in (optable.Kind.VIEW, optable.Kind.MAYBE_VIEW)


def _recomputable(node: fx.Node) -> bool:
    """An op Inductor's partitioner may recompute in the backward from what it reads: any but
    cats, contractions and random ops (an op the table does not know included)."""
    entry = optable.lookup(node)
    return entry is None or (entry.name not in optable.NEVER_RECOMPUTED and entry.kind is not optable.Kind.RANDOM)


def _storage_root(node: fx.Node, key: StorageKey) -> tuple[fx.Node, StorageKey]:
    """The node whose storage ``node``'s storage ``key`` is once Inductor has run: up its chain
    of views, and of copies it removes (:func:`_no_op_copy`: an output's clone of a result is
    the result, which another op may save)."""
    while True:
        node = view_base(node, key)
        if not (_no_op_copy(node) and node.all_input_nodes):
            return node, key
        node = node.all_input_nodes[0]
        key = next(iter(storage_keys(node)), key)


def _output_leaves(gm: fx.GraphModule) -> list[object]:
    """The graph's outputs, in place (a constant among them is no node)."""
    return pytree.tree_leaves(next(iter(gm.graph.find_nodes(op="output"))).args[0])


def _input_keys(gm: fx.GraphModule, node: fx.Node, writable: bool = False) -> set[StorageKey]:
    """The storages of an input's (or attribute's) tensors; ``writable``: those a caller may
    write in place (not leaves that require grad)."""
    return {k for t in tensors(value_in(gm, node)) if not (writable and t.requires_grad and t.is_leaf)
            if (k := storage_key(t)) is not None}


def _reads_operands(node: fx.Node) -> bool:
    entry = optable.lookup(node)
    return entry is None or entry.name not in optable.GRADIENT_WITHOUT_OPERANDS


def _readers(node: fx.Node, key: StorageKey | None) -> list[fx.Node]:
    """The calls that read ``node``'s value, through views of it (calls sharing its storage) and
    through copies Inductor removes (:func:`_no_op_copy`)."""
    out: list[fx.Node] = []
    stack, seen = list(node.users), set()
    while stack:
        user = stack.pop()
        if user in seen:
            continue
        seen.add(user)
        if key is not None and (key in storage_keys(user) or _no_op_copy(user)):
            stack.extend(user.users)
        else:
            out.append(user)
    return out


def _contraction(node: fx.Node) -> bool:
    entry = optable.lookup(node)
    return entry is not None and entry.name in optable.CONTRACTIONS


def _bytes(t: torch.Tensor) -> int:
    return _as_traced(t.untyped_storage().nbytes())


def _elements(t: torch.Tensor) -> int:
    return _as_traced(t.numel())


def _as_traced(size: int | torch.SymInt) -> int:
    """A size; under symbolic sizes, at the sizes traced (1 where unknown: a copy still counts)."""
    known = static_int(size)
    if known is None and isinstance(size, torch.SymInt):
        known = size.node.hint
    return known if known is not None else 1


def _no_op_copy(node: fx.Node) -> bool:
    """A copy that Inductor removes before it partitions (``optable.INDUCTOR_NO_OP_COPIES``)."""
    entry = optable.lookup(node)
    return entry is not None and (entry.name in optable.INDUCTOR_NO_OP_COPIES or (
        entry.name in optable.CATS and len(node.all_input_nodes) == 1))


def _needs_grad(node: fx.Node) -> bool:
    return any(t.requires_grad for t in tensors(val(node)))


def _inputs(gm: fx.GraphModule) -> list[torch.Tensor]:
    return [t for n in gm.graph.nodes if n.op in ("placeholder", "get_attr") for t in tensors(value_in(gm, n))]
