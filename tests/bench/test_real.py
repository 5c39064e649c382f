"""The real-model suite: every model builds, trains and infers eagerly, is seeded, and
``optimize`` of it (no Inductor) returns a graph whose outputs equal the model's in eval mode."""

import pytest
import torch
from optimus_egg import optimize
from optimus_egg.bench import harness, real

from tests.bench.test_harness import parse
from tests.helpers import assert_same_build

REAL = real.models()


def test_the_suite_has_thirty_models_and_a_quick_subset():
    assert len(REAL) >= 30 and all(name.startswith("real_") for name in REAL)
    assert set(real.QUICK) <= set(REAL) and list(real.models(quick=True)) == list(real.QUICK)
    args = parse("--suite", "real")
    assert list(harness.select_models(args.models, args.quick, args.suite)) == list(REAL)
    assert set(REAL) <= set(harness.select_models(None, False, "all"))


@pytest.mark.parametrize("name", list(REAL))
def test_real_model_trains_and_optimize_equals_it(name):
    model, inputs = REAL[name]()
    embeds = any(isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) for m in model.modules())
    assert not embeds or any(t.dtype == torch.long for t in inputs), "a model that embeds takes integer ids"
    assert_same_build((model, inputs), REAL[name]())  # seeded (before a step moves batch-norm statistics)
    out = model(*inputs)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters()), "a parameter the output does not reach"
    model.eval()
    gm, report = optimize(model, inputs)
    assert report.fallback is None, report.fallback
    torch.testing.assert_close(gm(*inputs), model(*inputs))
