"""The benchmark zoo: every model runs, is reproducible, and optimize() of it equals eager
(outputs on fresh random inputs, and gradients)."""

import pytest
from optimus_egg.bench.zoo import zoo

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
