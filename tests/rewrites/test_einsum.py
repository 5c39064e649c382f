"""einsum("bcd,bcde->bce") as a broadcast multiply and a sum (Optimus' einsum_to_pointwise_pass):
before and after on random inputs (outputs and gradients), which form each cost model keeps, and
the einsums the rule must leave alone."""

import pytest
import torch

from optimus_egg import optimize, optable
from optimus_egg.calls import Registry, contracts_last, generic_call
from optimus_egg.pipeline import capture
from tests.helpers import Fn, check, launches

RULE = "einsum-as-product-sum"
X, W = torch.randn(4, 3, 5), torch.randn(4, 3, 5, 6)


def _calls(gm: torch.fx.GraphModule, name: str) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method")
               and name == getattr(n.target, "__name__", n.target))


def _input_grads(fn, *inputs: torch.Tensor) -> list[torch.Tensor]:
    args = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*args)
    (out * torch.randn_like(out, generator=torch.Generator().manual_seed(0))).sum().backward()
    return [a.grad for a in args]


def check_rewritten(fn, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    """Under the ``inductor`` cost model the einsum becomes a mul and a sum; outputs and the
    inputs' gradients are the einsum's."""
    report, gm = check(fn, *inputs, cost_model="inductor")
    assert report.rules_fired[RULE] == 1
    assert (_calls(gm, "einsum"), _calls(gm, "mul"), _calls(gm, "sum")) == (0, 1, 1)
    for got, want in zip(_input_grads(gm, *inputs), _input_grads(Fn(fn), *inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    return gm


def test_einsum_then_add_is_a_product_and_a_sum_under_inductor():
    gm = check_rewritten(lambda x, w: torch.einsum("bcd,bcde->bce", x, w) + 1, X, W)
    # the sum runs over the contracted dim of the broadcast product, as Optimus writes it
    total = next(n for n in gm.graph.nodes if getattr(n.target, "__name__", "") == "sum")
    assert total.args[1] == 2 and total.meta["val"].shape == (4, 3, 6)


@pytest.mark.parametrize("spell", [
    lambda x, w: torch.einsum("xyz,xyzw->xyw", x, w),  # any four letters
    lambda x, w: torch.einsum(" b c d , b c d e -> b c e ", x, w),  # whitespace anywhere
    lambda x, w: torch.einsum("bcd,bcde->bce", [x, w]),  # operands as a list
    lambda x, w: torch.functional.einsum("BCD,BCDE->BCE", x, w),
])
def test_every_spelling_of_the_equation_is_rewritten(spell):
    check_rewritten(lambda x, w: spell(x, w).relu(), X, W)


def test_non_contiguous_operands_and_float64():
    def fn(x, w):
        return torch.einsum("bcd,bcde->bce", x.transpose(0, 1), w.transpose(0, 1)) + 2

    check_rewritten(fn, torch.randn(3, 4, 5), torch.randn(3, 4, 5, 6))
    check_rewritten(lambda x, w: torch.einsum("bcd,bcde->bce", x, w) - 1, X.double(), W.double())


def test_eager_cost_model_keeps_the_einsum():
    """Eager runs the einsum as one bmm and the product form as two kernels: never cheaper."""
    fn = Fn(lambda x, w: torch.einsum("bcd,bcde->bce", x, w) + 1)
    report, gm = check(fn, X, W, cost_model="eager")
    assert report.rules_fired[RULE] == 1 and report.kept
    assert _calls(gm, "einsum") == 1
    inductor, _ = optimize(fn, (X, W), cost_model="inductor")
    assert launches(inductor, X, W) == launches(fn, X, W) + 1


def test_inductor_model_prices_the_product_form_as_one_fused_kernel():
    """bmm + add is an extern call and a kernel; mul + sum + add is one reduction kernel."""
    report, _ = check(lambda x, w: torch.einsum("bcd,bcde->bce", x, w) + 1, X, W, cost_model="inductor")
    before, after = report.costs["inductor"]
    assert after < before
    alone, gm = check(lambda x, w: torch.einsum("bcd,bcde->bce", x, w), X, W, cost_model="inductor")
    assert alone.kept and _calls(gm, "einsum") == 1  # nothing fuses: one launch either way


@pytest.mark.parametrize("eq,shapes", [
    ("bcd,bcdd->bcd", [(4, 3, 5), (4, 3, 5, 5)]),  # a diagonal (Optimus' matcher takes it)
    ("bcd,bced->bce", [(4, 3, 5), (4, 3, 6, 5)]),  # contracts w's last dim
    ("bcd,bcde->bec", [(4, 3, 5), (4, 3, 5, 6)]),  # output permuted
    ("bcd,bcde->bcde", [(4, 3, 5), (4, 3, 5, 6)]),  # nothing contracted
    ("bd,bde->be", [(4, 5), (4, 5, 6)]),  # other ranks
    ("bcd,bcde", [(4, 3, 5), (4, 3, 5, 6)]),  # implicit output
    ("...d,...de->...e", [(4, 3, 5), (4, 3, 5, 6)]),  # ellipsis
])
def test_other_equations_are_left_alone(eq, shapes):
    inputs = [torch.randn(s) for s in shapes]
    report, gm = check(lambda x, w: torch.einsum(eq, x, w) + 1, *inputs, cost_model="inductor")
    assert RULE not in report.rules_fired and _calls(gm, "einsum") == 1


def test_three_operands_are_left_alone():
    report, _ = check(lambda x, w, v: torch.einsum("bcd,bcde,bce->bc", x, w, v) + 1, X, W, torch.randn(4, 3, 6),
                      cost_model="inductor")
    assert RULE not in report.rules_fired


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.int64])
def test_dtypes_whose_products_round_or_sums_promote_are_left_alone(dtype):
    """Half-precision products would round before the sum (bf16: off by 0.03 here); an integer
    sum promotes int32 to int64."""
    if dtype.is_floating_point:
        x, w = X.to(dtype), W.to(dtype)
    else:
        x, w = torch.randint(0, 5, X.shape, dtype=dtype), torch.randint(0, 5, W.shape, dtype=dtype)
    report, gm = check(lambda x, w: torch.einsum("bcd,bcde->bce", x, w) + 1, x, w, cost_model="inductor")
    assert RULE not in report.rules_fired and _calls(gm, "einsum") == 1


def test_broadcast_operands_are_left_alone():
    report, _ = check(lambda x, w: torch.einsum("bcd,bcde->bce", x, w) + 1, X[:1], W, cost_model="inductor")
    assert RULE not in report.rules_fired


class Contract(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bcd,bcde->bce", x, w) + 1


def test_symbolic_sizes_are_left_alone():
    batch = torch.export.Dim("batch")
    gm, _ = torch._dynamo.export(Contract(), dynamic_shapes=({0: batch}, {0: batch}))(X, W)
    report, _ = check(gm, X, W, cost_model="inductor")
    assert RULE not in report.rules_fired


@pytest.mark.parametrize("eq,ok", [
    ("bcd,bcde->bce", True), ("ijk,ijkl->ijl", True), (" b c d,b c d e->b c e", True),
    ("bcd,bcdd->bcd", False), ("bcd,bcde->bec", False), ("bc.,bc.e->bce", False), ("bcd,bcde,x->bce", False),
])
def test_contracts_last_reads_the_equation(eq, ok):
    assert contracts_last(eq) is ok


def test_only_the_contracting_form_is_keyed_as_an_einsum_rules_know():
    registry = Registry()
    calls = {}
    for eq in ("bcd,bcde->bce", "bcd,bcde->bec"):
        gm = capture(Fn(lambda x, w, eq=eq: torch.einsum(eq, x, w)), (X, W))
        node = next(n for n in gm.graph.nodes if "einsum" in str(n.target))
        call, _ = generic_call(node, optable.lookup(node))
        calls[eq] = registry.key(call, shareable=True)
    assert calls["bcd,bcde->bce"].startswith("einsum#")
    assert registry.calls[calls["bcd,bcde->bce"] + "-sum"].target is torch.sum
    assert calls["bcd,bcde->bec"].startswith("einsum-as-written#")
