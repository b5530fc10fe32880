"""What the profiler measures: the grid of points a Profile needs, and how many distinct layers a
per-layer timing cycles through.

A Profile's decode cost depends on batch B, context C and tokens verified per sequence T; its
drafter cost on the candidates a drafter forward scores (batch x top-k); prefill on prompt
tokens; the training phase and spot training on tokens trained. Each op is one kind of point:

- `decode`: B sequences, one new token each, over a KV cache of C tokens;
- `verify`: B sequences, T tokens each (a chain of T - 1 drafts, or a tree's tokens to verify),
  at the grid's verify contexts;
- `drafter`: one EAGLE drafter forward for B sequences x top-k candidates (T = top-k);
- `prefill`: one prompt of T tokens (no cache before it);
- `train_fwd`, `train_fwd_bwd`: the policy's forward (log-probs) and forward+backward over B
  sequences of T tokens; `drafter_train`: the drafter's forward+backward over the same.

Each drafter point (B, top-k) also gets a verify point of B x top-k sequences verifying 2
tokens (`points()` adds them): the target's cost of checking what that drafter step proposed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OPS = ("decode", "verify", "drafter", "prefill", "train_fwd", "train_fwd_bwd", "drafter_train")


@dataclass(frozen=True)
class Point:
    op: str
    batch: int  # sequences (drafter: sequences, each with `topk` candidates)
    context: int  # tokens already in each sequence's KV cache
    tokens: int  # new tokens per sequence this forward processes
    topk: int = 1  # drafter candidates per sequence (a drafter point's tokens)

    def label(self) -> str:
        extra = f" top-k {self.topk}" if self.op == "drafter" else ""
        return f"{self.op} B={self.batch} C={self.context} T={self.tokens}{extra}"


@dataclass(frozen=True)
class Grid:
    batches: tuple[int, ...]  # decode batch sizes
    contexts: tuple[int, ...]  # decode contexts
    verify_batches: tuple[int, ...]
    verify_tokens: tuple[int, ...]  # tokens per sequence, each > 1
    context: int  # the context of verify and drafter points
    drafter: tuple[tuple[int, int], ...]  # (batch, top-k) pairs
    prefill_tokens: tuple[int, ...]
    train_sequences: int
    train_tokens: int  # tokens per training sequence
    verify_contexts: tuple[int, ...] = ()  # contexts of the verify points (empty: `context` alone)

    @property
    def verify_at(self) -> tuple[int, ...]:
        return self.verify_contexts or (self.context,)


# Named grids: GPU engines run batches to 256 and contexts to 32k; on a CPU the tiny model's
# engine runs batches to 64 and contexts to 2k (traces/reference); "test" is for the test suite.
# "gpu-check" is the lent-GPU check's (real/gpu_check): the measured database's decode and verify
# points at batch <= 64 and contexts 2k and 8k, its drafter points at batch <= 32, in minutes.
GRIDS = {
    "cuda": Grid(
        batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        contexts=(512, 4096, 16384),
        verify_batches=(1, 4, 16, 64),
        verify_tokens=(2, 4, 8, 16, 32, 48, 64),
        context=4096,
        drafter=((1, 1), (1, 4), (4, 4), (8, 8), (16, 4), (32, 4), (64, 4)),
        prefill_tokens=(256, 1024, 4096),
        train_sequences=2,
        train_tokens=2048,
    ),
    "cpu": Grid(
        batches=(1, 2, 4, 8, 16, 32, 64),
        contexts=(64, 256, 1024),
        verify_batches=(1, 4, 16),
        verify_tokens=(2, 4, 8),
        context=256,
        drafter=((1, 1), (1, 4), (4, 4), (16, 4)),
        prefill_tokens=(32, 128, 512),
        train_sequences=4,
        train_tokens=256,
    ),
    "gpu-check": Grid(
        batches=(1, 2, 4, 8, 16, 32, 64),
        contexts=(2048, 8192),
        verify_batches=(1, 4, 16, 64),
        verify_tokens=(2, 4, 8, 16, 32, 48),
        context=2048,
        verify_contexts=(2048, 8192),
        drafter=((1, 1), (1, 4), (1, 8), (4, 4), (8, 4), (16, 4), (32, 4)),
        prefill_tokens=(1024, 4096),
        train_sequences=2,
        train_tokens=2048,
    ),
    "test": Grid(
        batches=(1, 4),
        contexts=(16, 64),
        verify_batches=(1, 4),
        verify_tokens=(2, 4),
        context=32,
        drafter=((1, 1), (2, 2)),
        prefill_tokens=(16, 64),
        train_sequences=2,
        train_tokens=16,
    ),
}


def points(g: Grid) -> list[Point]:
    """Every point of the grid, in the order they are measured (no point twice)."""
    out = [Point("decode", b, c, 1) for c in g.contexts for b in g.batches]
    verify = [(b, t) for t in g.verify_tokens for b in g.verify_batches]
    # verifying each drafter point's candidates
    verify += [(b * k, 2) for b, k in g.drafter if (b * k, 2) not in verify]
    out += [Point("verify", b, c, t) for c in g.verify_at for b, t in verify]
    out += [Point("drafter", b, g.context, k, k) for b, k in g.drafter]
    out += [Point("prefill", 1, 0, t) for t in g.prefill_tokens]
    out += [
        Point(op, g.train_sequences, 0, g.train_tokens)
        for op in ("train_fwd", "train_fwd_bwd", "drafter_train")
    ]
    return out


def distinct_layers(layer_bytes: int, model_layers: int, cache_bytes: int) -> int:
    """How many distinct layer instances a per-layer timing cycles through.

    A real step streams every layer's weights and KV cache once, so repeating one layer would
    find it in a cache the real step would not: the timing cycles through enough distinct
    layers to stream twice the device's cache, at most the model's own layers. A model that
    fits in the cache is cycled through whole (it is small, and then each layer meets the
    cache exactly as in the real step: on this project's 2-core CPU, one tiny-model layer
    repeated ran 25-40% faster than the same layer inside the whole model at batch 16)."""
    return min(model_layers, max(1, math.ceil(2 * cache_bytes / max(layer_bytes, 1))))
