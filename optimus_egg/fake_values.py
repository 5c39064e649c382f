"""Fake values for the nodes the emitter writes: every node carries ``val``/``example_value``
as Dynamo's and AOTAutograd's do, because Inductor and the next pass read them.

Most of a backward graph is written back unchanged, so its calls can take the values the
original graph already holds (:func:`known_values`, keyed by :func:`call_key`) instead of being
fake-run again."""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Callable

import torch
import torch.fx as fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils import _pytree as pytree

from optimus_egg.effects import identity_dropout, storage_key
from optimus_egg.nodes import static_shape, val


def propagate(graph: fx.Graph, root: torch.nn.Module, known: dict[Any, list[Any]] | None = None) -> None:
    """Fake-run every new node so that it carries ``val``/``example_value`` like Dynamo's.

    ``root`` holds the submodules of ``call_module`` nodes (graphs from ``fx.symbolic_trace``).
    A node that reads no fake value (``full([], 0.0)``) gets one in the inputs' mode: a value
    of another mode cannot meet them in a later op. ``known`` (:func:`known_values`): the
    values of the original graph's calls; a new call of the same op on the same values, none
    requiring grad, takes its value from there instead of running (each value once): what a
    fake run gives, as its inputs are those values. Most of a backward graph is written
    unchanged, and fake-running it again would be a large part of its emission."""
    modes = (v.fake_mode for n in graph.find_nodes(op="placeholder") if isinstance(v := val(n), FakeTensor))
    no_inputs_mode = next(modes, None) or FakeTensorMode(allow_non_fake_inputs=True)
    for node in graph.nodes:
        if node.op in ("call_function", "call_method", "call_module") and "val" not in node.meta:
            same = known.get(value_key(node)) if known else None
            if same:
                node.meta["val"] = node.meta["example_value"] = same.pop()
            else:
                fake_run(node, no_inputs_mode, root)


def alias_identity_dropouts(graph: fx.Graph) -> None:
    """Make a dropout that is off carry its input's value, as it returns its input itself
    (eager, AOTAutograd), and re-derive the views below it. Dynamo gives ``F.dropout(x,
    training=False)`` a fresh fake value (``alpha_dropout`` it gets right), and the views below
    inherit that storage: the emitter, which keeps each output aliasing what it aliased, would
    read the pieces of ``split(dropout(x))`` as fresh and return copies of ``x``'s where eager's
    alias the input. Not where the two values disagree on requiring grad: Dynamo's views taken
    under ``no_grad`` say they require it, its dropout's value rightly not, and the dropout's is
    kept."""
    stale: set[Any] = set()  # the fresh storages Dynamo gave such dropouts
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        if stale and any(storage_key(t) in stale for t in pytree.tree_leaves(val(node))):
            fake_run(node)  # a view of one: its value again, from the input's
        x = identity_dropout(node)
        if (x is not None and (key := storage_key(val(node))) is not None and key != storage_key(val(x))
                and val(node).requires_grad == val(x).requires_grad):
            stale.add(key)
            node.meta["val"] = node.meta["example_value"] = val(x)


def known_values(graph: fx.Graph) -> dict[Any, list[Any]]:
    """The fake values of ``graph``'s calls by :func:`value_key`, each list in graph order
    (``pop()`` takes the first)."""
    known: dict[Any, list[Any]] = {}
    for n in reversed(graph.nodes):
        if (v := val(n)) is not None and (key := value_key(n)) is not None:
            known.setdefault(key, []).append(v)
    return known


def value_key(node: fx.Node) -> Any:
    """A call keyed by the fake values it reads (:func:`call_key`); None when one requires grad
    (its result's flag would then hang on the grad mode) or is missing, and for other nodes."""
    if node.op not in ("call_function", "call_method"):
        return None
    for n in node.all_input_nodes:
        v = val(n)
        if v is None or (v.requires_grad if isinstance(v, torch.Tensor) else
                         any(isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves(v))):
            return None
    # by identity: the values stay alive in their graphs, so no id is reused while keyed
    return call_key(node.op, node.target, node.args, node.kwargs, lambda n: id(val(n)))


def call_key(op: str, target: Any, args: Any, kwargs: Any, node_key: Callable[[fx.Node], Any]) -> Any:
    """What makes two calls compute the same (a pure op): the op and its arguments, nodes as
    ``node_key`` names them, literals by type and value (``mul(x, 1)`` is not ``mul(x, 1.0)``,
    nor ``0.0`` ``-0.0``). None where an argument cannot be keyed (a slice, a symbolic size,
    a node ``node_key`` gives None)."""

    def literal(x: Any) -> Any:
        if isinstance(x, fx.Node):
            if (k := node_key(x)) is None:
                raise TypeError(f"{x.name} has no key")
            return "node", k
        if isinstance(x, (list, tuple)):
            return "seq", tuple(literal(i) for i in x)
        if isinstance(x, dict):
            return "dict", tuple((k, literal(v)) for k, v in x.items())
        if isinstance(x, float):
            return float, repr(x)
        return type(x), x

    try:
        key = (op, target, literal(args), literal(kwargs))
        hash(key)
    except TypeError:
        return None
    return key


def fake_run(node: fx.Node, no_inputs_mode: FakeTensorMode | None = None,
             root: torch.nn.Module | None = None) -> None:
    """Run ``node`` on its inputs' fake values. On symbolic sizes with the Python dispatcher, as
    Dynamo traces: the C++ ``linear`` of a strided slice of a symbolic tensor asks it for its
    ``numel()`` and raises (torch 2.11)."""
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: _value(n, root))
    if node.target is operator.getitem and isinstance(args[0], (tuple, list)):
        # a piece of a split or unbind: no op runs, and walking the whole tuple's values for
        # each of its pieces would be quadratic
        node.meta["val"] = node.meta["example_value"] = args[0][args[1]]
        return
    fakes = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, FakeTensor)]
    symbolic = any(None in static_shape(t) for t in fakes)
    with (fakes[0].fake_mode if fakes else (no_inputs_mode or FakeTensorMode(allow_non_fake_inputs=True)),
          enable_python_dispatcher() if symbolic else contextlib.nullcontext()):
        if node.op == "call_method":
            out = getattr(args[0], node.target)(*args[1:], **kwargs)
        elif node.op == "call_module":
            out = root.get_submodule(node.target)(*args, **kwargs)
        else:
            out = node.target(*args, **kwargs)
    node.meta["val"] = node.meta["example_value"] = out


def _value(node: fx.Node, root: torch.nn.Module | None) -> Any:
    """A node's fake value; a ``get_attr`` that has none is the attribute itself: the submodule
    a higher-order op calls (an ``autograd.Function``'s bodies, a checkpointed region)."""
    v = val(node)
    if v is None and node.op == "get_attr" and root is not None:
        return operator.attrgetter(node.target)(root)
    return v
