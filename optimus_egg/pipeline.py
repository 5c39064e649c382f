"""The pipeline: capture → FX → e-graph → saturate → extract → FX → clean-up, with a report.

``optimize`` never returns a wrong graph: the result is checked against the original's output
shapes and dtypes, and any failure inside the optimizer returns the original graph with one
warning (or raises, with ``strict=True`` or ``OPTIMUS_EGG_STRICT=1``). Where a stage finds that
the rewritten graph would not be worth it, or not what the caller sees of the original, it
raises :class:`Keep`: the graph is returned as written, with the reason in the report.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx as fx

from optimus_egg import bounds, cache, cleanup, draws, effects, fake_values, modes, rewrites, verify
from optimus_egg.egraph import EGraph, Frozen, Rows, rows
from optimus_egg.emit import Emitter
from optimus_egg.extract import Extraction, select
from optimus_egg.extract.cost import CostModel
from optimus_egg.extract.dag import Dag, Fact, class_facts
from optimus_egg.extract.profile import weights_for
from optimus_egg.frontend import Translation, translate
from optimus_egg.guards import refuse_others
from optimus_egg.ir import Term
from optimus_egg.logger import log, log_debug
from optimus_egg.nodes import static_int, tensors, val, value_in
from optimus_egg.options import Options
from optimus_egg.outputs import check_outputs, restride_outputs
from optimus_egg.post_grad import order_as_written
from optimus_egg.report import Costs, Report, UnchangedCosts


class OptimizerFallback(UserWarning):
    """The optimizer failed on a graph and left it as it was. (With the pipeline, which warns
    it, rather than the options: it is what the run reports, not what the caller asks for.)"""


#: Why a forward tie in a step with gradients keeps the graph (:func:`_settle_tie`).
TRAINING_TIE = "a forward tie whose backward would write as many pieces' gradients"


class Keep(Exception):
    """A stage keeps the graph as written, for ``reason`` (the report's ``kept_reason``; empty:
    nothing cheaper). Raised anywhere in a run, it ends the run with the input graph."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def capture(model: torch.nn.Module | fx.GraphModule, example_inputs: Sequence[Any]) -> fx.GraphModule:
    """A GraphModule with fake values on every node, callable like ``model``."""
    if isinstance(model, fx.GraphModule) and any(val(n) is not None for n in model.graph.nodes
                                                 if n.op == "placeholder"):
        return model
    if isinstance(model, fx.GraphModule):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        # get_attr nodes (parameters, buffers) read real tensors: the mode must take them
        FakeTensorProp(model, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*example_inputs)
        return model
    gm, _ = torch._dynamo.export(model, assume_static_by_default=True)(*example_inputs)
    return gm


def optimize(model: torch.nn.Module | fx.GraphModule, example_inputs: Sequence[Any] | torch.Tensor, **options: Any
             ) -> tuple[fx.GraphModule, Report]:
    """Return an equivalent GraphModule that runs eagerly, and what was done to it.

    Both are specialized to ``example_inputs`` (:mod:`optimus_egg.guards`): a graph that is not
    the model itself refuses other inputs. A tensor alone is the model's one argument, as
    ``torch.jit.trace`` takes it."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    opts = Options.from_kwargs(**options)
    gm = capture(model, example_inputs)
    new_gm, report = optimize_graph(gm, opts)
    if new_gm is not model:
        refuse_others(new_gm, example_inputs, gm.graph)
    return new_gm, report


def _strict_from_env() -> bool:
    return os.environ.get("OPTIMUS_EGG_STRICT", "") not in ("", "0")


def optimize_graph(gm: fx.GraphModule, options: Options | None = None, disjoint_outputs: bool = False
                   ) -> tuple[fx.GraphModule, Report]:
    """Optimize a graph whose nodes carry fake values (``val`` or ``example_value``).

    ``disjoint_outputs``: the outputs may become non-overlapping views of one tensor (a
    backward's gradients; see :func:`optimus_egg.outputs.keep_aliasing`)."""
    options = options or Options()
    report = Report()
    try:
        with _no_gc():
            new_gm = _optimize(gm, options, report, disjoint_outputs)
            if options.verify and new_gm is not gm:
                start = time.perf_counter()
                report.verified = verify.check(gm, new_gm, _fired_by_family(report, options), options.batch_random)
                report.seconds["verify"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - any failure falls back to the unoptimized graph
        if options.strict or _strict_from_env():
            raise
        report.fallback = f"{type(exc).__name__}: {exc}"
        report.verified = "failed" if isinstance(exc, verify.Mismatch) else report.verified
        # the figures describe the graph returned: a search may have priced one it then dropped
        report.kept, report.kept_reason = True, "the optimization failed"
        report.kernels_after, report.costs = report.kernels_before, UnchangedCosts(report.costs)
        warnings.warn(f"optimus_egg: optimization failed, using the unoptimized graph ({report.fallback})",
                      OptimizerFallback, stacklevel=2)
        log.warning("optimization failed, using the unoptimized graph (%s)", report.fallback)
        return gm, report
    # (a record is shown with the logger's name: the summary's own prefix would repeat it)
    log_debug("%s; %d FX nodes (%d opaque); %s", report.summary().removeprefix("optimus_egg: "), report.fx_nodes,
              report.opaque_nodes, report.timings())
    return new_gm, report


def _fired_by_family(report: Report, options: Options) -> str:
    """The rules that fired, those of modules of one's own first, each named with its module."""
    builtin = set(rewrites.all_family_names()) | {"analysis"}
    family = {r.name: f.name for f in rewrites.families(options.families) for r in f.rules}
    fired = sorted(report.rules_fired.items(), key=lambda kv: -kv[1])
    own = [f"{name} ({family[name]})×{n}" for name, n in fired if family.get(name, "analysis") not in builtin]
    rest = [f"{name}×{n}" for name, n in fired if family.get(name, "analysis") in builtin]
    if len(rest) > 8:  # (a model fires dozens)
        rest = [*rest[:8], f"{len(rest) - 8} more"]
    return "; ".join(filter(None, (", ".join(own), rest and "built-in " + ", ".join(rest)))) or "none"


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The optimizer allocates tens of thousands of small acyclic objects (terms, e-nodes): with
    the cyclic collector on, its passes over the whole heap (a model's is large) would dominate
    the translation."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Clock:
    """Adds the time since its last call to ``report.seconds[name]``, the run's phases."""

    def __init__(self, report: Report) -> None:
        self.report, self.last = report, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.report.seconds[name] = self.report.seconds.get(name, 0.0) + now - self.last
        self.last = now


def _optimize(gm: fx.GraphModule, options: Options, report: Report, disjoint_outputs: bool) -> fx.GraphModule:
    """``gm`` rewritten, or ``gm`` itself where a stage keeps it (:class:`Keep`): the figures
    then describe the graph returned, as many kernels after as before."""
    try:
        return _run(gm, options, report, disjoint_outputs)
    except Keep as keep:
        report.kept, report.kept_reason = True, keep.reason
        report.kernels_after = report.kernels_before
        return gm


def _run(gm: fx.GraphModule, options: Options, report: Report, disjoint_outputs: bool) -> fx.GraphModule:
    """The stages, in order: refusals, translation, search (or the cache's), emission, clean-up
    and the checks of what was emitted."""
    clock = _Clock(report)
    fake_values.alias_identity_dropouts(gm.graph)
    layout = next((n for n in gm.graph.nodes if effects.reads_layout(n)), None)
    if layout is not None:  # a rewrite keeps values, not strides: relu(x) for cat(relu(pieces of x)) is x's layout
        raise Keep(f"{layout.name} reads the memory layout of a computed tensor")
    switch = next((n for n in gm.graph.nodes if effects.switches_mode(n)), None)
    if switch is not None:
        return _around_mode_switches(gm, switch, options, report, disjoint_outputs)
    tr = translate(gm, batch_random=True) if options.batch_random else translate(gm)
    report.fx_nodes, report.opaque_nodes = tr.nodes, tr.opaque
    clock("translate")
    roots = [t for t in tr.outputs if isinstance(t, Term)]
    frozen, ex, names = _search_or_reuse(tr, roots, options, report, clock, disjoint_outputs)
    cheaper = _cheaper(report, gm)
    if cheaper is False:  # a rewrite that saves nothing gains nothing, and is a new graph for Inductor to fuse
        raise Keep("")

    classes = {t: frozen.refs[r] for t, r in names.items() if r in frozen.refs}
    emitter = Emitter(gm, tr, frozen, ex)
    emitted = emitter.emit([frozen.refs[names[t]] for t in roots],
                           frozen.refs[names[tr.effects]] if tr.effects is not None else None)
    clock("emit")
    leaves, copies = cleanup.clean(emitter, emitted, classes, disjoint_outputs)
    new_gm = emitter.module(leaves)
    if options.batch_random and not draws.consistent(emitter.done, emitter.node_of, tr.registry, new_gm.graph):
        # two dropouts written would draw for one element (draws.consistent): without batching
        log_debug("batched dropouts overlap; optimizing again without batch_random")
        return _optimize(gm, replace(options, batch_random=False), report, disjoint_outputs)
    emitter.mark_origins(classes)
    _order_as_written(new_gm.graph, gm.graph, sink=not disjoint_outputs,
                      check=tr.effects is not None and not disjoint_outputs)
    check_outputs(gm, new_gm)
    restrided = [] if disjoint_outputs else restride_outputs(gm, new_gm)
    clock("cleanup")

    if restrided is None:
        raise Keep("an output would be laid out differently")
    saved = bounds.copy_saved_inputs(gm, new_gm)
    if saved is None:
        raise Keep("the backward would save an input the caller may write, where it saved a copy")
    copies = [*copies, *restrided, *saved]  # every copy added since extraction
    if copies:
        # Outputs that eager returns as distinct tensors and that became views of one (each a
        # select of a fused op's result) are copied out, as are outputs laid out otherwise and
        # inputs autograd would save: kernels the extraction did not price. They count as any
        # kernel does: a copy of x for cat(split(x)) is one kernel as the cat is, and reads one
        # tensor where the cat reads each piece.
        device = select.input_device(gm.graph.find_nodes(op="placeholder"))
        report.kernels_after += sum(_copy_cost(n, options.cost_model, device) for n in copies)
        cheaper = _cheaper(report, gm, len(copies))
        if cheaper is False:
            raise Keep("the outputs would need copies")
    if cheaper is None:
        _settle_tie(gm, new_gm)
    if _grad_inputs(new_gm) != _grad_inputs(gm):
        # An input that requires grad and no longer reaches an output (b in cat([a, b])[:, :n])
        # would get a None gradient where eager autograd gives zeros: no graph emitted here can
        # give the zeros back without changing values.
        raise Keep("an input would lose its gradient")
    if options.memory_bound and bounds.saved_copies(new_gm) > bounds.saved_copies(gm):
        return _without(gm, options, report, disjoint_outputs, rewrites.BATCHING_FAMILIES,
                        "it would save copies for the backward")
    if (options.memory_bound and not disjoint_outputs and _batches(options)
            and bounds.restacked(new_gm) > bounds.restacked(gm)):
        # Whichever family made the copy: without batching, the bound is not checked again. A
        # backward's stacks of gradients for one bmm are what ``rewrite_backward`` decides.
        return _without(gm, options, report, disjoint_outputs, rewrites.BATCHING_FAMILIES,
                        "it would copy pieces of a result into a stack")
    if bounds.saved_outputs(new_gm) - bounds.saved_outputs(gm):
        # (no copy helps: AOTAutograd saves the copy, the one tensor of the value it returns)
        return _without(gm, options, report, disjoint_outputs, rewrites.POINTWISE_FAMILIES,
                        "the backward would save an output the caller may write")
    if bounds.pointwise_elements(new_gm) > bounds.pointwise_elements(gm):
        return _without(gm, options, report, disjoint_outputs, rewrites.POINTWISE_FAMILIES,
                        "pieces would be recomputed, each with a gradient")
    return new_gm


def _without(gm: fx.GraphModule, options: Options, report: Report, disjoint_outputs: bool,
             dropped: Sequence[str], reason: str) -> fx.GraphModule:
    """The graph optimized again without the families ``dropped``, or kept as written where none
    of them ran: the rewrite costs the step what the cost models do not price (``reason``,
    :mod:`optimus_egg.bounds`)."""
    names = rewrites.named(options.families)
    kept = rewrites.without(names, dropped)
    if not kept or len(kept) == len(names):  # nothing left, or none of them ran
        raise Keep(reason)
    log_debug(f"optimizing again without {', '.join(dropped)}: {reason}")
    new_gm = _optimize(gm, replace(options, families=kept), report, disjoint_outputs)
    report.dropped.update({n: reason for n in dropped if n in names})
    return new_gm


def _batches(options: Options) -> bool:
    return any(n in rewrites.BATCHING_FAMILIES for n in rewrites.named(options.families))


def _around_mode_switches(gm: fx.GraphModule, switch: fx.Node, options: Options, report: Report,
                          disjoint_outputs: bool) -> fx.GraphModule:
    """A graph that switches modes: the segments before and after its switches optimized each on
    its own (:mod:`optimus_egg.modes`). Rules and the emitter move calls freely: across a switch,
    one would compute under the other mode (``cat(no_grad(exp(a)), exp(b)) → exp(cat(a, b))``
    would give ``a`` its gradient)."""
    switches = f"the graph switches modes ({switch.target.__name__})"
    segments = modes.zone(gm)
    if segments is None or disjoint_outputs:
        raise Keep(switches)
    report.zone_nodes = len(segments[1])
    if options.batch_random and draws.reseeds(gm.graph):  # as for the whole graph
        options = replace(options, batch_random=False)
    new_gm = modes.optimize_around(gm, segments, lambda sub: _segment(sub, options, report))
    if report.kept or not report.segments:
        raise Keep(f"{switches}; {report.kept_reason or 'nothing cheaper outside them'}")
    return new_gm


def _segment(gm: fx.GraphModule, options: Options, report: Report) -> fx.GraphModule:
    """One segment of a graph that switches modes, its report added to ``report``."""
    part = Report()
    new_gm = _optimize(gm, options, part, False)
    report.add(part)
    return new_gm


def _order_as_written(graph: fx.Graph, original: fx.Graph, sink: bool, check: bool) -> None:
    """``graph`` in the program's order (:func:`order_as_written`; ``sink``: stacks of weights
    put back above their readers), which Inductor fuses along; emission writes each output's
    operands depth first (T5's decoder before its encoder). ``check`` (a forward graph that
    writes): only where the reorder keeps every effect where it was (:func:`effects.order_kept`);
    else as emitted."""
    def calls() -> list[fx.Node]:
        return [n for n in graph.nodes if n.op not in ("placeholder", "output")]

    emitted = calls()
    order_as_written(graph, original)
    if sink:
        cleanup.sink_input_stacks(graph)
    if check and not effects.order_kept(emitted, calls()):
        output = next(iter(graph.find_nodes(op="output")))
        for n in emitted:
            output.prepend(n)


def _cheaper(report: Report, gm: fx.GraphModule, copies: int = 0) -> bool | None:
    """Cheaper by the cost model's figure; on a tie, in a step with gradients None: the backward
    settles it (:func:`_settle_tie`), and it is the larger part of the step; else
    :func:`_tie_break`."""
    if abs(report.kernels_after - report.kernels_before) > 1e-9:
        return report.kernels_after < report.kernels_before
    return None if _grad_inputs(gm) else _tie_break(report, copies)


def _settle_tie(gm: fx.GraphModule, new_gm: fx.GraphModule) -> None:
    """A forward tie in a step with gradients stands where the backward writes pieces'
    gradients in fewer loops (:func:`bounds.grad_pieces`). The forward's figure cannot see the
    backward: a split glued back whole beside a slice leaves one slice's gradient where the
    backward wrote every piece's into a cat, but ``neg(cat([b, a]))`` for ``cat([b.neg(),
    a.neg()])`` of a split writes as many pieces, one loop later, and ``split(x * y)`` for
    products of slices of ``x`` and ``y`` writes a cat where Inductor summed the slices'
    gradients in the product's loop."""
    if bounds.grad_pieces(new_gm) >= bounds.grad_pieces(gm):
        raise Keep(TRAINING_TIE)


def _tie_break(report: Report, copies: int) -> bool:
    """Fewer eager launches under ``inductor`` (``copies``: the copies added since extraction;
    what Inductor does not fuse, a GPU launches); then fewer cat inputs. No cost model prices cat
    inputs in kernels (a cat is one launch on a GPU), but Inductor's CPU backend writes each one
    with a loop of its own, and a piece glued back whole reads as one contiguous copy."""
    before = after = 0.0  # (under another model the copies are in its own figure, which tied)
    if report.cost_model == "inductor":
        before, after = report.costs["eager"]
        after += copies
    if abs(after - before) > 1e-9:
        return after < before
    return report.cat_inputs[1] < report.cat_inputs[0]


def _search_or_reuse(tr: Translation, roots: list[Term], options: Options, report: Report,
                     clock: Callable[[str], None], disjoint_outputs: bool
                     ) -> tuple[Frozen, Extraction, dict[Term, int]]:
    """The e-graph and extraction of ``tr``: searched, or the cache's for an identical graph
    (the report's search figures restored with it). Returns them with each term's row id."""
    extra = [tr.effects] if tr.effects is not None else []
    device = select.device_of(tr)
    weights = weights_for(options.cost_profile, device) if options.cost_profile else None
    fams = rewrites.families(options.families)
    dag = rows(roots + extra, tr.facts, [] if disjoint_outputs else roots, [f.written for f in fams if f.written])
    names = dag.ids
    key = cache.key(tr, dag, (options, weights, [r.egglog() for f in fams for r in f.rules], disjoint_outputs),
                    roots + extra)
    hit = cache.get(key)
    models = {name: select.cost_model(name, tr.registry, weights, device) for name in select.COST_MODELS}
    if hit is None:
        frozen, ex = _search(tr, fams, dag, roots + extra, options, models, report, clock)
        cache.put(key, cache.Entry.of(frozen, ex, {k: copy.deepcopy(getattr(report, k)) for k in _SEARCH}))
    else:
        frozen, ex = hit.frozen(), hit.extraction
        for k, v in hit.report.items():
            setattr(report, k, copy.deepcopy(v))
        report.costs = Costs(models, functools.partial(_dags, tr, frozen, ex, names, roots + extra))
        report.cache_hit = True
        clock("cache")
    return frozen, ex, names


#: The report fields the search fills (and the cache restores).
_SEARCH = ("kernels_before", "kernels_after", "cost_model", "cat_inputs", "extraction", "enodes", "eclasses",
           "iterations", "stop_reason", "rules_fired", "extractor")


def _search(tr: Translation, fams: list[rewrites.Family], dag: Rows, roots: list[Term], options: Options,
            models: dict[str, CostModel], report: Report, phase: Callable[[str], None]) -> tuple[Frozen, Extraction]:
    """Build, saturate, extract ``roots`` and price the result: the e-graph, the extraction and
    the report's figures (``_SEARCH``) are what the cache saves."""
    egraph = EGraph(fams)
    egraph.add(dag, options.budget.max_seconds)  # the seed stage counts in the time limit
    phase("build")
    with ThreadPoolExecutor(1) as pool:  # egglog lets go of the GIL as it runs: the graph as written meanwhile
        translated = pool.submit(select.translated, tr)
        stats = egraph.saturate(options.budget)
    before = translated.result()
    report.iterations, report.stop_reason = stats.iterations, stats.stop_reason
    derived = {r.name for f in fams for r in f.rules if r.stage == "analysis"}  # facts, not rewrites
    report.rules_fired = {k: v for k, v in stats.rule_matches.items() if v and k not in derived}
    phase("saturate")
    frozen = egraph.freeze()
    report.enodes, report.eclasses = len(frozen.nodes), len(frozen.classes)
    classes, facts = _classes(tr, frozen, dag.ids, roots)
    ex, report.extraction = select.extract(frozen, classes, models[options.cost_model], facts, options.extractor,
                                           options.ilp_seconds, tr.registry)
    report.extractor = ex.method
    phase("extract")
    after = select.extracted_dag(frozen, ex, classes, facts)
    report.costs = Costs(models, lambda: (before, after))
    report.cost_model = options.cost_model
    report.kernels_before, report.kernels_after = report.costs[options.cost_model]
    report.cat_inputs = (_cat_inputs(before), _cat_inputs(after))
    phase("cost")
    return frozen, ex


def _dags(tr: Translation, frozen: Frozen, ex: Extraction, names: dict[Term, int], roots: list[Term]
          ) -> tuple[Dag, Dag]:
    """The graph as translated and as extracted, as :func:`_search` prices them: the other cost
    models' figures of a cached graph, figured when read (an entry keeps no terms,
    :mod:`optimus_egg.cache`)."""
    classes, facts = _classes(tr, frozen, names, roots)
    return select.translated(tr), select.extracted_dag(frozen, ex, classes, facts)


def _classes(tr: Translation, frozen: Frozen, names: dict[Term, int], roots: list[Term]
             ) -> tuple[list[int], dict[int, Fact]]:
    """The roots' e-classes, and the shape/dtype facts of every class."""
    return [frozen.refs[names[t]] for t in roots], class_facts(frozen, select.seed_facts(tr, names, frozen))


def _cat_inputs(dag: Dag) -> int:
    return sum(1 for t in dag.order if t.op == "Cons" and t.args[2] >= 0)  # argument lists have dim -1


def _copy_cost(node: fx.Node, cost_model: str, device: str) -> float:
    """A copy under ``cost_model``: one kernel, or (``memory``) its bytes read and written. A
    copy written as a cat (:func:`bounds.copy_saved_inputs`) is, under ``inductor`` on a CPU,
    a loop for each tensor it reads, as any cat is there."""
    v = val(node)
    if cost_model == "memory":
        n = static_int(v.numel()) if isinstance(v, torch.Tensor) else None
        return 2.0 * n * v.element_size() if n is not None else 0.0
    if cost_model == "inductor" and device == "cpu" and node.target is torch.cat:
        return float(len(node.args[0]))
    return 1.0


def _grad_inputs(gm: fx.GraphModule) -> set[tuple[str, Any]]:
    """The inputs and attributes (op, target) that reach an output requiring grad through nodes whose
    values require grad: the inputs autograd gives a gradient (zeros when every path is cut
    later), where unreached ones get None."""
    def needs_grad(node: fx.Node) -> bool:
        return any(t.requires_grad for t in tensors(value_in(gm, node)))

    output = next(iter(gm.graph.find_nodes(op="output")))
    stack = [n for n in output.all_input_nodes if needs_grad(n)]
    seen = set(stack)
    while stack:
        for arg in stack.pop().all_input_nodes:
            if arg not in seen and needs_grad(arg):
                seen.add(arg)
                stack.append(arg)
    return {(n.op, n.target) for n in seen if n.op in ("placeholder", "get_attr")}
