"""The benchmark zoo: every model runs, is reproducible, and optimize() of it equals eager
(outputs on fresh random inputs, and gradients)."""

import pytest
import torch
from optimus_egg.bench.zoo import zoo

from tests.helpers import check

ZOO = zoo(quick=True)


def _grads(model, fn, inputs):
    model.zero_grad(set_to_none=True)
    out = fn(*inputs)
    sum(t.sum() for t in torch.utils._pytree.tree_leaves(out)).backward()
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name", list(ZOO))
def test_optimized_model_equals_eager(name):
    model, inputs = ZOO[name]()
    _, gm = check(model, *inputs)
    for got, want in zip(_grads(model, gm, inputs), _grads(model, model, inputs), strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


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
