"""Drift by the capture's speed probe (workbench/calibrate/captures/probe_drift.py): a capture's
clock is
warped by its probe samples, `tlt calibrate` brings fit traces to one speed and records it, and
`tlt validate` reports a held-out capture's error at the profile's speed and raw."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from workbench.calibrate import calibrate
from workbench.calibrate.captures.drift import DRIFT_KEY, scale_trace
from workbench.calibrate.captures.probe_drift import Warp, probe_slowness_ms, warp_trace
from workbench.cli import app
from workbench.contracts.profile import load_profile
from workbench.contracts.trace import Trace, TraceError, write_trace
from workbench.validate.capture import validate

runner = CliRunner()
BASE = load_profile("cpu-tiny")
NGRAM = {"name": "ngram-dyn", "sd_threshold": 32, "schedule": [[1, 4, 4], [5, 16, 2], [17, 32, 1]],
         "drafter": {"kind": "ngram"}}
KW = dict(noise=0.02, outliers=0.0, warmup=0, gap_s=0.0, shared_acceptance=True)
PROBE_MS = 16.0


def slowed(trace: Trace, slowdown: float, probe_reads: float) -> Trace:
    """`trace` captured on a machine `slowdown` times slower throughout, whose probe read
    PROBE_MS * `probe_reads` (every 0.25 s, as a capture samples it)."""
    t = scale_trace(trace, slowdown)
    end = float(t.rl_steps["rollout_s"].sum())
    at = list(np.arange(0.0, end, 0.25)) + [end]
    meta = {k: v for k, v in t.meta.items() if k != DRIFT_KEY}
    meta["speed"] = {"t_s": at, "times_ms": [PROBE_MS * probe_reads] * len(at)}
    return Trace(meta, t.steps, t.requests, t.rl_steps)


def test_the_warp_runs_each_stretch_at_its_samples_speed():
    # Samples at 0, 1, 2 s reading 10, 20, 10 ms against a 10 ms reference: the clock runs at 1
    # until 0.5 s, at 1/2 until 1.5 s, then at 1 again.
    w = Warp(np.array([0.0, 1.0, 2.0]), np.array([10.0, 20.0, 10.0]), 10.0)
    assert np.allclose(w(np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0])), [0.0, 0.5, 0.75, 1.0, 1.5, 2.5])
    # An exponent weighs a slowdown more: the engine felt the probe's 2x as 2 ** 1.5.
    w = Warp(np.array([0.0, 1.0, 2.0]), np.array([10.0, 20.0, 10.0]), 10.0, exponent=1.5)
    assert w(np.array([1.5]))[0] == pytest.approx(0.5 + 2 ** -1.5)


def test_a_burst_in_part_of_a_capture_is_taken_out_of_that_part_only(
    synthetic_trace, synthetic_machine
):
    t = synthetic_trace(
        synthetic_machine,
        NGRAM,
        seed=5,
        prompts=8,
        samples=4,
        cap=256,
        workers=1,
        max_batch=16,
        **KW,
    )
    # The second half of the capture ran 2x slow, and the probe saw it there.
    end = float(t.rl_steps["rollout_s"].sum())
    at = np.arange(0.0, end, 0.05)
    reads = np.where(at >= end / 2, 2 * PROBE_MS, PROBE_MS)
    w = Warp(at, np.full(len(at), PROBE_MS), PROBE_MS)  # a clock that runs true
    # The capture's clock, slow after end / 2.
    stretched = Warp(at, PROBE_MS * PROBE_MS / reads, PROBE_MS)
    s = t.steps.copy()
    s["wall_s"] = stretched(s["start_s"] + s["wall_s"]) - stretched(s["start_s"])
    s["start_s"] = stretched(s["start_s"])
    r = t.requests.copy()
    r["start_s"], r["end_s"] = stretched(r["start_s"]), stretched(r["end_s"])
    rl = t.rl_steps.copy()
    rl["rollout_s"] = stretched(np.array([end]))[0]
    slow = Trace(
        {**t.meta, "speed": {"t_s": list(stretched(at)), "times_ms": list(reads)}}, s, r, rl
    )
    back, factor = warp_trace(slow, PROBE_MS)
    assert float(back.rl_steps["rollout_s"].sum()) == pytest.approx(end, rel=0.02)
    assert factor == pytest.approx(
        float(back.rl_steps["rollout_s"].sum()) / float(rl["rollout_s"].sum()), rel=1e-9
    )
    # Step by step too, but for the steps across the one stretch where the warp's sample midpoint
    # and the burst's start differ.
    rel = np.abs(back.steps["wall_s"].to_numpy() / t.steps["wall_s"].to_numpy() - 1)
    assert np.mean(rel < 0.02) > 0.95, np.sort(rel)[-5:]
    assert w(np.array([end]))[0] == pytest.approx(end)


def test_calibrate_brings_fit_traces_to_one_speed_and_validate_reports_both_errors(
        tmp_path, synthetic_trace, synthetic_machine):
    make = lambda seed, **shape: synthetic_trace(synthetic_machine, NGRAM, seed=seed, **shape, **KW)
    shape = dict(prompts=16, samples=4, cap=384, workers=1, max_batch=32)
    # Two fit captures taken while the machine ran 1.0x and 1.4x slow (the probe saw as much).
    fit = [slowed(make(21, **shape), 1.0, 1.0), slowed(make(22, **shape), 1.4, 1.4)]
    cal = calibrate(fit, BASE, name="probed")
    p = cal.profile
    assert p.speed_probe_ms == pytest.approx(PROBE_MS * 1.2, rel=1e-3)  # the median of the two
    assert p.speed_probe_exponent == 1.0
    # A held-out capture (another shape) taken while the machine ran 1.8x slow.
    held = slowed(make(23, prompts=8, samples=8, cap=300, workers=1, max_batch=16), 1.8, 1.8)
    v = validate(p, held)
    assert v.drift_factor == pytest.approx(1.2 / 1.8, rel=1e-3)
    assert abs(v.error_pct) < 5, v.summary()
    assert v.raw_error_pct == pytest.approx(100 * (1.2 / 1.8 - 1), abs=5)
    # The CLI prints both and its last line carries them.
    write_trace(held, tmp_path / "held")
    from workbench.contracts.schema import save
    save(p, tmp_path / "p.yaml")
    res = runner.invoke(
        app, ["validate", "--profile", str(tmp_path / "p.yaml"), str(tmp_path / "held")]
    )
    assert res.exit_code == 0, res.output
    last = json.loads(res.output.strip().splitlines()[-1])
    assert set(last) == {
        "predicted_rollout_s",
        "measured_rollout_s",
        "error_pct",
        "raw_error_pct",
        "drift_factor",
    }
    assert "raw error" in res.output


def test_the_exponent_that_explains_the_steps_is_found(synthetic_trace, synthetic_machine):
    """The engine felt the machine's slowdown as the probe's to the power 1.5: the fit finds it."""
    shape = dict(prompts=16, samples=4, cap=384, workers=1, max_batch=32)
    fit = [slowed(synthetic_trace(synthetic_machine, NGRAM, seed=s, **shape, **KW), r ** 1.5, r)
           for s, r in ((31, 1.0), (32, 1.5), (33, 2.0))]
    p = calibrate(fit, BASE, name="probed").profile
    assert p.speed_probe_exponent == 1.5
    assert p.decode.overhead_s == pytest.approx(
        synthetic_machine.decode.overhead_s * 1.5**1.5, rel=0.15
    )


def test_a_garbled_probe_is_refused_naming_the_field(synthetic_trace, synthetic_machine):
    t = synthetic_trace(
        synthetic_machine, NGRAM, seed=7, prompts=4, samples=2, cap=64, workers=1, max_batch=8, **KW
    )
    t = Trace(
        {**t.meta, "speed": {"t_s": [0.0, 1.0], "times_ms": [16.0, -1.0]}},
        t.steps,
        t.requests,
        t.rl_steps,
    )
    with pytest.raises(TraceError, match="speed"):
        probe_slowness_ms(t)
