"""``optimus-egg explain PATH_OR_MODULE:FACTORY``: what the optimizer does to your model.

The factory returns ``(model, example_inputs)``. Explain captures the model like ``optimize`` does,
optimizes it, and prints kernels before and after, the rules that fired, the e-graph's size and
time per phase, and every rewritten region as the original FX code → the code that replaces it.

Regions come from value correspondence, not from text: each emitted node records the original
nodes whose value it computes (``meta[ORIGIN]``, the nodes whose terms ended in its e-class). An
emitted node is *unchanged* when it is the same call as one of those on corresponding inputs;
everything else (original nodes nothing unchanged stands for, emitted nodes that are new) is
grouped into regions connected by data flow and by "computes the same value as".
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import operator
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

import torch
import torch.fx as fx
from torch.fx.node import _get_qualified_name, map_arg
from torch.utils import _pytree as pytree

from optimus_egg.cli_options import add_option_args, options_from_args
from optimus_egg.counting import eager_launches
from optimus_egg.emit import ORIGIN
from optimus_egg.options import Options
from optimus_egg.pipeline import capture, optimize_graph
from optimus_egg.report import Report
from optimus_egg.rewrites import user_code_error

Factory = Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]
_COMPUTE = ("call_function", "call_method", "call_module")


# ---------------------------------------------------------------------------------------------
# Loading the user's factory


@contextlib.contextmanager
def on_path(folder: str | None) -> Iterator[None]:
    """A folder on ``sys.path`` while the user's code loads and runs: a file's, as ``python file.py``
    would have, or the working directory, as ``python -m`` would have."""
    if folder is None or folder in sys.path:
        yield
        return
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)


def load_factory(target: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """``path/to/file.py:fn`` or ``pkg.module:fn`` → what ``fn()`` returns: ``(model, inputs)``.

    ``fn`` may also return such a factory (``optimus_egg.bench.models:rec_demo``).
    """
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"expected PATH_OR_MODULE:FACTORY, got {target!r}")
    folder = None
    if where.endswith(".py") or Path(where).is_file():
        path = Path(where).resolve()
        if not path.is_file():
            raise ValueError(f"no such file: {where}")
        folder = str(path.parent)
        spec = importlib.util.spec_from_file_location(f"optimus_egg_explain_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses and pickling look modules up here
        with on_path(folder):
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                raise user_code_error(f"{where} failed to load", exc) from exc
    else:
        try:
            found = importlib.util.find_spec(where) is not None
        except (ImportError, ValueError):  # a missing parent package, or not a module name at all
            found = False
        if not found:
            raise ValueError(f"no module named {where!r} (a file is named path/to/file.py)")
        try:
            module = importlib.import_module(where)
        except Exception as exc:
            raise user_code_error(f"{where} failed to load", exc) from exc
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"{where} has no function {name!r}")
    with on_path(folder):
        try:
            got = factory()
            if callable(got) and not isinstance(got, torch.nn.Module):
                got = got()
        except Exception as exc:
            raise user_code_error(f"{target} raised", exc) from exc
    if not (isinstance(got, tuple) and len(got) == 2 and callable(got[0])):
        raise ValueError(f"{target} must return (model, example_inputs), got {type(got).__name__}")
    model, inputs = got
    return model, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


# ---------------------------------------------------------------------------------------------
# Regions: original code → the code that replaces it


@dataclass
class Region:
    before: list[fx.Node] = field(default_factory=list)  # original nodes, in graph order
    after: list[fx.Node] = field(default_factory=list)  # emitted nodes, in graph order


@dataclass
class Diff:
    regions: list[Region]
    unchanged: int  # emitted calls that are an original call on equal inputs
    names: dict[fx.Node, str]  # how to show an emitted node next to the original code

    def name(self, node: fx.Node) -> str:
        return self.names.get(node, node.name)


def _origins(node: fx.Node) -> list[str]:
    own = [node.name] if node.op in ("placeholder", "get_attr") else []  # inputs are copied by name
    return own + [o for o in node.meta.get(ORIGIN, []) if o not in own]


def _same_call(a: fx.Node, b: fx.Node) -> bool:
    """``a`` (emitted) is the call ``b`` (original) on inputs of equal value."""
    if a.op != b.op or a.target != b.target:
        return False
    leaves_a, spec_a = pytree.tree_flatten((a.args, a.kwargs))
    leaves_b, spec_b = pytree.tree_flatten((b.args, b.kwargs))
    if str(spec_a) != str(spec_b):
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, fx.Node) or isinstance(y, fx.Node):
            if not (isinstance(x, fx.Node) and isinstance(y, fx.Node) and y.name in _origins(x)):
                return False
        else:
            try:
                if type(x) is not type(y) or bool(x != y):
                    return False
            except Exception:  # noqa: BLE001 - constants that do not compare (tensors): differ
                return False
    return True


def diff_regions(before: fx.GraphModule, after: fx.GraphModule) -> Diff:
    """The rewritten regions of ``before`` → ``after``.

    An unchanged emitted node is shown by its original name; a new one by its own, with ``_new``
    when an original node has that name.
    """
    if after is before:  # left unchanged (a fallback)
        return Diff([], sum(1 for n in before.graph.nodes if n.op in _COMPUTE), {})
    by_name = {n.name: n for n in before.graph.nodes}
    kept: set[fx.Node] = set()
    new: list[fx.Node] = []
    names: dict[fx.Node, str] = {}
    for a in after.graph.nodes:
        if a.op not in _COMPUTE:
            continue
        match = next((by_name[o] for o in _origins(a) if o in by_name and _same_call(a, by_name[o])), None)
        if match is None:
            new.append(a)
            names[a] = f"{a.name}_new" if a.name in by_name else a.name
        else:
            kept.add(match)
            names[a] = match.name
    removed = [b for b in before.graph.nodes if b.op in _COMPUTE and b not in kept]

    parent: dict[fx.Node, fx.Node] = {n: n for n in [*removed, *new]}

    def find(n: fx.Node) -> fx.Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def union(x: fx.Node, y: fx.Node) -> None:
        parent[find(x)] = find(y)

    for n in [*removed, *new]:
        for inp in n.all_input_nodes:
            if inp in parent:
                union(n, inp)
    for a in new:
        for o in _origins(a):
            if by_name.get(o) in parent:
                union(a, by_name[o])
    groups: dict[fx.Node, Region] = {}
    for b in removed:
        groups.setdefault(find(b), Region()).before.append(b)
    for a in new:
        groups.setdefault(find(a), Region()).after.append(a)
    order = {n: i for i, n in enumerate(before.graph.nodes)}
    regions = sorted(groups.values(), key=lambda r: order[r.before[0]] if r.before else len(order))
    return Diff(regions, len(kept), names)


class _Name:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def _target(t: Any) -> str:
    if isinstance(t, str):
        return t
    try:
        return _get_qualified_name(t).replace("_operator.", "operator.")
    except Exception:  # noqa: BLE001 - ATen overloads and other callables without a plain name
        return str(t)


def fx_line(n: fx.Node, name: Callable[[fx.Node], str] = lambda x: x.name) -> str:
    """One node as a line of Python, the way FX's code would read; ``name`` names nodes."""
    args, kwargs = map_arg((n.args, n.kwargs), lambda x: _Name(name(x)))
    lhs = name(n)
    if n.op == "call_function" and n.target is operator.getitem and len(args) == 2 and not kwargs:
        return f"{lhs} = {args[0]!r}[{args[1]!r}]"
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    if n.op == "call_method":
        return f"{lhs} = {parts[0]}.{n.target}({', '.join(parts[1:])})"
    if n.op == "call_module":
        return f"{lhs} = self.{n.target}({', '.join(parts)})"
    return f"{lhs} = {_target(n.target)}({', '.join(parts)})"


# ---------------------------------------------------------------------------------------------
# Graphviz


def to_dot(gm: fx.GraphModule, title: str, marked: set[fx.Node], color: str) -> str:
    """The graph as Graphviz text; ``marked`` nodes (the rewritten regions) are filled."""

    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"digraph {q(title)} {{", "  rankdir=TB;",
             '  node [shape=box, fontname="monospace", fontsize=10];']
    for n in gm.graph.nodes:
        what = {"placeholder": "input", "get_attr": f"self.{n.target}", "output": "output"}.get(
            n.op, _target(n.target))
        style = f', style=filled, fillcolor="{color}"' if n in marked else ""
        label = q(n.name)[:-1] + "\\n" + q(what)[1:]  # a Graphviz line break between the two
        lines.append(f"  {q(n.name)} [label={label}{style}];")
        lines.extend(f"  {q(i.name)} -> {q(n.name)};" for i in n.all_input_nodes)
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(before: fx.GraphModule, after: fx.GraphModule, regions: list[Region], folder: Path,
              out: TextIO) -> list[Path]:
    """``before.dot``/``after.dot`` (and PNGs when Graphviz's ``dot`` is on PATH); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    removed = {n for r in regions for n in r.before}
    new = {n for r in regions for n in r.after}
    written = []
    for name, gm, marked, color in (("before", before, removed, "#f4cccc"), ("after", after, new, "#d9ead3")):
        path = folder / f"{name}.dot"
        path.write_text(to_dot(gm, name, marked, color))
        written.append(path)
    dot = shutil.which("dot")
    if dot is None:
        print(f"wrote {', '.join(map(str, written))}; PNGs skipped: Graphviz's `dot` is not on PATH "
              f"(install graphviz, then: dot -Tpng {written[0]} -o {written[0].with_suffix('.png')})",
              file=out)
        return written
    for path in list(written):
        png = path.with_suffix(".png")
        subprocess.run([dot, "-Tpng", str(path), "-o", str(png)], check=True, timeout=120)
        written.append(png)
    print(f"wrote {', '.join(map(str, written))}", file=out)
    return written


# ---------------------------------------------------------------------------------------------
# The command


def _same_outputs(a: Any, b: Any) -> bool:
    la, lb = pytree.tree_leaves(a), pytree.tree_leaves(b)
    return len(la) == len(lb) and all(
        (x.shape == y.shape and x.dtype == y.dtype and torch.allclose(x, y, rtol=1e-4, atol=1e-5))
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y for x, y in zip(la, lb))


def _number(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _print_region(i: int, region: Region, diff: Diff, max_lines: int, out: TextIO) -> None:
    def after_line(n: fx.Node) -> str:
        same = _origins(n)
        return fx_line(n, diff.name) + (f"  # equals original {', '.join(same)}" if same else "")

    if len(region.before) == len(region.after) == 1:  # one call re-spelled: one line
        print(f"\nregion {i}: {fx_line(region.before[0])}  →  {after_line(region.after[0])}", file=out)
        return
    print(f"\nregion {i}: {len(region.before)} original nodes → {len(region.after)}", file=out)
    for label, nodes, line in (("before", region.before, fx_line), ("after", region.after, after_line)):
        print(f"  {label}:", file=out)
        for n in nodes[:max_lines]:
            print(f"    {line(n)}", file=out)
        if len(nodes) > max_lines:
            print(f"    ... {len(nodes) - max_lines} more", file=out)
        if not nodes:
            print("    (nothing)", file=out)


def explain(model: torch.nn.Module, inputs: tuple[Any, ...], options: dict[str, Any], out: TextIO,
            dot_dir: Path | None = None, max_lines: int = 30) -> Report:
    """Optimize ``model`` and print what was done to it; returns the pipeline's report."""
    opts = Options.from_kwargs(**options)
    start = time.perf_counter()
    gm = capture(model, inputs)
    capture_s = time.perf_counter() - start
    new_gm, report = optimize_graph(gm, opts)
    with torch.no_grad():
        launches = (eager_launches(model, *inputs), eager_launches(new_gm, *inputs))
        equal = _same_outputs(model(*inputs), new_gm(*inputs))

    print(f"model: {type(model).__name__}; inputs: "
          + ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" if isinstance(t, torch.Tensor)
                      else repr(t) for t in inputs), file=out)
    print(f"options: {options or 'defaults'}", file=out)
    print(f"captured by Dynamo in {capture_s:.2f} s: {report.fx_nodes} FX nodes, "
          f"{report.opaque_nodes} opaque (pinned in order, or unknown to the op table)", file=out)
    if report.fallback:
        print(f"\nFELL BACK: the graph was left unchanged ({report.fallback})", file=out)
    rows = [("eager launches, measured", *launches),
            *((f"cost model {name}" + (" (extracted by)" if name == report.cost_model else ""), *pair)
              for name, pair in report.costs.items())]  # none after a fallback
    table = [("kernels", "before", "after"), *((name, _number(b), _number(a)) for name, b, a in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    print(file=out)
    for name, b, a in table:
        print(f"{name:{widths[0]}}  {b:>{widths[1]}}  {a:>{widths[2]}}", file=out)
    print(f"outputs equal to the original on the example inputs: {'yes' if equal else 'NO'}", file=out)

    fired = sorted(report.rules_fired.items(), key=lambda kv: (-kv[1], kv[0]))
    print("\nrules fired (egglog matches per rule): "
          + (", ".join(f"{k} {v}" for k, v in fired) or "none"), file=out)
    print(f"e-graph: {report.enodes} e-nodes, {report.eclasses} e-classes, {report.iterations} "
          f"iterations ({report.stop_reason or '-'}); extractor: {report.extractor or '-'}", file=out)
    if "ilp" in report.extraction:  # (greedy's graph is kept where the ILP's is no better)
        print("extractions: " + "; ".join(_extraction(name, run) for name, run in report.extraction.items()
                                          if isinstance(run, dict)), file=out)
    print(f"time: {report.timings()}; total {report.total_seconds * 1e3:.0f} ms"
          + ("; the search was served from the in-process cache" if report.cache_hit else ""), file=out)

    diff = diff_regions(gm, new_gm)
    print(f"\nrewritten regions: {len(diff.regions)} ({diff.unchanged} calls unchanged; those keep "
          "their original names below)", file=out)
    for i, region in enumerate(diff.regions, 1):
        _print_region(i, region, diff, max_lines, out)
    if dot_dir is not None:
        print(file=out)
        write_dot(gm, new_gm, diff.regions, dot_dir, out)
    return report


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="PATH_OR_MODULE:FACTORY",
                        help="a .py file or module and a function returning (model, example_inputs)")
    parser.add_argument("--dot", type=Path, metavar="DIR",
                        help="write before.dot/after.dot there (and PNGs when `dot` is on PATH)")
    parser.add_argument("--max-lines", type=int, default=30, metavar="N",
                        help="lines shown per side of a region (default 30)")
    add_option_args(parser)


def _extraction(name: str, run: dict[str, Any]) -> str:
    """One extractor's run, as ``select.extract`` reports it."""
    cost = "no graph" if run.get("cost") is None else f"cost {run['cost']:g}"
    status = f", {run['status']}" if "status" in run else ""
    used = "" if "used" not in run else ", its graph used" if run["used"] else ", its graph not used"
    return f"{name} {cost} in {run['seconds']:.2f} s{status}{used}"


def main(args: argparse.Namespace) -> int:
    try:
        options = options_from_args(args)
        model, inputs = load_factory(args.target)
        try:  # else Dynamo's capture reports the model's own error among pages of its internals
            with torch.no_grad():
                model(*inputs)
        except Exception as exc:
            raise user_code_error(f"the model of {args.target} fails on its example inputs", exc) from exc
    except ValueError as exc:
        print(f"optimus-egg explain: error: {exc}", file=sys.stderr)
        return 2
    report = explain(model, inputs, options, sys.stdout, args.dot, args.max_lines)
    return 1 if report.fallback else 0
