"""Calibration (`tlt calibrate`) and validation (`tlt validate`) on synthetic traces.

The traces come from the `synthetic_trace` fixture (tests/workbench/conftest.py): a token-level
stand-in for vLLM whose steps cost exactly the simulator's form under known parameters, with noise,
outliers and warm-up.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.lengths import sample_step
from workbench.calibrate import (
    Calibration,
    ParamFit,
    calibrate,
    per_position_acceptance,
    predict_steps,
    trace_drafter_kind,
)
from workbench.cli import app
from workbench.contracts.profile import load_profile
from workbench.contracts.trace import Trace, TraceError, load_trace, write_trace
from workbench.contracts.workload import LengthModel, load_workload
from workbench.validate.capture import save_validations, validate
from workbench.workloads.tobit import fit_tobit

runner = CliRunner()
BASE = load_profile("cpu-tiny")
BASELINE = {"name": "baseline"}
NGRAM = {"name": "ngram-dyn", "sd_threshold": 32, "schedule": [[1, 4, 4], [5, 16, 2], [17, 32, 1]],
         "drafter": {"kind": "ngram"}}
EAGLE = {"name": "eagle-dyn", "sd_threshold": 32, "schedule": [[1, 4, 4], [5, 12, 3], [13, 32, 1]],
         "drafter": {"kind": "eagle"}}
SHAPE = dict(prompts=16, samples=4, cap=384, workers=2, max_batch=32)


@pytest.fixture(scope="module")
def traces(tmp_path_factory, synthetic_trace, synthetic_machine):
    """Written and read back, as the CLI sees them: no SD, n-gram and EAGLE Dynamic SD."""
    root = tmp_path_factory.mktemp("traces")
    out = {}
    for name, pol, seed in (("none", BASELINE, 1), ("ngram", NGRAM, 2), ("eagle", EAGLE, 3)):
        write_trace(
            synthetic_trace(synthetic_machine, pol, seed=seed, gap_s=0.0, **SHAPE), root / name
        )
        out[name] = load_trace(root / name)
    return out


@pytest.fixture(scope="module")
def cal(traces):
    return calibrate(list(traces.values()), BASE, name="fitted")


def param(c: Calibration, part: str, name: str) -> ParamFit:
    """How the calibration set one profile parameter."""
    return next(p for p in c.params if (p.part, p.name) == (part, name))


def close(got: float, want: float, rel: float) -> bool:
    return abs(got - want) <= rel * want


def test_recovers_step_costs(cal, synthetic_machine):
    d, dr = cal.profile.decode, cal.profile.drafter
    assert close(d.overhead_s, synthetic_machine.decode.overhead_s, 0.05)
    assert close(d.per_seq_s, synthetic_machine.decode.per_seq_s, 0.1)
    assert close(d.compute_s_per_token, synthetic_machine.decode.compute_s_per_token, 0.2)
    assert close(d.kv_s_per_token, synthetic_machine.decode.kv_s_per_token, 0.25)
    assert close(dr.ngram_s_per_seq, synthetic_machine.drafter.ngram_s_per_seq, 0.3)
    assert close(dr.eagle_s_per_seq, synthetic_machine.drafter.eagle_s_per_seq, 0.3)
    assert close(dr.eagle_step_s, synthetic_machine.drafter.eagle_step_s, 0.3)
    assert all(
        param(cal, *k).fitted
        for k in (
            ("decode", "overhead_s"),
            ("decode", "per_seq_s"),
            ("decode", "compute_s_per_token"),
            ("decode", "kv_s_per_token"),
            ("drafter", "ngram_s_per_seq"),
            ("drafter", "eagle_step_s"),
        )
    )
    # CPU-like: compute-bound from batch 1, so there is no knee and weights_s stays the base's 0.
    assert not param(cal, "decode", "weights_s").fitted and d.weights_s == 0.0
    # Warm-up steps (2 per engine, 2x slower) are left out; outliers (1%, 3x) do not drag the fit.
    assert cal.costs.steps_dropped.get("warm-up", 0) >= 6
    assert cal.costs.mdape_pct < 4 and cal.costs.cv_mdape_pct < 4
    assert cal.profile.fit_error_pct == pytest.approx(cal.costs.cv_mdape_pct, abs=1e-3)
    assert all(abs(b) < 2 for b in cal.costs.bias_pct.values())


def test_fit_is_in_the_simulators_own_cost_form(cal):
    """The fit's linear features reproduce sim/costs.py (verify + draft + prefill) with the fitted
    profile."""
    res = cal.residuals
    assert np.allclose(predict_steps(cal.profile, res), res["predicted_s"], rtol=1e-3)


def test_recovers_acceptance(cal):
    a = cal.profile.acceptance
    assert a.ngram_alpha == pytest.approx(0.65, abs=0.03) and a.ngram_shape == pytest.approx(
        0.6, abs=0.15
    )
    assert a.eagle_alpha_fresh == pytest.approx(0.8, abs=0.03) and a.eagle_shape == pytest.approx(
        0.7, abs=0.15
    )
    assert a.eagle_alpha_cold == BASE.acceptance.eagle_alpha_cold
    assert a.staleness_per_update == BASE.acceptance.staleness_per_update
    assert not param(cal, "acceptance", "staleness_per_update").fitted


PARAMETER_KEYS = [
    "decode.overhead_s",
    "decode.compute_s_per_token",
    "decode.per_seq_s",
    "decode.prefill_s_per_token",
    "decode.kv_s_per_token",
    "drafter.ngram_s_per_seq",
    "drafter.eagle_s_per_seq",
    "drafter.eagle_step_s",
    "drafter.sd_step_s",
    "decode.weights_s",
    "acceptance.eagle_alpha_fresh",
    "acceptance.eagle_alpha_cold",
    "acceptance.eagle_shape",
    "acceptance.ngram_alpha",
    "acceptance.ngram_shape",
    "acceptance.staleness_per_update",
    "phases.train_gpu_s_per_token",
    "phases.weight_sync_s",
]


def test_report_keeps_its_file_format(cal):
    """The calibration report (NAME.calibration.json) is a file format: its parameters are keyed
    'part.field', each with the profile's value, the base's, whether it was fitted, its relative
    error and why not."""
    report = cal.report(BASE)
    assert report["schema"] == "tlt-calibration/1"
    assert list(report["parameters"]) == PARAMETER_KEYS
    assert [row[0] for row in cal.param_rows(BASE)] == PARAMETER_KEYS
    for key, entry in report["parameters"].items():
        part, name = key.split(".")
        assert list(entry) == ["value", "base", "fitted", "rel_se", "why_not_fitted"]
        assert entry["value"] == getattr(getattr(cal.profile, part), name)
        assert entry["base"] == getattr(getattr(BASE, part), name)
        assert entry["fitted"] == param(cal, part, name).fitted
        assert (entry["why_not_fitted"] is None) == (
            entry["fitted"] or part in ("acceptance", "phases")
        )
        if part in ("acceptance", "phases") or key == "decode.weights_s":
            assert entry["rel_se"] is None
    assert 0 < report["parameters"]["decode.overhead_s"]["rel_se"] < 0.1
    # The per-finish cost is fitted and reported, never stored: a Profile has no field for it.
    assert report["decode"]["finish_s_stored"] is False and report["decode"]["finish_s"] >= 0
    assert not hasattr(cal.profile.decode, "finish_s")
    assert json.loads(json.dumps(report)) == report


def test_per_position_acceptance_counts_drafts_per_position():
    """Steps of different draft lengths: position i is offered only by steps that drafted >= i
    tokens."""
    steps = pd.DataFrame(
        {
            "draft_len": [4, 2, 0],
            "num_drafts": [10, 10, 0],
            "decode_requests": [10, 10, 50],
            "batch_size": [10, 10, 50],
            "accepted_per_pos": [[8, 6, 4, 2], [5, 3], []],
        }
    )
    acc, offered, drafts, r, n = per_position_acceptance(steps)
    assert n == 2 and offered.tolist() == [20, 20, 10, 10]
    assert r.tolist() == pytest.approx([13 / 20, 9 / 20, 4 / 10, 2 / 10])


def test_parameters_a_trace_cannot_identify_keep_the_base(traces, synthetic_machine):
    c = calibrate([traces["none"]], BASE)
    for part, name in (
        ("drafter", "ngram_s_per_seq"),
        ("drafter", "eagle_step_s"),
        ("drafter", "eagle_s_per_seq"),
        ("acceptance", "ngram_alpha"),
        ("acceptance", "eagle_alpha_fresh"),
    ):
        p = param(c, part, name)
        assert not p.fitted
        assert (
            p.value == getattr(getattr(c.profile, part), name) == getattr(getattr(BASE, part), name)
        )
    assert param(c, "drafter", "eagle_step_s").why_not_fitted.startswith("no such steps")
    # Without SD, K is always 0: per-sequence and per-token compute cost are one feature; one is
    # kept.
    assert (
        param(c, "decode", "per_seq_s").fitted != param(c, "decode", "compute_s_per_token").fitted
    )
    slope = c.profile.decode.per_seq_s + c.profile.decode.compute_s_per_token
    assert close(
        slope,
        synthetic_machine.decode.per_seq_s + synthetic_machine.decode.compute_s_per_token,
        0.1,
    )


def test_finds_the_knee_of_a_memory_bound_engine(tmp_path, synthetic_trace, synthetic_machine):
    """GPU-like: reading the weights costs the same up to 200 tokens per step (weights_s = compute *
    200)."""
    gpu = replace(
        synthetic_machine,
        decode=replace(
            synthetic_machine.decode,
            overhead_s=0.002,
            per_seq_s=1e-5,
            weights_s=0.004,
            compute_s_per_token=2e-5,
            kv_s_per_token=1e-8,
        ),
    )
    shape = dict(
        prompts=48,
        samples=4,
        cap=256,
        workers=1,
        max_batch=192,
        lengths=LengthModel(clip_ratio=0.05, sigma=0.4),
    )
    pol = {
        "name": "ngram",
        "sd_threshold": 192,
        "schedule": [[1, 48, 4], [49, 192, 2]],
        "drafter": {"kind": "ngram"},
    }
    ts = [
        synthetic_trace(gpu, BASELINE, seed=5, gap_s=0.0, **shape),
        synthetic_trace(gpu, pol, seed=6, gap_s=0.0, **shape),
    ]
    c = calibrate(ts, BASE)
    assert param(c, "decode", "weights_s").fitted
    assert close(c.profile.decode.weights_s, 0.004, 0.2)
    assert close(c.profile.decode.compute_s_per_token, 2e-5, 0.15)
    assert close(c.profile.decode.overhead_s, 0.002, 0.3)


def test_length_model_is_recovered():
    true = LengthModel(
        clip_ratio=0.05,
        sigma=0.8,
        group_correlation=0.5,
        mean_accuracy=0.6,
        accuracy_concentration=2.0,
        wrong_factor=1.8,
        drift_per_step=0.1,
    )
    rng = np.random.default_rng(0)
    cap, prompts, group = 2048, 300, 8
    rows = []
    for step in range(2):
        s = sample_step(true, cap, prompts, group, step, rng)
        rows.append(
            pd.DataFrame(
                {
                    "rl_step": step,
                    "engine": 0,
                    "request_id": [f"{step}-{i}" for i in range(len(s.lengths))],
                    "prompt_id": s.prompt,
                    "sample": np.tile(np.arange(group), prompts),
                    "prompt_tokens": 50,
                    "response_tokens": s.lengths,
                    "finish_reason": np.where(s.lengths >= cap, "length", "stop"),
                    "start_s": 0.0,
                    "end_s": 1.0,
                    "reward": s.correct.astype(float),
                }
            )
        )
    t = Trace(
        {"max_tokens": cap, "policy": BASELINE},
        pd.DataFrame(),
        pd.concat(rows, ignore_index=True),
        pd.DataFrame(),
        Path("lengths"),
    )
    fit = fit_tobit([t])
    m = fit.model
    assert m.sigma == pytest.approx(0.8, abs=0.08)
    assert m.group_correlation == pytest.approx(0.5, abs=0.1)
    assert m.mean_accuracy == pytest.approx(0.6, abs=0.05)
    assert m.wrong_factor == pytest.approx(1.8, abs=0.2)
    assert m.drift_per_step == pytest.approx(0.1, abs=0.04)
    assert (
        m.clip_ratio == pytest.approx(fit.clip_ratio_observed, rel=1e-3)
        and fit.clip_ratio_observed > 0
    )
    assert (
        abs(fit.clip_ratio_implied - fit.clip_ratio_observed) < 0.02
        and abs(m.clip_ratio - 0.05) < 0.02
    )
    m.check()


def test_cli_calibrate_writes_a_profile_and_a_workload_that_load(traces, tmp_path):
    dirs = [str(t.path) for t in traces.values()]
    for suffix in (".yaml", ".json"):
        out = tmp_path / f"fitted{suffix}"
        wl_out = tmp_path / "wl" / f"workload{suffix}"
        res = runner.invoke(app, ["calibrate", *dirs, "--out", str(out), "--name", "cpu-fitted",
                                  "--lengths-out", str(wl_out)])
        assert res.exit_code == 0, res.output
        prof = load_profile(out)
        assert prof.name == "cpu-fitted" and prof.fitted_on == ("none", "ngram", "eagle")
        assert prof.fit_error_pct is not None and 0 < prof.fit_error_pct < 5
        assert "tlt calibrate" in prof.source and "cpu-tiny" in prof.source
        assert (
            "decode.overhead_s" in res.output
            and "held out" in res.output
            and "acceptance ngram" in res.output
        )
        report = json.loads(out.with_name(out.stem + ".calibration.json").read_text())
        assert (
            report["schema"] == "tlt-calibration/1"
            and report["parameters"]["decode.overhead_s"]["fitted"]
        )
        assert (
            set(report["acceptance"]) == {"ngram", "eagle"}
            and report["lengths"]["responses"] == 3 * 64
        )
        wl = load_workload(wl_out)
        assert load_profile(wl.profile) == prof
        assert (
            wl.workers,
            wl.prompts_per_step,
            wl.group_size,
            wl.max_response_tokens,
            wl.max_batch,
        ) == (2, 16, 4, 384, 32)


def _corrupt(src: Path, dst: Path, how: str) -> None:
    shutil.copytree(src, dst)
    if how == "column":
        df = pd.read_parquet(dst / "steps.parquet").drop(columns=["wall_s"])
        df.to_parquet(dst / "steps.parquet")
    elif how == "truncated":
        data = (dst / "requests.parquet").read_bytes()
        (dst / "requests.parquet").write_bytes(data[: len(data) // 2])
    elif how == "version":
        meta = json.loads((dst / "meta.json").read_text())
        meta["trace_version"] = 99
        (dst / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("how, words", [("column", ["steps.parquet", "wall_s", "missing"]),
                                        ("truncated", ["requests.parquet", "truncated"]),
                                        ("version", ["meta.json", "trace_version", "99"])])
def test_malformed_traces_fail_with_a_clear_error(traces, tmp_path, how, words):
    bad = tmp_path / "bad"
    _corrupt(traces["ngram"].path, bad, how)
    with pytest.raises(TraceError):
        load_trace(bad)
    out = tmp_path / "p.yaml"
    for args in (["calibrate", str(traces["none"].path), str(bad), "--out", str(out)],
                 ["validate", "--profile", "cpu-tiny", str(bad)]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert all(w in res.output for w in words), res.output
    assert not out.exists()


def test_calibrate_then_validate_round_trips(tmp_path, synthetic_trace, synthetic_machine):
    """Fit on one run, validate on it and on a held-out run with another prompt mix, batch size and
    engine count.

    The runs are consistent with the simulator (every request of a step accepts the same number
    of drafts, no warm-up, no host gap), so what is left is the fit's own error."""
    kw = dict(noise=0.03, outliers=0.0, warmup=0, gap_s=0.0, shared_acceptance=True)
    fit_on = synthetic_trace(synthetic_machine, NGRAM, seed=11, **SHAPE, **kw)
    fit_base = synthetic_trace(synthetic_machine, BASELINE, seed=12, **SHAPE, **kw)
    held_out = synthetic_trace(
        synthetic_machine,
        NGRAM,
        seed=13,
        prompts=8,
        samples=8,
        cap=384,
        workers=1,
        max_batch=16,
        **kw,
    )
    for name, t in (("fit", fit_on), ("fit-base", fit_base), ("held", held_out)):
        write_trace(t, tmp_path / name)
    out = tmp_path / "p.json"
    res = runner.invoke(
        app, ["calibrate", str(tmp_path / "fit"), str(tmp_path / "fit-base"), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    for name in ("fit", "held"):
        res = runner.invoke(app, ["validate", "--profile", str(out), str(tmp_path / name), "--out",
                                  str(tmp_path / f"v-{name}")])
        assert res.exit_code == 0, res.output
        last = json.loads(res.output.strip().splitlines()[-1])
        assert set(last) == {"predicted_rollout_s", "measured_rollout_s", "error_pct"}
        traced = float(pd.read_parquet(tmp_path / name / "rl_steps.parquet")["rollout_s"].sum())
        assert last["measured_rollout_s"] == pytest.approx(traced, rel=1e-3)
        assert abs(last["error_pct"]) < 3, (name, last)
        doc = json.loads((tmp_path / f"v-{name}" / "validate.json").read_text())
        assert doc["runs"][0]["held_out"] == (name == "held")
        assert (tmp_path / f"v-{name}" / "validate.png").stat().st_size > 0
        assert list(doc["runs"][0]["details"]) == VALIDATE_DETAILS


VALIDATE_DETAILS = [
    "trace",
    "profile",
    "workers",
    "prompts",
    "samples",
    "max_tokens",
    "max_batch",
    "prompt_tokens",
    "rl_steps",
    "policy",
    "drafter",
    "schedule_overridden",
    "off_threshold_sd_steps",
    "shards_match",
    "measured_basis",
    "predicted_per_step_s",
    "rollout_s",
    "span_s",
    "span_vs_rollout_pct",
    "tokens_traced",
    "tokens_simulated",
    "accept_len_traced",
    "accept_len_simulated",
    "engine_steps_traced",
    "engine_steps_simulated",
    "step_cost_rollout_s",
    "step_cost_per_rl_step_s",
    "cost_error_pct",
    "pace_error_pct",
]


def test_validate_json_details_keep_their_format(traces, tmp_path):
    """validate.json's `details` keep the file's keys and order; a run with no SD schedule has no
    schedule_overridden, and a bucket the trace ran at another draft length is listed as before."""
    drifted = dict(
        traces["ngram"].meta, policy={**NGRAM, "schedule": [[1, 4, 1], [5, 16, 2], [17, 32, 1]]}
    )
    runs = [
        validate(BASE, traces["ngram"]),
        validate(BASE, traces["none"]),
        validate(
            BASE,
            replace(traces["ngram"], meta=drifted, path=traces["ngram"].path.with_name("drifted")),
        ),
    ]
    save_validations(runs, tmp_path, BASE)
    doc = json.loads((tmp_path / "validate.json").read_text())
    assert doc["schema"] == "tlt-validate/1" and [r["trace"] for r in doc["runs"]] == [
        "ngram",
        "none",
        "drifted",
    ]
    assert list(doc["runs"][0]["details"]) == VALIDATE_DETAILS
    assert list(doc["runs"][1]["details"]) == [
        k for k in VALIDATE_DETAILS if k != "schedule_overridden"
    ]
    assert doc["runs"][2]["details"]["schedule_overridden"] == [
        {"bucket": [1, 4], "schedule": 1, "traced": 4}
    ]
    assert runs[2].details.schedule_overridden[0].traced == 4
    assert (tmp_path / "validate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_validate_replays_lengths_and_schedule(traces):
    v = validate(BASE, traces["ngram"])
    d = v.details
    assert d.tokens_simulated == d.tokens_traced
    assert d.shards_match == 1.0 and d.drafter == "ngram" and d.schedule_overridden == []
    assert d.measured_basis == "rl_steps.rollout_s" and abs(d.span_vs_rollout_pct) < 1
    assert math.isfinite(v.error_pct) and v.error_pct == pytest.approx(
        100 * (v.predicted_rollout_s - v.measured_rollout_s) / v.measured_rollout_s)


def test_drafter_kind_comes_from_what_the_engine_ran():
    pol = {"name": "p", "drafter": {"kind": "eagle"}}
    assert (
        trace_drafter_kind({"policy": pol, "engine": {"speculative_config": {"method": "ngram"}}})
        == "ngram"
    )
    assert (
        trace_drafter_kind({"policy": pol, "engine": {"speculative_config": None, "drafter": None}})
        == "none"
    )
    assert (
        trace_drafter_kind(
            {"policy": pol, "engine": {"speculative_config": {"method": "eagle", "model": "/d"}}}
        )
        == "eagle"
    )
    assert trace_drafter_kind({"policy": pol, "engine": {"drafter": "/some/dir"}}) == "eagle"
