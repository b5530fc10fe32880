"""Whole runs: fit_runs (workbench/calibrate/captures/runs.py), predict_run, predict_bench,
`tlt validate RUN_DIR`.

The run directories are synthetic (tests/workbench/conftest.py `synthetic_run`): rollouts at a
known profile's step costs, updates and syncs at its phase costs, drafter estimates drawn from the
simulator's own forms, so each fit has a true value to recover."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.acceptance import accept_stats, alpha_for_mean, cumulative_acceptance
from sim.drafter import DrafterState, after_policy_update, after_training
from workbench.validate.bench_prediction import predict_bench
from workbench.calibrate.captures.run_dir import load_run, run_policy
from workbench.calibrate.captures.runs import (
    SPOT_BATCH_SEQUENCES,
    fit_runs,
    fit_step_seconds,
    whole_steps,
)
from workbench.cli import app
from workbench.contracts.profile import load_profile
from workbench.contracts.trace import TraceError, load_trace
from workbench.validate.run_prediction import predict_run

BASELINE = {"name": "baseline"}
SD = {
    "name": "sd",
    "sd_threshold": 16,
    "schedule": [[1, 16, 4]],
    "drafter": {"kind": "eagle", "warm_start": True},
    "spot_training": {"enabled": True},
}
TRUE = replace(
    load_profile("cpu-tiny"),
    phases=replace(
        load_profile("cpu-tiny").phases,
        train_gpu_s_per_token=3e-4,
        weight_sync_s=0.2,
        spot_stop_s=0.3,
        drafter_sync_s=0.15,
    ),
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, synthetic_run):
    root = tmp_path_factory.mktemp("runs")
    return {
        "baseline": synthetic_run(root / "baseline", TRUE, BASELINE, seed=1),
        "sd": synthetic_run(
            root / "sd", TRUE, SD, seed=1, spot_s=(1.0, 2.6, 0.4, 1.7), drafter_steps=(2, 5, 0, 3)
        ),
    }


def test_phase_costs_are_recovered_from_a_run(runs):
    fit = fit_runs([runs["baseline"]], load_profile("cpu-tiny"))
    assert fit.profile.phases.train_gpu_s_per_token == pytest.approx(3e-4, rel=1e-3)
    assert fit.profile.phases.weight_sync_s == pytest.approx(0.2, rel=1e-3)
    assert f"run:{runs['baseline'].resolve()}" in fit.profile.fitted_on
    rows = {r[0]: r for r in fit.table_rows()}
    assert rows["phases.weight_sync_s"][2] == "fitted"
    # a baseline run shows no spot training and no drafter estimate: those keep the base's value and
    # say why
    learning = rows["learning.train_tokens_per_s"]
    assert learning[2] == "kept (base)" and "no drafter step" in learning[3]
    assert rows["acceptance.staleness_per_update"][2] == "kept (base)"


def test_what_spot_training_adds_to_a_step_is_recovered_and_predicted(runs):
    """The wait for the spot trainers to stop and the drafter's sync: fitted from a run that
    spot-trains beside one that does not, then predicted as sync (the simulator's timeline puts the
    wait there)."""
    fit = fit_runs([runs["baseline"], runs["sd"]], load_profile("cpu-tiny"))
    ph = fit.profile.phases
    assert ph.weight_sync_s == pytest.approx(0.2, rel=1e-3)
    assert ph.spot_stop_s == pytest.approx(0.3, rel=1e-3) and ph.drafter_sync_s == pytest.approx(
        0.15, rel=1e-3
    )
    pred = predict_run(load_trace(runs["sd"] / "trace"), fit.profile)
    assert pred.predicted.sync_s == pytest.approx(0.2 + 0.15 + 0.3, rel=1e-3)
    assert pred.measured.sync_s == pytest.approx(0.2 + 0.15 + 0.3, rel=1e-3)
    assert pred.measured.other_s == pytest.approx(0.1, abs=1e-6)
    base = predict_run(load_trace(runs["baseline"] / "trace"), fit.profile)
    assert base.predicted.sync_s == pytest.approx(0.2, rel=1e-3)


def test_spot_step_time_counts_whole_steps_as_the_simulator_does():
    intervals = [([2.5], 5), ([1.2], 2), ([3.7], 7), ([0.3], 0)]  # a 0.5 s drafter step
    s = fit_step_seconds(intervals)
    assert whole_steps(intervals, s) == 14
    assert 0.4625 < s <= 0.5286  # the interval of step times that give every row its count
    assert fit_step_seconds([([1.0], 0)]) is None


def test_spot_throughput_from_the_timeline(runs):
    run = load_run(runs["sd"])
    fit = fit_runs([runs["sd"]], TRUE)
    req = run.trace.requests
    tps = round(
        SPOT_BATCH_SEQUENCES * float((req["prompt_tokens"] + req["response_tokens"]).mean())
    )
    assert fit.profile.learning.tokens_per_step == tps
    step_s = tps / fit.profile.learning.train_tokens_per_s
    # 1.0, 2.6, 0.4, 1.7 s doing 10 steps in all: the simulator's count at the fitted step time
    # matches
    assert whole_steps([([1.0], 2), ([2.6], 5), ([0.4], 0), ([1.7], 3)], step_s) == 10


def _est(profile, q, k):
    a = profile.acceptance
    return accept_stats(
        cumulative_acceptance(
            a.eagle_alpha_cold + (a.eagle_alpha_fresh - a.eagle_alpha_cold) * q, a.eagle_shape, k
        )
    ).mean


def _with_estimates(run_dir, base, stale, learn_tokens, trained):
    """metrics.csv rewritten with drafter estimates from the simulator's forms: the static drafter
    decays by `stale` per update; the spot-trained one follows sim.drafter's recursion."""
    run = load_run(run_dir)
    req = run.trace.requests
    tps = round(
        SPOT_BATCH_SEQUENCES * float((req["prompt_tokens"] + req["response_tokens"]).mean())
    )
    truth = replace(base, acceptance=replace(base.acceptance, staleness_per_update=stale),
                    learning=replace(base.learning, learn_tokens=learn_tokens, tokens_per_step=tps))
    pol, k = run_policy(run.trace), 4
    tokens = req.groupby("rl_step")["response_tokens"].sum()
    state, eagle, static = DrafterState(truth.acceptance.warm_start_quality), [], []
    for t, n in enumerate(trained):
        eagle.append(_est(truth, state.quality, k))
        static.append(_est(truth, truth.acceptance.warm_start_quality * (1 - stale) ** t, k))
        state = after_policy_update(
            after_training(state, pol, truth, n * tps, int(tokens[t])), truth
        )
    m = run.metrics.assign(eagle_est=eagle, static_est=static, drafter_steps=list(trained))
    m.to_csv(run_dir / "metrics.csv", index=False)


def test_staleness_and_learning_curve_are_recovered(runs, tmp_path, synthetic_run):
    base = replace(TRUE, acceptance=replace(TRUE.acceptance, warm_start_quality=0.6))
    d = synthetic_run(
        tmp_path / "sd", base, SD, seed=2, spot_s=(1.0, 2.6, 0.4, 1.7), drafter_steps=(2, 5, 0, 3)
    )
    _with_estimates(d, base, stale=0.05, learn_tokens=1e5, trained=(2, 5, 0, 3))
    fit = fit_runs([d], base)
    assert fit.profile.acceptance.staleness_per_update == pytest.approx(0.05, abs=2e-3)
    params = {p.key: p for p in fit.params}
    assert params["learning.learn_tokens"].fitted
    # The grid's step is 10**0.1.
    assert fit.profile.learning.learn_tokens == pytest.approx(1e5, rel=0.3)


def test_a_drafter_that_did_not_improve_keeps_the_base_learning_curve(
    runs, tmp_path, synthetic_run
):
    base = replace(TRUE, acceptance=replace(TRUE.acceptance, warm_start_quality=0.6))
    d = synthetic_run(
        tmp_path / "flat",
        base,
        SD,
        seed=3,
        spot_s=(1.0, 2.6, 0.4, 1.7),
        drafter_steps=(2, 5, 0, 3),
        eagle_est=(4.0, 3.9, 3.8, 3.7),
        static_est=(4.0, 3.9, 3.8, 3.7),
    )
    fit = fit_runs([d], base)
    p = {p.key: p for p in fit.params}["learning.learn_tokens"]
    assert not p.fitted and p.value == base.learning.learn_tokens and "noise" in p.why_not_fitted


def test_alpha_for_mean_inverts_the_accepted_length():
    for a in (0.2, 0.6, 0.9):
        el = accept_stats(cumulative_acceptance(a, 0.7, 6)).mean
        assert alpha_for_mean(0.7, 6, el) == pytest.approx(a, abs=1e-6)
    # no drafter is never wrong: the scale stops short of 1, and a pass of one token is 0
    assert alpha_for_mean(0.7, 6, 7.0) < 1.0 and alpha_for_mean(0.7, 6, 1.0) < 1e-6


def test_predict_run_per_phase_and_in_sample_label(runs):
    trace = load_trace(runs["baseline"] / "trace")
    held = predict_run(trace, TRUE)
    assert not held.in_sample and held.run == "baseline" and len(held.steps) == 4
    # the synthetic engine's steps cost the profile's form: the rollout is predicted closely
    assert abs(held.phase_error_pct("rollout")) < 15
    # updates took exactly the form's time on the run's own tokens (prompt lengths vary around their
    # mean)
    assert abs(held.phase_error_pct("train")) < 3
    assert held.phase_error_pct("sync") == pytest.approx(0.0, abs=1e-6)
    assert held.measured.other_s == pytest.approx(0.1, abs=1e-6) and held.predicted.other_s == 0.0
    fitted = fit_runs([runs["baseline"]], load_profile("cpu-tiny")).profile
    assert predict_run(trace, fitted).in_sample
    s = held.summary()
    assert set(s["phases"]) == {"rollout", "train", "sync", "other", "step"}
    assert s["error_pct"] == pytest.approx(
        100 * (s["predicted_step_s"] - s["measured_step_s"]) / s["measured_step_s"], abs=0.01
    )
    json.dumps(held.to_dict())  # plain JSON


def test_a_run_whose_probe_turned_sd_off_is_predicted_without_a_drafter(runs):
    trace = load_trace(runs["sd"] / "trace")
    assert {s.drafter_predicted for s in predict_run(trace, TRUE).steps} == {"eagle"}
    probed = replace(
        trace,
        meta={
            **trace.meta,
            "sd_probe": {"sd_s": 2.0, "plain_s": 1.4, "steps": 90, "speedup": 0.7, "sd_off": True},
        },
    )
    off = predict_run(probed, TRUE)
    assert {s.drafter_predicted for s in off.steps} == {"none"}
    assert all(s.accept_len_predicted == pytest.approx(1.0) for s in off.steps)
    # the same responses decoded plainly: what the run's policy without SD predicts
    assert off.predicted.rollout_s == pytest.approx(
        predict_run(trace, TRUE, run_policy(trace).without_sd()).predicted.rollout_s
    )


def test_predict_run_refuses_a_capture(synthetic_trace):
    t = synthetic_trace(TRUE, BASELINE, prompts=4, samples=2, cap=64, workers=1, max_batch=8)
    with pytest.raises(TraceError, match="no RL step trained"):
        predict_run(t, TRUE)


def test_predict_bench_speedups(runs):
    b = predict_bench(runs, TRUE, "baseline")
    rows = {r.name: r for r in b.rows}
    assert (
        rows["baseline"].predicted_speedup_step == 1.0
        and rows["baseline"].measured_speedup_step == 1.0
    )
    sd = rows["sd"]
    assert all(
        math.isfinite(v)
        for v in (sd.predicted_step_s, sd.measured_step_s, sd.predicted_speedup_step)
    )
    assert sd.prediction_error_pct == pytest.approx(
        100 * (sd.predicted_speedup_step - sd.measured_speedup_step) / sd.measured_speedup_step)
    doc = json.loads(json.dumps(b.to_json()))
    assert (
        set(doc["policies"]) == {"baseline", "sd"}
        and "prediction_error_pct" in doc["policies"]["sd"]
    )
    with pytest.raises(ValueError, match="baseline 'nope'"):
        predict_bench(runs, TRUE, "nope")


def test_cli_validate_run_dir(runs, tmp_path):
    prof = tmp_path / "p.json"
    from workbench.contracts.schema import to_mapping
    prof.write_text(json.dumps(to_mapping(TRUE)))
    r = CliRunner().invoke(
        app, ["validate", "--profile", str(prof), str(runs["sd"]), "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 0, r.output
    assert "phase (mean per step)" in r.output and "held out" in r.output
    last = json.loads(r.output.strip().splitlines()[-1])
    assert {"predicted_step_s", "measured_step_s", "error_pct", "phases"} <= set(last)
    assert (tmp_path / "o" / "validate-run.json").is_file()
    mixed = CliRunner().invoke(
        app, ["validate", "--profile", str(prof), str(runs["sd"]), str(runs["sd"] / "trace")]
    )
    assert mixed.exit_code == 2 and "separate commands" in mixed.output


def test_cli_names_a_bad_metrics_file(runs, tmp_path):
    import shutil
    d = tmp_path / "bad"
    shutil.copytree(runs["baseline"], d)
    pd.read_csv(d / "metrics.csv").drop(columns=["sync_s"]).to_csv(d / "metrics.csv", index=False)
    r = CliRunner().invoke(app, ["validate", "--profile", "cpu-tiny", str(d)])
    assert r.exit_code == 2 and "metrics.csv" in r.output and "sync_s" in r.output


def test_cli_calibrate_fits_whole_runs_on_top_of_a_profile(runs, tmp_path):
    """`tlt calibrate --run R...` alone (on top of --base), and after a trace fit of the runs' own
    traces (a run directory stands for its trace): the run-level parameters land in the profile
    and the report's `runs` section; a directory that is not a run is refused before anything is
    written."""
    from workbench.contracts.schema import to_mapping

    base = tmp_path / "base.json"
    base.write_text(json.dumps(to_mapping(TRUE)))
    out = tmp_path / "only.yaml"
    r = CliRunner().invoke(
        app,
        [
            "calibrate",
            "--run",
            str(runs["baseline"]),
            "--run",
            str(runs["sd"]),
            "--base",
            str(base),
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    prof = load_profile(out)
    assert prof.phases.spot_stop_s == pytest.approx(0.3, rel=1e-3)
    assert prof.phases.drafter_sync_s == pytest.approx(0.15, rel=1e-3)
    report = json.loads((tmp_path / "only.calibration.json").read_text())
    assert report["runs"]["runs"] == ["baseline", "sd"]
    assert {f"run:{runs['baseline'].resolve()}", f"run:{runs['sd'].resolve()}"} <= set(
        prof.fitted_on
    )

    both = tmp_path / "both.yaml"
    r = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(runs["baseline"]),
            str(runs["sd"]),
            "--run",
            str(runs["baseline"]),
            "--run",
            str(runs["sd"]),
            "--out",
            str(both),
        ],
    )
    assert r.exit_code == 0, r.output
    fitted = load_profile(both)
    assert fitted.phases.weight_sync_s == pytest.approx(0.2, rel=1e-3)
    assert json.loads((tmp_path / "both.calibration.json").read_text())["runs"]["runs"] == [
        "baseline",
        "sd",
    ]

    bad = CliRunner().invoke(
        app, ["calibrate", "--run", str(tmp_path), "--out", str(tmp_path / "x.yaml")]
    )
    assert bad.exit_code == 2 and "not a run directory" in bad.output
    assert not (tmp_path / "x.yaml").exists()


def test_a_run_of_the_same_name_elsewhere_is_held_out(runs, tmp_path):
    """Two benches both have a `baseline` run: a profile fitted on one predicts the other held
    out."""
    import shutil

    other = tmp_path / "bench" / "baseline"
    shutil.copytree(runs["baseline"], other)
    fit = fit_runs([runs["baseline"]], load_profile("cpu-tiny"))
    assert predict_run(load_trace(runs["baseline"] / "trace"), fit.profile).in_sample
    assert not predict_run(load_trace(other / "trace"), fit.profile).in_sample
