"""Bandit regret against the oracle schedule (best fixed draft length per bucket in hindsight)."""

import json
import math
from dataclasses import asdict, replace

import numpy as np
import pytest
from typer.testing import CliRunner

from sim.simulator import simulate
from workbench.cli import app
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.compare.regret import BANDITS, bandit_regret, bandit_variants, decision_segments

runner = CliRunner()
ORACLE_KEYS = [
    "bucket",
    "min_batch",
    "max_batch",
    "oracle_draft_len",
    "schedule_draft_len",
    "segments",
    "regret_s",
]


@pytest.fixture(scope="module")
def toy():
    """Stationary acceptance: no length drift, no staleness, a warm drafter that is not
    retrained."""
    wl = load_workload("cpu-tiny")
    wl = replace(wl, steps=3, lengths=replace(wl.lengths, drift_per_step=0.0))
    prof = load_profile("cpu-tiny")
    # No prefill cost: the regret's model time leaves prefill out on purpose
    # (workbench/compare/regret.py),
    # and the calibrated cpu-tiny profile has one (~2% of decode time here).
    prof = replace(prof, acceptance=replace(prof.acceptance, staleness_per_update=0.0),
                   decode=replace(prof.decode, prefill_s_per_token=0.0))
    base = load_policy("tlt-cold")
    base = replace(base, drafter=replace(base.drafter, warm_start=True),
                   spot_training=replace(base.spot_training, enabled=False))
    return wl, prof, base


@pytest.fixture(scope="module")
def report(toy):
    wl, prof, base = toy
    return bandit_regret(wl, base, prof, seeds=2)


def test_every_bandit_has_finite_nonnegative_regret(report):
    assert report.algorithms == [a for a, _ in BANDITS]
    for r in report.runs:
        assert r.decisions > 0
        for v in (r.regret_s, r.clairvoyant_regret_s, r.regret_pct):
            assert math.isfinite(v)
        assert r.regret_s >= -1e-9, (r.algorithm, r.seed, r.regret_s)
        # Against the best arm per segment: >= 0 by construction, and never below the fixed-oracle
        # regret.
        assert r.clairvoyant_regret_s >= -1e-9
        assert r.clairvoyant_regret_s >= r.regret_s - 1e-9
        # The curve ends at the total; the buckets add up to it.
        assert r.curve[-1] == pytest.approx(r.regret_s, abs=1e-9)
        assert sum(o.regret_s for o in r.oracle) == pytest.approx(r.regret_s, abs=1e-9)
        # A bucket whose played arm is the oracle's has exactly zero regret (the fixed table's
        # buckets).
        if r.algorithm == "fixed":
            for o in r.oracle:
                assert o.regret_s >= -1e-12
                if o.oracle_draft_len == o.schedule_draft_len:
                    assert o.regret_s == 0.0


def test_model_time_matches_the_simulator(toy):
    """The counterfactual cost model, applied to the arm played, reproduces the simulated
    durations."""
    wl, prof, base = toy
    policy = bandit_variants(base)[0]
    run = simulate(wl, policy, prof, seed=0, steps=2)
    seg = decision_segments(run, policy, prof, wl.prompt_tokens)
    model = np.array([seg.at[i, f"t_{k}"] for i, k in enumerate(seg["chosen"])])
    assert model.sum() == pytest.approx(seg["observed_s"].sum(), rel=0.02)


def test_beg_mab_beats_a_poor_fixed_table(toy, report):
    wl, prof, base = toy
    # SD off where it pays.
    poor = replace(base, schedule=tuple(replace(row, draft_len=0) for row in base.schedule))
    poor_report = bandit_regret(wl, poor, prof, seeds=2, algorithms=["fixed"])
    poor_regret = np.mean([r.regret_s for r in poor_report.runs])
    beg_regret = np.mean([r.regret_s for r in report.runs if r.algorithm == "beg"])
    assert beg_regret < 0.5 * poor_regret
    # and the poor table's loss shows in its step time
    beg_step = np.mean([r.step_time_s for r in report.runs if r.algorithm == "beg"])
    assert np.mean([r.step_time_s for r in poor_report.runs]) > beg_step


def test_fixed_table_at_the_oracle_schedule_has_no_regret(toy, report):
    wl, prof, base = toy
    beg0 = next(r for r in report.runs if r.algorithm == "beg" and r.seed == 0)
    oracle = {o.bucket: o.oracle_draft_len for o in beg0.oracle}
    tuned = replace(
        base,
        schedule=tuple(
            replace(row, draft_len=oracle.get(i) if oracle.get(i) is not None else row.draft_len)
            for i, row in enumerate(base.schedule)
        ),
    )
    rep = bandit_regret(wl, tuned, prof, seeds=[0], algorithms=["fixed"])
    fixed = rep.runs[0]
    assert fixed.regret_s <= 0.01 * fixed.decision_time_s
    beg_fixed = next(r for r in report.runs if r.algorithm == "fixed" and r.seed == 0)
    assert fixed.regret_s <= beg_fixed.regret_s


def test_json_and_png(report, tmp_path):
    json_path, png_path = report.save(tmp_path / "r")
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(json_path.read_text())
    assert data["base_policy"] == "tlt-cold" and data["seeds"] == [0, 1]
    assert list(data["bandits"]) == ["beg", "ucb1", "egreedy", "fixed"]
    for entry in data["bandits"].values():
        assert {"mean", "std", "min", "max", "ci95"} <= set(entry["regret_s"])
        for run in entry["per_seed"]:
            curve = run["curve"]
            assert len(curve["decision"]) == len(curve["cumulative_regret_s"]) > 0
            assert curve["decision"][-1] == run["decisions"]
            assert curve["cumulative_regret_s"][-1] == pytest.approx(run["regret_s"])
            assert run["oracle_schedule"] and all(
                list(o) == ORACLE_KEYS for o in run["oracle_schedule"]
            )
    runs = {(r.algorithm, r.seed): r for r in report.runs}
    for alg, entry in data["bandits"].items():
        for run in entry["per_seed"]:
            assert run["oracle_schedule"] == [asdict(o) for o in runs[alg, run["seed"]].oracle]


def test_oracle_consensus_is_the_most_common_pick(report):
    """What `tlt regret` prints: per bucket, the oracle draft length most runs chose."""
    consensus = report.oracle_consensus()
    assert consensus and [(lo, hi) for lo, hi, _ in consensus] == sorted(
        {(lo, hi) for lo, hi, _ in consensus}
    )
    for lo, hi, k in consensus:
        picks = [o.oracle_draft_len for r in report.runs for o in r.oracle
                 if (o.min_batch, o.max_batch) == (lo, hi) and o.oracle_draft_len is not None]
        assert picks.count(k) == max(picks.count(x) for x in picks)
    frame = report.oracle_frame()
    assert list(frame.columns[:2]) == ["bandit", "seed"] and len(frame) == len(report.runs)
    assert {f"{lo}-{hi}" for lo, hi, _ in consensus} <= set(frame.columns)


def test_cli_regret(tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(
        app,
        [
            "regret",
            "--workload",
            "cpu-tiny",
            "--policy",
            "tlt-cold",
            "--seeds",
            "2",
            "--steps",
            "2",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert (out / "regret.json").is_file() and (out / "regret.png").is_file()
    for label in ("BEG-MAB", "UCB1", "epsilon-greedy", "fixed table"):
        assert label in res.stdout


def test_cli_regret_needs_a_policy_with_sd(tmp_path):
    res = runner.invoke(
        app,
        ["regret", "--workload", "cpu-tiny", "--policy", "baseline", "--out", str(tmp_path / "r")],
    )
    assert res.exit_code == 2 and "speculative" in res.output
    assert not (tmp_path / "r").exists()
