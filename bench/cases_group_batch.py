"""The group/batch cases' models: the patterns of PyTorch's
``test/inductor/test_group_batch_fusion.py``, one module per test model or variant, at the
sizes :mod:`optimus_egg.bench.optimus_cases` gives them inputs for.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


# ---------------------------------------------------------------------------------------------
# test_group_batch_fusion.
# ---------------------------------------------------------------------------------------------


class GroupLinear(nn.Module):
    """Three stages of ten parallel Linears, the inputs of the later stages mixed from earlier
    ones with scalar adds and subtracts, the last cat (``MyModule``, group_linear)."""

    def __init__(self, z: int = 10, bias: bool = True) -> None:
        super().__init__()
        self.seq = nn.ModuleList(nn.ModuleList(nn.Linear(z, z, bias) for _ in range(10)) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = 10
        x1 = [x + 0.1 * i for i in range(n)]
        x3 = [self.seq[0][i](x1[i]) - 0.1 * i for i in range(n)]
        x4 = x1[:3] + x3[3:]
        x6 = [self.seq[1][i](x4[i]) + 0.1 * (n - i) for i in range(n)]
        x7 = x1[:4] + x3[6:8] + x6[:4]
        return torch.cat([self.seq[2][i](x7[i]) for i in range(n)], dim=1)


class GroupLinearShapes(nn.Module):
    """Linears of three input widths on the pieces of a split, half through BatchNorm (eval),
    all cat on dim 0 (``MyModule2``, ``test_group_linear_fusion_different_shapes``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(w, 8) for w in (6, 8, 10, 6, 8, 10))
        self.bns = nn.ModuleList(nn.BatchNorm1d(8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.split(x, [6, 8, 10], dim=1)
        a = [self.bns[i](self.linears[i](t[i] + 0.1 * (i + 1))) for i in range(3)]
        b = [self.linears[3](torch.sin(t[0])), self.linears[4](torch.cos(t[1])), self.linears[5](torch.sin(t[2] * 0.5))]
        return torch.sigmoid(torch.cat([*a, *b]))


class BatchLayerNorm(nn.Module):
    """Five functional layer norms over the pieces of a split (normalized shape (10,), weight
    and bias), cat, split again, five more over (5, 10) with or without weight and bias
    (``MyModule3``, batch_layernorm)."""

    def __init__(self, weight: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.scale0 = nn.ParameterList(nn.Parameter(torch.randn(10)) for _ in range(5))
        self.bias0 = nn.ParameterList(nn.Parameter(torch.randn(10)) for _ in range(5))
        self.scale1 = nn.ParameterList(nn.Parameter(torch.randn(5, 10)) for _ in range(5)) if weight else [None] * 5
        self.bias1 = nn.ParameterList(nn.Parameter(torch.randn(5, 10)) for _ in range(5)) if bias else [None] * 5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 10, dim=2)
        h = torch.cat([F.layer_norm(p[i], (10,), weight=self.scale0[i], bias=self.bias0[i]) for i in range(5)], dim=2)
        q = torch.split(h, 10, dim=2)
        return torch.cat([F.layer_norm(q[i], (5, 10), weight=self.scale1[i], bias=self.bias1[i]) for i in range(5)],
                         dim=2)


class BatchLinearLHS(nn.Module):
    """Ten functional linears of one input (out widths 10 down to 6), cat, split, cat on dim 0,
    ten more, cat, sigmoid (``MyModule4``, batch_linear_lhs)."""

    def __init__(self, z: int = 10, bias: bool = True) -> None:
        super().__init__()
        self.w1 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5, z)) for i in range(10))
        self.w2 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5, z)) for i in range(10))
        self.b1 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5)) for i in range(10)) if bias else [None] * 10
        self.b2 = nn.ParameterList(nn.Parameter(torch.randn(z - i % 5)) for i in range(10)) if bias else [None] * 10

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1.2
        h = torch.cat([F.linear(x, self.w1[i], self.b1[i]) for i in range(10)], dim=1)
        h = torch.cat(torch.split(h, 10, dim=1))
        return torch.sigmoid(torch.cat([F.linear(h, self.w2[i], self.b2[i]) for i in range(10)], dim=1))


class BatchLinearLHSModules(nn.Module):
    """Ten ``nn.Linear`` of one input (out widths 10 down to 6), cat, sigmoid
    (``test_batch_linear_lhs_fusion_nn_linear_inlined``)."""

    def __init__(self, z: int = 10, bias: bool = True) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(z, z - i % 5, bias=bias) for i in range(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1.2
        return torch.sigmoid(torch.cat([lin(x) for lin in self.linears], dim=1))


class BatchLinear(nn.Module):
    """Five functional linears, one per piece of a split, same shapes, cat, sin (``MyModule5``,
    batch_linear)."""

    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.weights = nn.ParameterList(nn.Parameter(torch.randn(10, 20)) for _ in range(5))
        self.biases = nn.ParameterList(nn.Parameter(torch.randn(10)) for _ in range(5)) if bias else [None] * 5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.split(x, 20, dim=1)
        return torch.sin(torch.cat([F.linear(p[i], self.weights[i], self.biases[i]) for i in range(5)], dim=1))


class BatchPointwise(nn.Module):
    """Two halves split into ten pieces each; sigmoid, relu per piece, then add, mul, sub, div
    of matching pieces, cat (``_TestPointwiseOps``; batch_relu, batch_sigmoid, batch_aten_*).
    (The test's ``div(sub, sub)`` of ``sub(mul, mul)`` is 0/0; here the operands differ.)"""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        halves = torch.split(x, 100, dim=1)
        xs, ys = torch.split(halves[0], 10, dim=1), torch.split(halves[1], 10, dim=1)
        r1 = [F.relu(torch.sigmoid(p)) for p in xs]
        r2 = [F.relu(torch.sigmoid(p)) for p in ys]
        add = [torch.add(a, b) for a, b in zip(r1, r2)]
        mul = [torch.mul(a, a) for a in add]
        sub = [torch.sub(m, a) for m, a in zip(mul, r1)]
        div = [torch.div(s, a + 1.0) for s, a in zip(sub, add)]
        return torch.cat(div, dim=1)


class BatchPointwiseAten(nn.Module):
    """The same on ATen ops called directly: tanh, sigmoid, relu per piece, add of pairs
    (``_TestPointwiseOpsPostGrad``; batch_aten_tanh/sigmoid/relu, unbind_stack_aten_pass)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        aten = torch.ops.aten
        halves = aten.split(x, 100, 1)
        xs, ys = aten.split(halves[0], 10, 1), aten.split(halves[1], 10, 1)
        r1 = [aten.relu(aten.sigmoid(aten.tanh(p))) for p in xs]
        r2 = [aten.relu(aten.sigmoid(aten.tanh(p))) for p in ys]
        return torch.cat([aten.add(a, b) for a, b in zip(r1, r2)], dim=1)


class HighwaySelfGating(nn.Module):
    """Highway self-gating on each of several inputs, with one gating and one transform Linear
    shared by all: ``gate(x) * sigmoid(transform(x))``, cat on the last dim
    (``_TestHighwaySelfGating``; batch_linear_post_grad, batch_aten_sigmoid/mul/add)."""

    def __init__(self, d_model: int = 10) -> None:
        super().__init__()
        self.gating_proj = nn.Linear(d_model, d_model)
        self.transform_proj = nn.Linear(d_model, d_model)
        self.gating_func = nn.Sigmoid()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.gating_proj(x) * self.gating_func(self.transform_proj(x)) for x in inputs], dim=-1)


class MathOps(nn.Module):
    """The same tensor ten times and ten times more: clamp, nan_to_num, detach of each,
    stacked, the two stacks stacked (``_TestMathOps``; batch_clamp, batch_nan_to_num,
    batch_detach, unbind_stack*). The input holds nan and ±inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def chain(t: torch.Tensor) -> torch.Tensor:
            return torch.nan_to_num(t.clamp(min=-1000.1, max=1000.1), 0.0).detach()

        inputs, others = [x for _ in range(10)], [x for _ in range(10)]
        return torch.stack((torch.stack([chain(t) for t in inputs], dim=0),
                            torch.stack([chain(t) for t in others], dim=0)), dim=0)


class MathOpsPieces(nn.Module):
    """The same chain on ten different rows (an unbind) of each of two inputs."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        def chain(t: torch.Tensor) -> torch.Tensor:
            return torch.nan_to_num(t.clamp(min=-2.0, max=2.0), 0.0).detach()

        return torch.stack((torch.stack([chain(t) for t in x.unbind(0)], dim=0),
                            torch.stack([chain(t) for t in y.unbind(0)], dim=0)), dim=0)


class BatchDropout(nn.Module):
    """A dropout (training) on each of five pieces of a split, five outputs (``_TestDropout``;
    batch_dropout). Draws random numbers: compare with eager under one seed."""

    draws = True

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(F.dropout(p, p=0.05, training=True, inplace=False) for p in x.split([20] * 5, 1))


class BMMFusion(nn.Module):
    """Ten Linears, one per input, their outputs summed in place into the first
    (``_TestBMMFusionModule``; batch_linear_post_grad)."""

    def __init__(self) -> None:
        super().__init__()
        self.my_modules = nn.ModuleList(nn.Linear(10, 10) for _ in range(10))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        output = None
        for linear, x in zip(self.my_modules, inputs):
            if output is None:
                output = linear(x)
            else:
                output += linear(x)
        return output


class QKVAsStrided(nn.Module):
    """Three bias-free projections of one permuted input (q, k, v), each reshaped into heads
    and re-strided with ``as_strided``; q @ k (``test_as_strided_storage_offset_after_mm_fusion``:
    batched mms must leave the views' storage offsets right)."""

    def __init__(self, hidden: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.scale = self.head_dim**0.5

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        seq, batch, _ = t.shape
        t = t.view(seq, batch, self.heads, self.head_dim).permute(2, 1, 0, 3)
        t = t.reshape(self.heads, batch * seq, self.head_dim)
        return t.as_strided((self.heads, batch * seq, self.head_dim), (self.head_dim, self.heads * self.head_dim, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x.permute(1, 0, 2)
        q = self._heads(self.q_proj(x) / self.scale)
        k = self._heads(self.k_proj(x)).permute(0, 2, 1)
        v = self._heads(self.v_proj(x)).permute(0, 2, 1)
        return torch.bmm(q, k), k, v


class CatLinear(nn.Module):
    """linear(cat(parts)) on the last dim, or on dim 0 (not matchable: the linear reads one
    part's width); with ``two_users`` the cat is also summed (``CatLinearMod``,
    ``CatLinearTwoUserMod``; cat_linear)."""

    def __init__(self, widths: tuple[int, ...], out: int = 32, cat_dim: int = -1, two_users: bool = False) -> None:
        super().__init__()
        self.cat_dim, self.two_users = cat_dim, two_users
        self.lin = nn.Linear(sum(widths) if cat_dim == -1 else widths[0], out)

    def forward(self, *parts: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        x = torch.cat(parts, dim=self.cat_dim)
        return (self.lin(x), x.sum()) if self.two_users else self.lin(x)
