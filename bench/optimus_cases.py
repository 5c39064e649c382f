"""Optimus's own test patterns as small models: one case per pattern that PyTorch's tests
give its split/cat passes (``test/inductor/test_split_cat_fx_passes.py``) and its group/batch
fusions (``test/inductor/test_group_batch_fusion.py``).

Those tests are the working spec of what Optimus does. Each case here holds the pattern of one
of their functions or modules (rewritten, at CPU-friendly sizes of a few hundred to a few
thousand elements), including the variants that change what a pass may do: another split or
cat dim, extra users of the pieces, extra tensors in the cat or stack, pieces out of order,
with and without bias. Call forms (``torch.split`` / ``Tensor.split``, keywords, negative dims)
follow the tests, since Optimus's normalization is what makes them match. The models are in
:mod:`~optimus_egg.bench.cases_split_cat` and :mod:`~optimus_egg.bench.cases_group_batch`, one
module per test file; this module pairs each with its inputs and the passes it is for.

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

from optimus_egg.bench.cases_group_batch import (
    BMMFusion, BatchDropout, BatchLayerNorm, BatchLinear, BatchLinearLHS, BatchLinearLHSModules, BatchPointwise,
    BatchPointwiseAten, CatLinear, GroupLinear, GroupLinearShapes, HighwaySelfGating, MathOps, MathOpsPieces,
    QKVAsStrided,
)
from optimus_egg.bench.cases_split_cat import (
    InputShuffling, InputShufflingDimMismatch, InputShufflingMultipleOutput, InputShufflingSameRanges,
    InputShufflingStack, MergeSplits, MergeSplitsDiffDims, MergeSplitsDuplicateGetitems, MergeSplitsGetitemGap,
    MergeSplitsOtherUsers, MergeSplitsOutOfOrder, MergeSplitsSections, MergeSplitsToCat, MultiSplitCat,
    NormalizationFunction, NormalizationMethod, NormalizationUnequal, NumpyCompat, SizeOneSplit, SplitCatAddnArgs,
    SplitCatDimMismatch, SplitCatIdentity, SplitCatMutation, SplitCatOtherDim, SplitSqueezeDimMismatch,
    SplitSqueezeMultiSqueezeUsers, SplitSqueezeNoneDim, SplitSqueezeOtherUsers, SplitSqueezeSizeNot1,
    SplitSqueezeStack, SplitSqueezeTopological, SplitStackAddnArgs, SplitStackSimple, UnbindCat, UnbindCatAddnArgs,
    UnbindCatMultiUsers, UnbindDimMismatch, UnbindStack, UnbindStackAddnArgs, UnbindStackDimMismatch,
    UnequalSplitMultipleOutput,
)
from optimus_egg.bench.cases_split_views import (
    MoveReshapeOutOfSplitStack, MutateCatSomeGetitems, RemoveCatAllGetitems, SplitCatSplit, SplitCatToSlices,
    SplitStackToCatsDifferentDim, SplitStackToCatsSameDim, UnbindCatToView, UnbindStackToSlices,
)
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
    "split_cat_stack_dim_mismatch": (functools.partial(SplitCatDimMismatch, torch.stack), _randn(_X, _X, _X), (SC,), SCMERGE),
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
