"""Real-model suite, transformer blocks, at toy sizes: nanoGPT's GPT-2 block, timm's ViT block,
Hugging Face's Phi-3 decoder layer and T5 encoder layer, each written as its public
implementation writes its attention (fused q/k/v projections split, chunked or unbound; T5's
separate projections and relative position bias).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from optimus_egg.bench.models import Factory
from optimus_egg.bench.zoo import _factory

BATCH, SEQ, EMBED, HEADS, VOCAB = 4, 16, 32, 4, 64


class CausalSelfAttention(nn.Module):
    """nanoGPT's ``CausalSelfAttention``: ``c_attn`` then ``.split(n_embd, dim=2)`` into q, k, v,
    heads by ``view`` + ``transpose``, causal SDPA, heads glued back, ``c_proj``."""

    def __init__(self) -> None:
        super().__init__()
        self.n_head, self.n_embd = HEADS, EMBED
        self.c_attn = nn.Linear(EMBED, 3 * EMBED)
        self.c_proj = nn.Linear(EMBED, EMBED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    """nanoGPT's ``Block`` (pre-norm attention and GELU MLP)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(EMBED), nn.LayerNorm(EMBED)
        self.attn = CausalSelfAttention()
        self.c_fc, self.c_proj = nn.Linear(EMBED, 4 * EMBED), nn.Linear(4 * EMBED, EMBED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    """nanoGPT's ``GPT`` (Radford et al. 2019): token and position embeddings, two blocks, the
    final norm, a tied LM head."""

    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, EMBED), nn.Embedding(SEQ, EMBED)
        self.h = nn.ModuleList(GPTBlock() for _ in range(layers))
        self.ln_f = nn.LayerNorm(EMBED)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


class ViTBlock(nn.Module):
    """timm's ViT ``Block`` (Dosovitskiy et al. 2021) with its ``Attention``: one ``qkv`` Linear,
    ``reshape(B, N, 3, heads, d).permute(2, 0, 3, 1, 4)``, ``unbind(0)``, SDPA, ``proj``; then the
    MLP. Over patch tokens ``[B, N, C]``."""

    def __init__(self) -> None:
        super().__init__()
        self.num_heads, self.head_dim = HEADS, EMBED // HEADS
        self.norm1, self.norm2 = nn.LayerNorm(EMBED), nn.LayerNorm(EMBED)
        self.qkv, self.proj = nn.Linear(EMBED, 3 * EMBED), nn.Linear(EMBED, EMBED)
        self.fc1, self.fc2 = nn.Linear(EMBED, 4 * EMBED), nn.Linear(4 * EMBED, EMBED)

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class RMSNorm(nn.Module):
    """Hugging Face's ``Phi3RMSNorm`` / ``T5LayerNorm``: scale by the root mean square, no mean."""

    def __init__(self, dim: int = EMBED, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's ``rotate_half``: the halves sliced, swapped, one negated, glued."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Phi3Layer(nn.Module):
    """Hugging Face's ``Phi3DecoderLayer`` (Abdin et al. 2024): RMS norms, one ``qkv_proj`` sliced
    into q, k, v by position, rotary embeddings (``rotate_half``), causal SDPA, ``o_proj``; the MLP's
    fused ``gate_up_proj`` chunked into gate and up (SwiGLU)."""

    def __init__(self, layers: int = 1) -> None:
        super().__init__()
        self.num_heads, self.head_dim = HEADS, EMBED // HEADS
        self.embed_tokens = nn.Embedding(VOCAB, EMBED)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
        self.qkv_proj = nn.Linear(EMBED, 3 * EMBED, bias=False)
        self.o_proj = nn.Linear(EMBED, EMBED, bias=False)
        self.gate_up_proj = nn.Linear(EMBED, 4 * EMBED, bias=False)
        self.down_proj = nn.Linear(2 * EMBED, EMBED, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        freqs = torch.outer(torch.arange(SEQ).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def attention(self, hidden_states: torch.Tensor) -> torch.Tensor:
        bsz, q_len, _ = hidden_states.size()
        qkv = self.qkv_proj(hidden_states)
        query_pos = self.num_heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos: 2 * query_pos]
        value_states = qkv[..., 2 * query_pos:]
        shape = (bsz, q_len, self.num_heads, self.head_dim)
        query_states = query_states.view(shape).transpose(1, 2)
        key_states = key_states.view(shape).transpose(1, 2)
        value_states = value_states.view(shape).transpose(1, 2)
        cos, sin = self.cos.unsqueeze(0).unsqueeze(0), self.sin.unsqueeze(0).unsqueeze(0)
        query_states = (query_states * cos) + (rotate_half(query_states) * sin)
        key_states = (key_states * cos) + (rotate_half(key_states) * sin)
        out = F.scaled_dot_product_attention(query_states, key_states, value_states, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, q_len, -1))

    def mlp(self, hidden_states: torch.Tensor) -> torch.Tensor:
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        return self.down_proj(up_states * F.silu(gate))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        hidden_states = hidden_states + self.attention(self.input_layernorm(hidden_states))
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class T5Attention(nn.Module):
    """Hugging Face's ``T5Attention`` (Raffel et al. 2020), bidirectional: separate q, k, v, o
    projections without bias, ``shape``/``unshape`` by ``view`` + ``transpose``, no score scaling,
    and the relative position bias (``_relative_position_bucket``: exact buckets near, log-spaced
    far, one table of per-head biases)."""

    def __init__(self, has_relative_attention_bias: bool, buckets: int = 8, max_distance: int = 16) -> None:
        super().__init__()
        self.n_heads, self.key_value_proj_dim = HEADS, EMBED // HEADS
        self.buckets, self.max_distance = buckets, max_distance
        self.q = nn.Linear(EMBED, EMBED, bias=False)
        self.k = nn.Linear(EMBED, EMBED, bias=False)
        self.v = nn.Linear(EMBED, EMBED, bias=False)
        self.o = nn.Linear(EMBED, EMBED, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(buckets, HEADS)

    def _relative_position_bucket(self, relative_position: torch.Tensor) -> torch.Tensor:
        num_buckets = self.buckets // 2
        relative_buckets = (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact) / math.log(self.max_distance / max_exact)
            * (num_buckets - max_exact)).to(torch.long)
        relative_position_if_large = torch.min(relative_position_if_large,
                                               torch.full_like(relative_position_if_large, num_buckets - 1))
        return relative_buckets + torch.where(is_small, relative_position, relative_position_if_large)

    def compute_bias(self, query_length: int, key_length: int, device: torch.device) -> torch.Tensor:
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position_bucket = self._relative_position_bucket(memory_position - context_position)
        values = self.relative_attention_bias(relative_position_bucket)  # [q, k, heads]
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states: torch.Tensor, position_bias: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        batch_size, seq_length = hidden_states.shape[:2]

        def shape(states: torch.Tensor) -> torch.Tensor:
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        query_states = shape(self.q(hidden_states))
        key_states = shape(self.k(hidden_states))
        value_states = shape(self.v(hidden_states))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            position_bias = self.compute_bias(seq_length, seq_length, scores.device)
        scores = scores + position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous().view(batch_size, -1, EMBED)
        return self.o(attn_output), position_bias


class T5Layer(nn.Module):
    """Hugging Face's ``T5Block`` (encoder): ``T5LayerSelfAttention`` and ``T5LayerFF``
    (``DenseReluDense``), pre-norm with ``T5LayerNorm``."""

    def __init__(self, has_relative_attention_bias: bool) -> None:
        super().__init__()
        self.layer_norm, self.ff_norm = RMSNorm(), RMSNorm()
        self.SelfAttention = T5Attention(has_relative_attention_bias)
        self.wi, self.wo = nn.Linear(EMBED, 2 * EMBED, bias=False), nn.Linear(2 * EMBED, EMBED, bias=False)

    def forward(self, hidden_states: torch.Tensor, position_bias: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        attn, position_bias = self.SelfAttention(self.layer_norm(hidden_states), position_bias)
        hidden_states = hidden_states + attn
        hidden_states = hidden_states + self.wo(F.relu(self.wi(self.ff_norm(hidden_states))))
        return hidden_states, position_bias


class T5Encoder(nn.Module):
    """Hugging Face's ``T5Stack`` (encoder): the first layer computes the position bias, the
    others reuse it; a final RMS norm."""

    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, EMBED)
        self.block = nn.ModuleList(T5Layer(i == 0) for i in range(layers))
        self.final_layer_norm = RMSNorm()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden_states, position_bias = self.embed_tokens(input_ids), None
        for layer in self.block:
            hidden_states, position_bias = layer(hidden_states, position_bias)
        return self.final_layer_norm(hidden_states)


def _tokens() -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, VOCAB, (BATCH, SEQ)),)


def models() -> dict[str, Factory]:
    """This module's models by suite name."""
    return {
        "real_gpt2": _factory(GPT, _tokens),
        "real_vit_block": _factory(ViTBlock, lambda: (torch.randn(BATCH, SEQ, EMBED),)),
        "real_phi3_layer": _factory(Phi3Layer, _tokens),
        "real_t5_encoder": _factory(T5Encoder, _tokens),
    }
