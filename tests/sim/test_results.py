"""Per-step metrics computed from timeline intervals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sim.results import PolicyRun, StepInfo, step_metrics
from workbench.contracts.timeline import Timeline


def _info(lengths) -> StepInfo:
    lengths = np.asarray(lengths)
    return StepInfo(lengths, "eagle", 1.0, 0.0, "sync", 1, 0)


def _two_workers() -> pd.DataFrame:
    """Worker 0 decodes 16 SD segments; worker 1 finishes at once and idles; then train and sync."""
    tl, t = Timeline(), 0.0
    for i in range(16):
        tl.add(0, 0, t, t + 1.0, "decode_sd", 4, 4, 0.1 * (i + 1), 0.05 * (i + 1))
        t += 1.0
    tl.add(0, 1, 0.0, t, "idle")
    for w in (0, 1):
        tl.add(0, w, t, t + 2.0, "train")
        tl.add(0, w, t + 2.0, t + 3.0, "sync")
    return tl.frame()


def test_step_metrics_from_intervals():
    df = _two_workers()
    m = step_metrics(0, df, 2, 64, _info([10, 64, 3]))
    assert m.rollout_time_s == pytest.approx(16.0)
    assert m.step_time_s == pytest.approx(19.0)
    assert m.train_time_s == pytest.approx(2.0)
    assert m.sync_time_s == pytest.approx(1.0)
    assert m.bubble_fraction == pytest.approx(0.5)  # worker 1 idle the whole rollout
    assert m.mean_accept_len == pytest.approx(2.0)  # tokens / passes over SD intervals
    assert m.longest_response == 64
    assert m.clip_ratio == pytest.approx(1 / 3)
    assert m.tokens == 14  # 0.1 * (1 + ... + 16) = 13.6, rounded


def test_sd_token_share_never_exceeds_one():
    """All tokens were decoded with SD: the share is exactly 1, not 1 + rounding error.

    Rows come in event order, so zero-token rows (idle, spot training) of one worker fall
    between another worker's decode rows; summing all tokens and summing the SD rows then
    round differently (numpy's pairwise sum groups the values differently).
    """
    tl = Timeline()
    for i in range(16):
        tl.add(0, 0, float(i), i + 1.0, "decode_sd", 4, 4, 0.1 * (i + 1), 0.05 * (i + 1))
        tl.add(0, 1, float(i), i + 1.0, "idle" if i % 2 == 0 else "drafter_train")
    for w in (0, 1):
        tl.add(0, w, 16.0, 18.0, "train")
    m = step_metrics(0, tl.frame(), 2, 64, _info([10]))
    assert 0.0 <= m.sd_token_share <= 1.0
    assert m.sd_token_share == 1.0
    assert m.tokens == 14


def test_timeline_drops_zero_length_intervals():
    tl = Timeline()
    tl.add(0, 0, 1.0, 1.0, "idle")
    tl.add(0, 0, 1.0, 0.5, "idle")
    tl.add(0, 0, 1.0, 2.0, "idle")
    assert len(tl.frame()) == 1


def test_policy_run_saves_metrics_and_timeline(tmp_path):
    df = _two_workers()
    run = PolicyRun("p", [step_metrics(0, df, 2, 64, _info([10, 20]))], df)
    run.save(tmp_path / "out")
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["metrics.json", "timeline.parquet"]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["policy"] == "p" and metrics["steps"][0]["rollout_time_s"] == pytest.approx(16.0)
    back = pd.read_parquet(tmp_path / "out" / "timeline.parquet")
    assert len(back) == len(df)
    np.testing.assert_allclose(back["end_s"], df["end_s"])
