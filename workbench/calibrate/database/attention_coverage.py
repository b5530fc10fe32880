"""How far NVIDIA's measured attention rows reach for a model's heads, and what the package does
where they do not: the sentence a measured-database profile's `source` gives about it.

The database measures decode attention for a few head counts per GPU (1, 2, 4 and 8 KV heads for
128-wide heads on H100 with vLLM). A model whose rank has other counts (a 32-KV-head model at TP2
has 16) has no rows of its own: the package's compiled engine answers from the nearest measured
count below, scaled by the head count, and labels the result silicon. `sweep_sentence` says so, with
the scaling checked against those rows at a few batch and context points.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.contracts.architecture import Architecture

GENERATION = "generation_attention_perf.parquet"
CONTEXT = "context_attention_perf.parquet"
# (batch, context) points where the head scaling is checked against measured rows
CHECK_POINTS = ((1, 512), (8, 2048), (64, 2048), (256, 512), (256, 8192))


@dataclass(frozen=True)
class Coverage:
    """How far the attention sweep reaches for this model's heads per rank."""

    heads: int
    kv_heads: int
    decode_max_context: dict[int, int]  # batch -> longest measured context (decode attention)
    prefill_max_tokens: int  # longest measured prefill sequence (context attention)
    # The rows that answer: the rank's own heads when measured, else the nearest measured KV-head
    # count below them (the package's engine scales those rows by the head count).
    rows_heads: int = 0
    rows_kv_heads: int = 0
    measured_kv_heads: tuple[int, ...] = ()  # KV-head counts the sweep has for this head size

    @property
    def scaled(self) -> bool:
        return self.rows_kv_heads != self.kv_heads

    def beyond(self, batch: int, context: int) -> float:
        """How many times past the sweep a (batch, context) decode step is (<= 1: inside it)."""
        near = [b for b in self.decode_max_context if b >= batch] or [
            max(self.decode_max_context, default=1)]
        reach = self.decode_max_context.get(min(near), 0)
        return context / reach if reach else math.inf


def attention_coverage(base: Path, arch: Architecture, tp: int) -> Coverage:
    """The coverage of `arch` at `tp` by the rows under `base` (a GPU x framework x version)."""
    import pandas as pd

    heads, kv = max(1, arch.heads // tp), max(1, arch.kv_heads // tp)
    reach: dict[int, int] = {}
    longest = 0
    rows_heads, rows_kv, measured = heads, kv, ()
    if (base / GENERATION).is_file():
        cols = ["batch_size", "num_heads", "num_key_value_heads", "head_dim", "step"]
        g = pd.read_parquet(base / GENERATION, columns=cols)
        g = g[g.head_dim == arch.head_dim]
        measured = tuple(sorted(int(k) for k in g.num_key_value_heads.unique()))
        rows_kv = kv if kv in measured else max((k for k in measured if k <= kv), default=kv)
        if rows_kv != kv:  # no rows for these heads: the nearest measured count (MHA stays MHA)
            rows_heads = rows_kv if heads == kv else max(rows_kv, heads * rows_kv // kv)
        g = g[g.num_key_value_heads == rows_kv]
        same = g.num_heads == rows_heads
        near = g[same] if same.any() else g[g.num_heads >= rows_heads]
        reach = {int(b): int(s) + 1 for b, s in near.groupby("batch_size").step.max().items()}
    if (base / CONTEXT).is_file():
        c = pd.read_parquet(base / CONTEXT, columns=["isl", "head_dim"])
        longest = c[c.head_dim == arch.head_dim].isl.max()
        longest = int(longest) if longest == longest else 0  # NaN: no rows of this head size
    return Coverage(heads, kv, reach, longest, rows_heads, rows_kv, measured)


def head_scaling(base: Path, cov: Coverage, arch: Architecture,
                 decode: Callable[[int, int], tuple[float, list[tuple]]]) -> tuple[float, float]:
    """Where the rank's heads have no rows: the engine's decode attention (the attention op of
    `decode(batch, context)`) over the rows it scales, per layer at the same batch and context;
    the lowest and highest over CHECK_POINTS (NaN where none is measured)."""
    import pandas as pd

    if not (base / GENERATION).is_file():
        return (math.nan, math.nan)
    g = pd.read_parquet(base / GENERATION)
    g = g[(g.num_key_value_heads == cov.rows_kv_heads) & (g.num_heads == cov.rows_heads)
          & (g.head_dim == arch.head_dim) & (g.kv_cache_dtype == "bfloat16") & (g.window_size == 0)]
    ratios = []
    for b, c in CHECK_POINTS:
        row = g[(g.batch_size == b) & (g.step == c - 1)]
        if row.empty:
            continue
        attn = next(o for o in decode(b, c)[1] if o[0].endswith("attention"))
        ratios.append(attn[1] / (float(row.latency.min()) * arch.layers))
    return (min(ratios), max(ratios)) if ratios else (math.nan, math.nan)


def sweep_sentence(cov: Coverage, arch: Architecture, base: Path,
                   decode: Callable[[int, int], tuple[float, list[tuple]]], long_context: int,
                   batches: Sequence[int]) -> str:
    """What the decode attention rows cover for these heads, for a profile's `source`."""
    worst = max((cov.beyond(b, long_context), b) for b in batches)
    reach = ", ".join(f"B={b}: {s}" for b, s in sorted(cov.decode_max_context.items())
                      if b in (1, 8, 64, 256))
    past = (f"a {long_context}-token context is up to {worst[0]:.1f}x past it (at batch "
            f"{worst[1]}), extrapolated by the package's interpolator (linear in context beyond "
            "the last measured row)") if worst[0] > 1 else \
        f"a {long_context}-token context lies inside it at every batch of the grid"
    if not cov.scaled:
        return f"Decode attention sweep for these heads reaches context {reach}; {past}."
    lo, hi = head_scaling(base, cov, arch, decode)
    return (f"The database has no decode attention rows for {cov.kv_heads} KV heads per rank "
            f"(it measured {', '.join(map(str, cov.measured_kv_heads))}): the package's engine "
            f"answers from the rows of {cov.rows_heads} heads and {cov.rows_kv_heads} KV heads "
            f"scaled by the head count ({lo:.2f}-{hi:.2f}x those rows per layer over the grid, "
            f"checked here) and labels them silicon. Their sweep reaches context {reach}; {past}.")
