"""Why a speedup: the decomposition is checkable by hand on a small timeline, reads a real run's
trace rows as it reads the simulator's, and says in words what bounds the gain."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from sim.simulator import simulate
from workbench.compare.policies import why_runs
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.speedup import (WHY_HEADERS, RunTimes, eligible_wall_s, explain,
                                         why_frame, why_json, why_table)
from workbench.contracts.timeline import Timeline
from workbench.contracts.trace import TimelineRow, rows_frame
from workbench.contracts.workload import load_workload


def _timeline(tail_s: float, tail_state: str) -> Timeline:
    """Two workers: worker 0 decodes at batch 64 for 10 s, then at batch 4 for `tail_s`; worker 1 at
    batch 64 for 15 s, then idles; then both train 5 s. 100 tokens a second at batch 4 in the
    reference."""
    tl = Timeline()
    end = max(10 + tail_s, 15)
    tl.add(0, 0, 0, 10, "decode", 64, tokens=6400)
    tl.add(0, 0, 10, 10 + tail_s, tail_state, 4, 4 if tail_state == "decode_sd" else 0, tokens=1000)
    tl.add(0, 1, 0, 15, "decode", 64, tokens=9600)
    if end > 10 + tail_s:
        tl.add(0, 0, 10 + tail_s, end, "idle")
    tl.add(0, 1, 15, end, "idle")
    for w in (0, 1):
        tl.add(0, w, end, end + 5, "train")
    return tl


def test_the_decomposition_checks_by_hand():
    ref = RunTimes.from_timeline(_timeline(10, "decode").frame())  # step 25 s, rollout 20 s
    run = RunTimes.from_timeline(
        _timeline(4, "decode_sd").frame()
    )  # the tail 2.5x faster: step 20 s
    assert (ref.step_s, ref.rollout_s, run.step_s) == (25, 20, 20)
    w = explain("sd", run, "base", ref)
    assert w.speedup == pytest.approx(25 / 20)
    assert w.rollout_share == pytest.approx(20 / 25)
    assert w.sd_batch == 4
    assert w.sd_share == pytest.approx(10 / 35)  # 10 of 35 decode worker-seconds are at batch <= 4
    assert w.sd_speedup == pytest.approx(2.5)  # 1000 tokens in 4 s against 10 s
    assert w.off_speedup == pytest.approx(1.0)
    # Only worker 0 decodes from 15 s to 20 s, at batch 4: free, the step would take 20 s.
    assert w.ceiling_step_s == pytest.approx(20) and w.ceiling_speedup == pytest.approx(1.25)
    assert w.reached == pytest.approx(1.0)
    assert w.bubble_ref == pytest.approx(5 / 40) and w.bubble == pytest.approx(
        1 / 30
    )  # worker 0 idles 14-15 s
    assert "batch 4" in w.sentence and "reaches 100%" in w.sentence


def test_eligible_wall_time_needs_every_decoding_worker_at_a_small_batch():
    rows = _timeline(10, "decode").frame()
    assert eligible_wall_s(rows, 4) == pytest.approx(5)  # 15-20 s: worker 1 has stopped
    assert eligible_wall_s(rows, 64) == pytest.approx(20)  # every decode interval
    assert eligible_wall_s(rows, 0) == 0


def test_a_real_runs_trace_rows_read_as_the_simulators():
    """`tlt train` writes TimelineRow rows into its trace: the same numbers from those rows."""
    frame = _timeline(10, "decode").frame()
    real = rows_frame([TimelineRow(*r) for r in _timeline(4, "decode_sd").rows], TimelineRow)
    a = explain("sd", RunTimes.from_timeline(real), "base", RunTimes.from_timeline(frame))
    b = explain(
        "sd",
        RunTimes.from_timeline(_timeline(4, "decode_sd").frame()),
        "base",
        RunTimes.from_timeline(frame),
    )
    assert a == b


@pytest.fixture(scope="module")
def dapo_runs():
    wl = replace(load_workload("polytrace-dapo-qwen2.5-32b"), steps=2)
    prof = load_profile(wl.profile)
    return [simulate(wl, load_policy(p), prof, seed=0) for p in ("baseline", "tlt", "april")]


def test_on_the_dapo_workload_tlt_is_bounded_by_decoding_below_its_threshold(dapo_runs):
    base, tlt, april = why_runs(dapo_runs)
    assert math.isnan(base.sd_speedup) and "no speculative decoding and no change" in base.sentence
    assert tlt.sd_batch <= load_policy("tlt").sd_threshold
    assert tlt.sd_speedup > 1.5 and tlt.ceiling_speedup > tlt.speedup > 1
    assert 0 < tlt.reached < 1
    assert f"batch <= {tlt.sd_batch}" in tlt.sentence and f"{tlt.speedup:.2f}x" in tlt.sentence
    assert (
        april.sd_batch == 0 and "scheduled" in april.sentence and math.isnan(april.ceiling_step_s)
    )
    rows = why_table([tlt, april])
    assert rows[1][-1] == "-" and rows[0][1] == f"{tlt.speedup:.2f}x"
    assert why_json(april)["reached"] is None  # JSON has no NaN


def test_a_slower_policy_is_said_to_be_slower_never_a_negative_share():
    """A policy slower than its reference (the run's SD tail too short to pay for an EAGLE drafter
    pass in every step): the sentence says it is slower and why, and never prints a share below
    zero, whatever the numbers."""
    ref = RunTimes.from_timeline(_timeline(10, "decode").frame())
    slow = RunTimes.from_timeline(_timeline(12, "decode_sd").frame())  # SD makes the tail slower
    w = explain("tlt", slow, "baseline", ref)
    assert w.speedup < 1 and w.reached < 0
    assert "slower than baseline" in w.sentence and "reaches" not in w.sentence
    assert not re.search(r"-\d+%", w.sentence)
    table = why_table([w])[0]
    assert table[list(WHY_HEADERS).index("reached")] == "slower"
    assert not any(re.search(r"-\d+%", cell) for cell in table)
    assert math.isnan(why_frame([w]).loc["tlt", "reached"])
    for speedup in (0.5, 0.9, 0.97, 0.99, 1.0, 1.01, 1.2):
        for reached in (-2.0, -0.57, -0.01, 0.0, 0.4, float("nan")):
            for off in (0.7, 1.0, float("nan")):
                v = replace(w, speedup=speedup, reached=reached, off_speedup=off)
                assert not re.search(r"-\d+(\.\d+)?%", v.sentence), v.sentence
                assert ("slower than" in v.sentence) == (speedup < 0.98), v.sentence
