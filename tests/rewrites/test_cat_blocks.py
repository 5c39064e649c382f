"""Cats of cats along two dims glued the other way round (``cat-blocks``): the graph before and
after on random inputs, and the must-not-fire cases."""

import torch

from tests.helpers import EAGER, Weighted, check_rule, check_training, launches

X, Y = torch.randn(4, 6), torch.randn(4, 6)


def test_blocks_whose_inner_cats_repeat_are_one_cat_fewer():
    """cat([cat([x, x]), cat([y, y])], 1) is cat([cat([x, y], 1)] * 2): two cats, not three."""
    for e, f in ((0, 1), (1, 0), (-1, -2)):
        def fn(x, y, e=e, f=f):
            return torch.cat([torch.cat([x, x], e), torch.cat([y, y], e)], f)

        report, gm = check_rule(fn, X, Y)
        assert report.rules_fired["cat-blocks"] > 0 and launches(gm, X, Y) == 2, (e, f, gm.code)
    # pieces of two widths along the inner cats' dim, paired alike
    a, b = torch.randn(2, 6), torch.randn(3, 6)
    report, gm = check_rule(lambda a, b: torch.cat([torch.cat([a, b], 0), torch.cat([a * 2, b], 0)], 1), a, b)
    assert report.rules_fired["cat-blocks"] > 0


def test_blocks_of_unequal_widths_stay():
    """cat([cat([x[:1], x[1:]]), cat([y[:2], y[2:]])], 1): the pieces do not pair up along dim 0."""
    def fn(x, y):
        return torch.cat([torch.cat([x[:1] * 2, x[1:] * 3], 0), torch.cat([y[:2] * 2, y[2:] * 3], 0)], 1)

    report, _ = check_rule(fn, X, Y)
    assert "cat-blocks" not in report.rules_fired


def test_cats_of_three_pieces_or_along_one_dim_stay():
    """Only two cats of two pieces each, along two dims (cat-of-cat flattens one dim)."""
    for fn in (lambda x, y: torch.cat([torch.cat([x, x, y], 0), torch.cat([y, y, x], 0)], 1),
               lambda x, y: torch.cat([torch.cat([x, x], 0), torch.cat([y, y], 0), x.repeat(2, 1)], 1),
               lambda x, y: torch.cat([torch.cat([x, x], 0), torch.cat([y, y], 0)], 0) * 2):
        report, _ = check_rule(fn, X, Y)
        assert "cat-blocks" not in report.rules_fired


def test_blocks_of_computed_pieces_and_gradients():
    def fn(x, w):
        a, b = torch.relu(x * w), torch.tanh(x)
        return torch.cat([torch.cat([a, a], 0), torch.cat([b, b], 0)], 1) * 2

    check_training(Weighted(6, fn), X, **EAGER)



def test_stacked_blocks_whose_inner_cats_repeat_are_one_cat_fewer():
    """stack([cat([x, x], e), cat([y, y], e)], f) is cat([stack([x, y], f)] * 2, e'): e' is e
    where it comes before f, else the dim after it."""
    for e, f in ((0, 0), (0, 1), (1, 0), (1, 2), (-1, 1)):
        def fn(x, y, e=e, f=f):
            return torch.stack([torch.cat([x, x], e), torch.cat([y, y], e)], f)

        report, gm = check_rule(fn, X, Y)
        fired = {"stack-blocks-before", "stack-blocks-after"} & set(report.rules_fired)
        assert fired and launches(gm, X, Y) == 2, (e, f, gm.code)
    a, b = torch.randn(2, 6), torch.randn(3, 6)  # pieces that do not pair up along dim 0
    report, _ = check_rule(lambda a, b: torch.stack([torch.cat([a, b], 0), torch.cat([b, a], 0)], 1) * 2, a, b)
    assert not {"stack-blocks-before", "stack-blocks-after"} & set(report.rules_fired)
