"""What a call does besides computing its result: the arguments it writes, the storage it shares
with its inputs, the modes it switches, the random numbers it draws.

The optimizer keeps every call with an effect where the program has it; these are the questions
that decide which calls those are.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch
import torch.fx as fx

from optimus_egg.nodes import bind, is_tensor_node, tensors, val
from optimus_egg.optable import (DROPOUTS, INPLACE_METHODS, INPLACE_OPERATORS, LAYOUT_READERS, MODE_SWITCHES,
                                 UNDECLARED_WRITES, Kind, lookup)


#: Functions that write some of their tensor arguments when called a certain way, not in place
#: of their result: a batch norm in training (or an instance norm on its input's statistics)
#: updates the running statistics it is given; an embedding with ``max_norm`` renormalizes the
#: rows it reads, in its weight. Each: the arguments written, and when, from the bound arguments.
_WRITES_WHEN: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], Any]]] = {
    "batch_norm": (("running_mean", "running_var"), lambda b: b["training"]),
    "instance_norm": (("running_mean", "running_var"), lambda b: b["use_input_stats"]),
    "embedding": (("weight",), lambda b: b["max_norm"] is not None),
    "embedding_bag": (("weight",), lambda b: b["max_norm"] is not None),
}


def written_arguments(node: fx.Node) -> list[fx.Node]:
    """The inputs a call writes to: all of them for a call in place (:func:`is_inplace`), else
    what it writes besides computing its result (:func:`_written_besides`)."""
    return node.all_input_nodes if _writes_in_place(node) else _written_besides(node)


def _written_besides(node: fx.Node) -> list[fx.Node]:
    """The inputs a call that is not in place writes to: those :data:`_WRITES_WHEN` names, all
    of them for an ATen op (or a builtin's) that writes one, all of them (and the tensors of its
    submodule) for a submodule that may write (:func:`_module_writes`)."""
    if node.op == "call_module":
        return _module_writes(node)
    if node.op not in ("call_function", "call_method"):
        return []
    name = _op_name(node.target) if node.op == "call_function" else ""
    entry = _WRITES_WHEN.get(name)
    if entry is None or not inspect.isfunction(node.target):
        # an ATen op, or a builtin whose ATen op, writes an argument (fake quantization's
        # observer statistics) or updates running statistics undeclared: as if it wrote all
        return node.all_input_nodes if name in UNDECLARED_WRITES or _aten_writes(name) else []
    names, when = entry
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
        bound.apply_defaults()
        written = when(bound.arguments)
    except (TypeError, ValueError, KeyError):  # (arguments that do not bind: as if it wrote all)
        return node.all_input_nodes
    if isinstance(written, fx.Node) or written:  # (a flag computed in the graph: it may be set)
        return [a for n in names if isinstance(a := bound.arguments.get(n), fx.Node)]
    return []


def _op_name(target: Any) -> str:
    """``native_batch_norm`` for ``torch.native_batch_norm``, ``aten.native_batch_norm`` and its
    overloads alike."""
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[-1]
    return getattr(target, "__name__", "")


def _module_writes(node: fx.Node) -> list[fx.Node]:
    """What a submodule call (``fx.symbolic_trace`` keeps ``torch.nn`` modules whole) may write:
    nothing for a ``torch.nn`` module that has no in-place flag, ``max_norm`` or running
    statistics it updates; otherwise its inputs and every tensor of it the graph reads."""
    root = node.graph.owning_module
    try:
        mod = root.get_submodule(node.target) if root is not None else None
    except AttributeError:
        mod = None
    pure = (mod is not None and type(mod).__module__.startswith("torch.nn.modules")
            and not getattr(mod, "inplace", False) and getattr(mod, "max_norm", None) is None
            and not (getattr(mod, "track_running_stats", False) and mod.training))
    if pure:
        return []
    prefix = f"{node.target}."
    held = [n for n in node.graph.find_nodes(op="get_attr") if n.target.startswith(prefix)]
    return [*node.all_input_nodes, *held]


@functools.cache
def _aten_writes(name: str) -> bool:
    """Does an overload of ``aten::name``, other than an ``out=`` one, write to an argument?"""
    packet = getattr(torch.ops.aten, name, None) if name else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only
               and str(a.type) in ("Tensor", "Optional[Tensor]")  # (not TorchScript's list ops)
               for o in packet.overloads() if "out" not in o for a in getattr(packet, o)._schema.arguments)


def is_inplace(node: fx.Node) -> bool:
    """Does this call write to one of its arguments?"""
    return _writes_in_place(node) or bool(_written_besides(node))


def _writes_in_place(node: fx.Node) -> bool:
    """Does this call write to one of its arguments, returning it (``add_``, ``out=``)?"""
    t = node.target
    if node.op == "call_method":
        return (t.endswith("_") and not t.startswith("__")) or t in INPLACE_METHODS
    if node.op != "call_function":
        return False
    if isinstance(t, torch._ops.OpOverload):
        return any(a.alias_info is not None and a.alias_info.is_write for a in t._schema.arguments)
    if isinstance(t, torch._ops.OpOverloadPacket):  # (the overload is picked at the call: any that writes)
        return any(a.alias_info is not None and a.alias_info.is_write
                   for o in t.overloads() for a in getattr(t, o)._schema.arguments)
    if t in INPLACE_OPERATORS:
        return True
    if "out" in node.kwargs:
        return True
    name = getattr(t, "__name__", "")
    if name.endswith("_") and not name.startswith("__"):
        return True
    if inspect.isfunction(t) and "inplace" in inspect.signature(t).parameters:
        try:
            return bool(inspect.signature(t).bind(*node.args, **node.kwargs).arguments.get("inplace"))
        except TypeError:
            return True
    return node.kwargs.get("inplace") is True


def reads_layout(node: fx.Node) -> bool:
    """Does this call read the memory layout of a tensor the graph computes (``as_strided`` of
    anything but an input)? A rewrite may compute that tensor with other strides."""
    if node.op not in ("call_function", "call_method"):
        return False
    name = node.target if node.op == "call_method" else _op_name(node.target)
    source = node.args[0] if node.args else node.kwargs.get("input", node.kwargs.get("self"))
    return name in LAYOUT_READERS and isinstance(source, fx.Node) and source.op not in ("placeholder", "get_attr")


class StorageKey(torch.multiprocessing.reductions.StorageWeakRef):
    """A tensor's storage, as a key: equal to the key of the same storage and to nothing else.
    (torch's ``StorageWeakRef`` raises when compared with ``None``, the key of a non-tensor
    argument such as a symbolic size: ``reshape(t, s0, -1)``.)"""

    __slots__ = ()
    __hash__ = torch.multiprocessing.reductions.StorageWeakRef.__hash__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageKey) and self.cdata == other.cdata


def storage_key(t: Any) -> StorageKey | None:
    """The key of a tensor's storage; None for anything else."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return StorageKey(t.untyped_storage())
    except Exception:  # noqa: BLE001 - tensors without storage (sparse, nested) alias nothing we track
        return None


def storage_keys(node: fx.Node) -> list[StorageKey]:
    """The storages of a node's tensors (a tuple's: each piece's)."""
    return [k for t in tensors(val(node)) if (k := storage_key(t)) is not None]


def view_base(node: fx.Node, key: StorageKey) -> fx.Node:
    """The node up ``node``'s chain of views whose tensor holds storage ``key`` first: the tensor
    the views were taken of."""
    while (up := next((a for a in node.all_input_nodes if key in storage_keys(a)), None)) is not None:
        node = up
    return node


def aliases_input(node: fx.Node) -> bool:
    """Does this call's result share storage with one of its inputs (a view, or a call that
    returns its input)?"""
    out = storage_key(val(node))
    return out is not None and any(storage_key(val(i)) == out for i in node.all_input_nodes)


def switches_mode(node: fx.Node) -> bool:
    """Does this call change a mode the calls after it compute under (one of
    :data:`~optimus_egg.optable.MODE_SWITCHES`)? The same call computes another value (``x @ y``
    in bfloat16 under autocast) or gradient (``p.exp()`` under ``no_grad``) on either side of it."""
    t = node.target
    return (node.op == "call_function" and getattr(t, "__name__", None) in MODE_SWITCHES
            and str(getattr(t, "__module__", "")).startswith("torch"))


def draws_random(node: fx.Node) -> bool:
    """Does this call draw random numbers (every random op but a dropout that is off)?"""
    op = lookup(node)
    return op is not None and op.kind is Kind.RANDOM and identity_dropout(node) is None


def runs_once(node: fx.Node) -> bool:
    """A call that must run where the program runs it, once: it draws random numbers, or it is
    a submodule or higher-order op (a checkpointed region may draw)."""
    return draws_random(node) or node.op == "call_module" or isinstance(node.target, torch._ops.HigherOrderOperator)


def order_kept(before: list[fx.Node], after: list[fx.Node]) -> bool:
    """Whether ``after`` (the same calls reordered) runs every call with an effect in the order
    of ``before``, and keeps every call that reads or is storage a call writes on the same side
    of that write: then the reorder computes what ``before`` does."""
    was = {n: i for i, n in enumerate(before)}
    now = {n: i for i, n in enumerate(after) if n in was}
    marked = [n for n in before if is_inplace(n) or runs_once(n) or switches_mode(n)]
    if sorted(marked, key=now.__getitem__) != marked:
        return False
    for w in (n for n in marked if is_inplace(n)):
        written = {k for a in written_arguments(w) for k in storage_keys(a)}
        if any(n is not w and touches(n, written) and (was[n] < was[w]) != (now[n] < now[w]) for n in before):
            return False
    return True


def touches(node: fx.Node, storages: set[Any]) -> bool:
    """Does ``node`` read or compute a tensor in one of ``storages``?"""
    return bool(storages) and any(k in storages for n in (node, *node.all_input_nodes) for k in storage_keys(n))


def identity_dropout(node: fx.Node) -> fx.Node | None:
    """The input of a dropout that is off (``training`` a literal False), else None. Such a call
    draws nothing and returns its input itself (ATen: ``if (!train) return input``), so it is
    parsed as its input: kept as a random op, it would hide the splits and cats around it from
    the rules."""
    op = lookup(node)
    if op is None or op.name not in DROPOUTS:
        return None
    b = bind(node, ("input",), "p", ("training", "train"), "inplace",
             defaults={"p": 0.5, "training": DROPOUTS[op.name], "inplace": False})
    if b is None or b["training"] is not False or not is_tensor_node(b["input"]):
        return None
    return b["input"]
