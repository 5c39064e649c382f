"""The benchmark zoo: every model runs, is reproducible, and optimize() of it equals eager
(outputs on fresh random inputs, and gradients)."""

import pytest
import torch
from optimus_egg.bench.zoo import zoo

from tests.helpers import check_training

ZOO = zoo(quick=True)


@pytest.mark.parametrize("name", list(ZOO))
def test_optimized_model_equals_eager(name):
    model, inputs = ZOO[name]()
    check_training(model, *inputs)


def test_factories_are_seeded():
    for name, make in ZOO.items():
        (m1, x1), (m2, x2) = make(), make()
        for a, b in zip(m1.state_dict().values(), m2.state_dict().values(), strict=True):
            assert torch.equal(a, b), name
        for a, b in zip(x1, x2, strict=True):
            assert torch.equal(a, b), name


def test_zoo_has_the_issue_models_and_the_quick_chain_is_smaller():
    full = zoo()
    assert len(full) >= 8 and list(full) == list(ZOO)
    chain_len = {q: len(zoo(q)["cruft_chain"]()[0].linears) * zoo(q)["cruft_chain"]()[0].every
                 for q in (False, True)}
    assert chain_len[True] < chain_len[False]
