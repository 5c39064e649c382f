"""The clean-up stage: passes over the graph the emitter wrote, before it goes to Inductor.

The e-graph has no ``split``, no doubling and no notion of where a node goes, so the emitted graph
is rewritten once more, at the FX level, where that changes what autograd and Inductor make of
it (the values stay the same). :func:`clean` runs the passes in their fixed order; each pass that
replaces nodes returns what replaced each, so that the emitter's class → node map follows.
"""

from __future__ import annotations

import bisect
import operator
from typing import Any

import torch
import torch.fx as fx

from optimus_egg import calls, effects, fake_values, ir, optable
from optimus_egg.aten import ATEN_CALLS, aten_stack, is_aten
from optimus_egg.effects import storage_key
from optimus_egg.emit import Emitter
from optimus_egg.extract.kernels import MAX_SCATTERED
from optimus_egg.frontend import mutated_storages
from optimus_egg.nodes import static_int, val
from optimus_egg.outputs import keep_aliasing

#: The positional arity of the slicing calls :func:`split_tilings` groups.
_VIEW_ARITY = {torch.narrow: 4, torch.select: 3}


def clean(emitter: Emitter, roots: list[fx.Node], classes: dict[ir.Term, int],
          disjoint_outputs: bool) -> tuple[list[Any], list[fx.Node]]:
    """Every clean-up pass on what ``emitter`` wrote (``roots``: the output classes' nodes), in
    order: the torch-level passes, the outputs' aliasing repair (:func:`outputs.keep_aliasing`,
    which may emit more classes, so it runs on the cleaned graph), then an ATen graph's lowering
    and ATen passes. Returns the output leaves and the kernels the aliasing repair added, which
    no cost model saw."""
    graph = emitter.graph
    split = {(emitter.done[classes[t]], d): n for (t, d), n in emitter.tr.split.items()
             if t in classes and classes[t] in emitter.done}
    emitter.forget(cut_cat_slices(graph, set(roots), split))
    regrouped = split_tilings(graph, split)
    emitter.replaced(regrouped)
    doubled = doubled_sums(graph)
    emitter.replaced(doubled)
    regrouped.update(doubled)
    emitter.forget(moves_read_in_place(graph, set(roots)))
    sink_input_stacks(graph)
    outs = iter([regrouped.get(n, n) for n in roots])
    leaves = [next(outs) if isinstance(x, ir.Term) else x for x in emitter.tr.outputs]
    before = set(graph.nodes)
    leaves = keep_aliasing(emitter, leaves, classes, disjoint_outputs)
    copies = [n for n in graph.nodes if n not in before and calls.launches(n)]
    if is_aten(emitter.gm.graph):
        replaced = to_aten(graph)
        replaced.update(stack_untransposed(graph))
        replaced.update(scatter_input_stacks(graph))
        emitter.replaced(replaced)
        leaves = [replaced.get(x, x) if isinstance(x, fx.Node) else x for x in leaves]
    return leaves, copies


def cut_cat_slices(graph: fx.Graph, keep: set[fx.Node], split: dict[tuple[fx.Node, int], int]) -> set[fx.Node]:
    """Slices of a tensor that requires grad and that the program split along one dim into as
    many pieces or more (``split``, :func:`split_tilings`), which together cover it along that
    dim but overlap, are cut at every slice's ends where only cats on that dim read them:
    ``cat([x[:, 24:], tanh(x[:, :2]), x[:, :24]])`` reads ``x[:, :2]`` and ``x[:, 2:24]`` in
    place of ``x[:, :24]``, so that :func:`split_tilings` makes the slices one split.

    Forward, a cat reads one input more; backward, the split's gradient is one cat where each
    overlapping slice's is a zero-filled copy, added up. ``keep``: nodes not to replace (the
    graph's outputs). Returns the slices erased."""
    groups: dict[tuple[fx.Node, int], list[fx.Node]] = {}
    for n in graph.nodes:
        if n.op != "call_function" or n.target is not torch.narrow or len(n.args) != 4 or n.kwargs:
            continue
        v = val(n.args[0])
        if (isinstance(v, torch.Tensor) and v.requires_grad
                and all(type(a) is int and a >= 0 for a in n.args[1:])):
            groups.setdefault((n.args[0], n.args[1] % v.dim()), []).append(n)
    erased: set[fx.Node] = set()
    for (base, d), nodes in groups.items():
        size = static_int(val(base).shape[d])
        spans = {n: (n.args[2], n.args[2] + n.args[3]) for n in nodes}
        cuts = sorted({0, *(s for s, _ in spans.values()), *(e for _, e in spans.values())})
        cells = list(zip(cuts, cuts[1:]))
        if size is None or cuts[-1] != size or _gap(sorted(spans.values())) or _unwritten(split, base, d, len(cells)):
            continue  # no split tiles the tensor, or one the program did not write
        wide = [n for n in nodes if bisect.bisect_left(cuts, spans[n][1]) > bisect.bisect_right(cuts, spans[n][0])]
        if not wide or any(n in keep or not all(_cat_reads(u, n, d) for u in n.users) for n in wide):
            continue
        for n in wide:
            with graph.inserting_before(n):
                pieces = [graph.call_function(torch.narrow, (base, d, a, b - a))
                          for a, b in cells if spans[n][0] <= a and b <= spans[n][1]]
            for p in pieces:
                fake_values.fake_run(p)
            for u in list(n.users):
                u.args = ([q for t in u.args[0] for q in (pieces if t is n else [t])], *u.args[1:])
            graph.erase_node(n)
            erased.add(n)
    return erased


def split_tilings(graph: fx.Graph, split: dict[tuple[fx.Node, int], int]) -> dict[fx.Node, fx.Node]:
    """Slices that tile a tensor along one dim become one ``split``, and selects of every
    index one ``unbind``, but of a tensor that requires grad only where the program split or
    unbound it along that dim into as many pieces or more (``split``: (node, dim) → pieces);
    returns what replaced each slice.

    The e-graph has no split: a piece is a slice (``Sl``). Forward, both are the same views.
    Backward, a split's gradient is one cat, which CPU Inductor writes a loop per piece; the
    slices' gradients, zero-filled copies added up, it writes as one loop that tests every
    piece's range for each element: fewer kernels, more work per element. The backward writes
    no more pieces than the program's did."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    # the split goes before the first slice: of a tensor the graph writes (t_() between two
    # narrows changes what the later one reads), each slice stays where it was
    written = mutated_storages(graph)
    groups: dict[tuple[fx.Node, int, bool], list[fx.Node]] = {}
    for n in graph.nodes:
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
        if val(base).requires_grad and _unwritten(split, base, d, len(spans)):
            continue  # a cat of more pieces than the program's split wrote: the slices' one loop
        base = replaced.get(base, base)  # itself a slice that an earlier group replaced
        with graph.inserting_before(min(nodes, key=order.__getitem__)):
            whole = (graph.call_function(torch.unbind, (base, d)) if select
                     else graph.call_function(torch.split, (base, [length for _, length in spans], d)))
            pieces = {sp: graph.call_function(operator.getitem, (whole, i)) for i, sp in enumerate(spans)}
        for n in nodes:
            new = pieces[span[n]]
            n.replace_all_uses_with(new)
            graph.erase_node(n)
            replaced[n] = new
    return replaced


def doubled_sums(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """``x + x`` becomes ``x * 2``; returns what replaced each sum.

    Simplification often proves both operands of an add one tensor. Forward, both are one
    kernel, and equal (doubling is exact, overflow included, in every non-bool dtype); backward,
    autograd accumulates the two gradients with an add of one ``mm`` result to itself, which
    Inductor's ``addmm`` pattern turns into a second matmul, where ``x * 2`` gives one pointwise
    op that fuses. What reads a doubling loses its fake value, to be derived again."""
    replaced: dict[fx.Node, fx.Node] = {}
    for n in list(graph.nodes):
        op = optable.lookup(n)
        v = val(n)
        if (op is None or op.name != "add" or len(n.args) != 2 or n.args[0] is not n.args[1] or n.kwargs
                or not isinstance(n.args[0], fx.Node) or not isinstance(v, torch.Tensor)
                or not isinstance(val(n.args[0]), torch.Tensor) or v.dtype == torch.bool):
            continue
        with graph.inserting_before(n):
            new = graph.call_function(torch.mul, (n.args[0], 2))
        if "val" in n.meta:  # the same value: a later lowering reads its rank off it
            new.meta["val"] = n.meta["val"]
        n.replace_all_uses_with(new)
        graph.erase_node(n)
        replaced[n] = new
    # what reads a doubling reads a new tensor: its fake value (storage, for the aliasing
    # checks that follow) is derived again, like everything computed from it
    stale = set(replaced.values())
    for n in graph.nodes:
        if n not in stale and any(a in stale for a in n.all_input_nodes):
            stale.add(n)
            n.meta.pop("val", None)
            n.meta.pop("example_value", None)
    return replaced


def moves_read_in_place(graph: fx.Graph, keep: set[fx.Node]) -> set[fx.Node]:
    """A dim moved and written out in order (``movedim(x, a, b).contiguous()``, the IR's ``Move``)
    that only batched matmuls read (directly or through reshapes of size-1 dims), the last dim
    left in place, is read as the ``movedim`` view: ``bmm`` takes any batch and row strides, so
    the copy was a kernel and a buffer for nothing (a stack of equal windows of one activation,
    a batched layer's input). ``keep``: the graph's outputs (not yet readers here), which stay
    fresh tensors: neither a copy nor a reshape of it between the copy and the matmuls may be one.
    Returns the copies erased (their class is emitted again where an output needs it)."""
    erased = set()
    for node in list(graph.find_nodes(op="call_function", target=torch.Tensor.contiguous)):
        moved = node.args[0]
        if (len(node.args) == 1 and not node.kwargs and isinstance(moved, fx.Node) and moved.target is torch.movedim
                and _batched_matmuls_read(node, keep)
                and optable.keeps_last_dim(val(moved.args[0]).dim(), *moved.args[1:])):
            node.replace_all_uses_with(moved)
            graph.erase_node(node)
            erased.add(node)
    return erased


def _batched_matmuls_read(node: fx.Node, keep: set[fx.Node]) -> bool:
    """Is ``node`` read by batched matmuls alone, directly or through reshapes of size-1 dims
    (views of any strided tensor), and neither it nor such a reshape is in ``keep``?"""
    def reader(user: fx.Node) -> bool:
        if (op := optable.lookup(user)) is not None and op.name in optable.BATCHED_MATMULS:
            return True
        shapes = [val(user), val(node)]
        return (user.target in _UNIT_RESHAPES and all(isinstance(v, torch.Tensor) for v in shapes)
                and optable.unit_reshape(shapes[0].shape, shapes[1].shape) and _batched_matmuls_read(user, keep))

    return node not in keep and bool(node.users) and all(reader(u) for u in node.users)


#: The reshapes the emitter writes (``Flat``, ``Unflat``, ``Squeeze``, ``Unsqueeze``).
_UNIT_RESHAPES = (torch.flatten, torch.unflatten, torch.squeeze, torch.unsqueeze)


def sink_input_stacks(graph: fx.Graph) -> None:
    """Cats and stacks of the graph's inputs alone (the weights a fused op reads, stacked in
    every step), and the views around them, move down to just before their first reader.

    The emitter writes operands in argument order, so a fused op's weight stacks can land
    far above it (the biases of a fused layer norm's ``addcmul`` before the matmul that
    feeds the norm); on CPU, Inductor then copies them in a kernel of their own instead of
    in the consumer's. Only graphs where every call is a known op (or one the rules build, or
    an ATen op: its schema says what it writes) that writes nothing are reordered, so nothing
    an input is read from changes."""
    nodes = list(graph.nodes)
    built = {call.target for call in calls.BUILT.values()}
    if not all(n.op in ("placeholder", "get_attr", "output")
               or ((n.target in built or optable.lookup(n) is not None
                    or isinstance(n.target, torch._ops.OpOverload)) and not effects.is_inplace(n))
               for n in nodes):
        return
    inputs_only: set[fx.Node] = set()  # computed from the inputs by views, cats and stacks alone
    stacked: set[fx.Node] = set()  # ... and a cat or stack is among them
    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            inputs_only.add(n)
            continue
        op = optable.lookup(n)
        kind = None if op is None else ("stack" if op.name in optable.CATS else op.kind)
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


def to_aten(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """Every torch-level call written here in its ATen spelling (``aten.ATEN_CALLS``): a
    graph that was ATen (Inductor's post-grad graphs) is lowered op by op, and a
    ``torch.narrow`` has no lowering. Returns what replaced each call."""
    replaced: dict[fx.Node, fx.Node] = {}
    for n in list(graph.nodes):
        lower = ATEN_CALLS.get(n.target) if n.op == "call_function" else None
        if lower is None:
            continue
        with graph.inserting_before(n):
            new = lower(graph, n)
        if "val" in n.meta:  # the same value: a later lowering reads its rank off it
            new.meta["val"] = n.meta["val"]
        n.replace_all_uses_with(new)
        graph.erase_node(n)
        replaced[n] = new
        for user in new.users:  # a tuple's projections read the new tuple's values
            if user.target is operator.getitem:
                user.meta.pop("val", None)
    if not is_aten(graph):
        raise RuntimeError("a call the emitter wrote has no ATen spelling (aten.ATEN_CALLS)")
    return replaced


def stack_untransposed(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """A stack that only batched matmuls read, of 2-D transposes ``g.T`` (a backward's
    ``bmm`` of weight gradients stacks ``grad.T`` of each layer), is written as the
    transpose of the stack of the ``g`` s (ATen: ``cat`` of ``unsqueeze`` s along dim 0, then
    ``permute [0, 2, 1]``): the same values, and a matmul reads either layout.

    Inductor copies each piece into the stack. A copy of ``g.T`` walks ``g`` column by
    column, as the column sum of a bias gradient ``sum(g, 0)`` does, so on CPU it fuses the
    copies with those sums, all layers in one or two kernels, instead of each sum with the
    kernel that computes its ``g``: the layers' kernels stop repeating and each is a C++
    build of its own. A copy of ``g`` walks it in the order its kernel writes it and joins
    that kernel. Returns the stacks replaced (erased), each by its new transpose."""
    aten = torch.ops.aten
    replaced: dict[fx.Node, fx.Node] = {}
    for cat in _bmm_stacks(graph):
        pieces = [_transposed_2d(x.args[0]) if x.target == aten.unsqueeze.default and x.args[1] == 0 else None
                  for x in cat.args[0]]
        if None in pieces or all(p.op == "placeholder" for p in pieces):
            continue
        with graph.inserting_before(cat):
            new = graph.call_function(aten.permute.default, (aten_stack(graph, pieces, 0), [0, 2, 1]))
        cat.replace_all_uses_with(new)
        unread = dict.fromkeys([*cat.args[0], *(x.args[0] for x in cat.args[0])])  # readers first
        graph.erase_node(cat)
        for n in unread:
            if not n.users:
                graph.erase_node(n)
        replaced[cat] = new
    return replaced


def scatter_input_stacks(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """A cat along dim 0 of graph inputs alone (each as it is, of one shape but maybe dim 0, or
    each ``unsqueeze(x, 0)``, of one shape), that only matmuls read (through views) is written
    as each input scattered into its rows of a zero tensor, in turn (ATen: ``slice_scatter``
    into ``full``): the same values, and Inductor writes one pointwise kernel for them. Such
    stacks are the weights a batched layer reads, stacked in every step (forward), and the
    saved inputs a backward's ``bmm`` of weight gradients stacks.

    Inductor (CPU) copies each piece of a cat in a loop of its own. In a backward, a copy of an
    input depends on nothing, so it fuses with whichever kernel near it reads the same input,
    or with none, and the layers' kernels stop repeating (each a C++ build of its own). One
    kernel, which Inductor computes where the matmul reads it, changes only that kernel; each
    element of it tests which slot it is in, one compare per input (hence
    :data:`~optimus_egg.extract.kernels.MAX_SCATTERED`). Returns the stacks replaced (erased), each by its
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


def _unwritten(split: dict[tuple[fx.Node, int], int], base: fx.Node, d: int, pieces: int) -> bool:
    """Would a split of ``base`` along ``d`` into ``pieces`` have more pieces than any the
    program wrote there (``split``; none where it only sliced)?"""
    return pieces > split.get((base, d), 0)


def _gap(spans: list[tuple[int, int]]) -> bool:
    """Whether the ``(start, end)`` spans, sorted, leave a gap between 0 and their last end."""
    covered = 0
    for start, end in spans:
        if start > covered:
            return True
        covered = max(covered, end)
    return False


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


def _transposed_2d(node: Any) -> fx.Node | None:
    """``g`` where ``node`` is the ATen transpose of a 2-D ``g`` (``permute [1, 0]``, ``t``,
    ``transpose 0 1``) that a kernel computes or the graph takes as input, else None. Not a
    view (the slices of one gradient that a split of features gives): no kernel writes it that
    its copy could join; nor a transpose that moves no element (a dim of size 1). An input
    (the tangent, when no activation follows the last layer) is a copy of its own in either
    layout; a stack of inputs alone is left as it is."""
    aten = torch.ops.aten
    if not isinstance(node, fx.Node) or node.op != "call_function" or node.kwargs:
        return None
    g = node.args[0] if node.args else None
    v = val(g) if isinstance(g, fx.Node) else None
    if v is None or v.dim() != 2 or 1 in v.shape or not (g.op == "placeholder" or calls.launches(g)):
        return None
    if (node.target == aten.t.default
            or node.target == aten.permute.default and [d % 2 for d in node.args[1]] == [1, 0]
            or node.target == aten.transpose.int and {d % 2 for d in node.args[1:]} == {0, 1}):
        return g
    return None


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
        matmul(u) or (u.op == "call_function" and not calls.launches(u) and _only_extern_matmuls(u))
        for u in node.users)
