"""Real-model suite, explicit feature crossing: cross networks, CIN, self-attention over fields,
bilinear and product layers, instance masks, written as DeepCTR-Torch (``deepctr_torch/models``,
``layers/interaction.py``) and FuxiCTR write them, at toy sizes.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from optimus_egg.bench.models import Factory
from optimus_egg.bench.real_layers import (DENSE, DIM, DNN, FIELDS, FieldEmbeddings, FirstOrder, InteractingLayer,
                                           combined_dnn_input, ctr)

WIDTH = FIELDS * DIM + DENSE  # combined_dnn_input's width


class CrossNet(nn.Module):
    """DeepCTR's ``CrossNet``: ``vector`` (DCN, Wang et al. 2017) or ``matrix`` (DCN-v2, Wang et
    al. 2021) parameterization, kernels and biases stacked in one parameter, indexed per layer."""

    def __init__(self, width: int, layers: int = 2, parameterization: str = "vector") -> None:
        super().__init__()
        self.layers, self.parameterization = layers, parameterization
        shape = (layers, width, 1) if parameterization == "vector" else (layers, width, width)
        self.kernels = nn.Parameter(torch.randn(*shape) * 0.05)
        self.bias = nn.Parameter(torch.zeros(layers, width, 1))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x_0 = inputs.unsqueeze(2)
        x_l = x_0
        for i in range(self.layers):
            if self.parameterization == "vector":
                xl_w = torch.tensordot(x_l, self.kernels[i], dims=([1], [0]))
                dot_ = torch.matmul(x_0, xl_w)
                x_l = dot_ + self.bias[i] + x_l
            else:
                xl_w = torch.matmul(self.kernels[i], x_l)
                dot_ = xl_w + self.bias[i]
                x_l = x_0 * dot_ + x_l
        return torch.squeeze(x_l, dim=2)


class CrossNetMix(nn.Module):
    """DeepCTR's ``CrossNetMix`` (DCN-Mix, Wang et al. 2021): per layer, a mixture of low-rank
    cross experts (``U``, ``C``, ``V`` stacked per layer and expert), one gate Linear per expert,
    the expert outputs and gate scores stacked and combined with a softmax."""

    def __init__(self, width: int, low_rank: int = 4, experts: int = 3, layers: int = 2) -> None:
        super().__init__()
        self.layers, self.experts = layers, experts
        self.U_list = nn.Parameter(torch.randn(layers, experts, width, low_rank) * 0.05)
        self.V_list = nn.Parameter(torch.randn(layers, experts, width, low_rank) * 0.05)
        self.C_list = nn.Parameter(torch.randn(layers, experts, low_rank, low_rank) * 0.05)
        self.gating = nn.ModuleList(nn.Linear(width, 1, bias=False) for _ in range(experts))
        self.bias = nn.Parameter(torch.zeros(layers, width, 1))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x_0 = inputs.unsqueeze(2)
        x_l = x_0
        for i in range(self.layers):
            output_of_experts, gating_score_of_experts = [], []
            for expert_id in range(self.experts):
                gating_score_of_experts.append(self.gating[expert_id](x_l.squeeze(2)))
                v_x = torch.matmul(self.V_list[i][expert_id].t(), x_l)
                v_x = torch.tanh(v_x)
                v_x = torch.matmul(self.C_list[i][expert_id], v_x)
                v_x = torch.tanh(v_x)
                uv_x = torch.matmul(self.U_list[i][expert_id], v_x)
                dot_ = x_0 * (uv_x + self.bias[i])
                output_of_experts.append(dot_.squeeze(2))
            output_of_experts = torch.stack(output_of_experts, 2)  # [B, W, E]
            gating = torch.stack(gating_score_of_experts, 1)  # [B, E, 1]
            moe_out = torch.matmul(output_of_experts, gating.softmax(1))
            x_l = moe_out + x_l
        return x_l.squeeze()


class DCN(nn.Module):
    """DCN / DCN-v2 / DCN-Mix, DeepCTR-Torch's ``DCN`` and ``DCNMix``: a cross network and a DNN
    side by side over ``combined_dnn_input``, their outputs glued, plus the first-order logit."""

    def __init__(self, cross: str = "vector") -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(), FirstOrder(dense=DENSE)
        self.dnn = DNN(WIDTH, (32, 16))
        self.crossnet = CrossNetMix(WIDTH) if cross == "mix" else CrossNet(WIDTH, parameterization=cross)
        self.dnn_linear = nn.Linear(WIDTH + 16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        dnn_input = combined_dnn_input(sparse, values)
        stack_out = torch.cat((self.crossnet(dnn_input), self.dnn(dnn_input)), dim=-1)
        return torch.sigmoid(self.linear(ids, dense) + self.dnn_linear(stack_out))


class CIN(nn.Module):
    """DeepCTR's ``CIN`` (xDeepFM, Lian et al. 2018): per layer an outer product of the last
    hidden map and the input by ``einsum``, a 1×1 ``Conv1d``, and with ``split_half`` the result
    split into the next hidden map and the direct connection; the connections glued and summed."""

    def __init__(self, fields: int = FIELDS, layer_size: tuple[int, ...] = (8, 8)) -> None:
        super().__init__()
        self.layer_size = layer_size
        self.conv1ds = nn.ModuleList()
        field_nums = [fields]
        for i, size in enumerate(layer_size):
            self.conv1ds.append(nn.Conv1d(field_nums[-1] * field_nums[0], size, 1))
            field_nums.append(size // 2 if i != len(layer_size) - 1 else size)
        self.featuremap_num = sum(size // 2 for size in layer_size[:-1]) + layer_size[-1]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        batch_size, dim = inputs.shape[0], inputs.shape[-1]
        hidden_nn_layers, final_result = [inputs], []
        for i, size in enumerate(self.layer_size):
            x = torch.einsum("bhd,bmd->bhmd", hidden_nn_layers[-1], hidden_nn_layers[0])
            x = x.reshape(batch_size, hidden_nn_layers[-1].shape[1] * hidden_nn_layers[0].shape[1], dim)
            curr_out = torch.relu(self.conv1ds[i](x))
            if i != len(self.layer_size) - 1:
                next_hidden, direct_connect = torch.split(curr_out, 2 * [size // 2], 1)
            else:
                direct_connect, next_hidden = curr_out, 0
            final_result.append(direct_connect)
            hidden_nn_layers.append(next_hidden)
        return torch.sum(torch.cat(final_result, dim=1), -1)


class XDeepFM(nn.Module):
    """xDeepFM (Lian et al. 2018), DeepCTR-Torch's ``xDeepFM``: first-order, CIN and DNN logits."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(), FirstOrder(dense=DENSE)
        self.cin = CIN()
        self.cin_linear = nn.Linear(self.cin.featuremap_num, 1, bias=False)
        self.dnn = DNN(WIDTH, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        cin_logit = self.cin_linear(self.cin(torch.cat(sparse, dim=1)))
        dnn_logit = self.dnn_linear(self.dnn(combined_dnn_input(sparse, values)))
        return torch.sigmoid(self.linear(ids, dense) + cin_logit + dnn_logit)


class AutoInt(nn.Module):
    """AutoInt (Song et al. 2019), DeepCTR-Torch's ``AutoInt``: stacked ``InteractingLayer``s
    over the field embeddings next to a DNN, both glued into one logit."""

    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.embeddings, self.linear = FieldEmbeddings(), FirstOrder(dense=DENSE)
        self.int_layers = nn.ModuleList(InteractingLayer(DIM, heads=2) for _ in range(layers))
        self.dnn = DNN(WIDTH, (32, 16))
        self.dnn_linear = nn.Linear(FIELDS * DIM + 16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        att_input = torch.cat(sparse, dim=1)
        for layer in self.int_layers:
            att_input = layer(att_input)
        att_output = torch.flatten(att_input, start_dim=1)
        deep_out = self.dnn(combined_dnn_input(sparse, values))
        stack_out = torch.cat([att_output, deep_out], dim=-1)
        return torch.sigmoid(self.linear(ids, dense) + self.dnn_linear(stack_out))


class SENETLayer(nn.Module):
    """DeepCTR's ``SENETLayer``: squeeze (mean per field), excitation MLP, re-weighting."""

    def __init__(self, fields: int, reduction: int = 3) -> None:
        super().__init__()
        reduced = max(1, fields // reduction)
        self.excitation = nn.Sequential(nn.Linear(fields, reduced, bias=False), nn.ReLU(),
                                        nn.Linear(reduced, fields, bias=False), nn.ReLU())

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        Z = torch.mean(inputs, dim=-1)
        A = self.excitation(Z)
        return torch.mul(inputs, torch.unsqueeze(A, dim=2))


class BilinearInteraction(nn.Module):
    """DeepCTR's ``BilinearInteraction`` with ``bilinear_type="interaction"``: one Linear per
    field pair from ``itertools.combinations`` over the split fields, times the pair's other
    field, all glued."""

    def __init__(self, fields: int, dim: int) -> None:
        super().__init__()
        self.bilinear = nn.ModuleList(nn.Linear(dim, dim, bias=False)
                                      for _ in itertools.combinations(range(fields), 2))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        inputs = torch.split(inputs, 1, dim=1)
        p = [bilinear(v[0]) * v[1] for v, bilinear in zip(itertools.combinations(inputs, 2), self.bilinear)]
        return torch.cat(p, dim=1)


class FiBiNET(nn.Module):
    """FiBiNET (Huang et al. 2019), DeepCTR-Torch's ``FiBiNET``: SENET re-weighting, the bilinear
    interaction of both the raw and the re-weighted embeddings, a DNN over both."""

    def __init__(self, fields: int = 6) -> None:
        super().__init__()
        self.fields = fields
        self.embeddings, self.linear = FieldEmbeddings(fields), FirstOrder(fields, DENSE)
        self.SE = SENETLayer(fields)
        self.bilinear = BilinearInteraction(fields, DIM)
        pairs = fields * (fields - 1) // 2
        self.dnn = DNN(2 * pairs * DIM + DENSE, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        sparse_embedding_input = torch.cat(sparse, dim=1)
        senet_bilinear_out = self.bilinear(self.SE(sparse_embedding_input))
        bilinear_out = self.bilinear(sparse_embedding_input)
        dnn_input = combined_dnn_input([torch.cat((senet_bilinear_out, bilinear_out), dim=1)], values)
        return torch.sigmoid(self.linear(ids, dense) + self.dnn_linear(self.dnn(dnn_input)))


def pair_lists(embed_list: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """PNN's ``row``/``col`` loops: every pair's left and right field, each side one cat."""
    row, col = [], []
    for i in range(len(embed_list) - 1):
        for j in range(i + 1, len(embed_list)):
            row.append(i)
            col.append(j)
    return torch.cat([embed_list[i] for i in row], dim=1), torch.cat([embed_list[j] for j in col], dim=1)


class PNN(nn.Module):
    """PNN (Qu et al. 2016), DeepCTR-Torch's ``PNN``: the flattened embeddings glued with the
    inner products (``InnerProductLayer``, IPNN) or the kernel outer products
    (``OutterProductLayer``, ``kernel_type="mat"``, OPNN) of every field pair, then a DNN."""

    def __init__(self, product: str = "inner") -> None:
        super().__init__()
        self.product = product
        self.embeddings = FieldEmbeddings()
        pairs = FIELDS * (FIELDS - 1) // 2
        if product == "outer":
            self.kernel = nn.Parameter(torch.randn(DIM, pairs, DIM) * 0.05)
        self.dnn = DNN(FIELDS * DIM + pairs + DENSE, (32, 16))
        self.dnn_linear = nn.Linear(16, 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        linear_signal = torch.flatten(torch.cat(sparse, dim=1), start_dim=1)
        p, q = pair_lists(sparse)
        if self.product == "inner":
            product = torch.flatten(torch.sum(p * q, dim=2, keepdim=True), start_dim=1)
        else:
            product = torch.sum(torch.mul(torch.transpose(
                torch.sum(torch.mul(p.unsqueeze(1), self.kernel), dim=-1), 2, 1), q), dim=-1)
        product_layer = torch.cat([linear_signal, product], dim=1)
        dnn_input = combined_dnn_input([product_layer], values)
        return torch.sigmoid(self.dnn_linear(self.dnn(dnn_input)))


class MaskBlock(nn.Module):
    """FuxiCTR's ``MaskBlock`` (MaskNet, Wang et al. 2021): an instance-guided mask from the
    embeddings times the hidden input, a Linear, layer norm, ReLU."""

    def __init__(self, emb: int, hidden_in: int, out: int, reduction: int = 2) -> None:
        super().__init__()
        self.mask_layer = nn.Sequential(nn.Linear(emb, emb * reduction), nn.ReLU(),
                                        nn.Linear(emb * reduction, hidden_in))
        self.hidden_layer = nn.Linear(hidden_in, out, bias=False)
        self.layer_norm = nn.LayerNorm(out)

    def forward(self, V_emb: torch.Tensor, V_hidden: torch.Tensor) -> torch.Tensor:
        V_mask = self.mask_layer(V_emb)
        return torch.relu(self.layer_norm(self.hidden_layer(V_mask * V_hidden)))


class ParallelMaskNet(nn.Module):
    """FuxiCTR's ``MaskNet`` (``model_type="ParallelMaskNet"``): a layer norm per field over
    the chunked embeddings, parallel mask blocks on the same inputs, glued, then a DNN."""

    def __init__(self, blocks: int = 3, block_dim: int = 16) -> None:
        super().__init__()
        self.embeddings = FieldEmbeddings()
        self.emb_norm = nn.ModuleList(nn.LayerNorm(DIM) for _ in range(FIELDS))
        width = FIELDS * DIM
        self.mask_blocks = nn.ModuleList(MaskBlock(width, width, block_dim) for _ in range(blocks))
        self.dnn = DNN(blocks * block_dim, (16,))
        self.out = nn.Linear(16, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        sparse, _ = self.embeddings(ids)
        V_emb = torch.cat(sparse, dim=1).flatten(start_dim=1)
        feat_list = V_emb.chunk(FIELDS, dim=1)
        V_hidden = torch.cat([ln(feat) for ln, feat in zip(self.emb_norm, feat_list)], dim=1)
        block_out = [block(V_emb, V_hidden) for block in self.mask_blocks]
        return torch.sigmoid(self.out(self.dnn(torch.cat(block_out, dim=-1))))


def models() -> dict[str, Factory]:
    """This module's models by suite name."""
    return {
        "real_dcn": ctr(lambda: DCN("vector"), dense=True),
        "real_dcn_v2": ctr(lambda: DCN("matrix"), dense=True),
        "real_dcn_mix": ctr(lambda: DCN("mix"), dense=True),
        "real_xdeepfm": ctr(XDeepFM, dense=True),
        "real_autoint": ctr(AutoInt, dense=True),
        "real_fibinet": ctr(FiBiNET, dense=True, fields=6),
        "real_ipnn": ctr(lambda: PNN("inner"), dense=True),
        "real_opnn": ctr(lambda: PNN("outer"), dense=True),
        "real_masknet": ctr(ParallelMaskNet),
    }

