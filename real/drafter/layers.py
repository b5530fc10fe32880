"""The Llama pieces an EAGLE and an EAGLE-3 head are made of (real/drafter/eagle.py, eagle3.py),
computed as vLLM's Llama layers compute them: RMSNorm, neox-style RoPE (default, linear or
Llama-3 scaled frequencies), grouped-KV attention and the SiLU-gated MLP.

`rotated_qkv` and `layer_output` split a decoder layer around its attention kernel, so that a
drafter can be run step by step against cached keys (real/drafter/chains.py) or unrolled over
its own outputs in training (eagle3.py's training-time test) with the same arithmetic.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_inv_freq(theta: float, head_dim: int, scaling: dict[str, Any] | None) -> torch.Tensor:
    """RoPE's inverse frequencies; `scaling` a config's rope_scaling ('linear' or 'llama3', as
    vLLM's and transformers' Llama compute them; None or 'default': unscaled)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind in (None, "default"):
        return inv
    if kind == "linear":
        return inv / float(scaling["factor"])
    if kind != "llama3":
        raise NotImplementedError(f"RoPE type {kind!r}: the drafter implements default, linear "
                                  "and llama3 RoPE")
    factor, low, high = (float(scaling[k]) for k in ("factor", "low_freq_factor",
                                                      "high_freq_factor"))
    old = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    smooth = ((old / wavelen - low) / (high - low)).clamp(0, 1)
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    mid = (wavelen <= old / low) & (wavelen >= old / high)
    return torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)


class Attention(nn.Module):
    """Llama attention reading `in_size` features (the model's hidden size unless given: EAGLE-3's
    reads twice that)."""

    def __init__(self, cfg: Any, in_size: int | None = None, bias: bool = False):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        size = in_size or cfg.hidden_size
        self.q_proj = nn.Linear(size, self.nh * self.hd, bias=bias)
        self.k_proj = nn.Linear(size, self.nkv * self.hd, bias=bias)
        self.v_proj = nn.Linear(size, self.nkv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        inv = rope_inv_freq(cfg.rope_theta, self.hd, getattr(cfg, "rope_scaling", None))
        self.register_buffer("inv_freq", inv, persistent=False)


def rotated_qkv(attn: Attention, x: torch.Tensor, positions: torch.Tensor):
    """The attention's RoPE-rotated queries and keys and its values at `positions`, KV heads
    repeated for grouped KV: each [B, heads, T, head_dim]."""
    b, t, _ = x.shape
    q = attn.q_proj(x).view(b, t, attn.nh, attn.hd).transpose(1, 2)
    k = attn.k_proj(x).view(b, t, attn.nkv, attn.hd).transpose(1, 2)
    v = attn.v_proj(x).view(b, t, attn.nkv, attn.hd).transpose(1, 2)
    freqs = positions.to(torch.float32)[..., None] * attn.inv_freq  # [b, t, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # neox-style RoPE, as vLLM's Llama
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    if attn.nkv != attn.nh:
        k = k.repeat_interleave(attn.nh // attn.nkv, dim=1)
        v = v.repeat_interleave(attn.nh // attn.nkv, dim=1)
    return q, k, v


class MLP(nn.Module):
    def __init__(self, cfg: Any):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def layer_output(layer: nn.Module, residual: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
    """A decoder layer after its attention kernel (`attn_out` [B, heads, T, head_dim]): output
    projection onto `residual`, then the post-attention norm's MLP, its residual added."""
    b, t, _ = residual.shape
    attn = layer.self_attn
    y = residual + attn.o_proj(attn_out.transpose(1, 2).reshape(b, t, attn.nh * attn.hd))
    return y + layer.mlp(layer.post_attention_layernorm(y))
