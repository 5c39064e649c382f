"""``verify=True``: a rewritten graph that computes something else falls back, naming the rules."""

import warnings

import pytest
import torch

from optimus_egg import optimize
from optimus_egg.pipeline import OptimizerFallback, capture
from optimus_egg.verify import Mismatch, random_inputs
from optimus_egg.verify import check as check_graphs
from tests.helpers import Fn, check

#: A rule of the user's own that is wrong: relu is not the identity.
WRONG = """
from optimus_egg.rewrites import Rule, op_named
RULES = [Rule("relu-is-identity", "(Unary f x)", "x", (op_named("f", "relu"),))]
"""


def towers(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.relu(p) for p in x.split(4, dim=1)], dim=1) * 2


@pytest.fixture
def wrong_rules(tmp_path):
    path = tmp_path / "wrong_rules.py"
    path.write_text(WRONG)
    return ["split_cat", "pointwise", str(path)]


def test_a_rule_that_changes_values_falls_back_with_one_warning_naming_it(wrong_rules, lenient):
    x = torch.randn(8, 16)
    unverified, _ = optimize(towers, (x,), families=wrong_rules)
    assert not torch.allclose(unverified(x), towers(x))  # the rule is wrong, and nothing else notices
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm, report = optimize(towers, (x,), families=wrong_rules, verify=True)
    assert torch.equal(gm(x), towers(x))
    assert report.verified == "failed" and report.fallback.startswith("Mismatch: verify: output 0 differs")
    [warning] = [w for w in caught if issubclass(w.category, OptimizerFallback)]
    assert f"relu-is-identity ({wrong_rules[-1]})" in str(warning.message)


def test_strict_raises_the_mismatch(wrong_rules):
    with pytest.raises(Mismatch, match="relu-is-identity"):
        optimize(towers, (torch.randn(8, 16),), families=wrong_rules, verify=True, strict=True)


def test_a_rewrite_that_keeps_values_passes_and_is_used():
    report, gm = check(towers, torch.randn(8, 16), verify=True)
    assert report.verified == "passed" and report.rules_fired and report.seconds["verify"] > 0
    assert report.kernels_after < report.kernels_before


def test_inputs_written_in_place_are_compared_and_the_callers_are_left_alone():
    def written(x, y):
        y.add_(1)
        return torch.cat([torch.tanh(p) for p in x.split(4, dim=1)], dim=1) + y

    x, y = torch.randn(8, 16), torch.randn(8, 16)
    before = y.clone()
    gm, report = optimize(Fn(written), (x, y), verify=True)
    assert report.verified == "passed" and report.fallback is None
    assert torch.equal(y, before)
    assert torch.equal(gm(x, y.clone()), written(x, y.clone()))


def test_random_inputs_take_each_inputs_layout_floats_random_integers_zero():
    gm, _ = optimize(Fn(lambda x, i: x[:, :4] * i.sum()), (torch.randn(4, 1).expand(4, 8), torch.ones(3, dtype=torch.long)))
    x, i = random_inputs(gm)
    assert x.shape == (4, 8) and x.stride() == (1, 0) and x.std() > 0
    assert i.dtype == torch.long and not i.any()


def test_a_graph_that_no_longer_writes_an_input_it_wrote_is_a_mismatch():
    x, y = torch.randn(4), torch.randn(4)
    old = capture(Fn(lambda x, y: y.add_(1) * x), (x, y.clone()))
    new = capture(Fn(lambda x, y: (y + 1) * x), (x, y.clone()))
    with pytest.raises(Mismatch, match="input 1 after the call differs"):
        check_graphs(old, new, "none", batch_random=False)
    assert check_graphs(old, old, "none", batch_random=False) == "passed"


def test_differences_count_against_the_size_of_the_values():
    """Random weights make large activations; rounding then differs by more than any absolute
    tolerance (a false mismatch on a built-in batching, found in review), a real error does not."""
    x = torch.randn(64)
    big = capture(Fn(lambda x: x * 1e6), (x,))
    rounded = capture(Fn(lambda x: (x.double() * 1e6).float()), (x,))
    off = capture(Fn(lambda x: x * 1e6 + 1e4), (x,))
    assert check_graphs(big, rounded, "none", batch_random=False) == "passed"
    with pytest.raises(Mismatch, match="largest difference"):
        check_graphs(big, off, "none", batch_random=False)


class Counter(torch.nn.Module):
    """A buffer the forward writes (a step counter) and a batch norm's running statistics."""

    def __init__(self):
        super().__init__()
        self.register_buffer("step", torch.zeros(()))
        self.norm = torch.nn.BatchNorm1d(16)

    def forward(self, x):
        self.step.add_(1)
        return towers(self.norm(x)) * self.step


def test_the_check_leaves_the_models_buffers_and_the_random_generator_as_they_were():
    x = torch.randn(8, 16)
    states = []
    for verify in (False, True):
        model = Counter()
        torch.manual_seed(5)
        _, report = optimize(model, (x,), verify=verify)
        states.append((model.step.clone(), model.norm.running_mean.clone(), torch.rand(3)))
    assert report.verified == "passed"
    for a, b in zip(*states):
        assert torch.equal(a, b)


def test_a_graph_that_returns_other_values_is_a_mismatch():
    x = torch.randn(4)
    one, two = capture(Fn(lambda x: x + 1), (x,)), capture(Fn(lambda x: (x + 1, x)), (x,))
    with pytest.raises(Mismatch, match="returns 2 values"):
        check_graphs(one, two, "none", batch_random=False)
