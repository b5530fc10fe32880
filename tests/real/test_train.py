"""`tlt train` end to end: Ray workers, spot drafter training, losslessness, kill and resume.

Runs are small (4-8 prompts, 2 workers, short caps) on the shipped reference model, and
shared through module-scoped fixtures: every run starts two vLLM engines.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from real.run.coordinator import RunConfig, TrainingRun, run_training
from workbench.contracts.policy import load_policy
from workbench.contracts.trace import load_trace

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]

SMALL = dict(steps=2, workers=2, seed=3, prompts=8, samples=2, max_tokens=384)


def _config(model: Path, policy: str, out: Path, **kw) -> RunConfig:
    return RunConfig(model=model, policy=load_policy(policy), out=out, **{**SMALL, **kw})


@pytest.fixture(scope="module")
def ray_local() -> str:
    """The module's own Ray (not another test's); its address, which the runs that must give the
    same outputs join (`tlt train --address`: each worker one torch thread, whatever the machine),
    so that no command-line run starts a Ray of its own."""
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def runs(ray_local, tmp_path_factory, reference_model, reference_drafter):
    """A sampled run of the paper's configuration on vLLM (tlt-vllm: the shipped drafter
    warm-started, start tables predicted on cpu-tiny) and a sampled baseline run, same model and
    seed (2 steps). The cold start (tlt-cold) runs in the switch test below."""
    from workbench.contracts.profile import load_profile
    from workbench.schedule import start_tables

    root = tmp_path_factory.mktemp("train")
    pol = load_policy("tlt-vllm")
    tables = {k: v.table for k, v in start_tables(pol, load_profile("cpu-tiny")).items()}
    tlt = RunConfig(model=reference_model, policy=pol, out=root / "tlt-vllm",
                    drafter=reference_drafter, start_tables=tables, **SMALL)
    return {
        "tlt-vllm": run_training(tlt, log=None),
        "baseline": run_training(_config(reference_model, "baseline", root / "baseline",
                                         address=ray_local), log=None),
    }


def test_warm_started_drafter_decodes_from_the_first_step_and_is_judged_against_itself_kept_static(
    runs,
):
    run = runs["tlt-vllm"]
    # The SD guard's probe decides before step 0 from timings (on the reference model SD wins by
    # 1.2-2.1x on a quiet machine; a machine loaded by other work can make it lose): the engines
    # start with the warm drafter unless the probe measured SD slower than a plain engine.
    probe = run.outputs.probe
    kept = probe.speedup * (1.0 + run.cfg.policy.drafter.switch_margin) >= 1.0
    assert run.metrics[0].drafter_kind == ("eagle" if kept else "none"), probe
    sd = [m for m in run.metrics if m.drafter_kind == "eagle"]
    assert all(m.mean_accept_len > 1.5 for m in sd), [m.mean_accept_len for m in sd]
    # Judged in an idle worker's time, or in the sync's after a step that ran SD: the drafter the
    # engines ran, n-gram and the shipped drafter never trained. At step 0 the first two are one
    # and the same drafter. With SD off from the probe on, only an idle worker that finished its
    # check before the rollout ended judges (none may, on a loaded machine).
    judged = [m for m in run.metrics if not math.isnan(m.eagle_est)]
    assert judged or all(m.drafter_kind == "none" for m in run.metrics), run.metrics
    assert all(1.0 <= m.static_est <= 9.0 and 1.0 <= m.ngram_est <= 9.0 for m in judged)
    first = run.metrics[0]
    if not math.isnan(first.eagle_est):
        assert first.eagle_est == pytest.approx(first.static_est)
    # The trace records the policy as written and, beside it, the table each bucket started at.
    meta = load_trace(run.out / "trace").meta
    assert meta["start_tables"]["eagle"] == list(run.cfg.start_tables["eagle"])
    assert meta["policy"]["bandit"]["algorithm"] == "climb"
    written = [r.draft_len for r in load_policy("tlt-vllm").schedule]
    assert [row["draft_len"] for row in meta["policy"]["schedule"]] == written


def test_the_guarded_run_prices_every_sd_rollout_against_a_plain_engine_it_measured(runs):
    """tlt-vllm is adaptive, so its workers measured a plain engine at start-up, from a batch of
    32 down to 1, the guard judged SD on a probe before step 0 (recorded in the trace), and every
    step that ran SD has its verdict; the baseline has none of these."""
    run = runs["tlt-vllm"]
    probe = run.outputs.probe
    assert probe is not None and probe.steps > 0 and probe.speedup > 0
    assert load_trace(run.out / "trace").meta["sd_probe"]["speedup"] == pytest.approx(probe.speedup)
    assert runs["baseline"].outputs.probe is None
    assert len(run.plain_rows) == 2
    for rows in run.plain_rows:
        sizes = {r.decode_requests for r in rows if r.prefill_requests == 0}
        assert 1 in sizes and max(sizes) > 16 and len(sizes) >= 16
    assert all(m.sd_speedup > 0 for m in run.metrics if m.drafter_kind != "none")
    assert runs["baseline"].plain_rows == [[], []] and all(
        math.isnan(m.sd_speedup) for m in runs["baseline"].metrics
    )


def test_two_ray_workers_spot_train_while_the_other_decodes(runs):
    run = runs["tlt-vllm"]
    trace = load_trace(run.out / "trace")
    tl = trace.timeline
    assert set(tl["worker"]) == {0, 1} and set(tl["rl_step"]) == {0, 1}
    overlaps = 0
    for step in (0, 1):
        s = tl[tl["rl_step"] == step]
        spot = s[s["state"] == "drafter_train"]
        for _, t in spot.iterrows():
            other = s[(s["worker"] != t["worker"]) & s["state"].isin(["decode", "decode_sd"])]
            overlaps += int(
                ((other["start_s"] < t["end_s"]) & (other["end_s"] > t["start_s"])).any()
            )
        # The rollout never waits for spot training: every trainer stopped by the time the
        # last decoder finished, plus its stop latency (one drafter step).
        last_decode = s[s["state"].isin(["decode", "decode_sd"])]["end_s"].max()
        m = run.metrics[step]
        if len(spot):
            assert spot["end_s"].max() <= last_decode + m.stop_latency_s + 0.5
            # An idle worker trains until it is stopped: a session without a drafter step was
            # stopped first (the window closed while it was still loading the new weights and
            # computing fresh hidden states, as on a busy machine), never one that did nothing.
            assert m.drafter_steps > 0 or not math.isnan(m.stop_latency_s), m
    assert overlaps >= 1, "an idle worker must train the drafter while the other still decodes"
    for m in run.metrics:
        assert (m.drafter_steps > 0) == (not math.isnan(m.drafter_loss)), m
    stopped = [m.stop_latency_s for m in run.metrics if not math.isnan(m.stop_latency_s)]
    # within one drafter step (~0.05-0.2 s here), not the rollout
    assert stopped and max(stopped) < 2.0, stopped
    # Outputs a user relies on: per-step metrics, the trace with its timeline, a servable drafter.
    assert list(run.outputs.metrics_frame()["rl_step"]) == [0, 1]
    assert (run.out / "metrics.csv").is_file()
    assert set(trace.requests["rl_step"]) == {0, 1} and len(trace.requests) == 2 * 8 * 2
    assert set(trace.steps["worker"]) == {0, 1}
    assert (run.out / "drafter" / "config.json").is_file()
    assert json.loads((run.out / "drafter" / "config.json").read_text())["architectures"] == [
        "EagleLlamaForCausalLM"
    ]


def test_sampled_rewards_agree_between_tlt_and_baseline(runs):
    """Same model, seed and prompts: SD changes which random numbers decide tokens, not their
    distribution, so rewards agree within sampling noise."""
    r = {name: load_trace(run.out / "trace").requests for name, run in runs.items()}
    means = {k: float(v["reward"].mean()) for k, v in r.items()}
    n = len(r["tlt-vllm"])
    pooled = (means["tlt-vllm"] + means["baseline"]) / 2
    se = math.sqrt(max(pooled * (1 - pooled), 0.05) * 2 / n)
    assert abs(means["tlt-vllm"] - means["baseline"]) < 3 * se, (means, se)
    assert sorted(r["tlt-vllm"]["request_id"]) == sorted(r["baseline"]["request_id"])
    # The reference model was built for the plain task: any style scores, so no style share.
    run = runs["baseline"]
    assert load_trace(run.out / "trace").meta["task_variant"] == "gcd"
    assert all(math.isnan(m.style_share) for m in run.metrics)


def test_switches_between_no_sd_ngram_and_eagle_inside_tlt_train_keep_greedy_outputs(
    ray_local, tmp_path, reference_model, monkeypatch
):
    """Real switches inside `tlt train`: the SD guard's probe before step 0 is handed a verdict that
    SD decoded at half a plain engine's speed, so every Ray worker restarts its vLLM engine without
    a drafter in set-up and steps 0-2 run plain; after step 2 n-gram estimates that predict SD wins
    bring n-gram back; after step 3 the rule is handed an EAGLE estimate above n-gram's and the
    engines restart with the (cold) learned drafter; after step 4 a losing verdict turns SD off
    again. The rules, the probe, the restarts and the run are production code; only the rules'
    inputs are forced (the real checks and verdicts still run, and must be finite). Greedy
    decoding: every step's responses are token for token what vLLM without SD gives for the same
    prompts. (Greedy groups have equal rewards, hence zero advantages: the weights stay the
    model's, and one plain engine is the baseline of all steps.)"""
    from real.rollout.engine import RolloutEngine
    from real.rollout.requests import Sampling
    from real.run import coordinator
    from real.run.records import DrafterCheck
    from real.run.sd_pricing import SDVerdict

    cfg = _config(
        reference_model,
        "tlt-cold",
        tmp_path / "tlt-cold",
        steps=5,
        temperature=0.0,
        prompts=4,
        max_tokens=256,
    )
    verdict = coordinator.rollout_verdict
    verdicts: list = []
    # the probe's, step 3's and step 4's (steps 0-2 ran without SD: not judged)
    forced_speedup = [0.5, 1.5, 0.5]

    def scripted_verdict(engines):
        verdicts.append(verdict(engines))
        return SDVerdict(sd_s=1.0, plain_s=forced_speedup[len(verdicts) - 1], steps=1)

    monkeypatch.setattr(coordinator, "rollout_verdict", scripted_verdict)
    run = TrainingRun(cfg, log=None).open()
    assert run.outputs.probe.speedup == 0.5
    assert run.engines.kind == "none" and run.engines.sd_off.kind == "ngram"
    seen: list = []
    update, check = run.trainer.step, run.check_drafters
    measured: list = []
    # Step 0's n-gram estimate is the reference (SD went off before any); steps 1-2 predict 0.5 x 5
    # / 1.
    forced = [
        DrafterCheck(eagle=1.0, ngram=1.0),
        DrafterCheck(eagle=1.0, ngram=5.0),
        DrafterCheck(eagle=1.0, ngram=5.0),
        DrafterCheck(eagle=2.0, ngram=1.0),
        DrafterCheck(1.0, 1.0),
    ]

    def record(batch, keep_hidden=True):
        seen.append([(r.prompt_ids, r.response_ids) for r in batch])
        return update(batch, keep_hidden=keep_hidden)

    def scripted(records, ro):
        measured.append(check(records, ro))
        return forced[len(measured) - 1]

    monkeypatch.setattr(run.trainer, "step", record)
    monkeypatch.setattr(run, "check_drafters", scripted)
    try:
        for _ in range(5):
            run.step()
    finally:
        run.close()
    assert [m.drafter_kind for m in run.metrics] == ["none", "none", "none", "ngram", "eagle"]
    # after step 4's losing verdict
    assert run.engines.kind == "none" and run.engines.sd_off.kind == "eagle"
    assert run.metrics[0].mean_accept_len == 1.0 and math.isnan(run.metrics[0].sd_speedup), (
        "no SD in step 0"
    )
    assert run.metrics[3].mean_accept_len > 1.0, "n-gram must have drafted"
    assert [m.sd_speedup for m in run.metrics[3:]] == [1.5, 0.5]
    k = 6  # the tlt preset's largest bandit arm: the draft length both drafters are judged at
    # While SD is off only an idle worker's check counts (the sync does not judge then).
    assert len(measured) == 5 and all(measured[i] is not None for i in (3, 4))
    assert all(
        1.0 <= c.eagle <= k + 1 and 1.0 <= c.ngram <= k + 1 for c in measured if c is not None
    )
    # The real verdicts of the probe and the SD steps, priced at the plain engine each worker
    # measured at start-up (None only if a worker's measurement gave no fit).
    assert len(verdicts) == 3 and all(
        v is None or (v.speedup > 0 and v.steps > 0) for v in verdicts
    )
    assert len(seen) == 5
    with RolloutEngine(reference_model, in_process=True, kv_cache_gib=0.25) as engine:
        for step, batch in enumerate(seen):
            prompts = [p for p, _ in batch]
            got = engine.generate(prompts, 1, Sampling(temperature=0.0, max_tokens=cfg.max_tokens))
            assert [g.samples[0].token_ids for g in got] == [r for _, r in batch], (
                f"step {step} differs from no SD"
            )


def _tlt_train(model: Path, out: Path, *extra: str) -> list[str]:
    exe = Path(sys.executable).with_name("tlt")
    return [
        str(exe),
        "train",
        "--model",
        str(model),
        "--policy",
        "baseline",
        "--out",
        str(out),
        "--steps",
        str(SMALL["steps"]),
        "--workers",
        str(SMALL["workers"]),
        "--seed",
        str(SMALL["seed"]),
        "--prompts",
        str(SMALL["prompts"]),
        "--samples",
        str(SMALL["samples"]),
        "--max-tokens",
        str(SMALL["max_tokens"]),
        *extra,
    ]


def test_resume_after_kill_loses_nothing(runs, ray_local, tmp_path, reference_model):
    """kill -9 the whole `tlt train` process group mid-run, resume: the finished step is kept
    and the run ends where an uninterrupted run with the same seed ends (baseline decoding is
    deterministic for a seed, so rewards must match request for request). Both commands join the
    module's Ray, as the uninterrupted run did: a killed driver's workers go with it."""
    out = tmp_path / "killed"
    env = {**os.environ, "RAY_ADDRESS": ""}
    proc = subprocess.Popen(
        _tlt_train(reference_model, out, "--address", ray_local),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    deadline = time.time() + 300
    try:
        while not (out / "LATEST").is_file():
            assert proc.poll() is None, "tlt train exited before its first checkpoint"
            assert time.time() < deadline, "no checkpoint within 5 minutes"
            time.sleep(0.2)
        time.sleep(0.5)  # inside step 1 now
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = (out / "metrics.csv").read_text().splitlines()
    assert len(before) == 2, "one finished step before the kill"
    done = subprocess.run(
        _tlt_train(reference_model, out, "--resume", "--address", ray_local),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after = (out / "metrics.csv").read_text().splitlines()
    assert len(after) == 3 and after[1] == before[1], "step 0's record must survive unchanged"
    resumed = load_trace(out / "trace").requests
    reference = load_trace(runs["baseline"].out / "trace").requests
    key = ["rl_step", "request_id"]
    assert len(resumed) == len(reference) and not resumed.duplicated(key).any()
    a = resumed.sort_values(key)[key + ["response_tokens", "reward"]].reset_index(drop=True)
    b = reference.sort_values(key)[key + ["response_tokens", "reward"]].reset_index(drop=True)
    assert a.equals(b), "the resumed run must generate exactly what the uninterrupted run did"


def test_validate_predicts_every_phase_of_a_real_run(runs):
    """`tlt validate RUN_DIR` re-simulates the whole run: per-phase and per-step rows, then the
    JSON."""
    from typer.testing import CliRunner

    from workbench.cli import app

    r = CliRunner().invoke(app, ["validate", "--profile", "cpu-tiny", str(runs["tlt-vllm"].out)])
    assert r.exit_code == 0, r.output
    assert "phase (mean per step)" in r.output and "held out" in r.output
    last = json.loads(r.output.strip().splitlines()[-1])
    assert (
        last["measured_step_s"] > 0
        and last["predicted_step_s"] > 0
        and math.isfinite(last["error_pct"])
    )
    assert set(last["phases"]) == {"rollout", "train", "sync", "other", "step"}
    assert (
        last["phases"]["rollout"]["measured_s"] > 0 and last["phases"]["train"]["predicted_s"] > 0
    )


def test_bench_prediction_from_real_runs(runs):
    """Run-level parameters fitted on the baseline run (in-sample for it, held out for tlt-vllm),
    then both runs predicted: finite speedups, and every parameter row says how it was set."""
    from workbench.validate.bench_prediction import predict_bench
    from workbench.calibrate.captures.runs import fit_runs
    from workbench.contracts.profile import load_profile

    fit = fit_runs([runs["baseline"].out], load_profile("cpu-tiny"))
    assert all(row[3] for row in fit.table_rows())
    assert {p.key: p for p in fit.params}["phases.train_gpu_s_per_token"].fitted
    b = predict_bench(
        {"baseline": runs["baseline"].out, "tlt-vllm": runs["tlt-vllm"].out},
        fit.profile,
        "baseline",
    )
    rows = {r.name: r for r in b.rows}
    assert rows["baseline"].in_sample and not rows["tlt-vllm"].in_sample
    t = rows["tlt-vllm"]
    assert all(
        math.isfinite(v) and v > 0
        for v in (
            t.predicted_step_s,
            t.measured_step_s,
            t.predicted_speedup_step,
            t.measured_speedup_step,
            t.predicted_speedup_rollout,
        )
    )
    json.dumps(b.to_json())
    spot = fit_runs([runs["tlt-vllm"].out], load_profile("cpu-tiny"))
    assert {
        "learning.train_tokens_per_s",
        "acceptance.staleness_per_update",
        "learning.learn_tokens",
    } <= {p.key for p in spot.params}
