"""The operators a decode step runs on one TP rank, in plain torch, with random weights.

A decoder layer here is what vLLM runs for a Qwen2/Llama layer: RMSNorm, one fused q/k/v
projection (with Qwen2's biases), rotary embedding, attention over a KV cache, the output
projection, RMSNorm, one fused gate/up projection, SiLU, the down projection. Every tensor a
step touches is allocated up front (the KV cache sized exactly for the step), so a step can be
captured in a CUDA graph and replayed. Latency does not depend on the weights' values, so
they are torch's default random initialisation (the caller seeds torch).

Attention of T new tokens per sequence over a cache of C + T runs without a mask: a causal
or tree mask would only hide a T x T corner, and what costs is reading the C + T keys and
values (prefill and training, which start at position 0, are causal).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from real.profiler.shard import Shard

RMS_EPS = 1e-6
ROPE_THETA = 10000.0  # the frequencies' base changes values, not cost


def rotary(
    head_dim: int, start: int, tokens: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin for positions start .. start + tokens - 1, shaped [tokens, head_dim]."""
    inv = 1.0 / ROPE_THETA ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    angles = torch.outer(
        torch.arange(start, start + tokens, device=device, dtype=torch.float32), inv
    )
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class KVCache:
    """One layer's keys and values for `sequences` sequences of exactly `length` positions."""

    def __init__(
        self, s: Shard, sequences: int, length: int, device: torch.device, dtype: torch.dtype
    ):
        shape = (sequences, s.kv_heads, length, s.head_dim)
        self.k = torch.randn(shape, device=device, dtype=dtype)
        self.v = torch.randn(shape, device=device, dtype=dtype)


class DecoderLayer(nn.Module):
    """One TP rank's decoder layer (the all-reduces after `o` and `down` are
    Shard.collectives_s)."""

    def __init__(self, s: Shard, input_norm: bool = True):
        super().__init__()
        h, d = s.hidden, s.head_dim
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, d
        # EAGLE's layer has no input norm
        self.norm1 = nn.Parameter(torch.ones(h)) if input_norm else None
        self.qkv = nn.Linear(h, (s.heads + 2 * s.kv_heads) * d, bias=s.arch.qkv_bias)
        self.o = nn.Linear(s.heads * d, h, bias=False)
        self.norm2 = nn.Parameter(torch.ones(h))
        self.gate_up = nn.Linear(h, 2 * s.intermediate, bias=False)
        self.down = nn.Linear(s.intermediate, h, bias=False)

    def forward(self, x: torch.Tensor, start: int, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | None = None) -> torch.Tensor:
        """x [B, T, H]: T new tokens per sequence at positions start ..; their keys and values are
        written into `cache` (None: no cache, attention over these T tokens only)."""
        b, t, h = x.shape
        y = F.rms_norm(x, (h,), self.norm1, RMS_EPS) if self.norm1 is not None else x
        q, k, v = self.qkv(y).split([self.heads * self.head_dim, self.kv_heads * self.head_dim,
                                     self.kv_heads * self.head_dim], dim=-1)
        q = apply_rotary(q.view(b, t, self.heads, self.head_dim).transpose(1, 2), cos, sin)
        k = apply_rotary(k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            cache.k[:, :, start:start + t] = k
            cache.v[:, :, start:start + t] = v
            k, v = cache.k, cache.v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and t > 1, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))
        g, u = self.gate_up(F.rms_norm(x, (h,), self.norm2, RMS_EPS)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Head(nn.Module):
    """The parts of a step outside the decoder layers: the embedding lookup, the final norm, the
    LM head (this rank's vocabulary) and greedy token choice (top-k for a drafter)."""

    def __init__(self, s: Shard):
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.hidden)
        self.norm = nn.Parameter(torch.ones(s.hidden))
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(F.rms_norm(x, (x.shape[-1],), self.norm, RMS_EPS))


class Drafter(nn.Module):
    """An EAGLE drafter on one rank: fc (2H -> H, replicated) over [token embedding, target hidden
    state], one decoder layer without input norm; the target's embedding and LM head (`Head`)."""

    def __init__(self, s: Shard):
        super().__init__()
        self.fc = nn.Linear(2 * s.hidden, s.hidden, bias=False)
        self.layer = DecoderLayer(s, input_norm=False)

    def forward(
        self,
        head: Head,
        ids: torch.Tensor,
        hidden: torch.Tensor,
        start: int,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        x = self.fc(torch.cat((head.embed(ids), hidden), dim=-1))
        return head.logits(self.layer(x, start, cos, sin, cache))

