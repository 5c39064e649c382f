"""Real-model suite, factorization-machine family: FM and the models built on its second-order
term, written as DeepCTR-Torch (``deepctr_torch/models``) and pytorch-fm (``torchfm/layer.py``)
write them, at toy sizes.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from optimus_egg.bench.models import Factory
from optimus_egg.bench.real_layers import (DENSE, DIM, DNN, FIELDS, FM, VOCAB, FieldEmbeddings, FirstOrder,
                                           InteractingLayer, combined_dnn_input, ctr)


class FMModel(nn.Module):
    """FM (Rendle 2010), DeepCTR-Torch's ``DeepFM`` without its DNN: first-order logit plus the
    ``FM`` layer over the concatenated field embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.linear, self.fm = FieldEmbeddings(), FirstOrder(dense=DENSE), FM()

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, _ = self.embeddings(ids, dense)
        logit = self.linear(ids, dense) + self.fm(torch.cat(sparse, dim=1))
        return torch.sigmoid(logit)


class DeepFM(FMModel):
    """DeepFM (Guo et al. 2017), DeepCTR-Torch's ``DeepFM``: FM logit plus a DNN over
    ``combined_dnn_input`` of the same embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.dnn = DNN(FIELDS * DIM + DENSE, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        logit = self.linear(ids, dense) + self.fm(torch.cat(sparse, dim=1))
        logit = logit + self.dnn_linear(self.dnn(combined_dnn_input(sparse, values)))
        return torch.sigmoid(logit)


class FFM(nn.Module):
    """Field-aware FM (Juan et al. 2016), pytorch-fm's ``FieldAwareFactorizationMachineModel``:
    one table per field over every field's ids (offsets per field), and for each field pair
    ``i < j`` the product of field ``i``'s vector in ``j``'s table and ``j``'s in ``i``'s."""

    def __init__(self, fields: int = FIELDS, dim: int = 4) -> None:
        super().__init__()
        self.fields = fields
        self.embeddings = nn.ModuleList(nn.Embedding(fields * VOCAB, dim) for _ in range(fields))
        for e in self.embeddings:
            nn.init.xavier_uniform_(e.weight.data)
        self.linear = nn.Embedding(fields * VOCAB, 1)
        self.bias = nn.Parameter(torch.zeros((1,)))
        self.register_buffer("offsets", torch.arange(fields) * VOCAB, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.offsets.unsqueeze(0)
        xs = [self.embeddings[i](x) for i in range(self.fields)]
        ix = []
        for i in range(self.fields - 1):
            for j in range(i + 1, self.fields):
                ix.append(xs[j][:, i] * xs[i][:, j])
        ffm = torch.sum(torch.sum(torch.stack(ix, dim=1), dim=1), dim=1, keepdim=True)
        linear = torch.sum(self.linear(x), dim=1) + self.bias
        return torch.sigmoid((linear + ffm).squeeze(1))


class ONN(nn.Module):
    """Operation-aware NN / NFFM (Yang et al. 2019), DeepCTR-Torch's ``ONN``: a table per ordered
    field pair (``"Ci+Cj"``), for every pair from ``itertools.combinations`` the product of the
    two cross lookups, glued with the first-order embeddings, and a DNN."""

    def __init__(self, fields: int = FIELDS, dim: int = 4) -> None:
        super().__init__()
        self.fields = fields
        self.embeddings = FieldEmbeddings(fields, dim)
        self.pairs = list(itertools.combinations(range(fields), 2))
        self.second = nn.ModuleDict({f"C{i}+C{j}": nn.Embedding(VOCAB, dim)
                                     for i in range(fields) for j in range(fields) if i != j})
        for table in self.second.values():
            nn.init.normal_(table.weight, std=0.1)
        self.linear = FirstOrder(fields)
        self.dnn = DNN(fields * dim + len(self.pairs) * dim, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        first, _ = self.embeddings(ids)
        second = []
        for i, j in self.pairs:
            a = self.second[f"C{i}+C{j}"](ids[:, i:i + 1])
            b = self.second[f"C{j}+C{i}"](ids[:, j:j + 1])
            second.append(a * b)
        dnn_input = torch.cat([torch.flatten(torch.cat(first, dim=1), start_dim=1),
                               torch.flatten(torch.cat(second, dim=1), start_dim=1)], dim=1)
        return torch.sigmoid(self.linear(ids) + self.dnn_linear(self.dnn(dnn_input)))


class FwFM(nn.Module):
    """Field-weighted FM (Pan et al. 2018), as DeepCTR's ``FwFMLayer``: a learned weight ``r_ij``
    per field pair on the inner product of the pair's embeddings, pairs from
    ``itertools.combinations`` over the split field embeddings."""

    def __init__(self, fields: int = FIELDS) -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(fields), FirstOrder(fields, DENSE)
        self.field_strengths = nn.Parameter(torch.randn(fields, fields) * 0.1)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, _ = self.embeddings(ids, dense)
        x = torch.cat(sparse, dim=1)
        fields = torch.split(x, 1, dim=1)
        pairwise = []
        for i, j in itertools.combinations(range(len(fields)), 2):
            inner = torch.sum(fields[i] * fields[j], dim=-1)  # [B, 1]
            pairwise.append(inner * self.field_strengths[i, j])
        fwfm = torch.sum(torch.cat(pairwise, dim=1), dim=1, keepdim=True)
        return torch.sigmoid(self.linear(ids, dense) + fwfm)


class FmFM(nn.Module):
    """Field-matrixed FM (Sun et al. 2021, Yahoo's FmFM): a ``K × K`` matrix per field pair,
    ``(v_i M_ij) · v_j``; the pair's left and right fields gathered by ``torch.stack``."""

    def __init__(self, fields: int = FIELDS, dim: int = DIM) -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(fields, dim), FirstOrder(fields)
        self.pairs = list(itertools.combinations(range(fields), 2))
        self.matrices = nn.Parameter(torch.randn(len(self.pairs), dim, dim) * 0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        sparse, _ = self.embeddings(ids)
        emb = [e.squeeze(1) for e in sparse]
        left = torch.stack([emb[i] for i, _ in self.pairs], dim=1)  # [B, P, K]
        right = torch.stack([emb[j] for _, j in self.pairs], dim=1)
        transformed = torch.matmul(left.unsqueeze(2), self.matrices).squeeze(2)
        fmfm = torch.sum(transformed * right, dim=(1, 2)).unsqueeze(1)
        return torch.sigmoid(self.linear(ids) + fmfm)


class NFM(nn.Module):
    """Neural FM (He & Chua 2017), DeepCTR-Torch's ``NFM``: ``BiInteractionPooling`` of the
    field embeddings, glued with the dense values, through a DNN."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(), FirstOrder(dense=DENSE)
        self.dnn = DNN(DIM + DENSE, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        x = torch.cat(sparse, dim=1)
        square_of_sum = torch.pow(torch.sum(x, dim=1, keepdim=True), 2)
        sum_of_square = torch.sum(x * x, dim=1, keepdim=True)
        bi_out = 0.5 * (square_of_sum - sum_of_square)  # [B, 1, K]
        dnn_input = combined_dnn_input([bi_out], values)
        return torch.sigmoid(self.linear(ids, dense) + self.dnn_linear(self.dnn(dnn_input)))


class AFM(nn.Module):
    """Attentional FM (Xiao et al. 2017), DeepCTR-Torch's ``AFMLayer``: the element-wise products
    of every field pair (rows and columns from ``itertools.combinations``, each side one
    ``torch.cat``), an attention net over the pairs, the attended sum projected to a logit."""

    def __init__(self, attention: int = 4) -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(), FirstOrder(dense=DENSE)
        self.attention_W = nn.Parameter(torch.randn(DIM, attention) * 0.1)
        self.attention_b = nn.Parameter(torch.zeros(attention))
        self.projection_h = nn.Parameter(torch.randn(attention, 1) * 0.1)
        self.projection_p = nn.Parameter(torch.randn(DIM, 1) * 0.1)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, _ = self.embeddings(ids, dense)
        row, col = [], []
        for r, c in itertools.combinations(sparse, 2):
            row.append(r)
            col.append(c)
        p, q = torch.cat(row, dim=1), torch.cat(col, dim=1)
        bi_interaction = p * q
        attention_temp = torch.relu(torch.tensordot(bi_interaction, self.attention_W, dims=([-1], [0]))
                                    + self.attention_b)
        normalized = torch.softmax(torch.tensordot(attention_temp, self.projection_h, dims=([-1], [0])), dim=1)
        attention_output = torch.sum(normalized * bi_interaction, dim=1)
        afm_out = torch.tensordot(attention_output, self.projection_p, dims=([-1], [0]))
        return torch.sigmoid(self.linear(ids, dense) + afm_out)


class IFM(nn.Module):
    """Input-aware FM (Yu et al. 2019), DeepCTR-Torch's ``IFM``: a DNN over the flattened
    embeddings gives each field a factor (softmax × fields) that re-weights the first-order
    lookups and the FM input."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.linear, self.fm = FieldEmbeddings(), FirstOrder(), FM()
        self.factor_estimating_net = DNN(FIELDS * DIM, (32, 16))
        self.transform_weight_matrix_P = nn.Linear(16, FIELDS, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        sparse, _ = self.embeddings(ids)
        dnn_input = combined_dnn_input(sparse, [])
        m_vec = self.transform_weight_matrix_P(self.factor_estimating_net(dnn_input))
        input_aware_factor = FIELDS * m_vec.softmax(1)  # [B, F]
        first, _ = self.linear.embeddings(ids)
        logit = torch.sum(torch.cat(first, dim=-1).squeeze(1) * input_aware_factor, dim=-1, keepdim=True)
        refined = torch.cat(sparse, dim=1) * input_aware_factor.unsqueeze(-1)
        return torch.sigmoid(logit + self.fm(refined))


class DIFM(nn.Module):
    """Dual input-aware FM (Lu et al. 2020), DeepCTR-Torch's ``DIFM``: a vector-wise factor from a
    self-attention layer over the fields and a bit-wise factor from a DNN, summed, re-weighting the
    first-order lookups and the FM input."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.linear, self.fm = FieldEmbeddings(), FirstOrder(), FM()
        self.vector_wise_net = InteractingLayer(DIM, heads=2, scaling=True)
        self.bit_wise_net = DNN(FIELDS * DIM, (32, 16))
        self.transform_matrix_P_vec = nn.Linear(FIELDS * DIM, FIELDS, bias=False)
        self.transform_matrix_P_bit = nn.Linear(16, FIELDS, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        sparse, _ = self.embeddings(ids)
        att_input = torch.cat(sparse, dim=1)
        att_out = self.vector_wise_net(att_input).reshape(att_input.shape[0], -1)
        m_vec = self.transform_matrix_P_vec(att_out)
        m_bit = self.transform_matrix_P_bit(self.bit_wise_net(combined_dnn_input(sparse, [])))
        m_x = m_vec + m_bit  # [B, F]
        first, _ = self.linear.embeddings(ids)
        logit = torch.sum(torch.cat(first, dim=-1).squeeze(1) * m_x, dim=-1, keepdim=True)
        return torch.sigmoid(logit + self.fm(att_input * m_x.unsqueeze(-1)))


class WideDeep(nn.Module):
    """Wide & Deep (Cheng et al. 2016), DeepCTR-Torch's ``WDL``: the first-order (wide) logit
    plus a DNN over ``combined_dnn_input``."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(), FirstOrder(dense=DENSE)
        self.dnn = DNN(FIELDS * DIM + DENSE, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        deep = self.dnn_linear(self.dnn(combined_dnn_input(sparse, values)))
        return torch.sigmoid(self.linear(ids, dense) + deep)


class MLR(nn.Module):
    """Mixed logistic regression (Gai et al. 2017), DeepCTR-Torch's ``MLR``: a first-order model
    per region and per learner, the region scores softmaxed, each learner sigmoided, both glued
    with ``torch.cat`` and summed."""

    def __init__(self, regions: int = 4) -> None:
        super().__init__()
        self.region_linear_model = nn.ModuleList(FirstOrder(dense=DENSE) for _ in range(regions))
        self.learner_linear_model = nn.ModuleList(FirstOrder(dense=DENSE) for _ in range(regions))

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        region = torch.cat([m(ids, dense) for m in self.region_linear_model], dim=-1)
        learner = torch.cat([torch.sigmoid(m(ids, dense)) for m in self.learner_linear_model], dim=-1)
        return torch.sum(torch.softmax(region, dim=-1) * learner, dim=-1, keepdim=True)


def models() -> dict[str, Factory]:
    """This module's models by suite name."""
    return {
        "real_fm": ctr(FMModel, dense=True),
        "real_ffm": ctr(FFM),
        "real_onn": ctr(ONN),
        "real_fwfm": ctr(FwFM, dense=True),
        "real_fmfm": ctr(FmFM),
        "real_deepfm": ctr(DeepFM, dense=True),
        "real_nfm": ctr(NFM, dense=True),
        "real_afm": ctr(AFM, dense=True),
        "real_ifm": ctr(IFM),
        "real_difm": ctr(DIFM),
        "real_wide_deep": ctr(WideDeep, dense=True),
        "real_mlr": ctr(MLR, dense=True),
    }
