"""real/experiments/bench_training.py's report, from hand-made trace tables (no vLLM, no Ray):
where the baseline's decoding time goes per batch bucket, how fast each run decodes there, the
rollout's share of the step, and the response-length shape."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from real.experiments.bench_training import bucket_rows, length_shape, paired_median, phase_times
from real.run.records import StepRecord


def _steps(rows) -> pd.DataFrame:
    """Engine steps of (batch, decode requests, new tokens, wall seconds, draft length, prefills)."""
    return pd.DataFrame([dict(batch_size=b, decode_requests=d, new_tokens=n, wall_s=w, draft_len=k, prefill_requests=p)
                         for b, d, n, w, k, p in rows])


def test_bucket_rows_compare_tokens_per_sequence_per_second_and_leave_prefill_out():
    base = _steps([(1, 1, 1, 0.01, 0, 0), (1, 1, 1, 0.01, 0, 0), (6, 6, 6, 0.02, 0, 0),
                   (8, 0, 40, 0.5, 0, 8)])  # a prefill step: no decoding to compare
    tlt = _steps([(1, 1, 3, 0.012, 4, 0), (1, 1, 1, 0.010, 4, 0), (6, 6, 6, 0.02, 0, 0), (6, 6, 12, 0.03, 2, 0)])
    rows = {r.bucket: r for r in bucket_rows(base, tlt)}
    assert set(rows) == {"1", "5-8"}
    one = rows["1"]
    assert one.baseline_time_share == pytest.approx(0.02 / 0.04)  # the prefill step's 0.5 s is no decoding
    assert one.baseline_rate == pytest.approx(2 / 0.02) and one.tlt_rate == pytest.approx(4 / 0.022)
    assert one.speedup == pytest.approx(one.tlt_rate / one.baseline_rate)
    assert one.tlt_draft_lens == "K4:100%"
    assert rows["5-8"].tlt_rate == pytest.approx(3 / 0.05) and rows["5-8"].tlt_draft_lens == "K0:50% K2:50%"


def test_a_bucket_only_one_run_reached_has_no_speedup():
    rows = bucket_rows(_steps([(2, 2, 2, 0.01, 0, 0)]), _steps([(3, 3, 3, 0.01, 2, 0)]))
    by = {r.bucket: r for r in rows}
    assert math.isnan(by["2"].tlt_rate) and math.isnan(by["3-4"].baseline_rate) and math.isnan(by["3-4"].speedup)


def test_length_shape_counts_responses_cut_at_the_cap():
    req = pd.DataFrame({"response_tokens": [10, 20, 30, 40, 100, 100], "finish_reason": ["stop"] * 4 + ["length"] * 2})
    shape = length_shape(req, max_tokens=100)
    assert (shape.p50, shape.max, shape.clip_ratio) == (35.0, 100, pytest.approx(2 / 6))
    assert shape.p90 == pytest.approx(100.0)


def _record(step_s: float, rollout_s: float, train_s: float, sync_s: float) -> StepRecord:
    fields = {f: math.nan for f in StepRecord.__dataclass_fields__}
    fields.update(step=0, step_s=step_s, rollout_s=rollout_s, train_s=train_s, sync_s=sync_s)
    return StepRecord(**fields)


def test_phase_times_are_means_per_step_and_the_rollout_share_their_ratio():
    p = phase_times([_record(10.0, 8.0, 1.5, 0.5), _record(20.0, 16.0, 3.0, 1.0)])
    assert (p.step_s, p.rollout_s, p.train_s, p.sync_s) == (15.0, 12.0, 2.25, 0.75)
    assert p.rollout_share == pytest.approx(0.8)


def test_the_paired_median_speedup_ignores_one_outlier_step():
    """Step 2 of the TLT run hit a busy machine (40 s): the ratio of means says TLT lost; the median
    of the per-step ratios says what the other steps agree on."""
    base, tlt = [10.0, 12.0, 11.0, 9.0, 10.0], [5.0, 6.0, 40.0, 4.5, 5.0]
    assert sum(base) / sum(tlt) < 1.0
    assert paired_median(base, tlt) == pytest.approx(2.0)
    assert math.isnan(paired_median([], []))
