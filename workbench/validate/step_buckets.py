"""Measured against predicted mean step latency per drafter kind and batch-size bucket: where in
the batch range a fitted profile misses (self-calibration's bucket table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from workbench.validate.capture_plan import KINDS
from workbench.calibrate.captures.costs import predict_steps
from workbench.calibrate.captures.trace_view import WARMUP_STEPS, step_frame
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.trace import Trace

BUCKET_EDGES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class BucketRow:
    """Mean step latency of one drafter kind in one batch bucket: measured vs the profile's."""

    kind: DrafterKind
    min_batch: int
    max_batch: int
    steps: int
    measured_ms: float
    predicted_ms: float
    error_pct: float


def bucket_table(profile: Profile, traces: Sequence[Trace], edges: Sequence[int] = BUCKET_EDGES,
                 warmup_steps: int = WARMUP_STEPS) -> list[BucketRow]:
    """Measured vs predicted mean step latency per drafter kind and batch bucket (decoding requests
    in (edges[i-1], edges[i]]; the first bucket is 1 .. edges[0]), over the steps a fit would
    use."""
    f = step_frame(traces, warmup_steps, target="cycle")
    f = f[(f["why_dropped"] == "") & ~f["warmup"] & (f["B"] > 0)].copy()
    f["pred"] = predict_steps(profile, f)
    rows = []
    lows = [1] + [e + 1 for e in edges[:-1]]
    for kind in [k for k in KINDS if k in set(f["kind"])]:
        for lo, hi in zip(lows, edges):
            g = f[(f["kind"] == kind) & (f["B"] >= lo) & (f["B"] <= hi)]
            if len(g):
                m, p = float(g["y"].mean()), float(g["pred"].mean())
                rows.append(BucketRow(kind, lo, hi, len(g), 1e3 * m, 1e3 * p, 100 * (p - m) / m))
    return rows
