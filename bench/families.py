"""One small model per Optimus pass family: the pattern each pass rewrites, in the call forms
users write.

PyTorch's Optimus passes (``torch._inductor.fx_passes``) are families of hand-written
matchers. Each model here holds its family's pattern, sized so the pass matches (Optimus
rewrites cat/stack arguments into slices only for runs of 10 or more pieces, and batches only
5 or more parallel ops), between a Linear that feeds it and a Linear that reads it, so a
training step differentiates the plumbing too. ``optimus-egg bench --suite families`` runs
them beside the zoo's backends; :data:`TARGETS` names the Optimus passes each model is for.

The call forms spread over the models: ``torch.split`` and ``Tensor.split`` (sizes and
sections), ``chunk``, ``split_with_sizes``, ``unbind``, ``narrow``, ``select``, indexing with
slices and integers, negative dims and keyword arguments.
"""

from __future__ import annotations

import torch
from torch import nn

from optimus_egg.bench.models import Factory
from optimus_egg.bench.zoo import _factory

BATCH = 32
WIDTH = 48  # 12 pieces of 4, 6 of 8, 24 of 2


class Plumbed(nn.Module):
    """A Linear in, the family's plumbing (:meth:`plumbing`), a Linear out."""

    def __init__(self, width: int = WIDTH, out: int = WIDTH) -> None:
        super().__init__()
        self.inp = nn.Linear(WIDTH, width)
        self.out = nn.Linear(out, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.plumbing(self.inp(x)))

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Normalization(Plumbed):
    """``normalization_pass``: splits, cats, stacks and unbinds spelled with keywords and
    negative dims (Optimus canonicalizes them before any other pass can match them); here they
    are round trips (split → cat, unbind → stack) that the later passes remove."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.cat(tensors=torch.split(x, split_size_or_sections=4, dim=-1), dim=-1)
        b = torch.concat(x.split(split_size=[8, 16, 24], dim=-1), dim=-1)
        c = torch.stack(tensors=x.unbind(dim=-1), dim=-1)
        return a + b * c


class SizeOneSplit(Plumbed):
    """``remove_split_with_size_one_pass``: a split, chunk or ``split_with_sizes`` that yields
    one piece, glued back by a cat of one tensor (a copy)."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat(torch.split(x, WIDTH, dim=1), dim=1)
        y = torch.cat(torch.tanh(y).chunk(1, dim=-1), dim=-1)
        return torch.cat(y.split_with_sizes([WIDTH], dim=1), dim=1)


class MergeSplits(Plumbed):
    """``merge_splits_pass``: both pieces of a split split again (``Tensor.split``, and
    ``torch.split`` with keywords and a negative dim), and all the pieces glued back in order."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        left, right = torch.split(x, [24, 24], dim=1)
        a = left.split(12, dim=1)
        b = torch.split(right, split_size_or_sections=[8, 16], dim=-1)
        return torch.cat([*a, *b], dim=1)


class SplitCat(Plumbed):
    """``split_cat_pass``: split → cat in order among other tensors (the pieces become the
    split input), and a split into size-1 pieces, each squeezed (an unbind), stacked back."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(x[:, :8])
        wide = torch.cat([h, *torch.split(x, 4, dim=1), h], dim=1)
        cols = [p.squeeze(1) for p in torch.split(x, 1, dim=1)]
        return wide[:, 8:-8] + torch.stack(cols, dim=1)


class MergeGetitemCat(Plumbed):
    """``merge_getitem_cat_pass``: a cat of consecutive pieces that nothing else reads, while
    the other pieces go elsewhere; the cat becomes one bigger split section."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        p = x.split(4, dim=1)
        head = torch.cat(p[:6], dim=1)
        tail = p[6] * p[7] + p[8] - p[9] + p[10] * p[11]
        return torch.cat([head, torch.relu(head)], dim=1) + tail.repeat(1, 12)


class MutateCat(Plumbed):
    """``mutate_cat_pass``: a cat of consecutive pieces that other ops read too; the cat
    becomes a slice of the split tensor. (Optimus does not normalize ``chunk``: written as
    ``x.chunk(12, dim=1)`` the same pattern is left alone.)"""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        p = x.split(4, dim=1)
        mid = torch.cat(p[2:8], dim=1)
        side = p[2] * p[3] + p[7]
        return torch.cat([mid, mid], dim=1) * side.repeat(1, 12)


class SplitCatToSlices(Plumbed):
    """``split_cat_to_slices_pass``: two long runs of consecutive split pieces, swapped, with
    another tensor between them (one piece is also read elsewhere, so the split stays): the cat
    keeps three inputs, two slices and the tensor."""

    def __init__(self) -> None:
        super().__init__(out=WIDTH + 2)

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 2, dim=-1)  # 24 pieces
        return torch.cat([*p[12:], torch.tanh(p[0]), *p[:12]], dim=1)


class SplitStack(Plumbed):
    """``split_stack_to_cats_pass``: all the pieces of a split stacked (a view of the split
    input) with another tensor appended."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        p = x.split(4, dim=1)
        s = torch.stack([*p, torch.relu(p[0])], dim=1)  # [B, 13, 4]
        return (s[:, :12] + s[:, 1:]).flatten(1)


class UnbindStack(Plumbed):
    """``unbind_stack_pass`` / ``unbind_stack_aten_pass`` / ``unbind_stack_to_slices_pass``:
    unbind → stack on the same dim (the input), and a stack of most of the pieces with another
    tensor appended."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        h = x.view(-1, 12, 4)
        same = torch.stack(torch.unbind(h, dim=1), dim=1)
        rows = h.unbind(-2)
        part = torch.stack([*rows[:11], torch.tanh(rows[11])], dim=-2)
        return (same * part).flatten(1)


class UnbindCat(Plumbed):
    """``unbind_stack_pass`` / ``unbind_cat_to_view_pass``: unbind → cat of the pieces on
    another dim (a flatten), alone and with another tensor appended; method and function forms,
    keyword and negative dims."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        h = x.view(-1, 12, 4)
        flat = torch.cat(torch.unbind(h, dim=1), dim=1)
        more = torch.cat(tensors=[*h.unbind(dim=-2), torch.tanh(h[:, 0])], dim=-1)  # [B, 52]
        return flat * torch.sigmoid(more[:, 4:])


class ReshapeSplitStack(Plumbed):
    """``move_reshape_out_of_split_stack_pass``: split pieces each reshaped, then stacked (one
    reshape of the split input)."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        pieces = [torch.reshape(p, (-1, 2, 4)) for p in torch.split(x, 8, dim=1)]
        s = torch.stack(pieces, dim=1)  # [B, 6, 2, 4]
        return torch.tanh(s).flatten(1)


class SelectCat(Plumbed):
    """``select_cat_aten_pass``: a cat of every ``select`` along one dim (a view), written as
    integer indexing, ``torch.select`` and ``Tensor.select`` with keywords."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        h = x.view(-1, 6, 8)
        rows = [h[:, 0], torch.select(h, 1, 1), h.select(dim=1, index=2), h[:, 3], h[:, 4], h[:, 5]]
        flat = torch.cat(rows, dim=1)
        return flat + torch.narrow(x, 1, 0, WIDTH)


class EinsumPointwise(nn.Module):
    """``einsum_to_pointwise_pass``: ``einsum("bcd,bcde->bce")`` followed by an add (per-batch
    weights, as in per-example expert mixing), rewritten as a broadcast multiply and a sum."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(WIDTH, WIDTH)
        self.weights = nn.Linear(WIDTH, 4 * 12 * 6)
        self.bias = nn.Parameter(torch.zeros(4, 6))
        self.out = nn.Linear(24, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x).view(-1, 4, 12)
        w = self.weights(x).view(-1, 4, 12, 6)
        return self.out((torch.einsum("bcd,bcde->bce", h, w) + self.bias).flatten(1))


class BatchLinear(Plumbed):
    """``batch_linear``: six same-shaped Linears on six different inputs (the pieces of a
    split) → one bmm on stacked inputs and weights."""

    def __init__(self) -> None:
        super().__init__()
        self.towers = nn.ModuleList(nn.Linear(8, 8) for _ in range(6))

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([t(p) for t, p in zip(self.towers, x.split(8, dim=1))], dim=1)


class SharedTower(Plumbed):
    """``batch_linear`` with one Linear for all six pieces (a tower the features share): Optimus
    stacks its weight once per piece; it is one linear of the input viewed as ``[n, 6, 8]``."""

    def __init__(self) -> None:
        super().__init__()
        self.tower = nn.Linear(8, 8)

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.tower(p) for p in x.split(8, dim=1)], dim=1)


class SharedInputs(Plumbed):
    """``batch_linear`` with one Linear on six separate inputs (features prepared each its own
    way, one tower they share): Optimus stacks its weight once per input; it is one linear of
    the stacked inputs."""

    PREPARE = (torch.relu, torch.sigmoid, torch.tanh, nn.functional.silu, nn.functional.gelu, torch.abs)

    def __init__(self) -> None:
        super().__init__()
        self.tower = nn.Linear(8, 8)

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.tower(f(p)) for f, p in zip(self.PREPARE, x.split(8, dim=1))], dim=1)


class BatchLinearLHS(Plumbed):
    """``batch_linear_lhs``: six Linears reading one input → one matmul on concatenated
    weights, split."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(WIDTH, 8) for _ in range(6))

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(h(x)) for h in self.heads], dim=1)


class BatchLayerNorm(Plumbed):
    """``batch_layernorm``: six LayerNorms over the pieces of a split → one layer norm on the
    stacked pieces."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(8) for _ in range(6))

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([n(p) for n, p in zip(self.norms, torch.chunk(x, 6, dim=1))], dim=1)


class BatchUnary(Plumbed):
    """``batch_relu`` / ``batch_tanh`` / ``batch_sigmoid`` / ``batch_clamp`` /
    ``batch_nan_to_num`` and their post-grad ``batch_aten_*``: the same pointwise op on each of
    six pieces (narrow and slice indexing among them), stacked."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        pieces = [x.narrow(1, 0, 8), x[:, 8:16], *torch.split(x[:, 16:], 8, dim=1)]
        pieces = [torch.nan_to_num(p).clamp(min=-3.0, max=3.0) for p in pieces]
        pieces = [torch.sigmoid(torch.tanh(torch.relu(p))) for p in pieces]
        return torch.stack(pieces, dim=1).flatten(1)


class BatchDropout(Plumbed):
    """``batch_dropout``: a dropout (training) on each of six pieces, stacked. It draws random
    numbers, so its outputs are not compared with eager's (``draws``); optimus_egg batches the
    dropouts only with ``--option batch_random=True``, which, as Optimus, changes which number
    each element gets."""

    draws = True

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        pieces = [nn.functional.dropout(p, 0.1, self.training) for p in torch.split(x, 8, dim=1)]
        return torch.stack(pieces, dim=1).flatten(1)


class BatchBinary(Plumbed):
    """``batch_aten_add`` / ``sub`` / ``mul`` / ``div``: the same binary op on each pair of
    pieces of two tensors, concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(WIDTH, WIDTH)

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate(x)
        xs, gs = x.split(8, dim=1), g.split(8, dim=1)
        y = torch.cat([a * b for a, b in zip(xs, gs)], dim=1)
        z = torch.cat([a + b for a, b in zip(y.chunk(6, dim=1), gs)], dim=1)
        w = torch.cat([a - b for a, b in zip(z.split(8, dim=1), xs)], dim=1)
        return torch.cat([a / (b.abs() + 1.0) for a, b in zip(w.split(8, dim=1), gs)], dim=1)


class SplitChunkCat(Plumbed):
    """A split, one piece chunked, all pieces glued back in order: the identity. Optimus
    (torch 2.13, ``split_cat_to_slices_pass``) returns the first piece alone, half the width;
    the sum hides the shape, so the answer is silently wrong."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 24, dim=1)
        c = p[1].chunk(2, dim=1)
        return x * torch.cat([p[0], *c], dim=1).sum(1, keepdim=True)


class SplitStackTwice(Plumbed):
    """The pieces of one split stacked twice (alone, and with another tensor): Optimus
    (torch 2.13, ``split_stack_to_cats_pass``) fails to compile it (AssertionError)."""

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        p = x.split(4, dim=1)
        s = torch.stack(p, dim=1) + torch.stack([*p, torch.relu(p[0]), torch.sigmoid(p[1])], dim=1)[:, 2:]
        return s.flatten(1)


class CatInCat(Plumbed):
    """A cat of consecutive split pieces, transformed, inside a cat of the other pieces:
    Optimus (torch 2.13, ``split_cat_to_slices_pass``) fails to compile it (KeyError:
    'example_value')."""

    def __init__(self) -> None:
        super().__init__(out=WIDTH + 24)

    def plumbing(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 2, dim=1)
        mid = torch.cat(p[4:16], dim=1)
        return torch.cat([*p[:12], torch.tanh(mid), *p[12:]], dim=1)


#: Model name → (class, the Optimus passes its pattern is for).
FAMILIES: dict[str, tuple[type[nn.Module], tuple[str, ...]]] = {
    "family_normalization": (Normalization, ("normalization_pass",)),
    "family_size_one_split": (SizeOneSplit, ("remove_split_with_size_one_pass",)),
    "family_merge_splits": (MergeSplits, ("merge_splits_pass",)),
    "family_split_cat": (SplitCat, ("split_cat_pass",)),
    "family_merge_getitem_cat": (MergeGetitemCat, ("merge_getitem_cat_pass",)),
    "family_mutate_cat": (MutateCat, ("mutate_cat_pass",)),
    "family_split_cat_to_slices": (SplitCatToSlices, ("split_cat_to_slices_pass",)),
    "family_split_stack": (SplitStack, ("split_stack_to_cats_pass",)),
    "family_unbind_stack": (UnbindStack, ("unbind_stack_pass", "unbind_stack_to_slices_pass",
                                          "unbind_stack_aten_pass")),
    "family_unbind_cat": (UnbindCat, ("unbind_stack_pass", "unbind_cat_to_view_pass")),
    "family_reshape_split_stack": (ReshapeSplitStack, ("move_reshape_out_of_split_stack_pass",)),
    "family_select_cat": (SelectCat, ("select_cat_aten_pass",)),
    "family_einsum": (EinsumPointwise, ("einsum_to_pointwise_pass",)),
    "family_batch_linear": (BatchLinear, ("batch_linear",)),
    "family_shared_tower": (SharedTower, ("batch_linear",)),
    "family_shared_inputs": (SharedInputs, ("batch_linear",)),
    "family_batch_linear_lhs": (BatchLinearLHS, ("batch_linear_lhs",)),
    "family_batch_layernorm": (BatchLayerNorm, ("batch_layernorm",)),
    "family_batch_unary": (BatchUnary, ("batch_relu", "batch_tanh", "batch_sigmoid", "batch_clamp",
                                        "batch_nan_to_num", "batch_aten_relu", "batch_aten_tanh",
                                        "batch_aten_sigmoid")),
    "family_batch_binary": (BatchBinary, ("batch_aten_add", "batch_aten_sub", "batch_aten_mul",
                                          "batch_aten_div")),
    "family_batch_dropout": (BatchDropout, ("batch_dropout",)),
    "family_split_chunk_cat": (SplitChunkCat, ("split_cat_to_slices_pass",)),
    "family_split_stack_twice": (SplitStackTwice, ("split_stack_to_cats_pass",)),
    "family_cat_in_cat": (CatInCat, ("split_cat_to_slices_pass",)),
}

#: Model name → the Optimus passes (``counters["inductor"]`` keys) its pattern is for.
TARGETS: dict[str, tuple[str, ...]] = {name: passes for name, (_, passes) in FAMILIES.items()}


def families(batch: int = BATCH) -> dict[str, Factory]:
    """Every family model by name, in table order (seeded factories, like the zoo's)."""
    return {name: _factory(cls, lambda: (torch.randn(batch, WIDTH),)) for name, (cls, _) in FAMILIES.items()}
