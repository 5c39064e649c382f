"""The split/cat cases' models: the patterns of PyTorch's
``test/inductor/test_split_cat_fx_passes.py``, one module per test function or variant, at the
sizes :mod:`optimus_egg.bench.optimus_cases` gives them inputs for. Grouped by the test they
come from, each group's comment naming the pass it is for and its input shape
(``test_split_cat_new_patterns``'s are in :mod:`optimus_egg.bench.cases_split_views`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _ones(*shape: int) -> torch.Tensor:
    return torch.ones(*shape)


# ---------------------------------------------------------------------------------------------
# test_split_normalization (normalization_pass): a split in each call form, its pieces read
# one by one. Input [8, 32].
# ---------------------------------------------------------------------------------------------


class NormalizationFunction(nn.Module):
    """``torch.split`` with positional, keyword and ``tensor=`` arguments, dims 1, 0 and -1,
    sizes and sections; each piece through a relu."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [
            *[torch.relu(s) for s in torch.split(x, 4, 1)],
            *[torch.relu(s) for s in torch.split(x, 4, 0)],
            *[torch.relu(s) for s in torch.split(x, split_size_or_sections=8, dim=1)],
            *[torch.relu(s) for s in torch.split(tensor=x, split_size_or_sections=8, dim=-1)],
            *[torch.relu(s) for s in torch.split(x, [16, 16], dim=1)],
        ]


class NormalizationMethod(nn.Module):
    """``Tensor.split`` positional, ``dim=``, ``split_size=``, and sections on dim -1."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [
            *[torch.sigmoid(s) for s in x.split(4, 1)],
            *[torch.sigmoid(s) for s in x.split(4, dim=1)],
            *[torch.sigmoid(s) for s in x.split(split_size=8, dim=1)],
            *[torch.sigmoid(s) for s in x.split([12, 20], dim=-1)],
        ]


class NormalizationUnequal(nn.Module):
    """A split size that does not divide the dim (the last piece is shorter), both forms."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [*[torch.relu(s) for s in torch.split(x, 5, 1)], *[torch.tanh(s) for s in x.split(7, 1)]]


class NumpyCompat(nn.Module):
    """numpy-style keywords (``axis=``, ``x2=``, ``keepdims=``) that Optimus renames before its
    passes match (``numpy_compat_normalization``; ``test_stack_normalization_axis_kwarg``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.stack([x, y], axis=1)
        b = torch.mul(x, x2=y)
        c = torch.max(x, dim=1, keepdims=True).values
        return a, b, c


# ---------------------------------------------------------------------------------------------
# test_consecutive_split_merge (merge_splits_pass), and the split of a piece into itself
# (remove_split_with_size_one_pass). Input [8, 32].
# ---------------------------------------------------------------------------------------------


class SizeOneSplit(nn.Module):
    """Each piece of a split split again by its own width (one piece: a copy); function,
    keyword and method forms (``multi_split``, ``multi_split_kwarg*``, ``multi_split_cm``)."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        a = [torch.split(s, 4, 1) for s in torch.split(x, 4, 1)]
        b = [torch.split(s, split_size_or_sections=8, dim=1) for s in torch.split(x, split_size_or_sections=8, dim=1)]
        c = [s.split(16, 1) for s in x.split(16, 1)]
        return [p for group in (*a, *b, *c) for p in group]


class MergeSplits(nn.Module):
    """Every piece of a split split again on the same dim (``multi_split_2``, and its
    negative-dim form on a second input)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        a = [p for s in torch.split(x, 4, 1) for p in torch.split(s, 2, 1)]
        b = [p for s in torch.split(y, 4, -1) for p in torch.split(s, 1, 1)]
        return [torch.relu(p) for p in (*a, *b)]


class MergeSplitsSections(nn.Module):
    """Sections, then unequal sections per piece, indexed from the front and from the back
    (``multi_split_with_sizes``, ``unequal_multi_split``, ``..._neg_index``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        a = [p for s in torch.split(x, [16, 16], 1) for p in torch.split(s, 4, 1)]
        fs = torch.split(y, [10, 10, 12], dim=1)
        b = [*fs[-3].split([4, 6], 1), *fs[-2].split([6, 4], 1), *fs[-1].split([4, 4, 4], 1)]
        return [torch.relu(p) for p in (*a, *b)]


class MergeSplitsDiffDims(nn.Module):
    """Pieces of a split on dim 1 split on dim 0: not one split (``diff_dims``)."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.relu(p) for s in torch.split(x, 8, dim=1) for p in torch.split(s, 2, dim=0)]


class MergeSplitsOtherUsers(nn.Module):
    """Two pieces split again, the third read by a sin (``some_users_not_splits``)."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        fs = torch.split(x, [10, 10, 12], dim=1)
        items = [*fs[0].split([4, 6], 1), *fs[1].split([6, 4], 1), torch.sin(fs[2])]
        return [torch.relu(p) for p in items]


class MergeSplitsToCat(nn.Module):
    """Two pieces kept, the third split into six, all glued back in order: the input
    (``split_with_cat``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fs = torch.split(x, [4, 4, 24], dim=1)
        return torch.cat([fs[0], fs[1], *fs[2].split((4, 4, 4, 4, 4, 4), 1)], dim=1)


class MergeSplitsDuplicateGetitems(nn.Module):
    """One piece read twice (split again, and iterated row by row, by positive and negative
    index), the last through a sin (``duplicate_getitems``, ``..._neg_index``)."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        fs = torch.split(x, [10, 10, 12], dim=1)
        items = [*fs[0].split([4, 6], 1), *fs[1].split([6, 4], 1), *fs[-2], torch.sin(fs[2])]
        return [torch.relu(p) for p in items]


class MergeSplitsGetitemGap(nn.Module):
    """A piece unread, the others (one split again) glued back (``split_getitem_gap``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fs = torch.split(x, [4, 4, 24], dim=1)
        return torch.cat([fs[0], *fs[2].split((4, 4, 4, 4, 4, 4), 1)], dim=1)


class MergeSplitsOutOfOrder(nn.Module):
    """Pieces glued back out of order, the last split again (``split_getitem_out_of_order``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fs = torch.split(x, [4, 4, 4, 20], dim=1)
        return torch.cat([fs[0], fs[2], fs[1], *fs[3].split((4, 4, 4, 4, 4), 1)], dim=1)


# ---------------------------------------------------------------------------------------------
# test_split_cat_merge (split_cat_pass; scmerge_* counters). Input [2, 16, 16, 2], split in
# pieces of 2 (8 pieces), the extra tensors ones.
# ---------------------------------------------------------------------------------------------


class SplitCatIdentity(nn.Module):
    """cat(split(x)) on the split dim, in each argument form (``simple_split_cat``,
    ``..._argspec1``, ``..._argspec2``): x, three times."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.cat(torch.split(x, 2, dim=1), dim=1), torch.cat(torch.split(x, 2, dim=1), 1),
                torch.cat(tensors=torch.split(x, 2, dim=1), dim=1))


class SplitCatOtherDim(nn.Module):
    """cat of all the pieces on another dim, -2 (``simple_split_cat_argspec3/4``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.cat(torch.split(x, 2, dim=1), -2), torch.cat(tensors=torch.split(y, 2, dim=1), dim=-2)


class SplitStackSimple(nn.Module):
    """stack of all the pieces on the split dim (``simple_split_stack``, ``..._argspec1/2``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.stack(torch.split(x, 2, dim=1), dim=1), torch.stack(torch.split(y, 2, dim=1), 1),
                torch.stack(tensors=torch.split(z, 2, dim=1), dim=1))


class SplitCatAddnArgs(nn.Module):
    """All the pieces in order between two other tensors, cat on the split dim (dim 1, and
    dim 2 on a second input) (``split_cat_addn_args``, ``..._dim2``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.cat([_ones(2, 5, 16, 2), *torch.split(x, 2, dim=1), _ones(2, 6, 16, 2)], dim=1)
        b = torch.cat([_ones(2, 16, 5, 2), *torch.split(y, 2, dim=2), _ones(2, 16, 6, 2)], dim=2)
        return a, b


class SplitStackAddnArgs(nn.Module):
    """All the pieces in order after one and before two other tensors, stacked on the split
    dim (``split_stack_addn_args``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([_ones(2, 2, 16, 2), *torch.split(x, 2, dim=1), _ones(2, 2, 16, 2),
                            _ones(2, 2, 16, 2)], dim=1)


class SplitCatDimMismatch(nn.Module):
    """All the pieces between other tensors, glued on another dim than the split's: split 1 /
    glue 2, split 1 / glue 3, split 2 / glue 0 (``split_cat_dim_mismatch``, ``...2``, ``...3``;
    ``glue=torch.stack``: ``split_stack_dim_mismatch``, ...)."""

    def __init__(self, glue: Callable[..., torch.Tensor] = torch.cat) -> None:
        super().__init__()
        self.glue = glue

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 2, 16, 2)
        a = self.glue([one, *torch.split(x, 2, dim=1), one], dim=2)
        b = self.glue([one, *torch.split(y, 2, dim=1), one], dim=3)
        c = self.glue([_ones(2, 16, 2, 2), *torch.split(z, 2, dim=2), _ones(2, 16, 2, 2)], dim=0)
        return a, b, c


def _shuffled(p: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """Two runs of consecutive pieces (1-3, 5-7; 0 and 4 unread) between other tensors."""
    one = _ones(2, 2, 16, 2)
    return [one, p[1], p[2], p[3], one, p[5], p[6], p[7], one]


class InputShuffling(nn.Module):
    """Two runs of pieces mixed with other tensors, cat on the split dim (``input_shuffling``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat(_shuffled(torch.split(x, 2, dim=1)), dim=1)


class InputShufflingStack(nn.Module):
    """The same, stacked on the split dim (``input_shuffling_stack``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack(_shuffled(torch.split(x, 2, dim=1)), dim=1)


class InputShufflingDimMismatch(nn.Module):
    """The same, cat and stack on dim 2 (``input_shuffling_dim_mismatch``, ``..._stack``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.cat(_shuffled(torch.split(x, 2, dim=1)), dim=2),
                torch.stack(_shuffled(torch.split(y, 2, dim=1)), dim=2))


class InputShufflingMultipleOutput(nn.Module):
    """Pieces of one split in a cat (dim 2), a stack (dim 1) and a relu; also a piece returned
    as it is (``input_shuffling_multiple_output``, ``..._direct_output``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 2, 16, 2)
        p = torch.split(x, 2, dim=1)
        cat1 = torch.cat([one, p[1], p[2], p[3], one], dim=2)
        stack1 = torch.stack([one, p[4], p[5], one], dim=1)
        q = torch.split(y, 2, dim=1)
        cat2 = torch.cat([one, q[1], q[2], q[3], one], dim=2)
        stack2 = torch.stack([one, q[4], q[5], one], dim=1)
        return cat1, stack1, torch.relu(p[6]), cat2, stack2, q[6]


class InputShufflingSameRanges(nn.Module):
    """Two equal cats of the same run of pieces, a stack and a relu
    (``input_shuffling_multiple_output_same_ranges``)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 2, 16, 2)
        p = torch.split(x, 2, dim=1)
        cat1 = torch.cat([one, p[1], p[2], p[3], one], dim=2)
        cat2 = torch.cat([one, p[1], p[2], p[3], one], dim=2)
        stack1 = torch.stack([one, p[4], p[5], one], dim=1)
        return cat1, cat2, stack1, torch.relu(p[6])


class UnequalSplitMultipleOutput(nn.Module):
    """Unequal sections, pieces of equal size in a cat and a stack, an odd one in a relu
    (``unequal_split_multiple_output``)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 2, 16, 2)
        p = torch.split(x, [1, 2, 2, 2, 2, 2, 4, 1], dim=1)
        cat1 = torch.cat([one, p[1], p[2], p[3], one], dim=2)
        stack1 = torch.stack([one, p[4], p[5], one], dim=1)
        return cat1, stack1, torch.relu(p[6])


class MultiSplitCat(nn.Module):
    """Runs of pieces of two splits (two inputs) in one cat and one stack, with other tensors
    between them, and a relu of each (``multi_split_cat``)."""

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 2, 16, 2)
        p, q = torch.split(x1, 2, dim=1), torch.split(x2, 2, dim=1)
        cat1 = torch.cat([one, p[1], p[2], p[3], one, q[1], q[2], q[3], one], dim=2)
        stack1 = torch.stack([one, p[4], p[5], one, q[4], q[5], one], dim=1)
        return cat1, stack1, torch.relu(p[6]), torch.relu(q[6])


class SplitCatMutation(nn.Module):
    """A piece written in place (a copy of another piece into it, so into the input), then all
    the pieces glued back: nothing to merge (``test_split_cat_merge_mutation``). The input is
    modified: run it on a copy."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 2, dim=1)
        p[1].copy_(p[0])
        return torch.cat(p, dim=1)


# ---------------------------------------------------------------------------------------------
# test_split_squeeze (split_cat_pass): split into size-1 pieces, each squeezed (an unbind),
# stacked. Input [4, 12].
# ---------------------------------------------------------------------------------------------


class SplitSqueezeStack(nn.Module):
    """``torch.squeeze(s, 1)``, ``s.squeeze(1)``, ``torch.squeeze(s, dim=1)``,
    ``s.squeeze(dim=1)`` of each size-1 piece, stacked on dim 0 (four inputs, one form each)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.stack([torch.squeeze(s, 1) for s in torch.split(a, 1, dim=1)]),
                torch.stack([s.squeeze(1) for s in torch.split(b, 1, dim=1)]),
                torch.stack([torch.squeeze(s, dim=1) for s in torch.split(c, 1, dim=1)]),
                torch.stack([s.squeeze(dim=1) for s in torch.split(d, 1, dim=1)]))


class SplitSqueezeNoneDim(nn.Module):
    """``s.squeeze()`` with no dim (Optimus leaves it: ``..._callmethod_none_dim``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([s.squeeze() for s in torch.split(x, 1, dim=1)])


class SplitSqueezeMultiSqueezeUsers(nn.Module):
    """The squeezed pieces stacked, two of them also read by a relu and a tanh
    (``split_squeeze_multi_squeeze_users``)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        items = [torch.squeeze(s, 1) for s in torch.split(x, 1, dim=1)]
        return torch.stack(items), torch.relu(items[0]), torch.tanh(items[1])


class SplitSqueezeSizeNot1(nn.Module):
    """Pieces of size 2 (the squeeze does nothing) stacked (``split_size_not_1``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.squeeze(s, 1) for s in torch.split(x, 2, dim=1)])


class SplitSqueezeDimMismatch(nn.Module):
    """Squeezed on another dim than the split's (a no-op on a size-4 dim) (``dim_mismatch``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.squeeze(s, 0) for s in torch.split(x, 1, dim=1)])


class SplitSqueezeOtherUsers(nn.Module):
    """The unsqueezed first piece read by a relu too, with all the pieces stacked, and with the
    first left out of the stack (``other_users``, ``other_users_2``; stack dim 0 and 1, the
    latter from ``test_unbind_stack``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p = torch.split(x, 1, dim=1)
        a = torch.stack([torch.squeeze(s, 1) for s in p])
        q = torch.split(y, 1, dim=1)
        b = torch.stack([torch.squeeze(s, 1) for s in q[1:]], 1)
        return a, torch.relu(p[0]), b, torch.relu(q[0])


class SplitSqueezeTopological(nn.Module):
    """Rows split off (``x.split(1)``, dim 0), each squeezed and through a sin, stacked: the
    rewrite must keep the graph in order (``graph_should_be_topological_sorted``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.sin(t.squeeze(dim=0)) for t in x.split(1)])


# ---------------------------------------------------------------------------------------------
# test_unbind_stack (unbind_stack_pass; scmerge_* and normalization_pass counters).
# Input [2, 8, 8, 4], unbound into 8 pieces of [2, 8, 4].
# ---------------------------------------------------------------------------------------------


class UnbindStack(nn.Module):
    """stack(unbind(x, 1), 1) in each argument form (``unbind_stack``, ``..._argspec1/2``), and
    the split-squeeze spelling (``split_squeeze_stack`` with dim 1)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.stack(torch.unbind(a, 1), 1), torch.stack(torch.unbind(input=b, dim=1), dim=1),
                torch.stack(tensors=torch.unbind(c, dim=1), dim=1),
                torch.stack([torch.squeeze(s, 1) for s in torch.split(d, 1, dim=1)], 1))


class UnbindStackDimMismatch(nn.Module):
    """Unbound on dim 1, stacked on dim 0 (a transpose) (``dim_mismatch``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack(torch.unbind(x, dim=1), 0)


class UnbindCat(nn.Module):
    """Unbound on dim -3 (1), cat on dim 1 (``unbind_cat``, unused in the test's table)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat(torch.unbind(x, dim=-3), 1)


class UnbindCatAddnArgs(nn.Module):
    """All the pieces between two other tensors, cat on the unbind dim (1, and 2 on a second
    input) (``unbind_cat_addn_args``, ``..._dim2``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 8, 4)
        return (torch.cat([one, *torch.unbind(x, dim=1), one], dim=1),
                torch.cat([one, *torch.unbind(y, dim=2), one], dim=2))


class UnbindStackAddnArgs(nn.Module):
    """All the pieces after one and before two other tensors, stacked on the unbind dim
    (``unbind_stack_addn_args``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        one = _ones(2, 8, 4)
        return torch.stack([one, *torch.unbind(x, dim=1), one, one], dim=1)


class UnbindDimMismatch(nn.Module):
    """Unbound on dim 1, cat and stack (with other tensors) on dim 2
    (``unbind_cat_dim_mismatch``, ``unbind_stack_dim_mismatch``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 8, 4)
        return (torch.cat([one, *torch.unbind(x, dim=1), one], dim=2),
                torch.stack([one, *torch.unbind(y, dim=1), one], dim=2))


class UnbindCatMultiUsers(nn.Module):
    """The pieces of one unbind in a cat and a stack, on the same dim and (second input) the
    stack on another (``unbind_cat_multi_users``, ``..._diff_dims``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 8, 4)
        p, q = torch.unbind(x, dim=1), torch.unbind(y, dim=1)
        return (torch.cat([one, *p, one], dim=1), torch.stack([one, *p, one, one], dim=1),
                torch.cat([one, *q, one], dim=1), torch.stack([one, *q, one], dim=2))
