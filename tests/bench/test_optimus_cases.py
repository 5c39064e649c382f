"""The Optimus test-pattern cases (:mod:`optimus_egg.bench.optimus_cases`): each builds and
runs eagerly, and ``optimize`` of each (no Inductor) computes what the model computes."""

import pytest
import torch
from optimus_egg import optimize
from optimus_egg.bench.optimus_cases import COUNTERS, MUTATES_INPUTS, NEWER_PASSES, TARGETS, cases

from tests.helpers import assert_same_build

CASES = cases()


def _inputs(name, inputs):
    """The inputs, copied for a case that writes them in place."""
    return tuple(t.clone() for t in inputs) if name in MUTATES_INPUTS else inputs


def _assert_same(got, want):
    got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w)


def _check(name, make):
    model, inputs = make()
    draws = getattr(model, "draws", False)
    torch.manual_seed(0)
    want = model(*_inputs(name, inputs))
    gm, report = optimize(model, _inputs(name, inputs))
    assert report.fallback is None, report.fallback
    if draws:  # one seed for both: without batch_random, the same numbers in the same order
        torch.manual_seed(0)
        want = model(*_inputs(name, inputs))
    torch.manual_seed(0)
    _assert_same(gm(*_inputs(name, inputs)), want)


@pytest.mark.parametrize("name", list(CASES))
def test_optimized_case_equals_eager(name):
    _check(name, CASES[name])


#: A few cases with the pattern inside a graph (inputs and outputs through a tanh).
INTERIOR = ["split_cat_identity", "split_cat_getitem_cat_merge", "group_batch_pointwise"]


@pytest.mark.parametrize("name", INTERIOR)
def test_optimized_interior_case_equals_eager(name):
    _check(name, cases(interior=True)[name])


def test_the_mutating_case_writes_its_input():
    model, (x,) = CASES["split_cat_mutation"]()
    y = x.clone()
    model(y)
    assert not torch.equal(x, y)


def test_targets_are_optimus_pass_names():
    from torch._inductor.fx_passes import split_cat
    from torch._inductor.fx_passes.group_batch_fusion import POST_GRAD_FUSIONS, PRE_GRAD_FUSIONS

    known = {*split_cat.pre_grad_pass_names, *getattr(split_cat, "post_grad_pass_names", ()), *PRE_GRAD_FUSIONS,
             *POST_GRAD_FUSIONS, *NEWER_PASSES}
    assert all(passes and all(p in known for p in passes) for passes in TARGETS.values())
    assert list(TARGETS) == list(CASES) == list(COUNTERS)
    assert all(n.startswith(("split_cat_", "group_batch_")) for n in CASES)


def test_factories_are_seeded():
    for make in CASES.values():
        assert_same_build(make(), make(), equal_nan=True)  # some inputs hold nan on purpose
