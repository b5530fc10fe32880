"""Draft length per batch size, as vLLM's scheduler keeps it (`dynamic_sd_lookup`: K per batch
size, index 0 unused) and as the rest of the project writes it (`(min_batch, max_batch, K)` rows,
inclusive ranges). Pure functions: `RolloutEngine.current_draft_lengths` and
`set_draft_lengths` (real/rollout/engine.py) read and write the scheduler with them."""

from __future__ import annotations

from typing import Any, Sequence

from real.rollout.spec_config import EngineConfigError

Rows = list[tuple[int, int, int]]


def started_lookup(spec: dict[str, Any] | None, max_num_seqs: int, k: int) -> list[int]:
    """The lookup an engine that cannot change draft lengths runs for its life: its start-up
    Dynamic SD table, else `k` at every batch size."""
    table = (spec or {}).get("num_speculative_tokens_per_batch_size")
    if table:
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        return build_dynamic_sd_schedule_lookup(table, max_num_seqs, k)
    return [0] + [k] * max_num_seqs


def lookup_rows(lookup: Sequence[int], max_num_seqs: int) -> Rows:
    """`lookup` as rows covering 1..max_num_seqs, equal neighbours merged."""
    rows: Rows = []
    for batch in range(1, max_num_seqs + 1):
        k = int(lookup[batch])
        if rows and rows[-1][2] == k:
            rows[-1] = (rows[-1][0], batch, k)
        else:
            rows.append((batch, batch, k))
    return rows


def rows_lookup(rows: Sequence[tuple[int, int, int]], max_num_seqs: int, cap: int) -> list[int]:
    """The scheduler's lookup for `rows` (checked: inclusive, non-overlapping ranges, 0 <= K <=
    `cap`, the engine's num_speculative_tokens). Batch sizes no row covers get K=0 and ranges are
    cut at max_num_seqs."""
    lookup = [0] * (max_num_seqs + 1)
    covered: set[int] = set()
    for row in rows:
        if len(row) != 3:
            raise EngineConfigError(
                f"draft length row {row!r}: give (min_batch, max_batch, draft_len)")
        lo, hi, k = (int(v) for v in row)
        if not 1 <= lo <= hi or k < 0:
            raise EngineConfigError(
                f"draft length row {row!r}: needs 1 <= min_batch <= max_batch and K >= 0")
        if k > cap:
            raise EngineConfigError(
                f"draft length row {row!r}: K={k} is above this engine's num_speculative_tokens "
                f"({cap}), the most it was started for (the largest of its policy's bandit arms "
                "and schedule)")
        span = set(range(lo, min(hi, max_num_seqs) + 1))
        if span & covered:
            raise EngineConfigError(f"draft length row {row!r} overlaps an earlier row")
        covered |= span
        for batch in span:
            lookup[batch] = k
    return lookup
