"""Calibrating on a real veRL log: the declared split (held-out steps never reach the fit), each
step's prediction a simulation of it, the files `tlt calibrate --run-log` writes, `tlt validate
--run-log` on the second real log, and `tlt compare` on the calibrated run.

Excerpts of the shipped logs (traces/published/verl-runs/) keep the simulations short."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from sim.simulator import simulate
from workbench.calibrate.database.profile import derive_profile
from workbench.cli import app
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.runlog import calibrate as cal
from workbench.runlog import engine
from workbench.runlog.prepared import prepare
from workbench.runlog.shape import ShapeFlags

FIT, STEPS = 24, 32


def excerpt(src, dest, steps: int, scale_after: int | None = None) -> None:
    """The log up to its `steps`-th step line; with `scale_after`, every later step's rollout time
    and length statistics tripled (what a held-out step says must not move the fit)."""
    out, seen = [], 0
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("step:"):
                seen += 1
                if seen > steps:
                    break
                if scale_after is not None and seen > scale_after:
                    parts = []
                    for part in line.rstrip("\n").split(" - "):
                        key, _, value = part.partition(":")
                        if key in ("timing_s/gen", "response_length/mean", "prompt_length/mean"):
                            value = f"{3 * float(value):.3f}"
                        parts.append(f"{key}:{value}")
                    line = " - ".join(parts) + "\n"
            out.append(line)
    dest.write_text("".join(out), encoding="utf-8")


@pytest.fixture(scope="module")
def runs(repo_root, tmp_path_factory):
    src = repo_root / "traces" / "published" / "verl-runs"
    d = tmp_path_factory.mktemp("runlogs")
    excerpt(src / "grpo_run_deepseek7b_llm.log.gz", d / "grpo.log", STEPS)
    excerpt(
        src / "grpo_run_deepseek7b_llm.log.gz", d / "grpo-perturbed.log", STEPS, scale_after=FIT
    )
    excerpt(src / "ppo_run_deepseek7b_llm.log.gz", d / "ppo.log", 16)
    return d


@pytest.fixture(autouse=True)
def _profile_cache(tmp_path_factory, monkeypatch):
    """Derived database profiles kept for this module only (not in the user's cache)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "runlog-cache"))


@pytest.fixture(scope="module")
def grpo(runs):
    return prepare(runs / "grpo.log", ShapeFlags(gpu="h100"), fit_steps=FIT)


def test_held_out_steps_never_reach_the_fit(runs, grpo):
    """Tripling the held-out steps' rollout times and length statistics leaves the factors as they
    were."""
    perturbed = prepare(runs / "grpo-perturbed.log", ShapeFlags(gpu="h100"), fit_steps=FIT)
    a, b = cal.calibrate(grpo, FIT, "a"), cal.calibrate(perturbed, FIT, "a")
    fa, fb = a.profile.run_factors, b.profile.run_factors
    assert replace(fa, fitted_on="") == replace(fb, fitted_on="")
    np.testing.assert_array_equal(a.posterior.draws, b.posterior.draws)
    assert not np.allclose(
        a.predicted.gen_s[FIT:], b.predicted.gen_s[FIT:]
    )  # the held-out steps did change
    np.testing.assert_array_equal(a.predicted.gen_s[:FIT], b.predicted.gen_s[:FIT])


def test_each_prediction_is_the_fitted_profile_s_simulation_of_that_step(grpo):
    """The rollout's closed-form work priced with the factors is the calibrated profile's
    simulation of that step; the update, held by the simulator as a fixed part and a part per
    token (its one training phase), comes out within the straight line's fit."""
    c = cal.calibrate(grpo, FIT, "fitted")
    f = c.profile.run_factors
    wl = engine.run_workload(grpo.shape, grpo.lengths, "run", c.profile.name)
    for i in (0, FIT + 3):
        w = replace(wl, prompt_tokens=int(grpo.lengths.prompt_tokens[i]))
        m = simulate(
            w, load_policy("baseline"), c.profile, steps=1, replay=[grpo.lengths.lengths[i]]
        ).steps[0]
        # the profile holds each cost to 5 significant digits (sig): the two agree to that
        assert m.rollout_time_s + f.rl_step_s == pytest.approx(c.predicted.gen_s[i], rel=1e-4)
        update = m.train_time_s + m.sync_time_s - f.rl_step_s
        assert update == pytest.approx(c.predicted.update_s[i], rel=0.03)


def test_the_calibration_beats_holding_the_first_steps_constant(grpo):
    c = cal.calibrate(grpo, FIT, "fitted")
    assert c.heldout.gen.steps == STEPS - FIT
    assert c.heldout.gen.median < c.baselines.first_median.median
    f = c.profile.run_factors
    assert f.decode_speed > 0 and f.train_speed > 0


def test_calibrate_validate_and_compare_from_the_command_line(runs, tmp_path):
    out, wl = tmp_path / "p.yaml", tmp_path / "w.yaml"
    cli = CliRunner()
    res = cli.invoke(
        app,
        [
            "calibrate",
            "--run-log",
            str(runs / "grpo.log"),
            "--fit-steps",
            str(FIT),
            "--gpu",
            "h100",
            "--out",
            str(out),
            "--workload-out",
            str(wl),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output.strip().splitlines()[-1])
    for key in (
        "gen_heldout_median_abs_error_pct",
        "step_heldout_median_abs_error_pct",
        "gen_heldout_p90_abs_error_pct",
        "update_heldout_median_abs_error_pct",
    ):
        assert summary[key] is not None
    assert (
        "tp                   2" in res.output
        and "<- log: actor_rollout_ref.rollout.tensor" in res.output
    )
    prof = load_profile(out)
    assert prof.run_factors is not None and prof.fitted_on[0].startswith(
        "runlog:grpo.log: its first 24 timed steps"
    )
    assert out.with_suffix(".png").is_file() and (tmp_path / "p.runlog.json").is_file()

    res = cli.invoke(
        app,
        [
            "validate",
            "--run-log",
            str(runs / "ppo.log"),
            "--profile",
            str(out),
            "--group-size",
            "1",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    assert res.exit_code == 0, res.output
    v = json.loads(res.output.strip().splitlines()[-1])
    assert v["steps"] == 16 and not v["in_sample"]
    assert v["gen_median_abs_error_pct"] is not None and v["step_median_abs_error_pct"] is not None
    assert "h100-deepseek-llm-7b-chat-tp4-vllm" in res.output  # the engine derived again for TP4

    res = cli.invoke(
        app,
        [
            "compare",
            "--workload",
            str(wl),
            "--policies",
            "baseline,tlt-base",
            "--seeds",
            "1",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "measured (the run's log" in res.output and "modelled, not in the log" in res.output
    # every speedup and time with its interval, and what the sample simulated
    assert "tlt-base 1." in res.output and "90%:" in res.output
    assert "simulated: 1 steps" in res.output
    c = json.loads((tmp_path / "c" / "compare.json").read_text())
    iv = c["policies"]["tlt-base"]["interval"]["speedup"]
    assert iv["low"] <= iv["value"] <= iv["high"] and iv["level"] == 0.9
    res = cli.invoke(app, ["sim", "--workload", str(wl), "--policy", "baseline,tlt-base",
                           "--steps", "1", "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert "its calibrated costs (a run log's posterior)" in res.output and "90%:" in res.output


def test_the_database_says_what_it_does_without_rows_for_32_kv_heads():
    src = derive_profile(
        "deepseek-llm-7b-chat", "h100", 2, "vllm", load_profile("h100-qwen2.5-7b-tp1"), "x"
    ).profile
    assert "reaches context ;" not in src.source and "infx" not in src.source
    assert "no decode attention rows for 16 KV heads per rank" in src.source
    assert "scaled by the head count" in src.source


def test_two_logs_of_one_cluster_share_the_factors(runs, tmp_path):
    """Fitted on both logs' first steps (each over its own engine), the second log is in sample for
    those steps and held out after them."""
    out = tmp_path / "both.yaml"
    cli = CliRunner()
    res = cli.invoke(
        app,
        [
            "calibrate",
            "--run-log",
            str(runs / "grpo.log"),
            "--run-log",
            f"{runs / 'ppo.log'}::group_size=1",
            "--fit-steps",
            "10",
            "--gpu",
            "h100",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output.strip().splitlines()[-1])
    assert [a["steps"] for a in summary["also"]] == [16]
    assert summary["also"][0]["gen_heldout_median_abs_error_pct"] is not None
    # leave one run out: each log predicted from the other's first steps alone
    loro = {x["log"]: x for x in summary["leave_one_out"]}
    assert loro["ppo.log"]["fitted_on"] == ["grpo.log"]
    assert loro["grpo.log"]["fitted_on"] == ["ppo.log"]
    for x in loro.values():
        assert x["gen_median_abs_error_pct"] is not None and 0 <= x["coverage"]["step_share"] <= 1
    assert "LEAVE ONE RUN OUT" in res.output
    assert len(load_profile(out).fitted_on) == 2 and (tmp_path / "both.ppo.png").is_file()
    res = cli.invoke(
        app, ["validate", "--run-log", f"{runs / 'ppo.log'}::group_size=1", "--profile", str(out)]
    )
    assert res.exit_code == 0, res.output
    v = json.loads(res.output.strip().splitlines()[-1])
    assert v["in_sample"] and v["gen_heldout_median_abs_error_pct"] is not None
    bad = cli.invoke(
        app,
        [
            "calibrate",
            "--run-log",
            f"{runs / 'ppo.log'}::groups=1",
            "--gpu",
            "h100",
            "--out",
            str(tmp_path / "x.yaml"),
        ],
    )
    assert bad.exit_code == 2 and "group_size" in bad.output and not (tmp_path / "x.yaml").exists()
