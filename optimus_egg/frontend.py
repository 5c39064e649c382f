"""FX graph → IR terms.

Every node becomes a term through the op table. Mutation is the one thing the e-graph cannot see,
so it is made explicit here: every node that writes to, reads from, or produces a tensor whose
storage is written anywhere in the graph (and every random op, and every call of a submodule or
subgraph: a checkpointed region may draw random numbers) is an opaque, unshareable ``Op``
threaded on an effect chain in program order. Rules never look inside those, and the chain keeps
their order on the way back. (Under the option ``batch_random`` plain dropouts are terms the rules
may batch instead: :mod:`optimus_egg.draws`.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
import operator
from typing import Any

import torch.fx as fx
from torch.utils import _pytree as pytree

from optimus_egg import calls, draws, optable, structural
from optimus_egg.calls import Registry
from optimus_egg.effects import draws_random, runs_once, storage_key, touches, written_arguments
from optimus_egg.ir import ARGS, Term, as_list
from optimus_egg.nodes import static_shape, val
from optimus_egg.structural import Pieces


@dataclass
class Translation:
    registry: Registry
    inputs: list[fx.Node]  # placeholders and get_attrs, by Input index
    outputs: list[Any]  # the output node's leaves: a Term for each node, constants as they are
    output_spec: Any  # how to rebuild the output node's args from the leaves
    effects: Term | None  # the last effectful term: it must survive even if nothing reads it
    facts: list[tuple[Term, list[int | None], str]] = field(default_factory=list)
    origin: dict[Term, fx.Node] = field(default_factory=dict)  # term -> the node it came from
    terms: dict[fx.Node, Term] = field(default_factory=dict)  # node -> its term (nodes that have one)
    opaque: int = 0  # nodes kept as opaque Ops
    nodes: int = 0
    split: dict[tuple[Term, int], int] = field(default_factory=dict)  # (tensor, dim) split or unbound -> most pieces

    def copies(self) -> dict[Term, int]:
        """How many times the graph as written computes each term that several of its calls
        compute alike (a stack of the same tensors written three times, ``torch.relu(x)`` and
        ``x.relu()``): the e-graph holds one, eager runs each. A call whose term is its own
        input's (``contiguous`` of a contiguous tensor) returns that tensor: no copy."""
        again = Counter(t for n, t in self.terms.items()
                        if n.op.startswith("call_") and n is not self.origin[t]
                        and all(self.terms.get(a) != t for a in n.all_input_nodes))
        return {t: k + 1 for t, k in again.items()}


def mutated_storages(graph: fx.Graph) -> set[Any]:
    """Storages written to by some node: their readers and writers are pinned in order. (An
    in-place call returns one of the arguments it writes: its result adds no storage.)"""
    written = {storage_key(val(arg)) for node in graph.nodes for arg in written_arguments(node)}
    written.discard(None)
    return written


def translate(gm: fx.GraphModule, batch_random: bool = False) -> Translation:
    """``batch_random``: dropouts that draw become terms the rules may batch (:mod:`optimus_egg.draws`)."""
    graph = gm.graph
    pinned_storages = mutated_storages(graph)
    registry = Registry()
    env: dict[fx.Node, Term | Pieces] = {}
    inputs: list[fx.Node] = []
    effects: Term | None = None
    tr = Translation(registry, inputs, [], None, None)
    tokens = draws.Tokens(graph, registry, tr.facts) if batch_random and not draws.reseeds(graph) else None

    def term(x: Any) -> Term | None:
        got = env.get(x) if isinstance(x, fx.Node) else None
        return got if isinstance(got, Term) else None

    def opaque(node: fx.Node, op: optable.OpDef | None, effectful: bool) -> Term:
        nonlocal effects
        call, args = calls.generic_call(node, op)
        if effectful:
            call.constructor = "Op"
        terms = [_materialize(a, env) for a in args]
        key = registry.key(call, shareable=not effectful and op is not None)
        if effectful and effects is not None:
            terms.append(effects)  # ordering only: not an argument of the call
        if call.constructor == "Op":
            t = Term("Op", (key, as_list(terms, ARGS)))
        else:
            t = Term(call.constructor, (key, *terms))
        if effectful:
            effects = t
        tr.opaque += op is None or effectful
        return t

    attrs: dict[str, Term] = {}  # get_attr target -> its term
    for node in graph.nodes:
        if node.op == "get_attr" and node.target in attrs:
            # every read of one attribute is the same tensor object (fx.symbolic_trace writes a
            # get_attr per use): one term, so that rules see a weight two linears share
            env[node] = attrs[node.target]
        elif node.op in ("placeholder", "get_attr"):
            env[node] = Term("Input", (len(inputs),))
            inputs.append(node)
            if node.op == "get_attr":
                attrs[node.target] = env[node]
        elif node.op == "output":
            leaves, tr.output_spec = pytree.tree_flatten(node.args[0])
            tr.outputs = [_materialize(x, env) if isinstance(x, fx.Node) else x for x in leaves]
            continue
        else:
            tr.nodes += 1
            op = optable.lookup(node)
            random = draws_random(node)
            pinned = touches(node, pinned_storages)
            drawn = draws.drawn_input(node) if tokens is not None and random and not pinned else None
            effectful = (pinned or (runs_once(node) and drawn is None) or (op is None and not node.users))
            parsed = None
            if drawn is not None:
                parsed = tokens.term(node, _materialize(drawn, env))
            elif not effectful and op is not None and op.name in structural.STRUCTURAL:
                if op.name == "getitem" and isinstance(env.get(node.args[0]), Pieces):
                    parsed = _piece(node, env[node.args[0]])
                else:
                    parsed = structural.STRUCTURAL[op.name](node, term)
                if isinstance(parsed, Pieces) and not _only_indexed(node):
                    parsed = None
                if isinstance(parsed, Pieces) and parsed.items:  # (an unbind of an empty dim has none)
                    split = parsed.sliced()
                    tr.split[split] = max(tr.split.get(split, 0), len(parsed.items))
            env[node] = parsed if parsed is not None else opaque(node, op, effectful)
        result = env[node]
        if isinstance(result, Term):
            tr.terms[node] = result
        if isinstance(result, Term) and result not in tr.origin:
            tr.origin[result] = node
            v = val(node)
            shape = static_shape(v)
            if shape is not None:
                tr.facts.append((result, shape, str(v.dtype).removeprefix("torch.")))
    tr.effects = effects
    return tr


def _piece(node: fx.Node, pieces: Pieces) -> Term | None:
    i = node.args[1]
    return pieces.items[i] if isinstance(i, int) and -len(pieces.items) <= i < len(pieces.items) else None


def _only_indexed(node: fx.Node) -> bool:
    """A split's tuple can become pieces only if nothing but ``tuple[i]`` reads it."""
    return all(u.op == "call_function" and u.target is operator.getitem and isinstance(u.args[1], int)
               for u in node.users)


def _materialize(x: fx.Node, env: dict[fx.Node, Term | Pieces]) -> Term:
    got = env[x]
    if not isinstance(got, Term):  # _only_indexed guarantees this never happens
        raise RuntimeError(f"node {x.name} produced pieces but is read whole")
    return got
