"""What one tensor-parallel rank holds and waits for: shard shapes and the collectives' cost.

A TP engine splits every decoder layer over its ranks (Megatron style, as vLLM and SGLang do):
q heads, KV heads (each rank keeps at least one: replicated beyond the model's KV heads) and
the MLP's intermediate size are divided by TP; the embedding and the LM head by vocabulary.
So one rank's layer is a smaller layer of the same kind, and timing it on one GPU gives a
TP rank's step without the other ranks. What one GPU cannot measure is the interconnect: a
rank waits for two all-reduces per layer (after attention's output projection and after the
MLP), one after the vocabulary-parallel embedding, and a gather of the logits. Those are
added from `Link`, a stated assumption, not a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.contracts.architecture import Architecture
from workbench.contracts.schema import ConfigError

# Assumed H100 SXM NVLink 4 figures (one GPU cannot measure them). Latency: one decode-size
# NCCL all-reduce, the same 15 us workbench/calibrate/published/shapes.py assumes for the paper's
# profiles.
# Bandwidth: NCCL's bus bandwidth for large all-reduces on 8 x H100 over NVSwitch without NVLS
# (~360 GB/s of the 450 GB/s per direction NVLink 4 gives).
ALLREDUCE_LATENCY_S = 15e-6
NVLINK_BUS_BYTES_PER_S = 360e9


@dataclass(frozen=True)
class Link:
    """The interconnect between the TP ranks: ring-algorithm costs from a latency and a bus
    bandwidth."""

    latency_s: float = ALLREDUCE_LATENCY_S
    bus_bytes_per_s: float = NVLINK_BUS_BYTES_PER_S

    def allreduce_s(self, nbytes: float, tp: int) -> float:
        """A ring all-reduce moves 2 (tp - 1) / tp of the message through each rank's link."""
        return (
            0.0 if tp == 1 else self.latency_s + 2 * (tp - 1) / tp * nbytes / self.bus_bytes_per_s
        )

    def gather_s(self, nbytes: float, tp: int) -> float:
        """Gathering a tensor of `nbytes` in all on one rank: it receives (tp - 1) / tp of it."""
        return 0.0 if tp == 1 else self.latency_s + (tp - 1) / tp * nbytes / self.bus_bytes_per_s


@dataclass(frozen=True)
class Shard:
    """One TP rank's share of an architecture: what one GPU holds and computes."""

    arch: Architecture
    tp: int
    heads: int  # query heads on this rank
    kv_heads: int  # KV heads on this rank
    intermediate: int  # MLP intermediate size on this rank
    # embedding and LM-head rows on this rank (the vocabulary padded to a multiple of tp)
    vocab: int

    @property
    def hidden(self) -> int:
        return self.arch.hidden

    @property
    def head_dim(self) -> int:
        return self.arch.head_dim

    @property
    def layer_params(self) -> int:
        """One decoder layer on this rank: q, k, v (with their biases), o, the gated MLP, two
        norms."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        bias = (q + 2 * kv) if self.arch.qkv_bias else 0
        attention = self.hidden * (q + 2 * kv) + bias + q * self.hidden
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    def kv_bytes(self, sequences: int, context: int, dtype_bytes: int) -> int:
        """One layer's KV cache on this rank for `sequences` sequences of `context` tokens."""
        return 2 * sequences * self.kv_heads * context * self.head_dim * dtype_bytes

    def collectives_s(
        self, tokens: int, link: Link, dtype_bytes: int, logit_tokens: int | None = None
    ) -> float:
        """A target forward over `tokens` positions: 2 all-reduces per layer and one after the
        embedding, each of tokens x hidden, then the logits of `logit_tokens` positions (default
        all; a prefill: its last) gathered on one rank."""
        activations = tokens * self.hidden * dtype_bytes
        logits = (
            (tokens if logit_tokens is None else logit_tokens) * self.vocab * self.tp * dtype_bytes
        )
        return (2 * self.arch.layers + 1) * link.allreduce_s(activations, self.tp) + link.gather_s(
            logits, self.tp
        )

    def drafter_collectives_s(self, tokens: int, link: Link, dtype_bytes: int) -> float:
        """An EAGLE drafter forward: the target's embedding (1 all-reduce), its one layer (2; its
        fc 2H -> H is replicated, no collective), the logits gathered."""
        activations = tokens * self.hidden * dtype_bytes
        logits = tokens * self.vocab * self.tp * dtype_bytes
        return 3 * link.allreduce_s(activations, self.tp) + link.gather_s(logits, self.tp)


def _problem(arch: Architecture, tp: int) -> tuple[str, int, str] | None:
    """(field, value, what it must be) that rules `tp` out for `arch`, or None."""
    if arch.heads % tp:
        return "num_attention_heads", arch.heads, f"divisible by --tp {tp}"
    if arch.intermediate % tp:
        return "intermediate_size", arch.intermediate, f"divisible by --tp {tp}"
    if (arch.kv_heads % tp) if tp <= arch.kv_heads else (tp % arch.kv_heads):
        return ("num_key_value_heads", arch.kv_heads,
                f"divisible by --tp {tp}, or dividing it (KV heads are then replicated)")
    return None


def valid_tps(arch: Architecture) -> list[int]:
    return [tp for tp in range(1, arch.heads + 1) if _problem(arch, tp) is None]


def shard(arch: Architecture, tp: int) -> Shard:
    """The shapes of one rank of `arch` at tensor-parallel degree `tp`, as vLLM splits them."""
    if tp < 1:
        raise ConfigError("--tp", "tp", tp, "an integer >= 1")
    bad = _problem(arch, tp)
    if bad is not None:
        field, value, need = bad
        raise ConfigError(
            arch.name,
            field,
            value,
            f"{need}: use --tp among {', '.join(map(str, valid_tps(arch)))}",
        )
    return Shard(arch=arch, tp=tp, heads=arch.heads // tp, kv_heads=max(1, arch.kv_heads // tp),
                 intermediate=arch.intermediate // tp, vocab=math.ceil(arch.vocab / tp))
