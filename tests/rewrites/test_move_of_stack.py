"""A stack with its stacked dim moved, or a neighbour moved past it, is the stack along the new
place (``move-of-stack``, ``move-past-stack``): the graph before and after on random inputs,
and the must-not-fire cases."""

import torch

from tests.helpers import EAGER, Weighted, check_rule, check_training, launches

X, Y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
RULES = {"move-of-stack", "move-past-stack"}


def _same_layout(fn, gm, *inputs):
    want, got = fn(*inputs), gm(*inputs)
    assert got.stride() == want.stride() and got.untyped_storage().data_ptr() not in {
        x.untyped_storage().data_ptr() for x in inputs}


def test_rows_of_a_stack_restacked_are_the_stack_along_another_dim():
    """stack(unbind(stack([x, y], 0), 1), 0) is stack([x, y], 1): one stack, not a stack and its
    rows moved; glued instead of stacked, its flatten."""
    for fn in (lambda x, y: torch.stack(torch.unbind(torch.stack([x, y], 0), 1), 0),
               lambda x, y: torch.cat(torch.unbind(torch.stack([x, y], 0), 1), 0),
               lambda x, y: torch.stack(torch.unbind(torch.stack([x, y, x], 1), 0), 1),
               lambda x, y: torch.stack(torch.unbind(torch.stack([x, x], 2), 3), 2)):
        report, gm = check_rule(fn, X, Y)
        assert report.rules_fired["move-past-stack"] > 0 and launches(gm, X, Y) == 1, gm.code
        _same_layout(fn, gm, X, Y)


def test_a_stack_with_its_dim_moved_is_a_stack():
    for a, b in ((1, 0), (1, 3), (0, 2), (3, 1)):
        def fn(x, y, a=a, b=b):
            return torch.movedim(torch.stack([x, torch.relu(y)], a), a, b).contiguous()

        report, gm = check_rule(fn, X, Y)  # (a swap of two neighbours reads as either move)
        assert RULES & set(report.rules_fired) and launches(gm, X, Y) == 2, (a, b, gm.code)
        _same_layout(fn, gm, X, Y)


def test_moves_that_reorder_the_pieces_dims_or_of_a_cat_stay():
    """A dim moved past another one than the stacked dim reorders the pieces' own dims; a cat's
    pieces are not unsqueezed."""
    for fn in (lambda x, y: torch.stack(torch.unbind(torch.stack([x, y], 0), 2), 0),  # past dims 0 and 1
               lambda x, y: torch.movedim(torch.stack([x, y], 1), 3, 0).contiguous(),
               lambda x, y: torch.movedim(torch.cat([x, y], 1), 1, 0).contiguous()):
        report, _ = check_rule(fn, X, Y)
        assert not RULES & set(report.rules_fired), report.rules_fired


def test_restacked_rows_with_gradients():
    check_training(Weighted(4, lambda x, w: torch.stack(torch.unbind(torch.stack([x * w, torch.tanh(x)], 0), 1), 0) * 2),
                   X, **EAGER)
