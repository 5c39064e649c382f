"""The benchmark's columns: which exist, how --rules makes one, and what each hands to Inductor."""

import pytest
import torch
from optimus_egg.bench.backends import (
    OPTIMUS,
    STANDARD,
    backends,
    optimus_config,
    rules_backend,
)
from optimus_egg.bench.steps import dynamo_graph, eager_equivalent
from optimus_egg.rewrites import all_family_names

from tests.helpers import Fn


def test_standard_columns_in_order_then_one_per_rule_set():
    cols = backends(STANDARD, ["split_cat", "split_cat,pointwise", "split_cat"])
    assert [c.label for c in cols] == [*STANDARD, "optimus_egg[split_cat]", "optimus_egg[split_cat+pointwise]"]
    assert cols[-1].options == {"families": ["split_cat", "pointwise"]}
    assert [c.label for c in backends(["optimus_egg", "eager"])] == ["eager", "optimus_egg"]


def test_unknown_names_are_errors_listing_the_valid_ones():
    with pytest.raises(ValueError, match="inductor\\+optimus"):
        backends(["tvm"])
    with pytest.raises(ValueError, match=all_family_names()[0]):
        rules_backend("split_cat,no_such_family")
    with pytest.raises(ValueError, match="at least one"):
        rules_backend(" , ")


def test_optimus_config_is_accepted_by_inductor_and_turns_every_pass_on():
    cfg = optimus_config()
    with torch._inductor.config.patch(cfg):  # an unknown pass name raises KeyError
        assert "split_cat_pass" in torch._inductor.config.pre_grad_fusion_options
        assert "batch_linear" in torch._inductor.config.pre_grad_fusion_options
        assert "unbind_stack_aten_pass" in torch._inductor.config.post_grad_fusion_options
    assert "group_linear" not in cfg["post_grad_fusion_options"]
    optimus = next(b for b in backends() if b.label == OPTIMUS)
    assert optimus.compiler == "inductor" and optimus.options == cfg


def cruft(x):
    x = torch.cat(torch.split(x, 4, dim=1), dim=1)  # a no-op glue that Optimus removes too
    return torch.cat([torch.relu(p) for p in torch.split(x, 2, dim=1)], dim=1)


@pytest.mark.parametrize("train", [False, True])
def test_rewriting_columns_hand_inductor_fewer_eager_launches(train):
    model = Fn(cruft)
    x = torch.randn(4, 8, requires_grad=train)
    counts = {b.label: eager_equivalent(b, model, (x,), train) for b in backends()}
    assert counts["eager"] == counts["inductor"]
    assert counts["inductor+optimus"] < counts["inductor"]
    assert counts["optimus_egg"] < counts["inductor+optimus"]


def test_inference_column_optimizes_a_model_with_parameters():
    """Regression: Dynamo captures inference under no_grad, so the optimizer must run in that
    mode too; outside it, the outputs of ops on parameters seemed to gain requires_grad and
    the optimizer fell back (strict mode, set by conftest, turns that into an error)."""
    class Head(torch.nn.Module):  # its own forward: Fn's Dynamo cache entries are the other tests'
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return cruft(torch.sigmoid(self.lin(x)))

    model, x = Head(), torch.randn(4, 8)
    counts = {b.label: eager_equivalent(b, model, (x,), False) for b in backends(["inductor", "optimus_egg"])}
    assert counts["optimus_egg"] < counts["inductor"]


def test_dynamo_graph_is_what_a_backend_receives():
    gm, example_inputs = dynamo_graph(Fn(cruft), (torch.randn(4, 8),), train=False)
    assert len(example_inputs) == 1
    torch.testing.assert_close(gm(*example_inputs)[0], cruft(example_inputs[0]))


def test_optimizer_flags_reach_every_optimus_egg_column():
    import argparse

    from optimus_egg.bench.harness import add_arguments
    from optimus_egg.cli_options import options_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--rules", "split_cat", "--max-iterations", "7", "--option", "extractor='ilp'"])
    columns = backends(["inductor", "optimus_egg"], args.rules, options_from_args(args))
    egg = [c for c in columns if c.compiler == "optimus_egg"]
    assert [c.label for c in egg] == ["optimus_egg", "optimus_egg[split_cat]"]
    assert all(c.options["max_iterations"] == 7 and c.options["extractor"] == "ilp" for c in egg)
    assert egg[1].options["families"] == ["split_cat"] and "families" not in egg[0].options
    with pytest.raises(ValueError, match="unknown"):
        backends(["optimus_egg"], (), {"no_such_option": 1})
