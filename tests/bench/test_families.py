"""The Optimus pass-family models: optimize() of each equals eager (outputs on fresh random
inputs, and gradients), the family's simplification happens under optimus_egg, and Optimus's
pre-grad pass the model is for matches it."""

import pytest
import torch
from optimus_egg import optimize
from optimus_egg.bench import harness, steps
from optimus_egg.bench.backends import backends
from optimus_egg.bench.families import TARGETS, families
from optimus_egg.bench.zoo import zoo

from tests.bench.test_harness import parse
from tests.helpers import assert_same_build, check_training, launches

FAMILIES = families()

#: Families whose simplification trades eager launches for Inductor fusion (an einsum is one
#: bmm in eager; its mul and sum are two there, and one reduction kernel with the add after it
#: in Inductor): measured with the cost model that sees fusion.
FUSED_BY_INDUCTOR = {"family_einsum"}

#: Families whose simplification is fewer cat/stack inputs (one cat either way, so eager
#: launches stay; CPU Inductor writes each input with its own kernel): measured with the
#: cost model that prices cat inputs.
FEWER_CAT_INPUTS = {"family_split_cat_to_slices", "family_split_stack"}


def cat_inputs(gm: torch.fx.GraphModule) -> int:
    """Tensors passed to cat/stack calls in a graph."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (torch.cat, torch.concat, torch.stack):
            count += len(node.args[0] if node.args else node.kwargs["tensors"])
    return count


#: Families that draw random numbers: batched only with ``batch_random`` (other numbers than
#: eager's, as Optimus's pass draws), and equal to eager under one seed without it.
DRAWS = {name for name, make in FAMILIES.items() if getattr(make()[0], "draws", False)}


@pytest.mark.parametrize("name", [n for n in FAMILIES if n not in DRAWS])
def test_optimized_family_model_equals_eager(name):
    model, inputs = FAMILIES[name]()
    check_training(model, *inputs)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_a_family_model_that_draws_equals_eager_under_one_seed(name):
    model, inputs = FAMILIES[name]()
    gm, report = optimize(model, inputs)
    results = []
    for fn in (model, gm):
        torch.manual_seed(0)
        model.zero_grad(set_to_none=True)
        out = fn(*inputs)
        out.sum().backward()
        results.append([out, *(p.grad for p in model.parameters())])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("name", [n for n in FAMILIES if n not in FEWER_CAT_INPUTS | FUSED_BY_INDUCTOR])
def test_family_simplification_removes_launches(name):
    model, inputs = FAMILIES[name]()
    gm, report = optimize(model, inputs, batch_random=name in DRAWS, cost_model="eager")  # (launches: the rules')
    assert report.fallback is None
    assert launches(gm, *inputs) < launches(model, *inputs)


@pytest.mark.parametrize("name", sorted(FEWER_CAT_INPUTS))
def test_family_simplification_glues_fewer_pieces(name):
    model, inputs = FAMILIES[name]()
    original, _ = optimize(model, inputs, families=[])  # captured, nothing rewritten
    gm, report = optimize(model, inputs, cost_model="inductor")
    assert report.fallback is None
    assert cat_inputs(gm) < cat_inputs(original)
    assert launches(gm, *inputs) <= launches(model, *inputs)


@pytest.mark.parametrize("name", sorted(FUSED_BY_INDUCTOR))
def test_family_simplification_is_kept_where_inductor_builds_it_no_smaller(name):
    """On CPU the fused form builds no less than as written (Inductor lowers this per-batch
    ``bmm`` to one loop too), and launches more in eager: kept under both models."""
    model, inputs = FAMILIES[name]()
    _, report = optimize(model, inputs, cost_model="eager")
    assert report.kept and report.rules_fired  # eager: the fused form launches more
    check_training(model, *inputs)
    _, report = optimize(model, inputs)
    before, after = report.costs["inductor"]
    assert report.kept and after >= before


#: Models Optimus's pre-grad passes fail on (torch 2.13), and how.
OPTIMUS_FAILS = {"family_split_stack_twice": AssertionError, "family_cat_in_cat": KeyError}

PRE_GRAD = {name: [p for p in passes if not p.endswith("_aten_pass") and not p.startswith("batch_aten_")]
            for name, passes in TARGETS.items()}


@pytest.mark.parametrize("name", [n for n, passes in PRE_GRAD.items() if passes])
def test_optimus_pre_grad_pass_matches_the_model(name):
    """The model holds its family's pattern as Optimus sees it (pre-grad passes run by hand on
    Dynamo's graph, no Inductor compile; post-grad passes are checked by the benchmark)."""
    from torch._dynamo.utils import counters

    optimus = next(b for b in backends() if b.optimus)
    model, inputs = FAMILIES[name]()
    torch._dynamo.reset()  # the models share Plumbed.forward: one Dynamo cache entry each
    gm, example_inputs = steps.dynamo_graph(model, inputs, train=False)
    before = dict(counters["inductor"])
    if name in OPTIMUS_FAILS:
        with pytest.raises(OPTIMUS_FAILS[name]):
            optimus.handed_to_inductor(gm, example_inputs)
        return
    optimus.handed_to_inductor(gm, example_inputs)
    fired = [p for p in PRE_GRAD[name] if counters["inductor"][p] > before.get(p, 0)]
    assert fired, f"none of {PRE_GRAD[name]} matched"


def test_targets_are_optimus_pass_names():
    from torch._inductor.fx_passes import split_cat
    from torch._inductor.fx_passes.group_batch_fusion import POST_GRAD_FUSIONS, PRE_GRAD_FUSIONS

    known = {*split_cat.pre_grad_pass_names, *PRE_GRAD_FUSIONS, *POST_GRAD_FUSIONS,
             *getattr(split_cat, "post_grad_pass_names", ())}
    assert all(p in known for passes in TARGETS.values() for p in passes)
    assert list(TARGETS) == list(FAMILIES) and all(n.startswith("family_") for n in FAMILIES)


def test_factories_are_seeded():
    for make in FAMILIES.values():
        assert_same_build(make(), make())


def test_bench_suite_selects_the_families():
    args = parse("--suite", "families", "--quick")
    assert list(harness.select_models(args.models, args.quick, args.suite)) == list(FAMILIES)
    assert harness.command_line(args) == "optimus-egg bench --quick --suite families"
    everything = harness.select_models(None, True, "all")
    assert list(everything)[:len(zoo(quick=True)) + len(FAMILIES)] == [*zoo(quick=True), *FAMILIES]
    named = parse("--models", "dlrm,family_unbind_cat")
    assert list(harness.select_models(named.models, named.quick, named.suite)) == ["dlrm", "family_unbind_cat"]
    with pytest.raises(ValueError, match="family_nope"):
        harness.select_models(["family_nope"], False)
