"""Layers the real-model suite's models share, written as DeepCTR-Torch
(``deepctr_torch/inputs.py``, ``layers/interaction.py``, ``layers/core.py``) writes them.

DeepCTR looks every sparse feature up on its own (``X[:, start:end]`` → its table →
``[B, 1, K]``), keeps the lookups as a Python list, and concatenates them where a layer wants
one tensor; dense features are sliced column by column the same way. That per-field plumbing is
kept here on purpose: it is what the optimizer is for.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from optimus_egg.bench.models import Factory
from optimus_egg.bench.zoo import _factory

BATCH = 32
VOCAB = 50
FIELDS = 8
DENSE = 4
DIM = 8


class DNN(nn.Module):
    """DeepCTR's ``DNN``: Linear + ReLU per hidden layer (ReLU after the last one too)."""

    def __init__(self, inputs: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        sizes = (inputs, *hidden)
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.linears:
            x = torch.relu(linear(x))
        return x


class FieldEmbeddings(nn.Module):
    """``input_from_feature_columns``: one table per sparse field, each looked up on its column
    slice (``[B, 1, K]`` each, a list); dense features as a list of ``[B, 1]`` column slices."""

    def __init__(self, fields: int = FIELDS, dim: int = DIM, vocab: int = VOCAB) -> None:
        super().__init__()
        self.fields, self.dim = fields, dim
        self.tables = nn.ModuleDict({f"C{i}": nn.Embedding(vocab, dim) for i in range(fields)})
        for table in self.tables.values():
            nn.init.normal_(table.weight, std=0.1)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor | None = None
                ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        sparse = [self.tables[f"C{i}"](ids[:, i:i + 1]) for i in range(self.fields)]
        values = [] if dense is None else [dense[:, i:i + 1] for i in range(dense.shape[1])]
        return sparse, values


def combined_dnn_input(sparse: list[torch.Tensor], dense: list[torch.Tensor]) -> torch.Tensor:
    """DeepCTR's ``combined_dnn_input``: the lookups flattened and glued, the dense values glued."""
    flat = torch.flatten(torch.cat(sparse, dim=-1), start_dim=1)
    if not dense:
        return flat
    return torch.cat([flat, torch.flatten(torch.cat(dense, dim=-1), start_dim=1)], dim=-1)


class FirstOrder(nn.Module):
    """DeepCTR's ``Linear``: a 1-wide table per sparse field, summed, plus a weight on the dense
    values."""

    def __init__(self, fields: int = FIELDS, dense: int = 0, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embeddings = FieldEmbeddings(fields, 1, vocab)
        self.weight = nn.Parameter(torch.randn(dense, 1) * 0.01) if dense else None

    def forward(self, ids: torch.Tensor, dense: torch.Tensor | None = None) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        logit = torch.sum(torch.cat(sparse, dim=-1), dim=-1, keepdim=False)
        if self.weight is not None and values:
            logit = logit + torch.cat(values, dim=-1).matmul(self.weight)
        return logit


class FM(nn.Module):
    """DeepCTR's ``FM`` (Rendle 2010): 0.5 · Σ_k ((Σ_f v)² − Σ_f v²) over ``[B, F, K]``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        square_of_sum = torch.pow(torch.sum(x, dim=1, keepdim=True), 2)
        sum_of_square = torch.sum(x * x, dim=1, keepdim=True)
        return 0.5 * torch.sum(square_of_sum - sum_of_square, dim=2, keepdim=False)


class InteractingLayer(nn.Module):
    """DeepCTR's ``InteractingLayer`` (AutoInt, Song et al. 2019): one query/key/value projection
    over the field embeddings, split into heads and stacked, a softmax over fields, the heads split
    apart again and concatenated, a residual projection."""

    def __init__(self, dim: int = DIM, heads: int = 2, residual: bool = True, scaling: bool = False) -> None:
        super().__init__()
        self.head_dim, self.scaling = dim // heads, scaling
        self.W_Query = nn.Parameter(torch.randn(dim, dim) * 0.05)
        self.W_key = nn.Parameter(torch.randn(dim, dim) * 0.05)
        self.W_Value = nn.Parameter(torch.randn(dim, dim) * 0.05)
        self.W_Res = nn.Parameter(torch.randn(dim, dim) * 0.05) if residual else None

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        querys = torch.tensordot(inputs, self.W_Query, dims=([-1], [0]))
        keys = torch.tensordot(inputs, self.W_key, dims=([-1], [0]))
        values = torch.tensordot(inputs, self.W_Value, dims=([-1], [0]))
        querys = torch.stack(torch.split(querys, self.head_dim, dim=2))  # [H, B, F, d]
        keys = torch.stack(torch.split(keys, self.head_dim, dim=2))
        values = torch.stack(torch.split(values, self.head_dim, dim=2))
        inner = torch.einsum("bnik,bnjk->bnij", querys, keys)
        if self.scaling:
            inner = inner / self.head_dim ** 0.5
        attn = torch.softmax(inner, dim=-1)
        result = torch.matmul(attn, values)
        result = torch.cat(torch.split(result, 1), dim=-1)
        result = torch.squeeze(result, dim=0)  # [B, F, H·d]
        if self.W_Res is not None:
            result = result + torch.tensordot(inputs, self.W_Res, dims=([-1], [0]))
        return torch.relu(result)


def ids_only(batch: int = BATCH, fields: int = FIELDS) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.randint(0, VOCAB, (batch, fields)),)


def ids_and_dense(batch: int = BATCH, fields: int = FIELDS, dense: int = DENSE
                  ) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.randint(0, VOCAB, (batch, fields)), torch.rand(batch, dense))


def ctr(build: Callable[[], nn.Module], dense: bool = False, fields: int = FIELDS) -> Factory:
    """A seeded factory of a CTR model over ``ids`` ``[B, F]`` (and ``dense`` ``[B, D]``)."""
    return _factory(build, ids_and_dense(fields=fields) if dense else ids_only(fields=fields))
