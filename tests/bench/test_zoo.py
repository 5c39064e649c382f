"""The benchmark zoo: every model runs, is reproducible, and optimize() of it equals eager
(outputs on fresh random inputs, and gradients)."""

import pytest
import torch
from optimus_egg.bench.zoo import REALISTIC_BATCH, zoo

from tests.helpers import assert_same_build, check_training

ZOO = zoo(quick=True)


@pytest.mark.parametrize("name", list(ZOO))
def test_optimized_model_equals_eager(name):
    model, inputs = ZOO[name]()
    check_training(model, *inputs)


def test_factories_are_seeded():
    for make in ZOO.values():
        assert_same_build(make(), make())


def test_zoo_has_the_issue_models_and_the_quick_chain_is_smaller():
    full = zoo()
    assert len(full) >= 8 and list(full) == list(ZOO)
    chain_len = {q: len(zoo(q)["cruft_chain"]()[0].linears) * zoo(q)["cruft_chain"]()[0].every
                 for q in (False, True)}
    assert chain_len[True] < chain_len[False]


def test_the_realistic_zoo_is_the_same_models_at_a_production_batch_and_width():
    realistic, toy = zoo(True, "realistic"), ZOO
    assert list(realistic) == list(toy)
    for name, make in realistic.items():
        model, inputs = make()
        toy_model = toy[name]()[0]
        assert all(t.shape[0] == REALISTIC_BATCH for t in inputs), name
        widths = [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert max(widths) >= 256 and type(model) is type(toy_model), name
        assert_same_build(make(), make())


def test_an_unknown_size_is_refused():
    with pytest.raises(ValueError, match="realistic"):
        zoo(size="huge")
