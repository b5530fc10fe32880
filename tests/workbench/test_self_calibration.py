"""Self-calibration (`tlt calibrate --model`) on a synthetic machine: captures from the
`synthetic_trace` fixture (tests/workbench/conftest.py), whose step costs are a known Profile's
own form, optionally slowed part-way through the run; the reference sees the slowdown."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from workbench.calibrate.captures.drift import (
    DRIFT_KEY,
    apply_recorded,
    cpu_drift_factors,
    drift_factors,
    scale_trace,
)
from workbench.validate.capture_plan import FIT_SHAPES, KINDS, CaptureSpec, plan_captures
from workbench.validate.self_calibration import (
    Progress,
    run_self_calibration,
    write_self_calibration,
)
from workbench.cli import app
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import to_mapping
from workbench.contracts.trace import Trace, load_trace
from workbench.contracts.workload import LengthModel, load_workload

runner = CliRunner()
BASE = load_profile("cpu-tiny")
MIXES = {
    "default": LengthModel(clip_ratio=0.05, sigma=0.8),
    "hard": LengthModel(clip_ratio=0.15, sigma=1.0),
}


def slowed(p: Profile, factor: float) -> Profile:
    """The same machine `factor` times slower: every cost scaled."""
    d, dr = p.decode, p.drafter
    return replace(
        p,
        decode=replace(
            d,
            overhead_s=d.overhead_s * factor,
            per_seq_s=d.per_seq_s * factor,
            compute_s_per_token=d.compute_s_per_token * factor,
            kv_s_per_token=d.kv_s_per_token * factor,
            prefill_s_per_token=d.prefill_s_per_token * factor,
        ),
        drafter=replace(
            dr,
            ngram_s_per_seq=dr.ngram_s_per_seq * factor,
            eagle_step_s=dr.eagle_step_s * factor,
            eagle_s_per_seq=dr.eagle_s_per_seq * factor,
        ),
    )


class SyntheticMachine:
    """A Machine whose captures are synthetic traces of `profile`; from engine session
    `slow_from` on, everything (captures and reference) runs `slowdown` times slower."""

    def __init__(self, make, profile: Profile, slow_from: int | None = None, slowdown: float = 1.0):
        self.make, self.profile, self.slow_from, self.slowdown = make, profile, slow_from, slowdown
        self.sessions, self.kind, self.closed = -1, None, False

    def speed(self) -> float:
        return (
            self.slowdown if self.slow_from is not None and self.sessions >= self.slow_from else 1.0
        )

    def start(self, kind: str) -> float:
        self.sessions, self.kind = self.sessions + 1, kind
        return 0.0

    def capture(self, spec: CaptureSpec) -> Trace:
        assert spec.kind == self.kind, "a capture runs on the engine of its kind"
        # Shorter responses than the real plan's keep the test fast; the shapes stay the plan's.
        return self.make(
            slowed(self.profile, self.speed()),
            to_mapping(spec.policy()),
            prompts=spec.prompts,
            samples=spec.samples,
            cap=spec.max_tokens // 4,
            workers=1,
            max_batch=spec.cap,
            lengths=MIXES[spec.mix],
            seed=spec.seed,
            noise=0.03,
            outliers=0.0,
            warmup=0,
            gap_s=0.0,
            shared_acceptance=True,
        )

    def reference_s(self) -> float:
        return 0.05 * self.speed()

    def close(self) -> None:
        self.closed = True


class ContendedMachine(SyntheticMachine):
    """The slowdown is other processes taking the cores: the capture's CPU share falls to
    1/slowdown, the reference's CPU time stays (its wall time grows): method "cpu" applies."""

    def capture(self, spec: CaptureSpec) -> Trace:
        t = super().capture(spec)
        t.meta["summary"] = {"cpu_share": 1.0 / self.speed()}
        return t

    def reference_cpu_s(self) -> float:
        return 0.04


def run(
    make, root: Path, compare_raw: bool = True, machine_class=SyntheticMachine, **machine
) -> tuple:
    """Self-calibrate a SyntheticMachine on a short plan: no SD and n-gram, two rounds, the
    first two fit captures of each engine session (the shapes rotate, so all four are used) and
    the held-out one."""
    plan = [s for s in plan_captures(("none", "ngram"), rounds=2, seed=3)
            if s.role == "heldout" or s.name.endswith(("-0", "-1"))]
    m = machine_class(make, **machine)
    seen: list[Progress] = []
    res = run_self_calibration(
        m,
        plan,
        BASE,
        "synthetic",
        root / "p.captures",
        progress=seen.append,
        compare_raw=compare_raw,
    )
    assert m.closed
    return res, seen


@pytest.fixture(scope="module")
def steady(synthetic_trace, synthetic_machine, tmp_path_factory):
    return run(
        synthetic_trace,
        tmp_path_factory.mktemp("steady"),
        compare_raw=False,
        profile=synthetic_machine,
    )


@pytest.fixture(scope="module")
def drifting(synthetic_trace, synthetic_machine, tmp_path_factory):
    """The machine runs 40% slower from the third engine session on (round 1)."""
    return run(
        synthetic_trace,
        tmp_path_factory.mktemp("drifting"),
        machine_class=ContendedMachine,
        slow_from=2,
        slowdown=1.4,
        profile=synthetic_machine,
    )[0]


def test_plan_interleaves_kinds_and_repeats_every_shape():
    plan = plan_captures(rounds=2, seed=0)
    sessions = [plan[0].kind] + [b.kind for a, b in zip(plan, plan[1:]) if a.kind != b.kind]
    assert len(sessions) == 6 and all(a != b for a, b in zip(sessions, sessions[1:]))
    assert [sessions[:3].count(k) for k in KINDS] == [1, 1, 1] and sessions[:3] != sessions[3:]
    fit = [s for s in plan if s.role == "fit"]
    for kind in KINDS:
        for r in range(2):
            shapes = {
                (s.prompts, s.samples, s.max_tokens, s.cap)
                for s in fit
                if s.kind == kind and s.round == r
            }
            assert shapes == set(FIT_SHAPES)
    for kind in ("ngram", "eagle"):  # every draft length meets more than one batch cap
        ks = {k for s in fit if s.kind == kind for *_, k in s.schedule}
        assert ks == {1, 2, 3, 4, 6, 8}  # up to the longest draft the tuner and tlt-vllm use
    held = [s for s in plan if s.role == "heldout"]
    assert len(held) == 6 and all(0 < plan.index(h) < len(plan) - 1 for h in held)
    for h in held:  # another mix, group size, batch cap and seed than any fit capture
        assert all(
            h.mix != s.mix and h.samples != s.samples and h.cap != s.cap and h.seed != s.seed
            for s in fit
        )
    assert len({s.name for s in plan}) == len(plan)
    assert plan == plan_captures(rounds=2, seed=0) and plan != plan_captures(rounds=2, seed=1)
    with pytest.raises(ValueError, match="kinds"):
        plan_captures(("suffix",))


def test_drift_factor_math():
    f = drift_factors([(1.0, 1.0), (2.0, 2.0), (1.0, 3.0)], [1.0, 1.0, 2.0, 2.0, 3.0])
    assert [x.factor for x in f] == pytest.approx([2.0, 1.0, 1.0])
    # cpu: slowness = reference CPU time / the capture's CPU share; a capture that got half the
    # cores (share 0.5) is twice as slow as one that got them all.
    f = cpu_drift_factors([(1.0, 1.0), (1.0, 1.0), (2.0, 2.0)], [1.0, 0.5, 1.0], [(1.0, 1.0)] * 3)
    assert [x.slowness for x in f] == pytest.approx([1.0, 2.0, 2.0]) and [
        x.factor for x in f
    ] == pytest.approx([2.0, 1.0, 1.0])
    with pytest.raises(ValueError):
        cpu_drift_factors([(1.0, 1.0)], [0.0], [(1.0, 1.0)])
    # A window of four: one reference that hit a burst (3.0) does not move the capture's slowness.
    (w,) = drift_factors([(1.0, 1.0, 3.0, 1.0)], [1.0, 1.0, 3.0, 1.0, 1.0])
    assert w.factor == pytest.approx(1.0) and (w.reference_before_s, w.reference_after_s) == (
        1.0,
        3.0,
    )
    with pytest.raises(ValueError):
        drift_factors([(1.0, 1.0)], [0.0])


def test_recovers_a_synthetic_machine(steady, synthetic_machine):
    res, seen = steady
    d, dr = res.profile.decode, res.profile.drafter
    true_d, true_dr = synthetic_machine.decode, synthetic_machine.drafter
    for got, want, rel in (
        (d.overhead_s, true_d.overhead_s, 0.05),
        (d.per_seq_s, true_d.per_seq_s, 0.15),
        (d.compute_s_per_token, true_d.compute_s_per_token, 0.25),
        (dr.ngram_s_per_seq, true_dr.ngram_s_per_seq, 0.35),
    ):
        assert abs(got - want) <= rel * want, (got, want)
    assert res.profile.fit_error_pct < 4
    assert len(res.heldout) == 4 and res.heldout_max_abs_error_pct < 5, res.heldout
    assert all(c.drift.factor == pytest.approx(1.0) for c in res.captures)
    assert res.method == "reference" and all(
        set(h.errors_by_method) == {"reference"} for h in res.heldout
    )
    assert res.captures[0].trace.path.parent.name == "p.captures"
    # Progress: every capture announced, with how many are left and an ETA once one is done.
    assert seen[-1].done == len(res.captures) and any(
        "capturing heldout-r1-ngram" in p.message for p in seen
    )
    assert all(p.eta_s is not None for p in seen if p.done > 0) and "left" in seen[3].line()
    # The per-bucket table: batch buckets of both kinds, predicted close to measured.
    kinds = {b.kind for b in res.buckets}
    assert kinds == {"none", "ngram"} and all(b.steps > 0 for b in res.buckets)
    assert {(b.min_batch, b.max_batch) for b in res.buckets} >= {(1, 1), (9, 16), (33, 64)}
    assert all(abs(b.error_pct) < 10 for b in res.buckets if b.steps >= 20), res.buckets


def test_normalising_drift_brings_the_heldout_error_down(drifting):
    """Raw, the fit averages both speeds and every held-out capture is off by ~15-20%; normalised,
    they agree."""
    res = drifting
    assert res.method == "cpu" and res.window == 2
    assert all(set(h.errors_by_method) == {"reference", "cpu"} for h in res.heldout)
    for m in ("reference", "cpu"):
        assert max(abs(h.errors_by_method[m]) for h in res.heldout) < 5, (m, res.heldout)
    raw = max(abs(h.raw_error_pct) for h in res.heldout)
    assert raw > 10, res.heldout
    assert res.heldout_max_abs_error_pct < 5 and res.heldout_max_abs_error_pct < raw / 3, (
        res.heldout
    )
    factors = sorted({round(c.drift.factor, 3) for c in res.captures})
    assert len(factors) == 2 and factors[1] / factors[0] == pytest.approx(1.4, rel=0.01)
    # The reference tracks the engine: the engine's raw/predicted ratio follows it.
    assert res.tracking.correlation > 0.9 and min(res.tracking.correlation_by_method.values()) > 0.9
    summary = res.summary("p.yaml")
    assert summary["heldout_max_abs_error_pct"] < summary["heldout_max_abs_raw_error_pct"]
    assert {"fit_error_pct", "heldout", "wall_s", "profile"} <= set(summary)


def test_writes_profile_report_workload_and_captures_that_refit_the_same(drifting, tmp_path):
    res = drifting
    out = tmp_path / "p.yaml"
    written = write_self_calibration(
        res, out, BASE, tmp_path / "p.captures", tmp_path / "p.workload.yaml"
    )
    assert [p.name for p in written] == [
        "p.captures",
        "p.yaml",
        "p.calibration.json",
        "p.workload.yaml",
    ]
    assert load_profile(out) == res.profile
    report = json.loads((tmp_path / "p.calibration.json").read_text())
    sc = report["self_calibration"]
    assert report["schema"] == "tlt-calibration/1" and len(sc["plan"]) == len(res.captures)
    assert (
        len(sc["references"]) == len(res.captures) + 4 and len(sc["heldout"]) == 4 and sc["buckets"]
    )
    assert load_profile(load_workload(tmp_path / "p.workload.yaml").profile) == res.profile
    assert not list(tmp_path.glob(".p.captures.*")), "no temporary directory left behind"
    # Raw times on disk, the factor in the meta; `tlt calibrate DIR...` applies it and says so.
    t = load_trace(tmp_path / "p.captures" / "fit-r1-none-0")
    assert t.meta[DRIFT_KEY]["factor"] < 1 and not t.meta[DRIFT_KEY]["applied"]
    scaled, factor = apply_recorded(t)
    assert scaled.steps["wall_s"].sum() == pytest.approx(factor * t.steps["wall_s"].sum())
    assert apply_recorded(scaled)[1] is None  # applied once only
    fits = sorted(str(p) for p in (tmp_path / "p.captures").glob("fit-*"))
    refit = tmp_path / "refit.yaml"
    r = runner.invoke(app, ["calibrate", *fits, "--out", str(refit), "--name", "synthetic"])
    assert r.exit_code == 0, r.output
    assert "drift factor" in r.output
    got, want = load_profile(refit), res.profile
    assert got.decode == want.decode and got.drafter == want.drafter


def test_scale_trace_scales_every_time(synthetic_trace, synthetic_machine):
    t = synthetic_trace(
        synthetic_machine,
        {"name": "baseline"},
        prompts=2,
        samples=2,
        cap=32,
        workers=1,
        max_batch=4,
    )
    s = scale_trace(t, 0.5)
    for table, col in (
        ("steps", "wall_s"),
        ("steps", "start_s"),
        ("requests", "end_s"),
        ("rl_steps", "rollout_s"),
    ):
        assert np.allclose(getattr(s, table)[col], 0.5 * getattr(t, table)[col])
    assert s.meta[DRIFT_KEY]["applied"] and DRIFT_KEY not in t.meta
    with pytest.raises(ValueError):
        scale_trace(t, 0.0)


def test_bad_model_path_exits_2_naming_the_option(tmp_path):
    out = tmp_path / "m.yaml"
    r = runner.invoke(app, ["calibrate", "--model", str(tmp_path / "nope"), "--out", str(out)])
    assert r.exit_code == 2 and "--model" in r.output and "nope" in r.output, r.output
    r = runner.invoke(app, ["calibrate", "--out", str(out)])
    assert r.exit_code == 2 and "--model" in r.output and "TRACE_DIR" in r.output, r.output
    assert not list(tmp_path.iterdir()), "nothing written"
