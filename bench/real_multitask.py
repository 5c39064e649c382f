"""Real-model suite, multi-task learning: shared-bottom, MMoE, CGC, PLE and ESMM, written as
DeepCTR-Torch (``deepctr_torch/models/multitask``) writes them, at toy sizes: one DNN per
expert, gate and tower in ``ModuleList``s, expert outputs stacked and mixed by a ``matmul`` with
the softmaxed gate, the task predictions glued with ``torch.cat``.
"""

from __future__ import annotations

import torch
from torch import nn

from optimus_egg.bench.models import Factory
from optimus_egg.bench.real_layers import DENSE, DIM, DNN, FIELDS, FieldEmbeddings, combined_dnn_input, ctr

WIDTH = FIELDS * DIM + DENSE
EXPERT = (32, 16)
TOWER = (8,)


class MultiTask(nn.Module):
    """The part every DeepCTR-Torch multi-task model shares: the inputs, and per task a tower
    DNN, a final Linear and a sigmoid, the predictions glued."""

    def __init__(self, tasks: int, tower_in: int = EXPERT[-1]) -> None:
        super().__init__()
        self.tasks = tasks
        self.embeddings = FieldEmbeddings()
        self.tower_dnn = nn.ModuleList(DNN(tower_in, TOWER) for _ in range(tasks))
        self.tower_dnn_final_layer = nn.ModuleList(nn.Linear(TOWER[-1], 1, bias=False) for _ in range(tasks))

    def dnn_input(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        return combined_dnn_input(sparse, values)

    def towers(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        task_outs = []
        for i in range(self.tasks):
            logit = self.tower_dnn_final_layer[i](self.tower_dnn[i](inputs[i]))
            task_outs.append(torch.sigmoid(logit))
        return torch.cat(task_outs, -1)


def gate_mix(gate: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """``matmul(gate.softmax(1).unsqueeze(1), experts).squeeze()``: experts ``[B, E, D]``."""
    return torch.matmul(gate.softmax(1).unsqueeze(1), experts).squeeze()


class SharedBottom(MultiTask):
    """Shared-bottom (Caruana 1997), DeepCTR-Torch's ``SharedBottom``: one bottom DNN, a tower per
    task."""

    def __init__(self, tasks: int = 3) -> None:
        super().__init__(tasks)
        self.bottom_dnn = DNN(WIDTH, EXPERT)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        shared = self.bottom_dnn(self.dnn_input(ids, dense))
        return self.towers([shared] * self.tasks)


class MMoE(MultiTask):
    """MMoE (Ma et al. 2018), DeepCTR-Torch's ``MMOE``: expert DNNs on one input, stacked; per
    task a gate DNN and final Linear, the softmaxed gate times the stacked experts."""

    def __init__(self, tasks: int = 3, experts: int = 4) -> None:
        super().__init__(tasks)
        self.experts = experts
        self.expert_dnn = nn.ModuleList(DNN(WIDTH, EXPERT) for _ in range(experts))
        self.gate_dnn = nn.ModuleList(DNN(WIDTH, (16,)) for _ in range(tasks))
        self.gate_dnn_final_layer = nn.ModuleList(nn.Linear(16, experts, bias=False) for _ in range(tasks))

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        dnn_input = self.dnn_input(ids, dense)
        expert_outs = [self.expert_dnn[i](dnn_input) for i in range(self.experts)]
        expert_outs = torch.stack(expert_outs, 1)  # [B, E, D]
        mmoe_outs = []
        for i in range(self.tasks):
            gate_dnn_out = self.gate_dnn_final_layer[i](self.gate_dnn[i](dnn_input))
            mmoe_outs.append(gate_mix(gate_dnn_out, expert_outs))
        return self.towers(mmoe_outs)


class PLE(MultiTask):
    """PLE (Tang et al. 2020), DeepCTR-Torch's ``PLE``: ``cgc_net`` levels of task-specific and
    shared experts (one input per task plus one shared, ``[dnn_input] * (tasks + 1)``); a level
    before the last also mixes every expert for the shared input. One level is CGC."""

    def __init__(self, tasks: int = 2, specific: int = 2, shared: int = 2, levels: int = 2) -> None:
        super().__init__(tasks)
        self.specific, self.shared, self.levels = specific, shared, levels
        widths = [WIDTH] + [EXPERT[-1]] * (levels - 1)

        def experts(n: int, level: int) -> nn.ModuleList:
            return nn.ModuleList(DNN(widths[level], EXPERT) for _ in range(n))

        self.specific_experts = nn.ModuleList(
            nn.ModuleList(experts(specific, lv) for _ in range(tasks)) for lv in range(levels))
        self.shared_experts = nn.ModuleList(experts(shared, lv) for lv in range(levels))
        self.specific_gate_dnn_final_layer = nn.ModuleList(
            nn.ModuleList(nn.Linear(widths[lv], specific + shared, bias=False) for _ in range(tasks))
            for lv in range(levels))
        self.shared_gate_dnn_final_layer = nn.ModuleList(
            nn.Linear(widths[lv], tasks * specific + shared, bias=False) for lv in range(levels - 1))

    def cgc_net(self, inputs: list[torch.Tensor], level_num: int) -> list[torch.Tensor]:
        specific_expert_outputs = []
        for i in range(self.tasks):
            for j in range(self.specific):
                specific_expert_outputs.append(self.specific_experts[level_num][i][j](inputs[i]))
        shared_expert_outputs = [self.shared_experts[level_num][k](inputs[-1]) for k in range(self.shared)]
        cgc_outs = []
        for i in range(self.tasks):
            cur = specific_expert_outputs[i * self.specific:(i + 1) * self.specific] + shared_expert_outputs
            gate = self.specific_gate_dnn_final_layer[level_num][i](inputs[i])
            cgc_outs.append(gate_mix(gate, torch.stack(cur, 1)))
        if level_num != self.levels - 1:
            cur = torch.stack(specific_expert_outputs + shared_expert_outputs, 1)
            cgc_outs.append(gate_mix(self.shared_gate_dnn_final_layer[level_num](inputs[-1]), cur))
        return cgc_outs

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        ple_inputs = [self.dnn_input(ids, dense)] * (self.tasks + 1)
        for level in range(self.levels):
            ple_inputs = self.cgc_net(ple_inputs, level)
        return self.towers(ple_inputs)


class ESMM(nn.Module):
    """ESMM (Ma et al. 2018), DeepCTR-Torch's ``ESMM``: a CTR and a CVR tower on one input, the
    CTCVR prediction their product, ``[ctr, ctcvr]`` glued."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = FieldEmbeddings()
        self.ctr_dnn, self.cvr_dnn = DNN(WIDTH, EXPERT), DNN(WIDTH, EXPERT)
        self.ctr_dnn_final_layer = nn.Linear(EXPERT[-1], 1, bias=False)
        self.cvr_dnn_final_layer = nn.Linear(EXPERT[-1], 1, bias=False)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        sparse, values = self.embeddings(ids, dense)
        dnn_input = combined_dnn_input(sparse, values)
        ctr_pred = torch.sigmoid(self.ctr_dnn_final_layer(self.ctr_dnn(dnn_input)))
        cvr_pred = torch.sigmoid(self.cvr_dnn_final_layer(self.cvr_dnn(dnn_input)))
        return torch.cat([ctr_pred, ctr_pred * cvr_pred], -1)


def models() -> dict[str, Factory]:
    """This module's models by suite name."""
    return {
        "real_shared_bottom": ctr(SharedBottom, dense=True),
        "real_mmoe": ctr(MMoE, dense=True),
        "real_cgc": ctr(lambda: PLE(levels=1), dense=True),
        "real_ple": ctr(PLE, dense=True),
        "real_esmm": ctr(ESMM, dense=True),
    }
