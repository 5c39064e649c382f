"""The pipeline: FX → e-graph → saturate → extract → FX, with a report.

``optimize`` never returns a wrong graph: the result is checked against the original's output
shapes and dtypes, and any failure inside the optimizer returns the original graph with one
warning (or raises, with ``strict=True`` or ``OPTIMUS_EGG_STRICT=1``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import numbers
import operator
import os
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from optimus_egg import cache, draws, fake_values, modes, optable, rewrites, verify
from optimus_egg.egraph import Budget, EGraph, Frozen, Rows, check_rules, rows
from optimus_egg.emit import Emitter
from optimus_egg.extract import Extraction, select
from optimus_egg.extract.cost import CostModel
from optimus_egg.extract.dag import Dag, Fact, class_facts
from optimus_egg.extract.profile import load_profile, weights_for
from optimus_egg.frontend import Translation, translate
from optimus_egg.ir import Term
from optimus_egg.logger import log, log_debug
from optimus_egg.optable import static_int, val
from optimus_egg.post_grad import order_as_written


class OptimizerFallback(UserWarning):
    """The optimizer failed on a graph and left it as it was."""


@dataclass(frozen=True)
class Options:
    """What ``optimize`` and the backend accept. Defaults are the documented ones."""

    families: tuple[str, ...] | None = None  # rule families; None = all
    budget: Budget = field(default_factory=Budget)
    strict: bool = False  # raise instead of falling back
    cost_model: str = "eager"  # eager | inductor | memory (optimus_egg.extract.cost)
    extractor: str = "greedy"  # greedy | ilp | compare (optimus_egg.extract.select)
    ilp_seconds: float = 10.0  # the ILP's time limit; then the best found, or greedy's result
    cost_profile: str | None = None  # weights fitted by `optimus-egg tune` (a JSON file)
    batch_random: bool = False  # dropouts that draw may be batched (optimus_egg.draws): not eager's mask
    rewrite_backward: bool | str = "auto"  # the backward too (backend.BackwardPass); auto: batched on a GPU only
    verify: bool = False  # run the rewritten graph against the original on random inputs (optimus_egg.verify)

    @classmethod
    def from_kwargs(cls, **kw: Any) -> "Options":
        budget_keys = {"max_iterations", "max_enodes", "max_seconds"}
        valid = {"families", "strict", "cost_model", "extractor", "ilp_seconds", "cost_profile", "batch_random",
                 "rewrite_backward", "verify", *budget_keys}
        unknown = set(kw) - valid
        if unknown:
            raise TypeError(f"unknown optimus_egg option(s) {sorted(unknown)}; valid: {sorted(valid)}")
        fams = kw.get("families")
        if fams is not None:
            fams = (fams,) if isinstance(fams, (str, os.PathLike)) else tuple(fams)
            fams = tuple(os.fspath(name) if isinstance(name, os.PathLike) else name for name in fams)
            for name in fams:
                if not isinstance(name, str):
                    raise ValueError(f"option families takes names, modules or .py files, got {name!r}")
            loaded = rewrites.families(fams)  # raises with the valid names, or on clashing rule names
            if not set(fams) <= {"analysis", *rewrites.all_family_names()}:
                check_rules(loaded)  # a module of one's own: egglog errors name its rule, here
        budget = Budget(**{k: _amount(k, kw[k], integer=k != "max_seconds") for k in budget_keys if k in kw})
        flags = {name: kw.get(name, default)
                 for name, default in (("strict", False), ("batch_random", False), ("rewrite_backward", "auto"),
                                       ("verify", False))}
        for name, flag in flags.items():
            allowed = "True, False or 'auto'" if name == "rewrite_backward" else "True or False"
            if not (isinstance(flag, bool) or ("auto" in allowed and flag == "auto")):  # bool("false") is True
                raise ValueError(f"option {name} must be {allowed}, got {flag!r}")
        cost_model = select.check_name("cost_model", kw.get("cost_model", "eager"), select.COST_MODELS)
        extractor = select.check_name("extractor", kw.get("extractor", "greedy"), select.EXTRACTORS)
        profile = kw.get("cost_profile")
        if profile is not None:
            profile = str(profile)
            load_profile(profile)  # raises on a missing or malformed profile
        return cls(fams, budget, flags["strict"], cost_model, extractor,
                   float(_amount("ilp_seconds", kw.get("ilp_seconds", 10.0), integer=False)), profile,
                   flags["batch_random"], flags["rewrite_backward"], flags["verify"])


def _amount(name: str, value: Any, integer: bool) -> Any:
    """A budget or time limit: a non-negative integer, or (``integer=False``) number. Anything
    else (a string from ``--option max_iterations=abc``, NaN) failed inside every compile, each
    graph falling back with a warning of its own, or (NaN seconds) never stopped the clock."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not value >= 0:
        raise ValueError(f"option {name} must be a non-negative {'integer' if integer else 'number'}, got {value!r}")
    return value


class Costs(Mapping[str, tuple[float, float]]):
    """Every cost model's (before, after), each model's figured on its first read. The search
    needs only the chosen model's; the others are for whoever reads them (``explain``, the
    benchmarks), and figuring them on every compile cost 2/3 of the cost phase (the Inductor
    simulation of the graph as translated: ~15 of ~23 ms on the 100-block chain). The graphs
    come from ``dags`` at the first read (a cached graph's are made again only if one is read)
    and are let go once every model is read. Read-only, so a copy is the object itself."""

    def __init__(self, models: Mapping[str, CostModel], dags: Callable[[], tuple[Dag, Dag]]) -> None:
        self._names = tuple(models)
        self._models: dict[str, CostModel] = dict(models)
        self._dags: Callable[[], tuple[Dag, Dag]] | tuple[Dag, Dag] | None = dags  # the graphs, once made
        self._figures: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> tuple[float, float]:
        with self._lock:
            if name not in self._figures:
                model = self._models[name]  # KeyError for a name that is not a model
                assert self._dags is not None  # dropped only once every figure is in
                if callable(self._dags):
                    self._dags = self._dags()
                before, after = self._dags
                self._figures[name] = (model.total(before), model.total(after))
                if len(self._figures) == len(self._names):
                    self._models, self._dags = {}, None
            return self._figures[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __deepcopy__(self, memo: dict[int, Any]) -> "Costs":
        return self

    def __repr__(self) -> str:
        return repr(dict(self))


class _Unchanged(Mapping[str, tuple[float, float]]):
    """A fallback's figures: every cost model's "after" is its "before"."""

    def __init__(self, costs: Mapping[str, tuple[float, float]]) -> None:
        self._costs = costs

    def __getitem__(self, name: str) -> tuple[float, float]:
        before = self._costs[name][0]
        return (before, before)

    def __iter__(self) -> Iterator[str]:
        return iter(self._costs)

    def __len__(self) -> int:
        return len(self._costs)

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass
class Report:
    kernels_before: float = 0.0  # kernels predicted by the chosen cost model
    kernels_after: float = 0.0
    cost_model: str = ""
    costs: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # every cost model: (before, after)
    cat_inputs: tuple[int, int] = (0, 0)  # tensors that cats and stacks read, before and after
    extraction: dict[str, Any] = field(default_factory=dict)  # per extractor: cost, seconds (ILP: status)
    cache_hit: bool = False  # the search was served from the in-process cache (no saturation)
    enodes: int = 0
    eclasses: int = 0
    iterations: int = 0
    stop_reason: str = ""
    rules_fired: dict[str, int] = field(default_factory=dict)  # matches per rewrite rule
    seconds: dict[str, float] = field(default_factory=dict)  # per phase
    fx_nodes: int = 0
    opaque_nodes: int = 0
    extractor: str = ""
    fallback: str | None = None  # why the graph was left unchanged
    verified: str = ""  # with verify=True: "passed", "failed", or why nothing was compared ("skipped: ...")
    kept: bool = False  # the input graph is returned as it was (kept_reason says why)
    kept_reason: str = ""
    zone_nodes: int = 0  # calls kept as written between mode switches, in no figure above
    segments: int = 0  # graphs optimized around such calls; their figures are added up here

    def add(self, part: "Report") -> None:
        """Add the figures of a segment optimized on its own (see ``zone_nodes``)."""
        first = not self.segments
        self.segments += 1
        for name in ("kernels_before", "kernels_after", "enodes", "eclasses", "fx_nodes", "opaque_nodes"):
            setattr(self, name, getattr(self, name) + getattr(part, name))
        self.costs = {m: tuple(a + b for a, b in zip(self.costs.get(m, (0.0, 0.0)), part.costs.get(m, (0.0, 0.0))))
                      for m in {*self.costs, *part.costs}}
        self.cat_inputs = tuple(a + b for a, b in zip(self.cat_inputs, part.cat_inputs))
        self.iterations = max(self.iterations, part.iterations)
        self.stop_reason = "; ".join(dict.fromkeys(r for r in (self.stop_reason, part.stop_reason) if r))
        for k, v in part.rules_fired.items():
            self.rules_fired[k] = self.rules_fired.get(k, 0) + v
        for k, v in part.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.cost_model, self.extractor = part.cost_model or self.cost_model, part.extractor or self.extractor
        self.cache_hit = part.cache_hit if first else self.cache_hit and part.cache_hit
        self.kept = part.kept if first else self.kept and part.kept
        self.kept_reason = "; ".join(r for r in (self.kept_reason, part.kept_reason) if r) if self.kept else ""

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def timings(self) -> str:
        return ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in self.seconds.items())

    def summary(self) -> str:
        if self.fallback:
            return f"optimus_egg: left the graph unchanged ({self.fallback})"
        fired = ", ".join(f"{k}×{v}" for k, v in sorted(self.rules_fired.items(), key=lambda kv: -kv[1]))
        kept = f" ({self.kept_reason or 'nothing cheaper'}: graph kept as it was)" if self.kept else ""
        if self.zone_nodes:
            kept += (f" (around {self.zone_nodes} calls kept as written between mode switches, not counted;"
                     f" {self.segments} graphs optimized)")
        return (f"optimus_egg: kernels {self.kernels_before:g} → {self.kernels_after:g}{kept}; "
                f"e-graph {self.enodes} nodes / {self.eclasses} classes after {self.iterations} "
                f"iterations ({self.stop_reason}); {self.total_seconds * 1e3:.0f} ms; rules: {fired or 'none'}")


def _strict_from_env() -> bool:
    return os.environ.get("OPTIMUS_EGG_STRICT", "") not in ("", "0")


def optimize_graph(gm: fx.GraphModule, options: Options | None = None, disjoint_outputs: bool = False
                   ) -> tuple[fx.GraphModule, Report]:
    """Optimize a graph whose nodes carry fake values (``val`` or ``example_value``).

    ``disjoint_outputs``: the outputs may become non-overlapping views of one tensor (a
    backward's gradients; see ``Emitter.keep_aliasing``)."""
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
        report.kernels_after, report.costs = report.kernels_before, _Unchanged(report.costs)
        warnings.warn(f"optimus_egg: optimization failed, using the unoptimized graph ({report.fallback})",
                      OptimizerFallback, stacklevel=2)
        log.warning("optimization failed, using the unoptimized graph (%s)", report.fallback)
        return gm, report
    # (a record is shown with the logger's name: the summary's own prefix printed it twice)
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
    """The optimizer allocates tens of thousands of small acyclic objects (terms, e-nodes); with
    the cyclic collector on, its passes over the whole heap (a model's is large) took 3/4 of the
    translation time at 600 blocks."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _optimize(gm: fx.GraphModule, options: Options, report: Report, disjoint_outputs: bool) -> fx.GraphModule:
    clock = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[name] = report.seconds.get(name, 0.0) + now - clock
        clock = now

    fake_values.alias_identity_dropouts(gm.graph)
    layout = next((n for n in gm.graph.nodes if optable.reads_layout(n)), None)
    if layout is not None:
        # A rewrite keeps values, not strides: relu(x) for cat(relu(pieces of x)) is x's layout
        report.kept, report.kept_reason = True, f"{layout.name} reads the memory layout of a computed tensor"
        return gm
    switch = next((n for n in gm.graph.nodes if optable.switches_mode(n)), None)
    if switch is not None:
        # Rules and the emitter move calls freely: across the switch, one would compute under
        # the other mode (cat(no_grad(exp(a)), exp(b)) -> exp(cat(a, b)) gave a its gradient).
        segments = modes.zone(gm)
        if segments is None or disjoint_outputs:
            report.kept, report.kept_reason = True, f"the graph switches modes ({switch.target.__name__})"
            return gm
        report.zone_nodes = len(segments[1])
        if options.batch_random and draws.reseeds(gm.graph):  # as for the whole graph
            options = replace(options, batch_random=False)
        new_gm = modes.optimize_around(gm, segments, lambda sub: _segment(sub, options, report))
        if report.kept or not report.segments:
            report.kept, report.kept_reason = True, (f"the graph switches modes ({switch.target.__name__}); "
                                                     f"{report.kept_reason or 'nothing cheaper outside them'}")
            return gm
        return new_gm
    tr = translate(gm, batch_random=True) if options.batch_random else translate(gm)
    report.fx_nodes, report.opaque_nodes = tr.nodes, tr.opaque
    phase("translate")
    roots = [t for t in tr.outputs if isinstance(t, Term)]
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
        frozen, ex = _search(tr, fams, dag, roots + extra, options, models, report, phase)
        cache.put(key, cache.Entry.of(frozen, ex, {k: copy.deepcopy(getattr(report, k)) for k in _SEARCH}))
    else:
        frozen, ex = hit.frozen(), hit.extraction
        for k, v in hit.report.items():
            setattr(report, k, copy.deepcopy(v))
        report.costs = Costs(models, functools.partial(_dags, tr, frozen, ex, names, roots + extra))
        report.cache_hit = True
        phase("cache")
    cheaper = _cheaper(report, gm)
    if cheaper is False:
        # A rewrite that saves nothing gains nothing, and a re-emitted graph is a new graph for
        # Inductor to fuse. (The 45 vs 39 launches per training step once measured here on an
        # untouched chain came from the parameter metadata the emitter used to drop, see
        # emit._DYNAMO_ATTRS.)
        report.kept, report.kernels_after = True, report.kernels_before
        return gm
    out_classes = [frozen.refs[names[t]] for t in roots]
    effect_class = frozen.refs[names[tr.effects]] if tr.effects is not None else None
    classes = {t: frozen.refs[r] for t, r in names.items() if r in frozen.refs}
    emitter = Emitter(gm, tr, frozen, ex, disjoint_outputs)
    new_gm = emitter.run(out_classes, effect_class, classes)
    if options.batch_random and not draws.consistent(emitter.done, emitter.node_of, tr.registry, new_gm.graph):
        # two dropouts written would draw for one element (draws.consistent): without batching
        log_debug("batched dropouts overlap; optimizing again without batch_random")
        return _optimize(gm, replace(options, batch_random=False), report, disjoint_outputs)
    emitter.mark_origins(classes)
    if disjoint_outputs:
        order_as_written(new_gm.graph, gm.graph)
    _check_outputs(gm, new_gm)
    restrided = [] if disjoint_outputs else _restride_outputs(gm, new_gm)
    phase("emit")
    if restrided is None:
        report.kept, report.kernels_after = True, report.kernels_before
        report.kept_reason = "an output would be laid out differently"
        return gm
    if emitter.copies or restrided:
        # Outputs that eager returns as distinct tensors and that became views of one (each a
        # select of a fused op's result) are copied out, as are outputs laid out otherwise:
        # kernels the extraction did not price.
        report.kernels_after += sum(_copy_cost(n, options.cost_model) for n in [*emitter.copies, *restrided])
        if report.kernels_after >= report.kernels_before:
            report.kept, report.kernels_after = True, report.kernels_before
            report.kept_reason = "the outputs would need copies"
            return gm
    if _grad_inputs(new_gm) != _grad_inputs(gm):
        # An input that requires grad and no longer reaches an output (b in cat([a, b])[:, :n])
        # would get a None gradient where eager autograd gives zeros: no graph emitted here can
        # give the zeros back without changing values, so the original is kept.
        report.kept, report.kernels_after = True, report.kernels_before
        report.kept_reason = "an input would lose its gradient"
        return gm
    if cheaper is None and _loose_slices(new_gm) > _loose_slices(gm):
        report.kept, report.kernels_after = True, report.kernels_before
        report.kept_reason = "slices would cost backward kernels"
        return gm
    return new_gm


def _segment(gm: fx.GraphModule, options: Options, report: Report) -> fx.GraphModule:
    """One segment of a graph that switches modes (:mod:`optimus_egg.modes`), its report added
    to ``report``."""
    part = Report()
    new_gm = _optimize(gm, options, part, False)
    report.add(part)
    return new_gm


def _cheaper(report: Report, gm: fx.GraphModule) -> bool | None:
    """Fewer kernels, or as many reading fewer cat inputs. No cost model prices cat inputs in
    kernels (a cat is one launch on a GPU), but Inductor's CPU backend writes each one with a
    loop of its own, and a piece glued back whole reads as one contiguous copy. With gradients
    that tie is None, cheaper only if the emitted graph slices no more tensors outside splits
    (:func:`_loose_slices`): a slice's gradient is a zero-filled copy where a split's is one cat
    (family split_cat_to_slices, 15 → 18 eager launches per training step with three slices;
    15 with them cut into one split, ``Emitter.cut_cat_slices``)."""
    if abs(report.kernels_after - report.kernels_before) > 1e-9:
        return report.kernels_after < report.kernels_before
    if report.cat_inputs[1] >= report.cat_inputs[0]:
        return False
    return None if _grad_inputs(gm) else True


#: Slicing calls: on a tensor (not a split's tuple of pieces) each is a view whose gradient is a
#: zero-filled tensor with the slice's gradient copied in.
_SLICING = frozenset({torch.narrow, torch.select, operator.getitem, "narrow", "select", "__getitem__"})


def _loose_slices(gm: fx.GraphModule) -> int:
    """Slices and selects of tensors that require grad, other than a split's or unbind's pieces."""
    return sum(1 for n in gm.graph.nodes
               if n.op in ("call_function", "call_method") and n.target in _SLICING and n.args
               and isinstance(v := val(n.args[0]), torch.Tensor) and v.requires_grad)


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


def _copy_cost(node: fx.Node, cost_model: str) -> float:
    """A copy under ``cost_model``: one kernel, or (``memory``) its bytes read and written."""
    v = val(node)
    if cost_model != "memory":
        return 1.0
    n = static_int(v.numel()) if isinstance(v, torch.Tensor) else None
    return 2.0 * n * v.element_size() if n is not None else 0.0


def _grad_inputs(gm: fx.GraphModule) -> set[tuple[str, Any]]:
    """The inputs and attributes (op, target) that reach an output requiring grad through nodes whose
    values require grad: the inputs autograd gives a gradient (zeros when every path is cut
    later), where unreached ones get None."""
    def needs_grad(node: fx.Node) -> bool:
        value = operator.attrgetter(node.target)(gm) if node.op == "get_attr" else val(node)
        if isinstance(value, torch.Tensor):  # most nodes: no pytree walk
            return value.requires_grad
        return any(isinstance(t, torch.Tensor) and t.requires_grad for t in torch.utils._pytree.tree_leaves(value))

    output = next(iter(gm.graph.find_nodes(op="output")))
    stack = [n for n in output.all_input_nodes if needs_grad(n)]
    seen = set(stack)
    while stack:
        for arg in stack.pop().all_input_nodes:
            if arg not in seen and needs_grad(arg):
                seen.add(arg)
                stack.append(arg)
    return {(n.op, n.target) for n in seen if n.op in ("placeholder", "get_attr")}


def _check_outputs(old: fx.GraphModule, new: fx.GraphModule) -> None:
    """Same output structure, shapes and dtypes, or the rewrite is rejected."""
    o_old, o_new = (list(g.graph.nodes)[-1].args[0] for g in (old, new))
    leaves_old, spec_old = torch.utils._pytree.tree_flatten(o_old)
    leaves_new, spec_new = torch.utils._pytree.tree_flatten(o_new)
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
    once a guard bounds ``s//2 < 2`` (fuzzer seed 1818, a recompile with dynamic shapes)."""
    return str(x) == str(y) or statically_known_true(x == y)


def _restride_outputs(old: fx.GraphModule, new: fx.GraphModule) -> list[fx.Node] | None:
    """Outputs laid out as the original's (eager's): returns the copies written, or None where
    one cannot be. ``cat([p.relu() for p in x.split(2, 1)], 1)`` is contiguous whatever ``x``'s
    layout, ``x.relu()`` has ``x``'s; a caller's ``out.view(-1)`` then raised. A fresh output
    that eager lays out contiguously is made contiguous (one copy); any other change of layout
    (strides of dims of size 1 aside), or one of an output that shares its storage with an input
    or another output (a split's pieces included: ``v = cat([x[:, 1:2]]); return v, v.split(1)``
    returned a copy of ``v`` and pieces of the original; seed 505), is refused."""
    inputs = {optable.storage_key(val(n)) for n in old.graph.nodes if n.op in ("placeholder", "get_attr")}
    out_old, out_new = (next(iter(g.graph.find_nodes(op="output"))) for g in (old, new))
    leaves_old = torch.utils._pytree.tree_leaves(out_old.args[0])
    leaves_new, spec = torch.utils._pytree.tree_flatten(out_new.args[0])
    keys = [{optable.storage_key(t) for t in torch.utils._pytree.tree_leaves(val(n))} - {None} for n in leaves_new]
    copies: list[fx.Node] = []
    for i, (a, b) in enumerate(zip(leaves_old, leaves_new)):
        va, vb = val(a), val(b)
        if isinstance(va, (tuple, list)):  # a split's pieces, returned as they are: no copy fits
            pairs = list(zip(va, vb)) if isinstance(vb, (tuple, list)) and len(vb) == len(va) else None
            if pairs is None or any(isinstance(x, torch.Tensor) and _layout(x) != _layout(y) for x, y in pairs):
                return None
            continue
        if not isinstance(va, torch.Tensor) or _layout(va) == _layout(vb):
            continue
        shared = keys[i] & set().union(inputs, *(k for j, k in enumerate(keys) if j != i))
        if _layout(va) != _layout(va.new_empty(va.shape)) or shared:
            return None
        with new.graph.inserting_before(out_new):
            leaves_new[i] = new.graph.call_method("contiguous", (b,))
        fake_values.fake_run(leaves_new[i])
        copies.append(leaves_new[i])
    if copies:
        out_new.args = (torch.utils._pytree.tree_unflatten(leaves_new, spec),)
        new.recompile()
    return copies


def _layout(v: torch.Tensor) -> Any:
    """A tensor's strides where they matter: along its dims of more than one element (none
    for a tensor without elements). Symbolic ones as written."""
    if static_int(v.numel()) == 0:
        return ()
    return tuple((str(n), str(s)) for n, s in zip(v.shape, v.stride()) if static_int(n) != 1)


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

    Both are specialized to ``example_inputs``: capture traces sizes into constants and bakes
    in the values of non-tensor arguments, and the rules fire on the shapes and dtypes seen. A
    graph that is not the model itself therefore refuses other inputs (a different batch size
    once returned ``reshape(x, 2, -1)`` of an 8-row input, silently). A tensor alone is the
    model's one argument, as ``torch.jit.trace`` takes it (its rows were the arguments)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    opts = Options.from_kwargs(**options)
    gm = capture(model, example_inputs)
    new_gm, report = optimize_graph(gm, opts)
    if new_gm is not model:
        # (a graph that switches grad mode sets it back to the mode it was captured in, not the caller's)
        grad = torch.is_grad_enabled() if any(optable.switches_mode(n) for n in new_gm.graph.nodes) else None
        _refuse_others(new_gm, (*_specialized(example_inputs, gm.graph), grad))
    return new_gm, report


def _refuse_others(gm: fx.GraphModule, expected: tuple[Any, list[Any], bool | None]) -> None:
    """``gm`` refuses arguments other than ``expected`` (and, where it switches grad mode, a
    grad mode other than the one it was captured in), and so do its deep copies: a
    GraphModule's deepcopy drops forward hooks (one ``copy.deepcopy(gm)`` silently took any
    shape again), but runs its deepcopy hooks, which are copied along."""
    gm.register_forward_pre_hook(functools.partial(_check_inputs, expected))
    if hasattr(gm, "_register_deepcopy_hook"):  # torch >= 2.5
        gm._register_deepcopy_hook(functools.partial(_refuse_again, expected))


def _refuse_again(expected: tuple[Any, list[Any], bool | None], copy: fx.GraphModule) -> None:
    copy.register_forward_pre_hook(functools.partial(_check_inputs, expected))


@dataclass(frozen=True)
class _TensorArg:
    shape: tuple[int | None, ...]  # None: a symbolic size of the graph's, any
    dtype: torch.dtype
    device: torch.device

    def admits(self, other: Any) -> bool:
        return (isinstance(other, _TensorArg) and len(self.shape) == len(other.shape)
                and all(n is None or n == m for n, m in zip(self.shape, other.shape))
                and (self.dtype, self.device) == (other.dtype, other.device))

    def __str__(self) -> str:
        return f"a {self.dtype} tensor of shape [{', '.join('any' if n is None else str(n) for n in self.shape)}] on {self.device}"


_ANY = object()  # a symbolic scalar of the graph's: any value


def _specialized(inputs: Sequence[Any], graph: fx.Graph | None = None) -> tuple[Any, list[Any]]:
    """What a graph optimized for ``inputs`` assumes of its arguments: their structure, each
    tensor's shape, dtype and device, each other value; except the sizes and scalars
    that ``graph``'s placeholders (one per argument, where it has them) hold symbolic."""
    leaves, spec = torch.utils._pytree.tree_flatten(list(inputs))
    holders = [n for n in graph.nodes if n.op == "placeholder"] if graph is not None else []
    vals = [val(n) for n in holders] if len(holders) == len(leaves) else [None] * len(leaves)
    out: list[Any] = []
    for x, v in zip(leaves, vals):
        if isinstance(x, torch.Tensor):
            sizes = v.shape if isinstance(v, torch.Tensor) and v.dim() == x.dim() else x.shape
            shape = tuple(None if static_int(s) is None else n for n, s in zip(x.shape, sizes))
            out.append(_TensorArg(shape, x.dtype, x.device))
        else:
            out.append(_ANY if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) else x)
    return spec, out


def _check_inputs(expected: tuple[Any, list[Any], bool | None], module: torch.nn.Module, args: tuple[Any, ...]
                  ) -> None:
    (spec, want, grad), (got_spec, got) = expected, _specialized(args)
    if grad is not None and torch.is_grad_enabled() != grad:
        # (its _set_grad_enabled(True) after a no_grad region left grad mode on in the caller's no_grad)
        raise ValueError(f"optimus_egg: this graph switches grad mode and was optimized with grad mode "
                         f"{'on' if grad else 'off'}; it would leave grad mode {'on' if grad else 'off'} here: "
                         f"optimize it again in this mode")
    if got_spec != spec:
        raise ValueError(f"optimus_egg: this graph was optimized for arguments structured as {spec}, got "
                         f"{got_spec}: optimize it again for these")
    for i, (w, g) in enumerate(zip(want, got)):
        if not (w is _ANY or (w.admits(g) if isinstance(w, _TensorArg) else type(w) is type(g) and w == g)):
            raise ValueError(f"optimus_egg: this graph was optimized for its example inputs; argument {i} was "
                             f"{w if isinstance(w, _TensorArg) else repr(w)}, got "
                             f"{g if isinstance(g, _TensorArg) else repr(g)}: optimize it again for these")
