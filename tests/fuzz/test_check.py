"""The fuzzer's own judgement (``check._check_grads``, ``check._compare``): rounding passes, a changed
value does not."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.fuzz.check import _check_grads, _compare, check_backward, check_compiled, check_program, dynamo_graph
from tests.fuzz.programs import Program
from tests.helpers import Fn


def _grads(eager, optimized, x: torch.Tensor) -> None:
    args_e, args_g = [x.clone().requires_grad_()], [x.clone().requires_grad_()]
    torch.manual_seed(0)
    _check_grads([eager(*args_e)], args_e, [optimized(*args_g)], args_g, (Fn(eager), Fn(optimized)))


def test_a_cancelling_gradient_summed_in_another_order_passes():
    """Found by the fuzzer (seed 63): ``v0 / v0`` of ``v0 = cat([x1, x1])``, optimized to one
    division of the cat, has a gradient that cancels terms of ~100 where x1 is ~0.01. In
    float32 it was 2.3e-5 from eager's (tolerance around 0: 1e-5), in float64 2e-16."""
    src = ("def forward(self, x0, x1, x2):\n    v0 = torch.cat([x1, x1], 0)\n    v1 = torch.split(v0, [0, 0, 0, 2], 0)\n"
           "    v7 = v0.narrow(0, 0, 2) / v0.narrow(0, 0, 2)\n    v8 = torch.cat([v7], 0)\n    return (v8, v1,)\n")
    x1 = torch.randn(1, 1, 5, 6, generator=torch.Generator().manual_seed(0)) * 0.01
    program = Program(src, (torch.randn(1), x1, torch.randn(1)))
    check_program(program, dynamo_graph(program, grad=True), grad=True)


def test_a_gradient_off_by_more_than_rounding_fails():
    x = torch.rand(4, 5) + 0.5
    with pytest.raises(AssertionError, match="in float64"):
        _grads(lambda x: x * x, lambda x: x * x * (1 + 1e-4), x)  # off beyond float32's tolerance
    with pytest.raises(AssertionError, match="in float64"):  # NaN where eager's is finite
        _grads(lambda x: x * 2, lambda x: torch.where(x > 1.2, x * 2, x * float("nan")), x)
    _grads(lambda x: x * x, lambda x: x * x, x)


def test_a_gradient_the_program_cannot_give_in_float64_keeps_float32s_verdict():
    x = torch.rand(4, 5) + 0.5
    with pytest.raises(AssertionError, match="grad of input 0: Tensor-likes"):
        _grads(lambda x: x * x, lambda x: (x.double() * x * (1 + 1e-4)).float(), x)


def test_a_backward_program_whose_draws_torch_itself_moves_is_not_judged():
    """Found by the fuzzer (seed 303, backward flavour): the same pipeline without the optimizer
    (Dynamo, AOTAutograd) gives ``v9`` other dropout masks than eager, with or without the
    optimizer (the dropouts nothing reads, ``v5`` and ``v7``, are where the draws move). Such a
    program says nothing about the optimizer: the check leaves it out."""
    src = ("def forward(self, x0, x1, x2):\n    v0 = torch.relu(x2)\n    v1 = torch.split(v0, 3, 0)\n"
           "    v2 = v1[-3]\n    v3 = v1[-2]\n    v4 = v1[-1]\n    v5 = F.dropout(v2, 0.3)\n    v6 = F.dropout(v3, 0.3)\n"
           "    v7 = F.dropout(v4, 0.3)\n    v8 = torch.cat([v5, v6, v7], 0)\n    v9 = v6[..., :]\n    return (v9, v1,)\n")
    x2 = torch.tensor([[-2.1788], [0.5684], [-1.0845], [-1.3986], [0.4033], [0.8380], [-0.7193]])
    assert not check_backward(Program(src, (torch.tensor([1.5410]), torch.tensor([-0.2934]), x2)))


def test_a_gradient_summed_in_half_precision_is_judged_at_its_tolerance():
    """Found by the fuzzer (seed 303, backward flavour): ``x0``'s gradient flows back from
    float16 outputs (``v5`` returned three times), and summed in another order it was one unit
    of float16's last place (0.002 at 2.9) from eager's: within float16's tolerance, beyond
    float32's, which its dtype had picked."""
    src = ("def forward(self, x0, x1):\n    v0 = torch.narrow(x0, 0, 0, 0)\n    v1 = torch.relu(v0)\n"
           "    v2 = torch.split(x0, 1, 1)\n    v3 = v2[-1]\n    v4 = v3.to(dtype=torch.float16)\n"
           "    v5 = torch.cat([v4], 1)\n    v6 = torch.split(v5, 1, 0)\n    v7 = torch.cat([x1, v5, v5], 0)\n"
           "    return (v7, v6,)\n")
    program = Program(src, (torch.tensor([[1.5410], [-0.2934]]), torch.tensor([[-2.1797]], dtype=torch.float16)))
    assert check_backward(program)


def test_a_backward_program_that_crashes_torch_itself_is_not_run():
    """Found by the fuzzer (seed 404, backward flavour): returning a view of a computed tensor
    and that view detached crashes AOTAutograd (torch 2.13; a segmentation fault replaying the
    outputs' aliases, with or without the optimizer), which took the whole test run down."""
    src = ("def forward(self, x0, x1):\n    v0 = torch.cat((x0, x0, x0, x0, x0,), 1)\n    v1 = torch.chunk(v0, 4, 1)\n"
           "    v2 = v1[0]\n    v9 = v1[2]\n    v10 = v9.detach()\n    return (v10, v2, v2, v9,)\n")
    assert not check_backward(Program(src, (torch.randn(10, 12), torch.randn(8, dtype=torch.float64))))


def test_a_fresh_tensor_returned_with_its_detach_is_checked():
    """``y.detach(), y`` with ``y`` an op's fresh result is no torch crash, so the program is run:
    the rewrite made ``y`` a slice of a wider gelu, and AOTAutograd failed on the pair (a
    probe's fuzzer, seed 5139; test_emit has the model)."""
    src = ("def forward(self, x0):\n    v0 = torch.split(torch.cat([x0, x0], 1), [1, 3], 0)[1]\n"
           "    v1 = F.gelu(v0)\n    v2 = F.gelu(torch.stack([v0, v1], 3).unbind(3)[0])\n"
           "    return (v2.detach(), v2,)\n")
    assert check_backward(Program(src, (torch.randn(4, 3, 8),)))


def _outputs(eager, optimized, x: torch.Tensor) -> None:
    _compare(Fn(eager), Fn(optimized), (x,), ([], []), grad=False)


def test_a_float64_output_of_float32_values_is_judged_at_float32s_tolerance():
    """Found by the fuzzer (seed 909, split_cat and grad flavours): ``stack`` of gelu'd float32
    pieces and one piece cast to float64 is float64. The optimizer's one gelu of the whole
    tensor takes CPU's vectorized loop, eager's gelu of each strided piece the scalar one: 2e-7
    apart, beyond float64's tolerance (1e-7), within float32's."""
    x = torch.randn(2, 20000, generator=torch.Generator().manual_seed(0))
    eager = lambda x: torch.stack([F.gelu(x[:, 0::2]), x[:, 1::2].double()])  # noqa: E731
    optimized = lambda x: torch.stack([F.gelu(x)[:, 0::2], x[:, 1::2].double()])  # noqa: E731
    assert not torch.equal(eager(x), optimized(x))
    _outputs(eager, optimized, x)
    with pytest.raises(AssertionError, match="output 0"):
        _outputs(eager, lambda x: optimized(x) * (1 + 1e-5), x)


def test_a_float32_output_of_half_values_is_judged_at_halfs_tolerance():
    """As above, where the program casts down inside: the float16 values a float32 output holds
    carry float16's rounding (here two products against one), though every input is float32."""
    x = torch.randn(2, 20000, generator=torch.Generator().manual_seed(0))
    eager = lambda x: torch.cat([x[:, 0::2].half() * 3 * 7, x[:, 1::2]])  # noqa: E731
    optimized = lambda x: torch.cat([(x.half() * 21)[:, 0::2], x[:, 1::2]])  # noqa: E731
    assert not torch.equal(eager(x), optimized(x))
    _outputs(eager, optimized, x)
    with pytest.raises(AssertionError, match="output 0"):
        _outputs(eager, lambda x: optimized(x) * (1 + 1e-2), x)


def test_an_output_that_never_touched_half_keeps_its_own_tolerance():
    """Only the values computed through float16 are judged at its tolerance: the program's other
    float32 output, off by 1e-4, still fails."""
    x = torch.randn(2, 200, generator=torch.Generator().manual_seed(0))
    eager = lambda x: (x.half() * 21, x * 3)  # noqa: E731
    _outputs(eager, eager, x)
    with pytest.raises(AssertionError, match="output 1"):
        _outputs(eager, lambda x: (x.half() * 21, x * 3 * (1 + 1e-4)), x)


def _off_by_one(gm: torch.fx.GraphModule, _: Any) -> Any:
    """A backend that gets every value wrong."""
    return lambda *args: [t + 1 for t in gm(*args)]


def test_a_compiled_program_plain_inductor_gets_wrong_too_is_not_judged():
    """Found by the fuzzer (seed 1818, backend flavour): programs share a code identity, so
    Dynamo recompiled one with dynamic sizes after another shape of it, and torch 2.13's Inductor
    alone then computed it wrongly (the optimizer kept the graph as written). What the reference
    gets wrong too says nothing about the optimizer, and the check leaves it out; what only the
    backend gets wrong fails. torch 2.15's Inductor computes seed 1818's program right, so a
    backend that is always wrong stands in for that Inductor."""
    program = Program("def forward(self, x0):\n    return (torch.cat(torch.split(x0, 2, 1), 1).relu(),)\n",
                      (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),))
    assert check_compiled(program, backend="eager", reference=_off_by_one)
    assert not check_compiled(program, backend=_off_by_one, reference=_off_by_one)
    with pytest.raises(AssertionError):
        check_compiled(program, backend=_off_by_one, reference="eager")


def test_a_graph_whose_sizes_the_first_run_guarded_is_not_required_to_come_back_the_same():
    """Found by the fuzzer (seed 1919, dynamic flavour). Fake-running the emitted
    ``narrow(x1, 1, 0, 3) * 2`` (``x1`` of ``s0`` columns) adds the guard ``s0 == 3``: its strides
    equal a contiguous tensor's only then. A second run sees 3 columns, and finds ``x1 * 2``
    (right under that guard). The cache check compares only runs on one graph."""
    src = ("def forward(self, x0, x1):\n    v4 = x1.narrow(1, 0, 0) + x1.narrow(1, 0, 0)\n"
           "    v5 = x1.narrow(1, 0, 1) + x1.narrow(1, 0, 1)\n    v6 = x1.narrow(1, 1, 2) + x1.narrow(1, 1, 2)\n"
           "    v7 = torch.cat([v4, v5, v6], 1)\n    v3 = torch.split(x1, 1, 0)\n    return (v7, v3,)\n")
    program = Program(src, (torch.tensor([1.5410]), torch.randn(2, 3, generator=torch.Generator().manual_seed(0))))
    check_program(program, dynamo_graph(program, dynamic=True))
