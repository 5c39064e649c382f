"""Rule families. Each module lists its rules; ``FAMILIES`` maps a family name to them.

A rule is egglog text over the sorts of :mod:`optimus_egg.ir`, short enough to read as the
identity it states. A family may also read relations off the graph as written (``WRITTEN``, see
:class:`Written`). The ``analysis`` family (shapes and dtypes) is always on.
Each rule has a stage (``STAGES``): ``analysis`` rules derive facts (shapes, dtypes, which list
is an op applied to each piece of another) and never make two terms equal; they run to a
fixpoint before every round, so that a fact that takes one step per list cell costs no rounds.
``seed`` rules read the graph as the program wrote it, to a fixpoint, before any other rule;
``simplify`` rules run to a fixpoint; ``expand`` rules (an op pushed through every slice
creates a new op per sliced tensor) run one round at a time in between, within the budget.
"""

from __future__ import annotations

import sys
import traceback
from difflib import get_close_matches
from dataclasses import dataclass
from importlib import import_module
from importlib.util import find_spec, module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from optimus_egg.calls import EXACT
from optimus_egg.optable import OPS, SINGULAR

if TYPE_CHECKING:
    from optimus_egg.ir import Term


@dataclass(frozen=True)
class Rule:
    """``lhs → rhs`` when every ``when`` fact holds."""

    name: str
    lhs: str
    rhs: str
    when: tuple[str, ...] = ()
    covers: str = "new"  # the Optimus pass whose rewrite this rule performs, or "new"
    stage: str = "simplify"  # see STAGES

    def egglog(self) -> str:
        """The rule as egglog text, in its stage's ruleset."""
        when = f" :when ({' '.join(self.when)})" if self.when else ""
        return f'(rewrite {self.lhs} {self.rhs}{when} :ruleset {self.stage} :name "{self.name}")'


@dataclass(frozen=True)
class Derive:
    """A datalog rule: when the ``query`` facts hold, perform the ``actions``."""

    name: str
    query: tuple[str, ...]
    actions: tuple[str, ...]
    covers: str = "new"
    stage: str = "simplify"

    def egglog(self) -> str:
        """The rule as egglog text, in its stage's ruleset."""
        return (f"(rule ({' '.join(self.query)}) ({' '.join(self.actions)})"
                f' :ruleset {self.stage} :name "{self.name}")')


AnyRule = Rule | Derive

#: A written relation's rows: terms as terms, literals as ints or strings.
WrittenRows = dict[str, list[tuple["Term | int | str", ...]]]


@dataclass(frozen=True)
class Written:
    """Relations read off the graph as the program wrote it, computed in Python with the rows.

    For facts a seed rule could derive only by walking the graph one step per round (the cell
    of a long list that a slice reads), where one pass over the terms finds them all.
    ``relations``: name → column sorts (``T``, ``TList``, ``i64``, ``String``), declared for the
    family's rules; ``rows(terms, shapes)``: every term of the graph in ``pos`` order (operands
    first), and the static shape of the terms that have one (a ``None`` per symbolic size) →
    rows per relation.
    """

    relations: Mapping[str, tuple[str, ...]]
    rows: Callable[[Iterable["Term"], Mapping["Term", Sequence[int | None]]], WrittenRows]

    def declarations(self) -> str:
        return "\n".join(f"(relation {name} ({' '.join(sorts)}))" for name, sorts in self.relations.items())


STAGES = ("analysis", "seed", "simplify", "expand")


def op_named(var: str, *names: str) -> str:
    """A ``when``/``query`` fact: the ``Unary``/``Binary``/``Op`` key bound to ``var`` is op ``name``
    (one of ``names``).

    Keys are per-graph (``relu#3``): two calls share a key only when they are the same call, so
    a rule about one op (not about "any elementwise op") tests the name with this fact. A name is
    the op table's name (``optimus_egg.optable.OPS``), e.g. ``relu`` for ``torch.relu``,
    ``F.relu``, ``Tensor.relu`` and ``nn.ReLU``; a key marked as computing exactly (``exp!#3``,
    :data:`optimus_egg.calls.EXACT`) is its op's too. Any other name is an error: it would match
    nothing, and the rule would never fire without a word.
    """
    known = {op.name for op in OPS}
    for name in names:
        if name not in known:
            near = get_close_matches(name, known, n=3)
            raise ValueError(f"op_named: no op {name!r} in the op table (optimus_egg.optable.OPS)"
                             + (f"; did you mean {', '.join(near)}?" if near else ""))
    marked = [f"{name}{EXACT}" for name in names if name in SINGULAR]  # calls.computes_exactly
    counts = [f'(count-matches (+ "#" {var}) "#{name}#")' for name in sorted([*names, *marked])]
    total = counts[0]
    for count in counts[1:]:
        total = f"(+ {total} {count})"
    return f"(= 1 {total})"


def one_of(var: str, names: Iterable[str]) -> str:
    """A ``when``/``query`` fact: the String bound to ``var`` is one of ``names``."""
    return f'(= 1 (count-matches ",{",".join(names)}," (+ "," {var} ",")))'


def args(*items: str) -> str:
    """An ``Op`` argument list."""
    out = "(Nil)"
    for item in reversed(items):
        out = f"(Cons {item} {out} -1)"
    return out


#: Family name → module that defines ``RULES`` (and optionally ``DECLARATIONS``, ``WRITTEN``).
_MODULES = {
    "analysis": "optimus_egg.rewrites.analysis",
    "split_cat": "optimus_egg.rewrites.split_cat",
    "pointwise": "optimus_egg.rewrites.pointwise",
    "horizontal": "optimus_egg.rewrites.horizontal",
    "einsum": "optimus_egg.rewrites.einsum",
}
DEFAULT_FAMILIES = ("split_cat", "pointwise", "horizontal", "einsum")
#: The families that batch calls into one (stacks of weights and inputs, one result for many):
#: fewer kernels for more bytes, dropped where those bytes raise the peak memory or, on CPU, from
#: a backward.
BATCHING_FAMILIES = ("horizontal",)
#: The families that move pointwise ops through splits and cats: dropped from a training graph
#: where that computes a piece once per cat, each with a gradient (:mod:`optimus_egg.bounds`).
POINTWISE_FAMILIES = ("pointwise",)


def named(names: Sequence[str] | None) -> tuple[str, ...]:
    """The families a run uses: ``names``, or (None) the defaults."""
    return DEFAULT_FAMILIES if names is None else tuple(names)


def without(names: Sequence[str] | None, dropped: Sequence[str]) -> tuple[str, ...]:
    """The families ``names`` (None: the defaults) without those ``dropped``."""
    return tuple(n for n in named(names) if n not in dropped)


def _check_stage(rule: "AnyRule") -> None:
    if rule.stage not in STAGES:
        raise ValueError(f"rule {rule.name!r}: unknown stage {rule.stage!r}; valid: {', '.join(STAGES)}")
    if rule.stage == "analysis" and (isinstance(rule, Rule) or any("union" in a for a in rule.actions)):
        raise ValueError(f"rule {rule.name!r}: an analysis rule derives facts and never makes two terms "
                         "equal (a Derive without union); a rewrite belongs in seed, simplify or expand")


@dataclass(frozen=True)
class Family:
    name: str
    rules: tuple[AnyRule, ...]
    declarations: str = ""
    written: Written | None = None

    def declared(self) -> str:
        """The egglog text the family declares: its ``DECLARATIONS`` and its written relations."""
        return "\n".join(t for t in (self.declarations, self.written and self.written.declarations()) if t)


def family(name: str) -> Family:
    """A built-in family, or a rule module of your own named by import path or ``.py`` file.

    A user module is read exactly like a built-in one: ``RULES`` (a list of :class:`Rule` and
    :class:`Derive`) and optionally ``DECLARATIONS`` (egglog text: relations, functions).
    """
    mod = import_module(_MODULES[name]) if name in _MODULES else _user_module(name)
    rules = getattr(mod, "RULES", None)
    if not isinstance(rules, (list, tuple)) or not all(isinstance(r, (Rule, Derive)) for r in rules):
        raise ValueError(f"rule module {name!r} must define RULES, a list of "
                         "optimus_egg.rewrites.Rule / Derive")
    for rule in rules:
        _check_stage(rule)
    written = getattr(mod, "WRITTEN", None)
    if written is not None and not isinstance(written, Written):
        raise ValueError(f"rule module {name!r}: WRITTEN must be an optimus_egg.rewrites.Written")
    return Family(name, tuple(rules), getattr(mod, "DECLARATIONS", ""), written)


def _unknown(name: str, why: str = "") -> ValueError:
    builtin = ", ".join(n for n in _MODULES if n != "analysis")
    return ValueError(f"unknown rule family {name!r}{why}; built-in families: {builtin}; a rule module "
                      "of your own is passed by import path ('mypkg.myrules') or file ('path/to/rules.py')")


_FILES: dict[str, ModuleType] = {}  # resolved .py path -> its module, loaded once per process


def _user_module(name: str) -> ModuleType:
    if name.endswith(".py"):
        path = Path(name).resolve()
        if not path.is_file():
            raise _unknown(name, " (no such file)")
        if str(path) not in _FILES:
            spec = spec_from_file_location(f"optimus_egg_user_rules_{len(_FILES)}_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses and pickling look modules up here
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[spec.name]
                raise user_code_error(f"rule module {name!r} failed to load", exc) from exc
            _FILES[str(path)] = module
        return _FILES[str(path)]
    try:
        found = find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package, or not a module name at all
        found = False
    if not found:
        raise _unknown(name)
    try:
        return import_module(name)
    except Exception as exc:
        raise user_code_error(f"rule module {name!r} failed to load", exc) from exc


def user_code_error(what: str, exc: BaseException) -> ValueError:
    """An error raised by the user's own code (a rule module's syntax error, a failing import,
    a model factory's bug) as one line that says whose it is and the line it came from: raised
    bare, it would read as the optimizer's."""
    import optimus_egg

    ours = {Path(__file__).parent, Path(optimus_egg.__file__).parent}
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and Path(f.filename).parent not in ours]
    at = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return ValueError(f"{what}{at}: {type(exc).__name__}: {exc}")


def families(names: tuple[str, ...] | list[str] | None = None) -> list[Family]:
    """The analysis family plus the requested ones (default: all)."""
    out = [family("analysis"), *(family(n) for n in dict.fromkeys(named(names)) if n != "analysis")]
    owners: dict[str, list[str]] = {}
    for fam in out:
        for rule in fam.rules:
            owners.setdefault(rule.name, []).append(fam.name)
    clashes = {rule: fams for rule, fams in owners.items() if len(fams) > 1}
    if clashes:  # egglog aborts the process on a duplicate rule name
        raise ValueError(f"rule names must be unique; used more than once (rule: families): {clashes}")
    return out


def all_family_names() -> list[str]:
    return [n for n in _MODULES if n != "analysis"]
