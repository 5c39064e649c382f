"""The optimizer's options, checked once where they are given (``optimize``, the backend, the
command line) so that a bad value is one clear error rather than a fallback on every graph."""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field
from typing import Any

from optimus_egg import rewrites
from optimus_egg.egraph import Budget, check_rules
from optimus_egg.extract import select
from optimus_egg.extract.profile import load_profile


@dataclass(frozen=True)
class Options:
    """What ``optimize`` and the backend accept. Defaults are the documented ones."""

    families: tuple[str, ...] | None = None  # rule families; None = all
    budget: Budget = field(default_factory=Budget)
    strict: bool = False  # raise instead of falling back
    cost_model: str = "inductor"  # inductor | eager | memory (optimus_egg.extract.cost)
    extractor: str = "greedy"  # greedy | ilp | compare (optimus_egg.extract.select)
    ilp_seconds: float = 10.0  # the ILP's time limit; then the best found, or greedy's result
    cost_profile: str | None = None  # weights fitted by `optimus-egg tune` (a JSON file)
    batch_random: bool = False  # dropouts that draw may be batched (optimus_egg.draws): not eager's mask
    rewrite_backward: bool | str = "auto"  # the backward too (backend.BackwardPass); auto: batched on a GPU only
    verify: bool = False  # run the rewritten graph against the original on random inputs (optimus_egg.verify)
    memory_bound: bool = True  # no rewrite that adds the copies batching makes (optimus_egg.bounds)

    @classmethod
    def from_kwargs(cls, **kw: Any) -> "Options":
        budget_keys = {"max_iterations", "max_enodes", "max_seconds"}
        valid = {"families", "strict", "cost_model", "extractor", "ilp_seconds", "cost_profile", "batch_random",
                 "rewrite_backward", "verify", "memory_bound", *budget_keys}
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
                                       ("verify", False), ("memory_bound", True))}
        for name, flag in flags.items():
            allowed = "True, False or 'auto'" if name == "rewrite_backward" else "True or False"
            if not (isinstance(flag, bool) or ("auto" in allowed and flag == "auto")):  # bool("false") is True
                raise ValueError(f"option {name} must be {allowed}, got {flag!r}")
        cost_model = select.check_name("cost_model", kw.get("cost_model", "inductor"), select.COST_MODELS)
        extractor = select.check_name("extractor", kw.get("extractor", "greedy"), select.EXTRACTORS)
        profile = kw.get("cost_profile")
        if profile is not None:
            profile = str(profile)
            load_profile(profile)  # raises on a missing or malformed profile
        return cls(fams, budget, flags["strict"], cost_model, extractor,
                   float(_amount("ilp_seconds", kw.get("ilp_seconds", 10.0), integer=False)), profile,
                   flags["batch_random"], flags["rewrite_backward"], flags["verify"], flags["memory_bound"])


def _amount(name: str, value: Any, integer: bool) -> Any:
    """A budget or time limit: a non-negative integer, or (``integer=False``) number. Checked
    here, once: anything else (a string from ``--option max_iterations=abc``, NaN) would fail
    inside every compile, each graph falling back with a warning of its own, or (NaN seconds)
    never stop the clock."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not value >= 0:
        raise ValueError(f"option {name} must be a non-negative {'integer' if integer else 'number'}, got {value!r}")
    return value
