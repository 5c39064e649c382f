"""The benchmark zoo: small recommendation models written the way production rec code looks.

Each model is a common architecture, with the split/cat/stack/unbind plumbing such code
accumulates (per-feature preprocessing that splits a dense block and glues it back, per-table
lookups over an unbound id tensor, expert outputs stacked and re-split). Two sizes of the same
graphs: ``toy`` (the default: Inductor compiles each in well under a minute on CPU, and a step
takes a millisecond) and ``realistic`` (batch 1024, layers 256 wide or wider: what memory and
step time are like where activations, not launch overheads, dominate).

Every entry of :func:`zoo` is a :data:`~optimus_egg.bench.models.Factory`: it seeds the RNG,
builds the model and its example inputs, so every backend sees the same weights and inputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn

from optimus_egg.bench.models import Factory, chain

BATCH = 64
VOCAB = 100
SIZES = ("toy", "realistic")


def mlp(*sizes: int) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def per_feature(fn: Callable[[torch.Tensor], torch.Tensor], dense: torch.Tensor) -> torch.Tensor:
    """Apply ``fn`` to each dense feature column separately, the way feature transforms are
    usually registered one per feature, and glue the columns back together."""
    return torch.cat([fn(col) for col in dense.split(1, dim=1)], dim=1)


def log_transform(col: torch.Tensor) -> torch.Tensor:
    """Criteo-style count feature transform: negatives clipped, then log(1 + x)."""
    return torch.log1p(col.clamp(min=0))


class DLRM(nn.Module):
    """DLRM (Naumov et al. 2019): bottom MLP over dense features, one pooled EmbeddingBag per
    sparse feature, pairwise dot-product interaction of all feature vectors, top MLP."""

    def __init__(self, dense: int = 13, tables: int = 8, dim: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.dim = dim
        self.bottom = mlp(dense, hidden, dim)
        self.emb = nn.ModuleList(nn.EmbeddingBag(VOCAB, dim, mode="sum") for _ in range(tables))
        n = tables + 1
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = mlp(dim + n * (n - 1) // 2, hidden, 1)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x = self.bottom(per_feature(log_transform, dense))
        ly = [emb(bag) for emb, bag in zip(self.emb, torch.unbind(ids, dim=1))]
        t = torch.cat([x, *ly], dim=1).view(x.shape[0], -1, self.dim)
        z = torch.bmm(t, t.transpose(1, 2))
        zflat = z[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, zflat], dim=1)))


def dlrm(batch: int = BATCH, **widths: int) -> Factory:
    return _factory(lambda: DLRM(**widths), lambda: (torch.rand(batch, 13) * 10, torch.randint(0, VOCAB, (batch, 8, 3))))


class Features(nn.Module):
    """The input layer most rec models share: dense features plus one embedding per sparse
    field, looked up column by column and concatenated."""

    def __init__(self, dense: int, fields: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.ModuleList(nn.Embedding(VOCAB, dim) for _ in range(fields))
        self.width = dense + fields * dim

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        cols = ids.split(1, dim=1)
        sparse = [emb(col).squeeze(1) for emb, col in zip(self.emb, cols)]
        return torch.cat([per_feature(log_transform, dense), *sparse], dim=1)


def _dense_and_ids(batch: int, dense: int, fields: int) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.rand(batch, dense) * 10, torch.randint(0, VOCAB, (batch, fields)))


class DCNv2(nn.Module):
    """DCN-v2 (Wang et al. 2021): full-rank cross layers x_{l+1} = x0 * (W x_l + b) + x_l next to
    a deep MLP, both over the concatenated features."""

    def __init__(self, dense: int = 13, fields: int = 8, dim: int = 8, layers: int = 3, hidden: int = 64) -> None:
        super().__init__()
        self.features = Features(dense, fields, dim)
        d0 = self.features.width
        self.cross = nn.ModuleList(nn.Linear(d0, d0) for _ in range(layers))
        self.deep = mlp(d0, hidden, hidden // 2)
        self.out = nn.Linear(d0 + hidden // 2, 1)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x0 = self.features(dense, ids)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        return torch.sigmoid(self.out(torch.cat([x, torch.relu(self.deep(x0))], dim=1)))


def dcn_v2(batch: int = BATCH, **widths: int) -> Factory:
    return _factory(lambda: DCNv2(**widths), _dense_and_ids(batch, 13, 8))


class DeepFM(nn.Module):
    """DeepFM (Guo et al. 2017): first-order weights, the factorization machine's second-order
    term over field embeddings, and a deep MLP over the flattened embeddings."""

    def __init__(self, fields: int = 10, dim: int = 8, hidden: int = 64) -> None:
        super().__init__()
        self.emb = nn.ModuleList(nn.Embedding(VOCAB, dim) for _ in range(fields))
        self.first = nn.ModuleList(nn.Embedding(VOCAB, 1) for _ in range(fields))
        self.deep = mlp(fields * dim, hidden, hidden // 2, 1)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        cols = torch.unbind(ids, dim=1)
        v = torch.stack([emb(c) for emb, c in zip(self.emb, cols)], dim=1)  # [B, F, K]
        first = torch.cat([w(c) for w, c in zip(self.first, cols)], dim=1).sum(1, keepdim=True)
        s = v.sum(1)
        second = 0.5 * (s * s - (v * v).sum(1)).sum(1, keepdim=True)
        deep = self.deep(torch.cat(torch.unbind(v, dim=1), dim=1))  # flatten field by field
        return torch.sigmoid(first + second + deep + self.bias)


def deepfm(batch: int = BATCH, **widths: int) -> Factory:
    return _factory(lambda: DeepFM(**widths), lambda: (torch.randint(0, VOCAB, (batch, 10)),))


def _mix(gate: torch.Tensor, experts: list[torch.Tensor]) -> torch.Tensor:
    """Gate-weighted sum of expert outputs: softmax over experts, stacked on dim 1."""
    weights = torch.softmax(gate, dim=-1).unsqueeze(-1)
    return (weights * torch.stack(experts, dim=1)).sum(1)


class MMoE(nn.Module):
    """MMoE (Ma et al. 2018): shared experts, one softmax gate and one tower per task."""

    def __init__(self, dense: int = 8, fields: int = 6, dim: int = 8, experts: int = 4,
                 expert_dim: int = 16, tasks: int = 3, hidden: int = 32) -> None:
        super().__init__()
        self.features = Features(dense, fields, dim)
        d = self.features.width
        self.experts = nn.ModuleList(mlp(d, hidden, expert_dim) for _ in range(experts))
        self.gates = nn.ModuleList(nn.Linear(d, experts) for _ in range(tasks))
        self.towers = nn.ModuleList(mlp(expert_dim, hidden // 2, 1) for _ in range(tasks))

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x = self.features(dense, ids)
        outs = [torch.relu(e(x)) for e in self.experts]
        preds = [torch.sigmoid(tower(_mix(gate(x), outs))) for gate, tower in zip(self.gates, self.towers)]
        return torch.cat(preds, dim=1)


def mmoe(batch: int = BATCH, **widths: int) -> Factory:
    return _factory(lambda: MMoE(**widths), _dense_and_ids(batch, 8, 6))


class PLE(nn.Module):
    """PLE (Tang et al. 2020): stacked extraction layers of task-specific and shared experts;
    each task's gate mixes its own and the shared experts, the shared gate mixes all of them."""

    def __init__(self, dense: int = 8, fields: int = 6, dim: int = 8, tasks: int = 2, specific: int = 2,
                 shared: int = 2, levels: int = 2, expert_dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.features = Features(dense, fields, dim)
        self.tasks, self.levels = tasks, levels
        widths = [self.features.width] + [expert_dim] * (levels - 1)

        def experts(n: int, d: int) -> nn.ModuleList:
            return nn.ModuleList(mlp(d, hidden, expert_dim) for _ in range(n))

        self.task_experts = nn.ModuleList(
            nn.ModuleList(experts(specific, widths[lv]) for _ in range(tasks)) for lv in range(levels))
        self.shared_experts = nn.ModuleList(experts(shared, widths[lv]) for lv in range(levels))
        self.task_gates = nn.ModuleList(
            nn.ModuleList(nn.Linear(widths[lv], specific + shared) for _ in range(tasks)) for lv in range(levels))
        self.shared_gates = nn.ModuleList(
            nn.Linear(widths[lv], tasks * specific + shared) for lv in range(levels - 1))
        self.towers = nn.ModuleList(mlp(expert_dim, hidden // 2, 1) for _ in range(tasks))

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x = self.features(dense, ids)
        inputs = [x] * (self.tasks + 1)  # one per task, the last one for the shared experts
        for lv in range(self.levels):
            own = [[torch.relu(e(inputs[t])) for e in self.task_experts[lv][t]] for t in range(self.tasks)]
            shared = [torch.relu(e(inputs[-1])) for e in self.shared_experts[lv]]
            mixed = [_mix(self.task_gates[lv][t](inputs[t]), own[t] + shared) for t in range(self.tasks)]
            if lv < self.levels - 1:
                everything = [out for task in own for out in task] + shared
                mixed.append(_mix(self.shared_gates[lv](inputs[-1]), everything))
            inputs = mixed
        return torch.cat([torch.sigmoid(tower(h)) for tower, h in zip(self.towers, inputs)], dim=1)


def ple(batch: int = BATCH, **widths: int) -> Factory:
    return _factory(lambda: PLE(**widths), _dense_and_ids(batch, 8, 6))


class FeatureTowers(nn.Module):
    """Dense features arrive as one block; each feature group is sanitized, glued back, split
    again and sent through its own small tower, and the tower outputs are normalized together."""

    def __init__(self, groups: int = 8, width: int = 4, hidden: int = 8) -> None:
        super().__init__()
        self.width = width
        self.towers = nn.ModuleList(mlp(width, hidden, hidden) for _ in range(groups))
        self.norm = nn.LayerNorm(groups * hidden)
        self.head = mlp(groups * hidden, 4 * hidden, 1)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        groups = [torch.nan_to_num(g).clamp(-5.0, 5.0) for g in dense.split(self.width, dim=1)]
        x = torch.cat(groups, dim=1)  # kept whole for logging upstream
        x = torch.cat([t(g) for t, g in zip(self.towers, x.split(self.width, dim=1))], dim=1)
        x = torch.cat([torch.relu(h) for h in x.chunk(len(self.towers), dim=1)], dim=1)
        return torch.sigmoid(self.head(self.norm(x)))


def feature_towers(batch: int = BATCH, groups: int = 8, width: int = 4, **widths: int) -> Factory:
    return _factory(lambda: FeatureTowers(groups, width, **widths), lambda: (torch.randn(batch, groups * width),))


class SequenceFeatures(nn.Module):
    """DIN-style target attention over a user's recent items, written step by step as sequence
    code often is: unbind the history, add positions and transform each step, stack it back,
    and pool with per-step weights."""

    def __init__(self, length: int = 10, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.item = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.randn(length, dim) * 0.1)
        self.att = mlp(4 * dim, hidden, 1)
        self.head = mlp(2 * dim, hidden, 1)

    def forward(self, history: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        q = self.item(target)
        steps = [torch.tanh(s + p) for s, p in zip(torch.unbind(self.item(history), dim=1),
                                                   torch.unbind(self.pos, dim=0))]
        h = torch.stack(steps, dim=1)
        qs = q.unsqueeze(1).expand_as(h)
        scores = self.att(torch.cat([qs, h, qs - h, qs * h], dim=-1)).squeeze(-1)
        w = torch.softmax(scores, dim=1)
        pooled = torch.stack([w[:, i:i + 1] * s for i, s in enumerate(torch.unbind(h, dim=1))], dim=1).sum(1)
        return torch.sigmoid(self.head(torch.cat([pooled, q], dim=1)))


def sequence(batch: int = BATCH, **widths: int) -> Factory:
    return _factory(lambda: SequenceFeatures(**widths),
                    lambda: (torch.randint(0, VOCAB, (batch, 10)), torch.randint(0, VOCAB, (batch,))))


def _factory(build: Callable[[], nn.Module], inputs: Callable[[], tuple[torch.Tensor, ...]]) -> Factory:
    def make() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        model = build()
        return model, inputs()

    return make


#: Blocks of the cruft chain and its clean twin in the full and the ``--quick`` suite.
CHAIN_BLOCKS = {False: 48, True: 8}

#: The ``realistic`` size: a production batch, and every model's widths (hidden layers,
#: embedding dims, expert outputs) set so that its layers are 256 wide or wider.
REALISTIC_BATCH = 1024
REALISTIC_WIDTHS: dict[str, dict[str, int]] = {
    "dlrm": {"dim": 64, "hidden": 512},
    "dcn_v2": {"dim": 32, "hidden": 512},
    "deepfm": {"dim": 32, "hidden": 512},
    "mmoe": {"dim": 48, "hidden": 512, "expert_dim": 256},
    "ple": {"dim": 48, "hidden": 512, "expert_dim": 256},
    "feature_towers": {"width": 32, "hidden": 256},
    "sequence": {"dim": 64, "hidden": 256},
    "cruft_chain": {"width": 256},
}


def zoo(quick: bool = False, size: str = "toy") -> dict[str, Factory]:
    """Every benchmark model by name, in table order, at the ``toy`` or the ``realistic`` size."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; valid: {', '.join(SIZES)}")
    blocks = CHAIN_BLOCKS[quick]
    realistic = size == "realistic"

    def sized(name: str) -> dict[str, int]:
        return {"batch": REALISTIC_BATCH, **REALISTIC_WIDTHS[name]} if realistic else {}

    return {
        "dlrm": dlrm(**sized("dlrm")),
        "dcn_v2": dcn_v2(**sized("dcn_v2")),
        "deepfm": deepfm(**sized("deepfm")),
        "mmoe": mmoe(**sized("mmoe")),
        "ple": ple(**sized("ple")),
        "feature_towers": feature_towers(**sized("feature_towers")),
        "sequence": sequence(**sized("sequence")),
        "cruft_chain": chain(blocks, **sized("cruft_chain")),
        "clean_chain": chain(blocks, clean=True, **sized("cruft_chain")),
    }
