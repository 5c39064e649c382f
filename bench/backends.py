"""The columns of the benchmark: eager, ``inductor``, ``inductor`` with every Optimus pass,
``optimus_egg`` and ``optimus_egg`` restricted to chosen rule families.

A :class:`Backend` knows how to compile a model, which Inductor config must be active while it
compiles, and which torch-level graph it hands to Inductor (for the eager-equivalent launch
count: the ATen ops that graph runs when executed eagerly).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from optimus_egg.backend import optimus_egg_backend
from optimus_egg.pipeline import Options, optimize_graph

EAGER, INDUCTOR, OPTIMUS, OPTIMUS_EGG = "eager", "inductor", "inductor+optimus", "optimus_egg"
STANDARD = (EAGER, INDUCTOR, OPTIMUS, OPTIMUS_EGG)

#: Optimus's post-grad passes (``torch._inductor.fx_passes``); ``group_linear`` needs fbgemm.
_POST_GRAD = ("normalization_aten_pass", "unbind_stack_aten_pass", "split_cat_aten_pass",
              "select_cat_aten_pass", "move_view_after_cat_aten_pass")


def optimus_config() -> dict[str, Any]:
    """``torch._inductor.config`` patch that turns on every Optimus pass open-source torch can
    run (pre-grad split/cat and batch fusions, post-grad ATen passes and batch fusions)."""
    from torch._inductor.fx_passes import split_cat
    from torch._inductor.fx_passes.group_batch_fusion import (
        POST_GRAD_FUSIONS,
        PRE_GRAD_FUSIONS,
    )

    known_post = set(getattr(split_cat, "post_grad_pass_names", _POST_GRAD)) | set(POST_GRAD_FUSIONS)
    post = [p for p in _POST_GRAD if p in known_post] + [f for f in POST_GRAD_FUSIONS if f != "group_linear"]
    return {
        "pre_grad_fusion_options": {k: {} for k in [*split_cat.pre_grad_pass_names, *PRE_GRAD_FUSIONS]},
        "post_grad_fusion_options": {k: {} for k in post},
    }


@dataclass(frozen=True)
class Backend:
    """One column. ``compiler`` is the ``torch.compile`` backend name (None: run eagerly)."""

    label: str
    compiler: str | None
    options: dict[str, Any] = field(default_factory=dict)  # torch.compile(..., options=...)
    optimus: bool = False  # options are Inductor config: Optimus's passes while compiling

    @property
    def is_optimus_egg(self) -> bool:
        return self.compiler == OPTIMUS_EGG

    def compile(self, model: torch.nn.Module) -> Callable[..., Any]:
        """``torch.compile`` with this column's options (Inductor takes config patches as
        options, which also cover the lazily compiled backward; a column with other options is
        a separate Dynamo cache entry, not a reuse of the ``inductor`` column's)."""
        if self.compiler is None:
            return model
        return torch.compile(model, backend=self.compiler, fullgraph=True, options=dict(self.options) or None)

    @contextlib.contextmanager
    def config(self) -> Iterator[None]:
        """The Inductor config this column compiles under (for running its passes by hand)."""
        with torch._inductor.config.patch(self.options if self.optimus else {}):
            yield

    def handed_to_inductor(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> fx.GraphModule:
        """Dynamo's graph as Inductor lowers it: after this backend's torch-level rewrite and
        Inductor's pre-grad passes (which run Optimus's pre-grad passes when they are on)."""
        from torch._inductor.fx_passes.pre_grad import pre_grad_passes

        if self.is_optimus_egg:
            gm, _ = optimize_graph(gm, Options.from_kwargs(**self.options))
        with self.config():
            return pre_grad_passes(gm, example_inputs)


def rules_backend(families: str, options: dict[str, Any] | None = None) -> Backend:
    """``--rules split_cat,pointwise`` → the column ``optimus_egg[split_cat+pointwise]``, with
    the command line's other optimizer ``options``.

    The families are checked here, so a typo fails before any model is compiled.
    """
    names = [f.strip() for f in families.split(",") if f.strip()]
    if not names:
        raise ValueError("--rules needs at least one rule family")
    Options.from_kwargs(**{**(options or {}), "families": names})  # raises, listing the valid ones
    return Backend(f"{OPTIMUS_EGG}[{'+'.join(names)}]", OPTIMUS_EGG, {**(options or {}), "families": names})


def backends(names: Sequence[str] = STANDARD, rules: Sequence[str] = (),
             options: dict[str, Any] | None = None) -> list[Backend]:
    """The standard columns asked for, in table order, then one column per ``--rules`` value.
    ``options`` (the optimizer flags of the command line) go to every optimus_egg column."""
    unknown = [n for n in names if n not in STANDARD]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; valid: {', '.join(STANDARD)}")
    try:
        Options.from_kwargs(**(options or {}))
    except TypeError as exc:  # unknown option names, reported like every other bad value
        raise ValueError(str(exc)) from None
    standard = {
        EAGER: Backend(EAGER, None),
        INDUCTOR: Backend(INDUCTOR, "inductor"),
        OPTIMUS: Backend(OPTIMUS, "inductor", optimus_config(), optimus=True),
        OPTIMUS_EGG: Backend(OPTIMUS_EGG, OPTIMUS_EGG, dict(options or {})),
    }
    out = [standard[n] for n in STANDARD if n in names]
    for value in rules:
        column = rules_backend(value, options)
        if column.label not in {b.label for b in out}:
            out.append(column)
    return out


def ensure_registered() -> None:
    """Make ``backend="optimus_egg"`` resolvable when the package is on the path but not
    installed (no entry-point metadata), as on a bare GPU machine."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    try:
        torch._dynamo.lookup_backend(OPTIMUS_EGG)
    except Exception:  # noqa: BLE001 - InvalidBackend; its class moved between torch versions
        if OPTIMUS_EGG not in _BACKENDS:
            register_backend(optimus_egg_backend, name=OPTIMUS_EGG)
