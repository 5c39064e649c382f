"""Rule families. Each module lists its rules; ``FAMILIES`` maps a family name to them.

A rule is egglog text over the sorts of :mod:`optimus_egg.ir`, short enough to read as the
identity it states. ``analysis`` (shapes and dtypes) is always on; it never changes the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Rule:
    """``lhs → rhs`` when every ``when`` fact holds."""

    name: str
    lhs: str
    rhs: str
    when: tuple[str, ...] = ()
    covers: str = "new"  # the Optimus pass whose rewrite this rule performs, or "new"

    def egglog(self, ruleset: str) -> str:
        when = f" :when ({' '.join(self.when)})" if self.when else ""
        return f'(rewrite {self.lhs} {self.rhs}{when} :ruleset {ruleset} :name "{self.name}")'


@dataclass(frozen=True)
class Derive:
    """A datalog rule: when the ``query`` facts hold, perform the ``actions``."""

    name: str
    query: tuple[str, ...]
    actions: tuple[str, ...]
    covers: str = "new"

    def egglog(self, ruleset: str) -> str:
        return (f"(rule ({' '.join(self.query)}) ({' '.join(self.actions)})"
                f' :ruleset {ruleset} :name "{self.name}")')


AnyRule = Rule | Derive

#: Family name → module that defines ``RULES`` (and optionally ``DECLARATIONS``).
_MODULES = {
    "analysis": "optimus_egg.rewrites.analysis",
    "split_cat": "optimus_egg.rewrites.split_cat",
    "pointwise": "optimus_egg.rewrites.pointwise",
}
DEFAULT_FAMILIES = ("split_cat", "pointwise")


@dataclass(frozen=True)
class Family:
    name: str
    rules: tuple[AnyRule, ...]
    declarations: str = ""


def family(name: str) -> Family:
    if name not in _MODULES:
        raise ValueError(f"unknown rule family {name!r}; valid: {', '.join(sorted(_MODULES))}")
    mod = import_module(_MODULES[name])
    return Family(name, tuple(mod.RULES), getattr(mod, "DECLARATIONS", ""))


def families(names: tuple[str, ...] | list[str] | None = None) -> list[Family]:
    """The analysis family plus the requested ones (default: all)."""
    wanted = list(DEFAULT_FAMILIES if names is None else names)
    return [family("analysis"), *(family(n) for n in dict.fromkeys(wanted) if n != "analysis")]


def all_family_names() -> list[str]:
    return [n for n in _MODULES if n != "analysis"]
