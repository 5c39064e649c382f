"""Real-model suite, DLRM variants, at toy sizes: the reference implementation
(facebookresearch/dlrm ``dlrm_s_pytorch.py``: index and offset tensors per table, ``dot`` or
``cat`` interaction) and TorchRec's (``torchrec/models/dlrm.py``: ``SparseArch`` over an
``EmbeddingBagCollection``'s ``KeyedTensor``, ``InteractionArch``, ``InteractionDCNArch`` with a
``LowRankCrossNet``), the TorchRec types written as the plain tensors they hold.
"""

from __future__ import annotations

import torch
from torch import nn

from optimus_egg.bench.models import Factory
from optimus_egg.bench.real_layers import BATCH, VOCAB
from optimus_egg.bench.zoo import _factory

TABLES = 6
DENSE_IN = 13
DIM = 8
BAG = 3  # ids per bag


def create_mlp(sizes: tuple[int, ...], sigmoid_layer: int = -1) -> nn.Sequential:
    """The reference's ``create_mlp``: Linear then ReLU per layer, a Sigmoid at ``sigmoid_layer``."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        layers.append(nn.Sigmoid() if i == sigmoid_layer else nn.ReLU())
    return nn.Sequential(*layers)


class DLRMReference(nn.Module):
    """DLRM (Naumov et al. 2019) as ``dlrm_s_pytorch.DLRM_Net``: bottom MLP, ``apply_emb`` (one
    ``EmbeddingBag`` per table on its index and offset tensors, here unbound from one tensor
    each), ``interact_features`` (``dot``: ``bmm`` of the stacked features, the lower triangle
    gathered with ``torch.tensor`` index lists; ``cat``), top MLP with a final sigmoid."""

    def __init__(self, interaction: str = "dot") -> None:
        super().__init__()
        self.interaction = interaction
        self.bot_l = create_mlp((DENSE_IN, 16, DIM))
        self.emb_l = nn.ModuleList(nn.EmbeddingBag(VOCAB, DIM, mode="sum") for _ in range(TABLES))
        n = TABLES + 1
        top_in = DIM + n * (n - 1) // 2 if interaction == "dot" else DIM * n
        self.top_l = create_mlp((top_in, 16, 1), sigmoid_layer=1)

    def apply_emb(self, lS_o: torch.Tensor, lS_i: torch.Tensor) -> list[torch.Tensor]:
        ly = []
        for k, sparse_index_group_batch in enumerate(torch.unbind(lS_i, dim=0)):
            sparse_offset_group_batch = lS_o[k]
            ly.append(self.emb_l[k](sparse_index_group_batch, sparse_offset_group_batch))
        return ly

    def interact_features(self, x: torch.Tensor, ly: list[torch.Tensor]) -> torch.Tensor:
        if self.interaction == "cat":
            return torch.cat([x] + ly, dim=1)
        batch_size, d = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        li = torch.tensor([i for i in range(ni) for j in range(i)])
        lj = torch.tensor([j for i in range(nj) for j in range(i)])
        Zflat = Z[:, li, lj]
        return torch.cat([x] + [Zflat], dim=1)

    def forward(self, dense_x: torch.Tensor, lS_o: torch.Tensor, lS_i: torch.Tensor) -> torch.Tensor:
        x = self.bot_l(dense_x)
        ly = self.apply_emb(lS_o, lS_i)
        return self.top_l(self.interact_features(x, ly))


class SparseArch(nn.Module):
    """TorchRec's ``SparseArch``: the ``EmbeddingBagCollection`` pools every feature with its own
    table and returns a ``KeyedTensor`` (the pooled values glued on dim 1); ``to_dict`` splits
    them apart by the features' lengths, and the arch glues them again and reshapes to
    ``[B, F, D]``. Features arrive as ``[F, B, L]`` bags (a ``KeyedJaggedTensor`` of fixed
    lengths)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding_bags = nn.ModuleDict({f"t_cat_{i}": nn.EmbeddingBag(VOCAB, DIM, mode="sum")
                                             for i in range(TABLES)})
        self.sparse_feature_names = [f"cat_{i}" for i in range(TABLES)]

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        pooled = [self.embedding_bags[f"t_{name}"](bags)
                  for name, bags in zip(self.sparse_feature_names, features.unbind(0))]
        values = torch.cat(pooled, dim=1)  # KeyedTensor.values()
        sparse = dict(zip(self.sparse_feature_names, torch.split(values, [DIM] * TABLES, dim=1)))  # to_dict()
        sparse_values = [sparse[name] for name in self.sparse_feature_names]
        return torch.cat(sparse_values, dim=1).reshape(-1, TABLES, DIM)


class LowRankCrossNet(nn.Module):
    """TorchRec's ``LowRankCrossNet``: ``x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l``, kernels
    in ``ParameterList``s."""

    def __init__(self, width: int, layers: int = 2, low_rank: int = 4) -> None:
        super().__init__()
        self._num_layers = layers
        self.V_kernels = nn.ParameterList(nn.Parameter(torch.randn(low_rank, width) * 0.05) for _ in range(layers))
        self.W_kernels = nn.ParameterList(nn.Parameter(torch.randn(width, low_rank) * 0.05) for _ in range(layers))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(width)) for _ in range(layers))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x_0 = input
        x_l = x_0
        for layer in range(self._num_layers):
            x_l_v = nn.functional.linear(x_l, self.V_kernels[layer])
            x_l_w = nn.functional.linear(x_l_v, self.W_kernels[layer], self.bias[layer])
            x_l = x_0 * x_l_w + x_l
        return x_l


class TorchRecDLRM(nn.Module):
    """TorchRec's ``DLRM`` (``InteractionArch``: dense and sparse stacked, ``bmm``, the upper
    triangle gathered by ``triu_indices``, glued with the dense features) or ``DLRM_DCN``
    (``InteractionDCNArch``: the flattened features through a ``LowRankCrossNet``)."""

    def __init__(self, dcn: bool = False) -> None:
        super().__init__()
        self.dcn = dcn
        self.dense_arch = create_mlp((DENSE_IN, 16, DIM))
        self.sparse_arch = SparseArch()
        n = TABLES + 1
        if dcn:
            self.crossnet = LowRankCrossNet(n * DIM)
            top_in = n * DIM
        else:
            self.register_buffer("triu_indices", torch.triu_indices(n, n, offset=1), persistent=False)
            top_in = DIM + n * (n - 1) // 2
        self.over_arch = create_mlp((top_in, 16, 1), sigmoid_layer=-1)

    def forward(self, dense_features: torch.Tensor, sparse_features: torch.Tensor) -> torch.Tensor:
        embedded_dense = self.dense_arch(dense_features)
        embedded_sparse = self.sparse_arch(sparse_features)
        combined_values = torch.cat((embedded_dense.unsqueeze(1), embedded_sparse), dim=1)
        if self.dcn:
            concatenated = self.crossnet(combined_values.reshape([dense_features.shape[0], -1]))
        else:
            interactions = torch.bmm(combined_values, torch.transpose(combined_values, 1, 2))
            interactions_flat = interactions[:, self.triu_indices[0], self.triu_indices[1]]
            concatenated = torch.cat((embedded_dense, interactions_flat), dim=1)
        return self.over_arch(concatenated)


def _reference_inputs(batch: int = BATCH) -> tuple[torch.Tensor, ...]:
    offsets = torch.arange(batch).mul(BAG).expand(TABLES, batch).contiguous()
    return torch.rand(batch, DENSE_IN), offsets, torch.randint(0, VOCAB, (TABLES, batch * BAG))


def _torchrec_inputs(batch: int = BATCH) -> tuple[torch.Tensor, ...]:
    return torch.rand(batch, DENSE_IN), torch.randint(0, VOCAB, (TABLES, batch, BAG))


def models() -> dict[str, Factory]:
    """This module's models by suite name."""
    return {
        "real_dlrm": _factory(DLRMReference, _reference_inputs),
        "real_dlrm_cat": _factory(lambda: DLRMReference("cat"), _reference_inputs),
        "real_torchrec_dlrm": _factory(TorchRecDLRM, _torchrec_inputs),
        "real_torchrec_dlrm_dcn": _factory(lambda: TorchRecDLRM(dcn=True), _torchrec_inputs),
    }
