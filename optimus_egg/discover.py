"""``optimus-egg discover``: the equalities of small programs that the rules do not prove.

Ruler's recipe on this optimizer's IR. :mod:`optimus_egg.discover_programs` enumerates small
programs of splits, slices, views, cats, stacks and a few pointwise ops on concrete shapes and
groups them by what they compute. Each group with several members (or whose values a view of an
input also computes: a copy of that view is then a member, as the pipeline copies an output
that would alias an input) goes through the pipeline's own front end and e-graph: its members
are the outputs of one FX graph (a batch of groups per graph), translated, saturated with the
rule families, and a member is *proven* when its root ends in the class of the group's cheapest
member (eager model, then Inductor's). The rest are reported, most profitable first (under the
eager model and in the kernels eager actually launches, which differ where a flatten of a strided
view copies; the model's gain is over what the member's own class extracts to, so a class that
already holds a form as cheap as the cheapest member gains nothing from a rule), each as a
before → after pair of programs and a candidate rule in the format of ``rewrites/`` with the
shapes and dims it held on and those a program of the same form was not equal. Candidates are
printed, never installed: a rule needs its side conditions proven, which is a human's job.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.fx as fx

from optimus_egg import rewrites
from optimus_egg.calls import Call, Registry, Slot
from optimus_egg.counting import eager_launches
from optimus_egg.discover_programs import Groups, Prog, Shape, bits, copied, enumerate_programs, function, source
from optimus_egg.egraph import Budget, EGraph, Frozen, rows
from optimus_egg.extract import greedy_dag
from optimus_egg.extract.cost import KernelCost, MemoryCost
from optimus_egg.extract.dag import Dag, Fact, class_facts
from optimus_egg.extract.inductor import InductorCost
from optimus_egg.extract.select import extracted_dag, seed_facts, term_facts
from optimus_egg.frontend import translate
from optimus_egg.ir import Term
from optimus_egg.outputs import visible_strides


@dataclass
class Finding:
    """An equality the rules do not prove: ``before`` computes what ``after`` does, cheaper."""

    shape: Shape
    before: str
    after: str
    form: str  # "before form → after form", literals left out
    size: int  # ops of both programs together
    eager_gain: float  # over what the optimizer makes of ``before`` (its class extracted)
    inductor_gain: float
    launches_gain: int  # ATen kernels launched, measured running both programs eagerly
    rule: str  # a candidate Rule(...) for rewrites/, to be checked by hand
    held_on: list[str]
    not_equal_on: list[str]


@dataclass
class Summary:
    programs: int = 0
    groups: int = 0
    checked_groups: int = 0
    proven: int = 0
    unproven: int = 0
    forms: int = 0  # distinct (before form, after form) among the unproven
    profitable: int = 0  # forms with a gain under the eager model
    confirmed: int = 0  # ... and in the kernels eager launches
    default_model: int = 0  # forms with a gain under the default cost model (Inductor's)
    seconds: float = 0.0
    stop_reasons: Counter = field(default_factory=Counter)

    def line(self) -> str:
        return (f"discover: {self.programs} programs, {self.groups} groups ({self.checked_groups} checked), "
                f"{self.proven} proven, {self.unproven} unproven in {self.forms} forms "
                f"({self.profitable} profitable, {self.confirmed} in measured launches too; "
                f"{self.default_model} under the default Inductor model), {self.seconds:.1f} s")


@dataclass
class _Member:
    """A program of a group as the e-graph saw it: its value's term and class, its costs as
    written, and the costs of what its class extracts to (``extracted``: eager, Inductor)."""

    prog: Prog
    shape: Shape
    term: Term
    eclass: int
    eager: float
    inductor: float
    registry: Registry
    extracted: tuple[float, float]

    @property
    def emitted(self) -> tuple[float, float]:
        """What the optimizer makes of the program (eager, Inductor): its class's extraction
        where that is cheaper, else the program as written (the pipeline keeps a graph it would
        not make cheaper)."""
        return min(self.eager, self.extracted[0]), min(self.inductor, self.extracted[1])


class _Values(fx.Interpreter):
    """Runs the graph on real tensors and keeps each node's value as its ``val``, as a capture's
    fake values would be: the graphs are small and their tensors tiny, so running them is several
    times faster than propagating fake tensors (``pipeline.capture``)."""

    def run_node(self, n: fx.Node) -> Any:
        n.meta["val"] = result = super().run_node(n)
        return result


def check_batch(groups: list[list[Prog]], shape: Shape, inputs: Sequence[str], fams: list[rewrites.Family],
                budget: Budget) -> tuple[list[list[_Member]], str]:
    """The members of ``groups`` as one FX graph through the front end and the saturated
    e-graph: each member's term, class and costs, and why saturation stopped."""
    flat = [p for g in groups for p in g]
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(function(flat, inputs), "<discover>", "exec"), namespace)
    gm = fx.symbolic_trace(namespace["f"])
    xs = [torch.randn(shape) for _ in inputs]
    results = _Values(gm).run(*xs)
    storages = {x.untyped_storage().data_ptr() for x in xs}
    tr = translate(gm)
    roots = list(tr.outputs)
    fams_written = [f.written for f in fams if f.written]
    dag = rows(roots, tr.facts, roots, fams_written)
    egraph = EGraph(fams)
    egraph.add(dag, budget.max_seconds)
    stats = egraph.saturate(budget)
    frozen = egraph.freeze()
    facts = term_facts(tr)
    eager, inductor = KernelCost(tr.registry), InductorCost(tr.registry)
    values = [t.args[1].args[0] if p.op == "clone" else t for p, t in zip(flat, roots)]  # a copy's class is its view's
    classes = [frozen.refs[dag.ids[v]] for v in values]
    prices = extracted_prices(frozen, classes, class_facts(frozen, seed_facts(tr, dag.ids, frozen)), tr.registry)
    out, k = [], 0
    for g in groups:
        members = []
        for prog in g:
            one = Dag([roots[k]], facts)
            # a fresh result takes a kernel to write, whatever the models see: a flatten of a
            # strided view copies, and the pipeline copies an output that became an input's view
            least = float(results[k].untyped_storage().data_ptr() not in storages)
            e, i = prices[classes[k]]
            members.append(_Member(prog, shape, values[k], classes[k], max(eager.total(one), least),
                                   max(inductor.total(one), least), tr.registry, (max(e, least), max(i, least))))
            k += 1
        out.append(members)
    return out, stats.stop_reason


def extracted_prices(frozen: Frozen, classes: list[int], facts: dict[int, Fact], registry: Registry
                     ) -> dict[int, tuple[float, float]]:
    """What each class costs (eager, Inductor) as the pipeline extracts it alone: greedy under
    eager launches and under Inductor's approximation (both, as :func:`select.extract` does),
    the cheaper of the two DAGs each class's root then reads."""
    eager, inductor = KernelCost(registry), InductorCost(registry)
    moved = MemoryCost(registry).bind(frozen, facts)
    out: dict[int, tuple[float, float]] = {}
    for model in (eager, inductor):
        for c, ex in greedy_dag.extract_apart(frozen, classes, model.bind(frozen, facts), moved).items():
            one = extracted_dag(frozen, ex, [c], facts)
            price = (eager.total(one), inductor.total(one))
            out[c] = min(out.get(c, price), price)
    return out


def cheapest(members: list[_Member]) -> _Member:
    return min(members, key=lambda m: (m.eager, m.inductor, m.prog.size, len(source(m.prog))))


# -- candidate rules -----------------------------------------------------------------------------


def rule_text(name: str, before: Term, after: Term, shape: Shape, inputs: Sequence[str], registry: Registry
              ) -> str:
    """``Rule(name, lhs, rhs, when)`` for the pair as written on ``shape``: the inputs become
    pattern variables with their sizes as facts, each op key a variable tested with
    ``op_named`` (an ``Op``'s literal arguments, which its key stands for, in a comment)."""
    keys: dict[str, str] = {}
    used: dict[str, None] = {}

    def pattern(t: Any) -> str:
        if isinstance(t, str):
            return keys.setdefault(t, f"k{len(keys)}")
        if not isinstance(t, Term):
            return str(t)
        if t.op == "Input":
            used[inputs[t.args[0]]] = None
            return inputs[t.args[0]]
        return f"({' '.join([t.op, *map(pattern, t.args)])})" if t.args else f"({t.op})"

    lhs, rhs = pattern(before), pattern(after)
    when = [f'"(= {n} (size {x} {d}))"' for x in used for d, n in enumerate(shape)]
    when += [f'op_named("{v}", "{registry.calls[k].name}")' for k, v in keys.items()]
    notes = [f"{v}: {registry.calls[k].name}{_literals(registry.calls[k])}" for k, v in keys.items()
             if registry.calls[k].constructor == "Op"]
    return f'Rule("{name}", "{lhs}", "{rhs}", ({", ".join(when)},))' + (f"  # {'; '.join(notes)}" if notes else "")


def _literals(call: Call) -> str:
    """The literal arguments of a call (its tensor slots left out), as a tuple."""
    return str(tuple(x for x in call.leaves if not isinstance(x, Slot)))


def _instance(prog: Prog, shape: Shape) -> str:
    return f"{'x'.join(map(str, shape))}: {source(prog)}"


#: Instances listed per finding where its form held, and where it did not.
_EXAMPLES = 4


def side_conditions(findings: list[tuple[_Member, _Member]], all_groups: list[Groups]
                    ) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """For each (before form, after form): the programs of the before form whose group holds a
    program of the after form, or a copy of one, as :func:`_to_check` does (it held), and those
    whose group does not (not equal there)."""
    wanted = {(b.prog.form(), a.prog.form()) for b, a in findings}
    afters: dict[str, list[str]] = defaultdict(list)
    for b, a in wanted:
        afters[b].append(a)
    out: dict[tuple[str, str], tuple[list[str], list[str]]] = {w: ([], []) for w in wanted}
    for groups in all_groups:
        for sig, members in groups.members.items():
            forms = [p.form() for p in members]
            twin = [] if sig.aliases else groups.members.get(replace(sig, aliases=True), [])
            present = {*forms, *(copied(p).form() for p in twin)}
            for p, f in zip(members, forms):
                for a in afters.get(f, ()):
                    held, not_equal = out[(f, a)]
                    listed = held if a in present else not_equal
                    if len(listed) < _EXAMPLES:
                        listed.append(_instance(p, groups.shape))
    return out


# -- the run -------------------------------------------------------------------------------------


def discover(shapes: Sequence[Shape], inputs: Sequence[str], size: int, families: Sequence[str] | None = None,
             seed: int = 0, max_programs: int = 100_000, max_groups: int = 5000, max_members: int = 8,
             batch: int = 200, budget: Budget = Budget(30, 50_000, 5.0), progress_every: int = 10_000,
             log=sys.stderr) -> tuple[Summary, list[Finding]]:
    """Enumerate, group, ask the e-graph; the summary and the findings, most profitable first."""
    start = time.perf_counter()
    fams = rewrites.families(list(families) if families is not None else None)
    summary = Summary()
    rng = random.Random(seed)
    all_groups: list[Groups] = []
    unproven: list[tuple[_Member, _Member]] = []
    for shape in shapes:
        def progress(n: int, shape: Shape = shape) -> None:
            if n % progress_every == 0:
                print(f"discover: {shape}: {n} programs enumerated ({time.perf_counter() - start:.0f} s)", file=log)

        groups = enumerate_programs(shape, inputs, size, seed, max_programs, progress)
        all_groups.append(groups)
        summary.programs += groups.programs
        summary.groups += len(groups.members)
        several = _to_check(groups, max_members)
        if len(several) > max_groups:
            several = rng.sample(several, max_groups)
        summary.checked_groups += len(several)
        done = 0
        for chunk in _chunks(several, batch):
            checked, stop = check_batch(chunk, shape, inputs, fams, budget)
            summary.stop_reasons[stop] += 1
            for members in checked:
                best = cheapest(members)
                for m in members:
                    if m is best or m.prog.op == "clone":
                        continue
                    if m.eclass == best.eclass:
                        summary.proven += 1
                    else:
                        summary.unproven += 1
                        unproven.append((m, best))
            done += len(chunk)
            if done // 1000 > (done - len(chunk)) // 1000 or done == len(several):
                print(f"discover: {shape}: {done}/{len(several)} groups checked, {summary.proven} proven, "
                      f"{summary.unproven} unproven ({time.perf_counter() - start:.0f} s)", file=log)
    findings = _findings(unproven, all_groups, inputs)
    summary.forms = len(findings)
    summary.profitable = sum(1 for f in findings if f.eager_gain > 0)
    summary.confirmed = sum(1 for f in findings if min(f.eager_gain, f.launches_gain) > 0)
    summary.default_model = sum(1 for f in findings if f.inductor_gain > 0)
    summary.seconds = time.perf_counter() - start
    return summary, findings


def _to_check(groups: Groups, max_members: int) -> list[list[Prog]]:
    """The groups the e-graph is asked about: those of several programs, each on its
    representative and up to ``max_members - 1`` others, smallest first; and those of fresh
    values that a view of an input also computes, with a copy of that view (up to two) as a
    member of their own: the pipeline copies an output that would alias an input."""
    out = []
    for sig, members in groups.members.items():
        twin = None if sig.aliases else groups.members.get(replace(sig, aliases=True))
        if len(members) > 1 or twin:
            rest = sorted(members[1:], key=lambda p: (p.size, len(source(p))))[:max_members - 1]
            out.append([members[0], *rest, *(copied(p) for p in (twin or [])[:2])])
    return out


def _chunks(groups: list[list[Prog]], batch: int) -> list[list[list[Prog]]]:
    """Groups in batches of about ``batch`` members (a group is never cut)."""
    out: list[list[list[Prog]]] = [[]]
    n = 0
    for g in groups:
        if n and n + len(g) > batch:
            out.append([])
            n = 0
        out[-1].append(g)
        n += len(g)
    return [c for c in out if c]


def _findings(unproven: list[tuple[_Member, _Member]], all_groups: list[Groups], inputs: Sequence[str]
              ) -> list[Finding]:
    """One finding per (before form, after form): its most profitable, then smallest, instance
    that another draw of the inputs (normal floats) confirms bit for bit, with where the form
    held or not."""
    by_form: dict[tuple[str, str], list[tuple[_Member, _Member]]] = defaultdict(list)
    for before, after in unproven:
        by_form[_canonical(before.prog.form(), after.prog.form())].append((before, after))
    conditions = side_conditions(unproven, all_groups)
    found = []
    for (bf, af), pairs in by_form.items():
        pairs.sort(key=lambda p: (p[1].eager - p[0].emitted[0], p[0].prog.size + p[1].prog.size))
        measured = next((m for m in (_measure(*p, inputs) for p in pairs) if m is not None), None)
        if measured is None:  # equal on the enumeration's draws only
            continue
        before, after, launches, relaid = measured
        held, not_equal = conditions[(before.prog.form(), after.prog.form())]
        # the gain is over what the optimizer emits for the before program; an output laid out
        # otherwise is copied back into the program's layout (the pipeline's restride_outputs):
        # the after form pays that copy
        eager, inductor = before.emitted
        found.append((Finding(before.shape, source(before.prog), source(after.prog), f"{bf} → {af}",
                              before.prog.size + after.prog.size, eager - after.eager - relaid,
                              inductor - after.inductor - relaid, launches - relaid, "", held, not_equal),
                      before, after))
    # a gain the model sees but eager does not (a flatten of a strided view is a copy) comes later
    found.sort(key=lambda f: (-min(f[0].eager_gain, f[0].launches_gain), -f[0].inductor_gain, f[0].size, f[0].before))
    for k, (finding, before, after) in enumerate(found):
        finding.rule = rule_text(f"found-{k}", before.term, after.term, before.shape, inputs, before.registry)
    return [f for f, _, _ in found]


def _canonical(before: str, after: str) -> tuple[str, str]:
    """A pair of forms with its inputs renamed in order of appearance: ``relu(relu(y)) → relu(y)``
    is the finding ``relu(relu(x)) → relu(x)``."""
    names: dict[str, str] = {}
    for name in re.findall(r"\b[xy]\b", f"{before} {after}"):
        if name not in names:
            names[name] = "xy"[len(names)]
    text = re.sub(r"\b[xy]\b", lambda m: names[m.group(0)], f"{before}\t{after}")
    b, a = text.split("\t")
    return b, a


def _measure(before: _Member, after: _Member, inputs: Sequence[str]) -> tuple[_Member, _Member, int, int] | None:
    """The pair, the kernels eager launches fewer for ``after``, and 1 where ``after``'s output is
    laid out otherwise (its strides), if the two are equal bit for bit on another draw of the
    inputs (normal floats); else None."""
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(before.shape, generator=gen) for _ in inputs]
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(function([before.prog], inputs) + function([after.prog], inputs).replace("def f(", "def g("),
                 "<discover>", "exec"), namespace)
    (a,), (b,) = namespace["f"](*xs), namespace["g"](*xs)
    if a.shape != b.shape or bits(a) != bits(b):
        return None
    launches = eager_launches(namespace["f"], *xs) - eager_launches(namespace["g"], *xs)
    return before, after, launches, int(visible_strides(a) != visible_strides(b))


# -- the command ---------------------------------------------------------------------------------


def _shape(text: str) -> Shape:
    try:
        return tuple(int(n) for n in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is sizes joined by x, e.g. 4x6; not {text!r}") from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=3, help="most ops in a program (default 3)")
    parser.add_argument("--shapes", type=_shape, nargs="+", default=[(4, 6), (2, 3, 4)], metavar="AxB",
                        help="input shapes, each enumerated on its own (default 4x6 2x3x4)")
    parser.add_argument("--inputs", type=int, choices=(1, 2), default=2, help="inputs of a program: x, or x and y")
    parser.add_argument("--families", nargs="+", default=None, metavar="NAME",
                        help="rule families whose e-graph is asked (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="draws the ops' dims, sizes and orders")
    parser.add_argument("--max-programs", type=int, default=100_000, help="per shape (default 100000)")
    parser.add_argument("--max-groups", type=int, default=5000,
                        help="groups of several programs checked per shape, sampled beyond (default 5000)")
    parser.add_argument("--max-members", type=int, default=8, help="programs checked per group (default 8)")
    parser.add_argument("--batch", type=int, default=200, help="programs per e-graph (default 200)")
    parser.add_argument("--max-seconds", type=float, default=5.0, help="saturation time per e-graph (default 5)")
    parser.add_argument("--top", type=int, default=20, help="findings printed (default 20)")
    parser.add_argument("--progress", type=int, default=10_000, metavar="N",
                        help="a progress line every N programs (default 10000)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the summary and every finding there")


def main(args: argparse.Namespace) -> int:
    try:
        summary, findings = discover(args.shapes, ("x", "y")[:args.inputs], args.size, args.families, args.seed,
                                     args.max_programs, args.max_groups, args.max_members, args.batch,
                                     Budget(30, 50_000, args.max_seconds), args.progress)
    except ValueError as exc:
        print(f"optimus-egg discover: error: {exc}", file=sys.stderr)
        return 2
    print(summary.line())
    if summary.stop_reasons and set(summary.stop_reasons) != {"saturated"}:
        print(f"  saturation stopped: {dict(summary.stop_reasons)} (a proof may be missing where it did not saturate)")
    print(f"{len(findings)} unproven forms, most profitable first (gain: eager model / Inductor model / eager "
          "launches measured); candidates only, never installed:")
    for f in findings[:args.top]:
        print(f"\n[{'x'.join(map(str, f.shape))}] gain {f.eager_gain:g} / {f.inductor_gain:g} / {f.launches_gain}   "
              f"{f.form}\n"
              f"  before: {f.before}\n  after:  {f.after}\n  rule:   {f.rule}\n"
              f"  held on: {'; '.join(f.held_on) or '-'}\n  not equal on: {'; '.join(f.not_equal_on) or '-'}")
    if args.json:
        record = {"summary": {**asdict(summary), "stop_reasons": dict(summary.stop_reasons)},
                  "findings": [asdict(f) for f in findings]}
        args.json.write_text(json.dumps(record, indent=1))
    return 0
