"""Optimus's own test patterns as small models: one case per pattern that PyTorch's tests
give its split/cat passes (``test/inductor/test_split_cat_fx_passes.py``) and its group/batch
fusions (``test/inductor/test_group_batch_fusion.py``).

Those tests are the working spec of what Optimus does. Each case here holds the pattern of one
of their functions or modules (rewritten, at CPU-friendly sizes of a few hundred to a few
thousand elements), including the variants that change what a pass may do: another split or
cat dim, extra users of the pieces, extra tensors in the cat or stack, pieces out of order,
with and without bias. Call forms (``torch.split`` / ``Tensor.split``, keywords, negative dims)
follow the tests, since Optimus's normalization is what makes them match.

:data:`TARGETS` names, per case, the Optimus passes (the ``pre_grad_fusion_options`` /
``post_grad_fusion_options`` keys, which are also the ``counters["inductor"]`` keys the tests
assert); :data:`COUNTERS` names the counters the tests assert where they are others
(``scmerge_*`` for ``split_cat_pass`` and ``unbind_stack_pass``, ``batch_fusion``). A target
may be a pass newer than the torch installed (``cat_linear``: :data:`NEWER_PASSES`).

Not made into cases (:data:`SKIPPED` says why):

- ``test_group_batch_fusion.test_xpu_auto_enable_batch_linear_lhs``: XPU only (its model is
  ``group_batch_linear_lhs``'s).
- ``test_predispatch_device_aware_batch_linear_lhs`` / ``..._cpu_device_agnostic_...``: the
  same model as ``group_batch_linear_lhs``, under ``is_predispatch`` (a config of Optimus, not
  a pattern).
- ``test_batch_linear_lhs_skips_tensor_subclass_weights``: a tensor-subclass weight in a
  hand-built FX graph, a unit test of the matcher.
- ``TestFindIndependentSubsetGreedy``: unit tests of Optimus's graph search, no model.
- ``test_cat_linear_numerics`` (bf16) and ``..._backward``: CUDA-only numerics of the
  ``group_batch_cat_linear`` pattern (fp32 on CPU is the case itself).
- ``test_split_normalization.normalize_reshape_with_dynamic_shape``: a dynamic-shape reshape;
  ``optimus_egg.optimize`` specializes to the example inputs.
- ``test_config_flag_is_respected``: a config check (passes off) on the pattern of
  ``split_cat_merge_splits_to_cat``.
- ``test_numpy_compat_normalization``'s ``torch.dropout(x=..., train=True)``: draws random
  numbers; the rest of its numpy-style keywords are ``split_cat_numpy_compat``.
- ``test_split_cat_merge.split_partial_getitem_cat``: the same function as
  ``split_getitem_gap`` (``split_cat_merge_splits_getitem_gap``).

Most other tests there run only with a GPU (``requires_gpu``, or the whole split/cat file
under ``HAS_GPU``), but their models run on CPU, so each is a case; Optimus's ``group_linear``
needs fbgemm on CUDA, the pattern does not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from optimus_egg.bench.models import Factory
from optimus_egg.bench.zoo import _factory

SKIPPED: dict[str, str] = {
    "test_xpu_auto_enable_batch_linear_lhs": "XPU only",
    "test_predispatch_device_aware_batch_linear_lhs": "CUDA only; is_predispatch config of group_batch_linear_lhs",
    "test_predispatch_cpu_device_agnostic_batch_linear_lhs": "is_predispatch config of group_batch_linear_lhs",
    "test_batch_linear_lhs_skips_tensor_subclass_weights": "matcher unit test on a hand-built graph",
    "TestFindIndependentSubsetGreedy": "graph-search unit tests, no model",
    "test_cat_linear_numerics": "CUDA bf16 numerics of group_batch_cat_linear",
    "test_cat_linear_numerics_backward": "CUDA bf16 numerics of group_batch_cat_linear",
    "normalize_reshape_with_dynamic_shape": "dynamic shapes; optimize specializes",
    "test_config_flag_is_respected": "a config check (passes off) of split_cat_merge_splits_to_cat",
    "numpy_compat dropout": "draws random numbers",
    "split_partial_getitem_cat": "same function as split_getitem_gap",
}

#: Passes targeted here that torch 2.13's Optimus does not have.
NEWER_PASSES = frozenset({"cat_linear"})


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
    """All the pieces between other tensors, cat on another dim than the split's: split 1 /
    cat 2, split 1 / cat 3, split 2 / cat 0 (``split_cat_dim_mismatch``, ``...2``, ``...3``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 2, 16, 2)
        a = torch.cat([one, *torch.split(x, 2, dim=1), one], dim=2)
        b = torch.cat([one, *torch.split(y, 2, dim=1), one], dim=3)
        c = torch.cat([_ones(2, 16, 2, 2), *torch.split(z, 2, dim=2), _ones(2, 16, 2, 2)], dim=0)
        return a, b, c


class SplitStackDimMismatch(nn.Module):
    """The same with stack: split 1 / stack 2, split 1 / stack 3, split 2 / stack 0
    (``split_stack_dim_mismatch``, ``...2``, ``...3``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = _ones(2, 2, 16, 2)
        a = torch.stack([one, *torch.split(x, 2, dim=1), one], dim=2)
        b = torch.stack([one, *torch.split(y, 2, dim=1), one], dim=3)
        c = torch.stack([_ones(2, 16, 2, 2), *torch.split(z, 2, dim=2), _ones(2, 16, 2, 2)], dim=0)
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


# ---------------------------------------------------------------------------------------------
# test_split_cat_new_patterns: the passes that turn runs of pieces into slices and views.
# Inputs of 400 elements (the tests' [500, 500] scaled down, sections by 10).
# ---------------------------------------------------------------------------------------------


class SplitCatSplit(nn.Module):
    """Two cats of adjacent pieces, each split again, all the pieces glued back
    (``split_cat_split``; the keyword form on a second input) (merge_getitem_cat_pass)."""

    SECTIONS = [20, 5, 5, 2, 2, 2, 2, 2, 2, 5, 3]

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p = torch.split(x, self.SECTIONS, 1)
        a = torch.split(torch.cat((p[0], p[1]), 1), [5, 12, 8], 1)
        b = torch.split(torch.cat((p[9], p[10]), 1), [1, 2, 5], 1)
        first = torch.cat([*a, *b, *p[2:9]], 1)
        q = torch.split(y, self.SECTIONS, dim=1)
        c = torch.split(torch.cat((q[0], q[1]), dim=1), [5, 12, 8], dim=1)
        d = torch.split(torch.cat((q[9], q[10]), dim=1), [1, 2, 5], dim=1)
        return first, torch.cat([*c, *d, *q[2:9]], dim=1)


_ROWS = [5, 5, 20, 2, 2, 2, 2, 2, 4, 1, 5]  # sections of 50 rows


class RemoveCatAllGetitems(nn.Module):
    """A cat of every piece in order (the input) and cats of some, split again, glued with
    the rest along dim 0 (``remove_cat_node_with_all_getitmes``) (mutate_cat_pass)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, _ROWS, dim=0)
        everything = torch.cat(p, dim=0)
        a = torch.split(torch.cat((p[0], p[1]), dim=0), [2, 3, 5], dim=0)
        b = torch.split(torch.cat((p[0], p[10]), dim=0), [1, 6, 3], dim=0)
        return torch.cat((torch.cat([*a, *b, *p[2:9]], dim=0), everything), dim=0)


class MutateCatSomeGetitems(nn.Module):
    """A cat of two runs of consecutive pieces, swapped (6-10, then 2-5), beside the same
    re-split cats (``mutate_cat_node_with_some_getitmes``) (mutate_cat_pass)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, _ROWS, dim=0)
        runs = torch.cat((*p[6:11], *p[2:6]), dim=0)
        a = torch.split(torch.cat((p[0], p[1]), dim=0), [2, 3, 5], dim=0)
        b = torch.split(torch.cat((p[0], p[10]), dim=0), [1, 6, 3], dim=0)
        return torch.cat((torch.cat([*a, *b, p[2]], dim=0), runs), dim=0)


class SplitCatToSlices(nn.Module):
    """Three splits (of x and two clones) into 10, 10 and 5 pieces; one cat of another tensor,
    every piece of the first in order, the second's rotated, the third's in order
    (``split_cat_to_slices``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, [5] * 10, dim=0)
        q = torch.split(x.clone(), [5] * 10, dim=0)
        r = torch.split(x.clone(), [10] * 5, dim=0)
        return torch.cat([p[0].clone(), *p, *q[4:], *q[:4], *r], dim=0)


class UnbindCatToView(nn.Module):
    """Two unbinds of views of x, a cat on dim 1 of seven pieces of the first, a clone, every
    piece of the second, two clones (``unbind_cat_to_view``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, q = torch.unbind(x.view(10, 5, 8), dim=0), torch.unbind(x.view(10, 5, 8), dim=0)
        return torch.cat([*p[:7], p[7].clone(), *q, p[8].clone(), p[9].clone()], dim=1)


class SplitStackToCatsSameDim(nn.Module):
    """Rows of a view unbound, each split in two, the halves stacked (dim 1) in runs with
    clones between them (``split_stack_to_cats_same_dim``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = torch.unbind(x.view(10, 5, 8), dim=0)
        h = [half for r in rows[:6] for half in torch.split(r, [4, 4], dim=1)]
        return torch.stack((*h[:6], h[0].clone(), h[1].clone(), *h[6:], h[2].clone()), dim=1)


class SplitStackToCatsDifferentDim(nn.Module):
    """Two splits (x and a clone) on dim 1, all their pieces stacked on dim 2 after three
    clones (``split_stack_to_cats_different_dim``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, q = torch.split(x, [10] * 5, dim=1), torch.split(x.clone(), [10] * 5, dim=1)
        return torch.stack((p[0].clone(), p[1].clone(), p[2].clone(), *p, *q), dim=2)


class UnbindStackToSlices(nn.Module):
    """A view unbound on dim 1, three clones then every piece stacked on dim 1
    (``unbind_stack_to_slices``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.unbind(x.view(5, 10, 8), dim=1)
        return torch.stack((p[0].clone(), p[1].clone(), p[2].clone(), *p), dim=1)


class MoveReshapeOutOfSplitStack(nn.Module):
    """Size-1 pieces of a view each reshaped, stacked (dim 0) between clones of the reshaped
    pieces (``move_reshape_out_of_split_stack``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = [p.reshape(-1, 5) for p in torch.split(x.view(80, 5), [1, 1, 1, 1, 1], dim=1)]
        return torch.stack((r[0].clone(), r[1].clone(), r[2].clone(), *r, r[3].clone()), dim=0)


# ---------------------------------------------------------------------------------------------
# test_group_batch_fusion.
# ---------------------------------------------------------------------------------------------


class GroupLinear(nn.Module):
    """Three stages of ten parallel Linears, the inputs of the later stages mixed from earlier
    ones with scalar adds and subtracts, the last cat (``MyModule``, group_linear)."""

    def __init__(self, z: int = 10, bias: bool = True) -> None:
        super().__init__()
        self.seq = nn.ModuleList(nn.ModuleList(nn.Linear(z, z, bias) for _ in range(10)) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = 10
        x1 = [x + 0.1 * i for i in range(n)]
        x3 = [self.seq[0][i](x1[i]) - 0.1 * i for i in range(n)]
        x4 = x1[:3] + x3[3:]
        x6 = [self.seq[1][i](x4[i]) + 0.1 * (n - i) for i in range(n)]
        x7 = x1[:4] + x3[6:8] + x6[:4]
        return torch.cat([self.seq[2][i](x7[i]) for i in range(n)], dim=1)


class GroupLinearShapes(nn.Module):
    """Linears of three input widths on the pieces of a split, half through BatchNorm (eval),
    all cat on dim 0 (``MyModule2``, ``test_group_linear_fusion_different_shapes``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(w, 8) for w in (6, 8, 10, 6, 8, 10))
        self.bns = nn.ModuleList(nn.BatchNorm1d(8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.split(x, [6, 8, 10], dim=1)
        a = [self.bns[i](self.linears[i](t[i] + 0.1 * (i + 1))) for i in range(3)]
        b = [self.linears[3](torch.sin(t[0])), self.linears[4](torch.cos(t[1])), self.linears[5](torch.sin(t[2] * 0.5))]
        return torch.sigmoid(torch.cat([*a, *b]))


class BatchLayerNorm(nn.Module):
    """Five functional layer norms over the pieces of a split (normalized shape (10,), weight
    and bias), cat, split again, five more over (5, 10) with or without weight and bias
    (``MyModule3``, batch_layernorm)."""

    def __init__(self, weight: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.scale0 = nn.ParameterList(nn.Parameter(torch.randn(10)) for _ in range(5))
        self.bias0 = nn.ParameterList(nn.Parameter(torch.randn(10)) for _ in range(5))
        self.scale1 = nn.ParameterList(nn.Parameter(torch.randn(5, 10)) for _ in range(5)) if weight else [None] * 5
        self.bias1 = nn.ParameterList(nn.Parameter(torch.randn(5, 10)) for _ in range(5)) if bias else [None] * 5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 10, dim=2)
        h = torch.cat([F.layer_norm(p[i], (10,), weight=self.scale0[i], bias=self.bias0[i]) for i in range(5)], dim=2)
        q = torch.split(h, 10, dim=2)
        return torch.cat([F.layer_norm(q[i], (5, 10), weight=self.scale1[i], bias=self.bias1[i]) for i in range(5)],
                         dim=2)


class BatchLinearLHS(nn.Module):
    """Ten functional linears of one input (out widths 10 down to 6), cat, split, cat on dim 0,
    ten more, cat, sigmoid (``MyModule4``, batch_linear_lhs)."""

    def __init__(self, z: int = 10, bias: bool = True) -> None:
        super().__init__()
        self.w1 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5, z)) for i in range(10))
        self.w2 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5, z)) for i in range(10))
        self.b1 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5)) for i in range(10)) if bias else [None] * 10
        self.b2 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5)) for i in range(10)) if bias else [None] * 10

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1.2
        h = torch.cat([F.linear(x, self.w1[i], self.b1[i]) for i in range(10)], dim=1)
        h = torch.cat(torch.split(h, 10, dim=1))
        return torch.sigmoid(torch.cat([F.linear(h, self.w2[i], self.b2[i]) for i in range(10)], dim=1))


class BatchLinearLHSModules(nn.Module):
    """Ten ``nn.Linear`` of one input (out widths 10 down to 6), cat, sigmoid
    (``test_batch_linear_lhs_fusion_nn_linear_inlined``)."""

    def __init__(self, z: int = 10, bias: bool = True) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(z, z - i % 5, bias=bias) for i in range(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1.2
        return torch.sigmoid(torch.cat([lin(x) for lin in self.linears], dim=1))


class BatchLinear(nn.Module):
    """Five functional linears, one per piece of a split, same shapes, cat, sin (``MyModule5``,
    batch_linear)."""

    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.weights = nn.ParameterList(nn.Parameter(torch.randn(10, 20)) for _ in range(5))
        self.biases = nn.ParameterList(nn.Parameter(torch.randn(10)) for _ in range(5)) if bias else [None] * 5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 20, dim=1)
        return torch.sin(torch.cat([F.linear(p[i], self.weights[i], self.biases[i]) for i in range(5)], dim=1))


class BatchPointwise(nn.Module):
    """Two halves split into ten pieces each; sigmoid, relu per piece, then add, mul, sub, div
    of matching pieces, cat (``_TestPointwiseOps``; batch_relu, batch_sigmoid, batch_aten_*).
    (The test's ``div(sub, sub)`` of ``sub(mul, mul)`` is 0/0; here the operands differ.)"""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        halves = torch.split(x, 100, dim=1)
        xs, ys = torch.split(halves[0], 10, dim=1), torch.split(halves[1], 10, dim=1)
        r1 = [F.relu(torch.sigmoid(p)) for p in xs]
        r2 = [F.relu(torch.sigmoid(p)) for p in ys]
        add = [torch.add(a, b) for a, b in zip(r1, r2)]
        mul = [torch.mul(a, a) for a in add]
        sub = [torch.sub(m, a) for m, a in zip(mul, r1)]
        div = [torch.div(s, a + 1.0) for s, a in zip(sub, add)]
        return torch.cat(div, dim=1)


class BatchPointwiseAten(nn.Module):
    """The same on ATen ops called directly: tanh, sigmoid, relu per piece, add of pairs
    (``_TestPointwiseOpsPostGrad``; batch_aten_tanh/sigmoid/relu, unbind_stack_aten_pass)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        aten = torch.ops.aten
        halves = aten.split(x, 100, 1)
        xs, ys = aten.split(halves[0], 10, 1), aten.split(halves[1], 10, 1)
        r1 = [aten.relu(aten.sigmoid(aten.tanh(p))) for p in xs]
        r2 = [aten.relu(aten.sigmoid(aten.tanh(p))) for p in ys]
        return torch.cat([aten.add(a, b) for a, b in zip(r1, r2)], dim=1)


class HighwaySelfGating(nn.Module):
    """Highway self-gating on each of several inputs, with one gating and one transform Linear
    shared by all: ``gate(x) * sigmoid(transform(x))``, cat on the last dim
    (``_TestHighwaySelfGating``; batch_linear_post_grad, batch_aten_sigmoid/mul/add)."""

    def __init__(self, d_model: int = 10) -> None:
        super().__init__()
        self.gating_proj = nn.Linear(d_model, d_model)
        self.transform_proj = nn.Linear(d_model, d_model)
        self.gating_func = nn.Sigmoid()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.gating_proj(x) * self.gating_func(self.transform_proj(x)) for x in inputs], dim=-1)


class MathOps(nn.Module):
    """The same tensor ten times and ten times more: clamp, nan_to_num, detach of each,
    stacked, the two stacks stacked (``_TestMathOps``; batch_clamp, batch_nan_to_num,
    batch_detach, unbind_stack*). The input holds nan and ±inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def chain(t: torch.Tensor) -> torch.Tensor:
            return torch.nan_to_num(t.clamp(min=-1000.1, max=1000.1), 0.0).detach()

        inputs, others = [x for _ in range(10)], [x for _ in range(10)]
        return torch.stack((torch.stack([chain(t) for t in inputs], dim=0),
                            torch.stack([chain(t) for t in others], dim=0)), dim=0)


class MathOpsPieces(nn.Module):
    """The same chain on ten different rows (an unbind) of each of two inputs."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        def chain(t: torch.Tensor) -> torch.Tensor:
            return torch.nan_to_num(t.clamp(min=-2.0, max=2.0), 0.0).detach()

        return torch.stack((torch.stack([chain(t) for t in x.unbind(0)], dim=0),
                            torch.stack([chain(t) for t in y.unbind(0)], dim=0)), dim=0)


class BatchDropout(nn.Module):
    """A dropout (training) on each of five pieces of a split, five outputs (``_TestDropout``;
    batch_dropout). Draws random numbers: compare with eager under one seed."""

    draws = True

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(F.dropout(p, p=0.05, training=True, inplace=False) for p in x.split([20] * 5, 1))


class BMMFusion(nn.Module):
    """Ten Linears, one per input, their outputs summed in place into the first
    (``_TestBMMFusionModule``; batch_linear_post_grad)."""

    def __init__(self) -> None:
        super().__init__()
        self.my_modules = nn.ModuleList(nn.Linear(10, 10) for _ in range(10))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        output = None
        for linear, x in zip(self.my_modules, inputs):
            if output is None:
                output = linear(x)
            else:
                output += linear(x)
        return output


class QKVAsStrided(nn.Module):
    """Three bias-free projections of one permuted input (q, k, v), each reshaped into heads
    and re-strided with ``as_strided``; q @ k (``test_as_strided_storage_offset_after_mm_fusion``:
    batched mms must leave the views' storage offsets right)."""

    def __init__(self, hidden: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.scale = self.head_dim**0.5

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        seq, batch, _ = t.shape
        t = t.view(seq, batch, self.heads, self.head_dim).permute(2, 1, 0, 3)
        t = t.reshape(self.heads, batch * seq, self.head_dim)
        return t.as_strided((self.heads, batch * seq, self.head_dim), (self.head_dim, self.heads * self.head_dim, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x.permute(1, 0, 2)
        q = self._heads(self.q_proj(x) / self.scale)
        k = self._heads(self.k_proj(x)).permute(0, 2, 1)
        v = self._heads(self.v_proj(x)).permute(0, 2, 1)
        return torch.bmm(q, k), k, v


class CatLinear(nn.Module):
    """linear(cat(parts)) on the last dim, or on dim 0 (not matchable: the linear reads one
    part's width); with ``two_users`` the cat is also summed (``CatLinearMod``,
    ``CatLinearTwoUserMod``; cat_linear)."""

    def __init__(self, widths: tuple[int, ...], out: int = 32, cat_dim: int = -1, two_users: bool = False) -> None:
        super().__init__()
        self.cat_dim, self.two_users = cat_dim, two_users
        self.lin = nn.Linear(sum(widths) if cat_dim == -1 else widths[0], out)

    def forward(self, *parts: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        x = torch.cat(parts, dim=self.cat_dim)
        return (self.lin(x), x.sum()) if self.two_users else self.lin(x)


# ---------------------------------------------------------------------------------------------


def _randn(*shapes: tuple[int, ...]) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: tuple(torch.randn(*s) for s in shapes)


_X = (2, 16, 16, 2)  # split_cat_pass tests
_U = (2, 8, 8, 4)  # unbind tests
_SQ = (4, 12)  # split-squeeze tests
_N = (8, 32)  # normalization and merge-splits tests


def _nan_input() -> tuple[torch.Tensor, ...]:
    return (torch.tensor([float("nan"), float("inf"), -float("inf"), 3.14, -2.5, 0.5]),)


def _nan_rows() -> tuple[torch.Tensor, ...]:
    x, y = torch.randn(10, 8) * 3, torch.randn(10, 8) * 3
    x[0, 0], x[3, 1], y[5, 2] = float("nan"), float("inf"), -float("inf")
    return x, y


SC, NP, MS, SO = "split_cat_pass", "normalization_pass", "merge_splits_pass", "remove_split_with_size_one_pass"
UB = "unbind_stack_pass"
SCMERGE = ("scmerge_split_added", "scmerge_split_removed", "scmerge_cat_added", "scmerge_cat_removed",
           "scmerge_split_sections_removed")

#: Case name → (model builder, example-input builder, Optimus passes, other counters asserted).
CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, ...]], tuple[str, ...],
                       tuple[str, ...]]] = {
    # test_split_normalization
    "split_cat_normalization": (NormalizationFunction, _randn(_N), (NP,), ()),
    "split_cat_normalization_method": (NormalizationMethod, _randn(_N), (NP,), ()),
    "split_cat_normalization_unequal": (NormalizationUnequal, _randn(_N), (NP,), ()),
    "split_cat_numpy_compat": (NumpyCompat, _randn((8, 16), (8, 16)), (NP,), ()),
    # test_consecutive_split_merge
    "split_cat_size_one_split": (SizeOneSplit, _randn(_N), (SO, MS), ()),
    "split_cat_merge_splits": (MergeSplits, _randn(_N, _N), (MS,), ()),
    "split_cat_merge_splits_sections": (MergeSplitsSections, _randn(_N, _N), (MS,), ()),
    "split_cat_merge_splits_diff_dims": (MergeSplitsDiffDims, _randn(_N), (MS,), ()),
    "split_cat_merge_splits_other_users": (MergeSplitsOtherUsers, _randn(_N), (MS,), ()),
    "split_cat_merge_splits_to_cat": (MergeSplitsToCat, _randn(_N), (MS,), ()),
    "split_cat_merge_splits_duplicate_getitems": (MergeSplitsDuplicateGetitems, _randn(_N), (MS,), ()),
    "split_cat_merge_splits_getitem_gap": (MergeSplitsGetitemGap, _randn(_N), (MS,), ()),
    "split_cat_merge_splits_out_of_order": (MergeSplitsOutOfOrder, _randn(_N), (MS,), ()),
    # test_split_cat_merge
    "split_cat_identity": (SplitCatIdentity, _randn(_X), (SC,), SCMERGE),
    "split_cat_other_dim": (SplitCatOtherDim, _randn(_X, _X), (SC,), SCMERGE),
    "split_cat_simple_stack": (SplitStackSimple, _randn(_X, _X, _X), (SC,), SCMERGE),
    "split_cat_addn_args": (SplitCatAddnArgs, _randn(_X, _X), (SC,), SCMERGE),
    "split_cat_split_stack_addn_args": (SplitStackAddnArgs, _randn(_X), (SC,), SCMERGE),
    "split_cat_dim_mismatch": (SplitCatDimMismatch, _randn(_X, _X, _X), (SC,), SCMERGE),
    "split_cat_stack_dim_mismatch": (SplitStackDimMismatch, _randn(_X, _X, _X), (SC,), SCMERGE),
    "split_cat_input_shuffling": (InputShuffling, _randn(_X), (SC,), SCMERGE),
    "split_cat_input_shuffling_stack": (InputShufflingStack, _randn(_X), (SC,), SCMERGE),
    "split_cat_input_shuffling_dim_mismatch": (InputShufflingDimMismatch, _randn(_X, _X), (SC,), SCMERGE),
    "split_cat_input_shuffling_multiple_output": (InputShufflingMultipleOutput, _randn(_X, _X), (SC,), SCMERGE),
    "split_cat_input_shuffling_same_ranges": (InputShufflingSameRanges, _randn(_X), (SC,), SCMERGE),
    "split_cat_unequal_split_multiple_output": (UnequalSplitMultipleOutput, _randn(_X), (SC,), SCMERGE),
    "split_cat_multi_split_cat": (MultiSplitCat, _randn(_X, _X), (SC,), SCMERGE),
    "split_cat_mutation": (SplitCatMutation, _randn(_X), (SC,), SCMERGE),
    # test_split_squeeze
    "split_cat_split_squeeze_stack": (SplitSqueezeStack, _randn(_SQ, _SQ, _SQ, _SQ), (SC,), ()),
    "split_cat_split_squeeze_none_dim": (SplitSqueezeNoneDim, _randn(_SQ), (SC,), ()),
    "split_cat_split_squeeze_multi_squeeze_users": (SplitSqueezeMultiSqueezeUsers, _randn(_SQ), (SC,), ()),
    "split_cat_split_squeeze_size_not_1": (SplitSqueezeSizeNot1, _randn(_SQ), (SC,), ()),
    "split_cat_split_squeeze_dim_mismatch": (SplitSqueezeDimMismatch, _randn(_SQ), (SC,), ()),
    "split_cat_split_squeeze_other_users": (SplitSqueezeOtherUsers, _randn(_SQ, _SQ), (SC, UB), SCMERGE),
    "split_cat_split_squeeze_topological": (SplitSqueezeTopological, _randn(_SQ), (SC,), ()),
    # test_unbind_stack
    "split_cat_unbind_stack": (UnbindStack, _randn(_U, _U, _U, _U), (UB,), (*SCMERGE, NP)),
    "split_cat_unbind_stack_dim_mismatch": (UnbindStackDimMismatch, _randn(_U), (UB,), (*SCMERGE, NP)),
    "split_cat_unbind_cat": (UnbindCat, _randn(_U), (UB,), (*SCMERGE, NP)),
    "split_cat_unbind_cat_addn_args": (UnbindCatAddnArgs, _randn(_U, _U), (UB,), (*SCMERGE, NP)),
    "split_cat_unbind_stack_addn_args": (UnbindStackAddnArgs, _randn(_U), (UB,), (*SCMERGE, NP)),
    "split_cat_unbind_dim_mismatch": (UnbindDimMismatch, _randn(_U, _U), (UB,), (*SCMERGE, NP)),
    "split_cat_unbind_cat_multi_users": (UnbindCatMultiUsers, _randn(_U, _U), (UB,), (*SCMERGE, NP)),
    # test_split_cat_new_patterns
    "split_cat_getitem_cat_merge": (SplitCatSplit, _randn((4, 50), (4, 50)), ("merge_getitem_cat_pass",), ()),
    "split_cat_remove_cat_all_getitems": (RemoveCatAllGetitems, _randn((50, 8)), ("mutate_cat_pass",), ()),
    "split_cat_mutate_cat": (MutateCatSomeGetitems, _randn((50, 8)), ("mutate_cat_pass",), ()),
    "split_cat_to_slices": (SplitCatToSlices, _randn((50, 8)), ("split_cat_to_slices_pass",), ()),
    "split_cat_unbind_cat_to_view": (UnbindCatToView, _randn((50, 8)), ("unbind_cat_to_view_pass",), ()),
    "split_cat_split_stack_to_cats_same_dim": (SplitStackToCatsSameDim, _randn((50, 8)),
                                               ("split_stack_to_cats_pass",), ()),
    "split_cat_split_stack_to_cats_different_dim": (SplitStackToCatsDifferentDim, _randn((8, 50)),
                                                    ("split_stack_to_cats_pass",), ()),
    "split_cat_unbind_stack_to_slices": (UnbindStackToSlices, _randn((50, 8)), ("unbind_stack_to_slices_pass",), ()),
    "split_cat_move_reshape_out_of_split_stack": (MoveReshapeOutOfSplitStack, _randn((50, 8)),
                                                  (NP, "move_reshape_out_of_split_stack_pass"), ()),
    # test_group_batch_fusion
    "group_batch_group_linear": (GroupLinear, _randn((10, 10)), ("group_linear",), ()),
    "group_batch_group_linear_no_bias": (functools.partial(GroupLinear, bias=False), _randn((10, 10)),
                                         ("group_linear",), ()),
    "group_batch_group_linear_shapes": (lambda: GroupLinearShapes().eval(), _randn((4, 24)), ("group_linear",),
                                        ("batch_fusion",)),
    "group_batch_layernorm": (BatchLayerNorm, _randn((2, 5, 50)), ("batch_layernorm",), ()),
    "group_batch_layernorm_no_affine": (functools.partial(BatchLayerNorm, weight=False, bias=False),
                                        _randn((2, 5, 50)), ("batch_layernorm",), ()),
    "group_batch_linear_lhs": (BatchLinearLHS, _randn((20, 10)), ("batch_linear_lhs",), ()),
    "group_batch_linear_lhs_no_bias": (functools.partial(BatchLinearLHS, bias=False), _randn((20, 10)),
                                       ("batch_linear_lhs",), ()),
    "group_batch_linear_lhs_modules": (BatchLinearLHSModules, _randn((20, 10)), ("batch_linear_lhs",), ()),
    "group_batch_linear": (BatchLinear, _randn((8, 100)), ("batch_linear",), ()),
    "group_batch_linear_no_bias": (functools.partial(BatchLinear, bias=False), _randn((8, 100)),
                                   ("batch_linear",), ()),
    "group_batch_pointwise": (BatchPointwise, _randn((4, 200)),
                              ("batch_relu", "batch_sigmoid", "batch_aten_add", "batch_aten_mul", "batch_aten_sub",
                               "batch_aten_div"), ()),
    "group_batch_pointwise_aten": (BatchPointwiseAten, _randn((4, 200)),
                                   ("batch_aten_tanh", "batch_aten_relu", "batch_aten_sigmoid",
                                    "unbind_stack_aten_pass"), ()),
    "group_batch_highway_self_gating": (HighwaySelfGating, _randn(*[(4, 10)] * 10),
                                        ("batch_linear_post_grad", "batch_aten_sigmoid", "batch_aten_mul",
                                         "batch_aten_add", "normalization_aten_pass", "unbind_stack_aten_pass"), ()),
    "group_batch_math_ops": (MathOps, _nan_input, (NP, "batch_clamp", "batch_detach", "batch_nan_to_num",
                                                  "unbind_stack_to_slices_pass", UB), ()),
    "group_batch_math_ops_pieces": (MathOpsPieces, _nan_rows, (NP, "batch_clamp", "batch_detach", "batch_nan_to_num",
                                                               "unbind_stack_to_slices_pass", UB), ()),
    "group_batch_dropout": (BatchDropout, _randn((10, 100)), (NP, "batch_dropout"), ()),
    "group_batch_bmm_fusion": (BMMFusion, _randn(*[(10, 10)] * 10), ("batch_linear_post_grad",), ()),
    "group_batch_qkv_as_strided": (lambda: QKVAsStrided().eval(), _randn((1, 8, 32)), ("batch_linear_post_grad",),
                                   ()),
    "group_batch_cat_linear": (functools.partial(CatLinear, (24, 24)), _randn((8, 24), (8, 24)), ("cat_linear",), ()),
    "group_batch_cat_linear_three": (functools.partial(CatLinear, (16, 16, 16)), _randn(*[(8, 16)] * 3),
                                     ("cat_linear",), ()),
    "group_batch_cat_linear_four": (functools.partial(CatLinear, (16, 16, 16, 16)), _randn(*[(8, 16)] * 4),
                                    ("cat_linear",), ()),
    "group_batch_cat_linear_thin_piece": (functools.partial(CatLinear, (4, 16)), _randn((8, 4), (8, 16)),
                                          ("cat_linear",), ()),
    "group_batch_cat_linear_non_last_dim": (functools.partial(CatLinear, (16, 16), 16, cat_dim=0),
                                            _randn((8, 16), (8, 16)), ("cat_linear",), ()),
    "group_batch_cat_linear_two_users": (functools.partial(CatLinear, (16, 16), two_users=True),
                                         _randn((8, 16), (8, 16)), ("cat_linear",), ()),
}

#: Case name → the Optimus passes (``pre_grad_fusion_options`` / ``post_grad_fusion_options``
#: keys, and ``counters["inductor"]`` keys) its pattern is for.
TARGETS: dict[str, tuple[str, ...]] = {name: passes for name, (_, _, passes, _) in CASES.items()}

#: Case name → the other ``counters["inductor"]`` keys Optimus's test asserts for its pattern.
COUNTERS: dict[str, tuple[str, ...]] = {name: extra for name, (_, _, _, extra) in CASES.items()}

#: Cases whose model writes its input in place: run each call on a copy of the inputs.
MUTATES_INPUTS = frozenset({"split_cat_mutation"})


class Interior(nn.Module):
    """A case with its pattern inside a graph: each input through a tanh first, each output
    through a tanh after. The tests' functions read the graph's inputs and return their pieces,
    so an optimized graph whose outputs alias an input or each other must copy them out (and
    keeps the graph when the copies cost what the rewrite saved); here they need not."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.draws = getattr(inner, "draws", False)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.inner(*(torch.tanh(x) for x in inputs))
        return tuple(torch.tanh(o) for o in torch.utils._pytree.tree_leaves(out))


def cases(interior: bool = False) -> dict[str, Factory]:
    """Every case by name, in table order (seeded factories, like the zoo's); with
    ``interior``, each wrapped in :class:`Interior`."""

    def wrap(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
        return (lambda: Interior(build())) if interior else build

    return {name: _factory(wrap(build), inputs) for name, (build, inputs, _, _) in CASES.items()}
