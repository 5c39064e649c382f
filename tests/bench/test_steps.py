"""One step under one backend: comparison with eager and interleaved timing rounds."""

import pytest
import torch
from optimus_egg.bench.backends import backends
from optimus_egg.bench.device import Device
from optimus_egg.bench.steps import (Result, Row, Settings, clear_grads, compare, compile_first_step,
                                      interleaved_times, make_step, snapshot, training_inputs)

from tests.helpers import Fn


def test_compare_checks_values_shapes_and_missing_grads():
    a = Result([torch.ones(3)], [torch.zeros(2), None])
    assert compare(a, a, 1e-4, 1e-5) == (True, 0.0)
    off = Result([torch.ones(3) + 1e-3], [torch.zeros(2), None])
    ok, err = compare(off, a, 1e-4, 1e-5)
    assert not ok and err == pytest.approx(1e-3, rel=1e-3)
    assert compare(Result([torch.ones(4)], a.grads), a, 1e-4, 1e-5) == (False, None)
    assert not compare(Result(a.outputs, [torch.zeros(2), torch.zeros(1)]), a, 1e-4, 1e-5)[0]


def test_interleaved_rounds_rotate_and_take_medians():
    order = []
    steps = {k: (lambda k=k: order.append(k)) for k in "abc"}
    settings = Settings(reps=3, warmup=0, target_sample_s=0.0)
    times = interleaved_times(steps, Device("cpu"), settings)
    assert set(times) == set("abc") and all(t >= 0 for t in times.values())
    timed = order[3:]  # after one calibration call each
    assert timed == list("abc" "bca" "cab")


def test_a_graph_left_with_nothing_to_compute_has_no_kernels():
    """Optimus turns ``stack(unbind(x))`` into ``x``, and Inductor writes no code for it: 0
    kernels, not an error."""
    optimus = backends(["inductor+optimus"])[0]
    row = Row("unbind_stack", "inference", optimus.label)
    model = Fn(lambda x: torch.stack(torch.unbind(x, 0), 0))
    compile_first_step(optimus, model, (torch.randn(3, 4),), False, Device("cpu"), row)
    assert row.kernels == 0 and row.launches == 0


def test_a_model_without_parameters_trains_its_inputs():
    x = torch.randn(3)
    linear = torch.nn.Linear(3, 3)
    assert training_inputs(linear, (x,))[0] is x
    double = Fn(lambda t: t * 2)
    (leaf,) = training_inputs(double, (x,))
    assert leaf.requires_grad and not x.requires_grad
    result = snapshot(make_step(double, double, (leaf,), True)(), double, True, (leaf,))
    torch.testing.assert_close(result.grads, [torch.full((3,), 2.0)])


def test_a_training_step_whose_outputs_carry_no_gradient_runs_no_backward():
    model = Fn(lambda t: t.clamp(-1, 1).detach())
    (x,) = training_inputs(model, (torch.randn(3),))
    out = make_step(model, model, (x,), True)()
    assert x.grad is None and not out.requires_grad


def test_a_training_step_from_cleared_gradients_weighs_its_own_gradients():
    """The harness clears the gradients before it weighs a training step, so that the step's peak
    holds every byte of its own gradients whatever the last step left."""
    model = torch.nn.Linear(256, 256, bias=False)
    x = torch.randn(4, 256, requires_grad=True)
    step = make_step(model, model, (x,), True)
    step()
    clear_grads(model, (x,))
    assert model.weight.grad is None and x.grad is None
    assert Device("cpu").peak_bytes(step) >= model.weight.numel() * 4 + x.numel() * 4
