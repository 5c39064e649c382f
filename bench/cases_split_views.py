"""The split/cat cases of PyTorch's ``test_split_cat_new_patterns`` (the passes that turn runs of
pieces into slices and views), at the sizes :mod:`optimus_egg.bench.optimus_cases` gives them
inputs for; the other split/cat cases are in :mod:`optimus_egg.bench.cases_split_cat`.
"""

from __future__ import annotations

import torch
from torch import nn


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
