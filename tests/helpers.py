"""Run a function before and after ``optimize`` on random inputs and compare."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from optimus_egg import Report, optimize
from optimus_egg.counting import eager_launches
from optimus_egg.egraph import ENode, Frozen


#: For tests that assert how CPU Inductor lays out kernels (which loops fuse, which kernels
#: repeat), figures of torch 2.13's Inductor (2.14's and 2.15's agree): torch 2.11's fuses some
#: of them otherwise (``log_softmax(x) + x`` one loop fewer; a chain's backward kernels repeat in
#: another pattern).
INDUCTOR_2_13 = pytest.mark.skipif(torch.torch_version.TorchVersion(torch.__version__) < "2.13",
                                   reason="asserts the CPU Inductor kernel layout of torch 2.13 to 2.15")


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


class Weighted(torch.nn.Module):
    """``fn(x, w)`` with ``w`` a parameter of ``n`` random elements: a rule's pattern with a
    gradient to check (:func:`check_training`)."""

    def __init__(self, n: int, fn: Callable[[torch.Tensor, torch.Tensor], Any]) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n))
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x, self.w)


def _like(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point:
        return torch.randn_like(t)
    return torch.randint_like(t, 0, 10)


def check(fn: Callable[..., Any] | torch.nn.Module, *inputs: torch.Tensor, trials: int = 3,
          **options: Any) -> tuple[Report, torch.fx.GraphModule]:
    """The optimized graph computes what ``fn`` computes on ``inputs`` and fresh random inputs."""
    model = fn if isinstance(fn, torch.nn.Module) else Fn(fn)
    gm, report = optimize(model, inputs, **options)
    assert report.fallback is None, report.fallback
    for trial in range(trials):
        args = inputs if trial == 0 else tuple(_like(t) for t in inputs)
        expected, got = model(*args), gm(*args)
        flat_e, flat_g = torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(got)
        assert len(flat_e) == len(flat_g)
        for e, g in zip(flat_e, flat_g):
            assert e.shape == g.shape and e.dtype == g.dtype
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    return report, gm


#: The options a rule's test runs under: extraction by eager launches, which a rule that removes
#: ops pays under by construction. The default, Inductor-aware model keeps several of these
#: small graphs as written on CPU, where Inductor already fuses the ops piece by piece
#: (tests/extract/test_inductor_default.py). Without the memory bound, which drops batching
#: from training graphs as a policy of the pipeline (tests/test_bounds.py): a rule's test
#: checks the rule.
EAGER = {"cost_model": "eager", "memory_bound": False}


def check_rule(fn: Callable[..., Any] | torch.nn.Module, *inputs: torch.Tensor, **options: Any
               ) -> tuple[Report, torch.fx.GraphModule]:
    """:func:`check` with the rule's graph extracted by eager launches (:data:`EAGER`)."""
    return check(fn, *inputs, **{**EAGER, **options})


def check_training(model: torch.nn.Module, *inputs: torch.Tensor, **options: Any) -> torch.fx.GraphModule:
    """:func:`check`, and every parameter gets the gradient eager gives it (None where eager's is None)."""
    _, gm = check(model, *inputs, **options)
    for got, want in zip(_grads(model, gm, inputs), _grads(model, model, inputs), strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    return gm


def _grads(model: torch.nn.Module, fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> list[Any]:
    model.zero_grad(set_to_none=True)
    out = fn(*inputs)
    sum(t.sum() for t in torch.utils._pytree.tree_leaves(out)).backward()
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def frozen(nodes: list[ENode]) -> Frozen:
    """An e-graph snapshot made of ``nodes`` (each names its class), for extractor tests."""
    classes: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        classes.setdefault(n.eclass, []).append(i)
    return Frozen(nodes, classes, {})


def launches(fn: Callable[..., Any] | torch.nn.Module, *inputs: torch.Tensor) -> int:
    model = fn if isinstance(fn, torch.nn.Module) else Fn(fn)
    return eager_launches(model, *inputs)


def calls_to(gm: torch.fx.GraphModule, target: Any) -> int:
    """How many ``call_function`` nodes of ``gm`` call ``target``."""
    return sum(n.op == "call_function" and n.target is target for n in gm.graph.nodes)


def assert_same_build(first: tuple[torch.nn.Module, tuple[Any, ...]], second: tuple[torch.nn.Module, tuple[Any, ...]],
                      equal_nan: bool = False) -> None:
    """Two builds of a seeded factory: the same weights and the same inputs, bit for bit."""
    (m1, x1), (m2, x2) = first, second
    for a, b in zip([*m1.state_dict().values(), *x1], [*m2.state_dict().values(), *x2], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=equal_nan)
