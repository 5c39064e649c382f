"""Real-model suite, behaviour sequences: DIN, a DIEN-like interest extractor and evolver, and BST,
at toy sizes. DIN and DIEN follow DeepCTR-Torch (``models/din.py``, ``models/dien.py``,
``layers/sequence.py``, ``layers/core.py``); BST follows the paper with
``torch.nn.MultiheadAttention``'s packed in-projection (``_in_projection_packed``).

Inputs: ``ids`` ``[B, 3]`` (user, item, category of the candidate), ``hist_item`` and
``hist_cate`` ``[B, T]`` (the behaviour history), ``length`` ``[B]`` (its valid length).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from optimus_egg.bench.models import Factory
from optimus_egg.bench.real_layers import BATCH, DNN, VOCAB
from optimus_egg.bench.zoo import _factory

T = 8  # history length
EMB = 8


class Behaviours(nn.Module):
    """DeepCTR's ``embedding_lookup`` for DIN-style features: the candidate's item and category
    share their tables with the history's (``embedding_name``), the user has one of its own;
    each lookup a column slice, item and category glued on the last dim."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding_dict = nn.ModuleDict({name: nn.Embedding(VOCAB, EMB) for name in ("user", "item", "cate")})
        for table in self.embedding_dict.values():
            nn.init.normal_(table.weight, std=0.1)

    def forward(self, ids: torch.Tensor, hist_item: torch.Tensor, hist_cate: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The query ``[B, 1, 2E]``, the keys ``[B, T, 2E]``, the DNN's lookups ``[B, 1, 3E]``."""
        names = ("user", "item", "cate")
        lookups = {n: self.embedding_dict[n](ids[:, i:i + 1]) for i, n in enumerate(names)}
        query_emb = torch.cat([lookups["item"], lookups["cate"]], dim=-1)
        keys_emb = torch.cat([self.embedding_dict["item"](hist_item), self.embedding_dict["cate"](hist_cate)], dim=-1)
        deep_input_emb = torch.cat([lookups[n] for n in names], dim=-1)
        return query_emb, keys_emb, deep_input_emb


class LocalActivationUnit(nn.Module):
    """DeepCTR's ``LocalActivationUnit``: ``[q, k, q − k, q · k]`` per step, a sigmoid DNN, a
    Linear to one score."""

    def __init__(self, dim: int = 2 * EMB, hidden: tuple[int, ...] = (16, 8)) -> None:
        super().__init__()
        sizes = (4 * dim, *hidden)
        self.dnn = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.dense = nn.Linear(hidden[-1], 1)

    def forward(self, query: torch.Tensor, user_behavior: torch.Tensor) -> torch.Tensor:
        queries = query.expand(-1, user_behavior.size(1), -1)
        x = torch.cat([queries, user_behavior, queries - user_behavior, queries * user_behavior], dim=-1)
        for linear in self.dnn:
            x = torch.sigmoid(linear(x))
        return self.dense(x)  # [B, T, 1]


class AttentionSequencePoolingLayer(nn.Module):
    """DeepCTR's ``AttentionSequencePoolingLayer``: scores masked past each history's length
    (``arange < length``, ``torch.where``), optionally softmaxed; the weighted sum of the keys,
    or (``return_score``) the scores."""

    def __init__(self, weight_normalization: bool = False, return_score: bool = False) -> None:
        super().__init__()
        self.weight_normalization, self.return_score = weight_normalization, return_score
        self.local_att = LocalActivationUnit()

    def forward(self, query: torch.Tensor, keys: torch.Tensor, keys_length: torch.Tensor) -> torch.Tensor:
        batch_size, max_length, _ = keys.size()
        keys_masks = torch.arange(max_length, device=keys_length.device, dtype=keys_length.dtype).repeat(batch_size, 1)
        keys_masks = (keys_masks < keys_length.view(-1, 1)).unsqueeze(1)  # [B, 1, T]
        outputs = torch.transpose(self.local_att(query, keys), 1, 2)  # [B, 1, T]
        if self.weight_normalization:
            paddings = torch.ones_like(outputs) * (-2 ** 32 + 1)
        else:
            paddings = torch.zeros_like(outputs)
        outputs = torch.where(keys_masks, outputs, paddings)
        if self.weight_normalization:
            outputs = F.softmax(outputs, dim=-1)
        if self.return_score:
            return outputs
        return torch.matmul(outputs, keys)  # [B, 1, E]


class DIN(nn.Module):
    """DIN (Zhou et al. 2018), DeepCTR-Torch's ``DIN``: target attention pooling of the history,
    glued with the other lookups, a DNN."""

    def __init__(self) -> None:
        super().__init__()
        self.behaviours = Behaviours()
        self.attention = AttentionSequencePoolingLayer()
        self.dnn = DNN(5 * EMB, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, hist_item: torch.Tensor, hist_cate: torch.Tensor,
                length: torch.Tensor) -> torch.Tensor:
        query_emb, keys_emb, deep_input_emb = self.behaviours(ids, hist_item, hist_cate)
        hist = self.attention(query_emb, keys_emb, length)
        deep_input_emb = torch.cat((deep_input_emb, hist), dim=-1)
        dnn_input = deep_input_emb.view(deep_input_emb.size(0), -1)
        return torch.sigmoid(self.dnn_linear(self.dnn(dnn_input)))


class GRUCell(nn.Module):
    """DeepCTR's ``AGRUCell``/``AUGRUCell`` (and ``torch.nn.GRUCell``'s maths): both gate
    projections chunked into reset, update and new parts; with an attention score, the update
    gate scaled by it (AUGRU)."""

    def __init__(self, inputs: int, hidden: int) -> None:
        super().__init__()
        self.weight_ih = nn.Parameter(torch.randn(3 * hidden, inputs) * 0.1)
        self.weight_hh = nn.Parameter(torch.randn(3 * hidden, hidden) * 0.1)
        self.bias_ih = nn.Parameter(torch.zeros(3 * hidden))
        self.bias_hh = nn.Parameter(torch.zeros(3 * hidden))

    def forward(self, inputs: torch.Tensor, hx: torch.Tensor, att_score: torch.Tensor | None = None) -> torch.Tensor:
        gi = F.linear(inputs, self.weight_ih, self.bias_ih)
        gh = F.linear(hx, self.weight_hh, self.bias_hh)
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        reset_gate = torch.sigmoid(i_r + h_r)
        update_gate = torch.sigmoid(i_z + h_z)
        new_state = torch.tanh(i_n + reset_gate * h_n)
        if att_score is None:
            return (1.0 - update_gate) * new_state + update_gate * hx
        update_gate = att_score.view(-1, 1) * update_gate
        return (1.0 - update_gate) * hx + update_gate * new_state


class DIEN(nn.Module):
    """DIEN-like (Zhou et al. 2019; DeepCTR-Torch's ``DIEN`` with ``gru_type="AUGRU"``): an
    interest-extractor GRU unrolled over the unbound history, states stacked; attention scores of
    the candidate over them (softmaxed, masked by length); an AUGRU unrolled over the states and
    scores; its last state glued with the lookups into a DNN. Histories are taken as full length
    in the GRUs (DeepCTR packs them)."""

    def __init__(self) -> None:
        super().__init__()
        self.behaviours = Behaviours()
        self.interest_extractor = GRUCell(2 * EMB, 2 * EMB)
        self.attention = AttentionSequencePoolingLayer(weight_normalization=True, return_score=True)
        self.interest_evolution = GRUCell(2 * EMB, 2 * EMB)
        self.dnn = DNN(5 * EMB, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, hist_item: torch.Tensor, hist_cate: torch.Tensor,
                length: torch.Tensor) -> torch.Tensor:
        query_emb, keys_emb, deep_input_emb = self.behaviours(ids, hist_item, hist_cate)
        h = keys_emb.new_zeros(keys_emb.shape[0], keys_emb.shape[2])
        interests = []
        for step in torch.unbind(keys_emb, dim=1):
            h = self.interest_extractor(step, h)
            interests.append(h)
        interests = torch.stack(interests, dim=1)  # [B, T, 2E]
        scores = self.attention(query_emb, interests, length).squeeze(1)  # [B, T]
        h = torch.zeros_like(h)
        for step, score in zip(torch.unbind(interests, dim=1), torch.unbind(scores, dim=1)):
            h = self.interest_evolution(step, h, score)
        dnn_input = torch.cat([deep_input_emb.squeeze(1), h], dim=-1)
        return torch.sigmoid(self.dnn_linear(self.dnn(dnn_input)))


class BST(nn.Module):
    """Behaviour Sequence Transformer (Chen et al. 2019): the history and the candidate as one
    sequence with learned positions, one transformer layer (multi-head self-attention with
    ``nn.MultiheadAttention``'s packed q/k/v projection, unflattened and unbound; LeakyReLU FFN,
    post-norm), the outputs flattened and glued with the user lookup, an MLP."""

    def __init__(self, heads: int = 2) -> None:
        super().__init__()
        dim = 2 * EMB
        self.heads, self.dim = heads, dim
        self.behaviours = Behaviours()
        self.position = nn.Embedding(T + 1, dim)
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.LeakyReLU(), nn.Linear(2 * dim, dim))
        self.register_buffer("positions", torch.arange(T + 1), persistent=False)
        self.dnn = DNN((T + 1) * dim + EMB, (32, 16))
        self.dnn_linear = nn.Linear(16, 1)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        proj = self.in_proj(x)
        proj = proj.unflatten(-1, (3, dim)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
        q, k, v = proj[0], proj[1], proj[2]
        q, k, v = (t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, dim))

    def forward(self, ids: torch.Tensor, hist_item: torch.Tensor, hist_cate: torch.Tensor,
                length: torch.Tensor) -> torch.Tensor:
        query_emb, keys_emb, deep_input_emb = self.behaviours(ids, hist_item, hist_cate)
        x = torch.cat([keys_emb, query_emb], dim=1) + self.position(self.positions)
        x = self.norm1(x + self.attention(x))
        x = self.norm2(x + self.ffn(x))
        user = deep_input_emb[:, 0, :EMB]
        dnn_input = torch.cat([x.flatten(1), user], dim=-1)
        return torch.sigmoid(self.dnn_linear(self.dnn(dnn_input)))


def _inputs(batch: int = BATCH) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, VOCAB, (batch, 3)), torch.randint(0, VOCAB, (batch, T)),
            torch.randint(0, VOCAB, (batch, T)), torch.randint(1, T + 1, (batch,)))


def models() -> dict[str, Factory]:
    """This module's models by suite name."""
    return {"real_din": _factory(DIN, _inputs), "real_dien": _factory(DIEN, _inputs),
            "real_bst": _factory(BST, _inputs)}
