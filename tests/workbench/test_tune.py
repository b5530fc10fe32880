"""The tuner (`tlt tune`): it finds good policies, survives a kill, and writes files `tlt sim`
runs."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from workbench import tune
from workbench.cli import app
from workbench.contracts.policy import (
    BanditConfig,
    DrafterConfig,
    Policy,
    ScheduleBucket,
    load_policy,
)
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import from_mapping, save, to_mapping
from workbench.contracts.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def small():
    """fastrl-example-7b-8gpu cut to 16 prompts and 2 steps: the same long tail and costs, ~30 ms a
    simulation."""
    wl = replace(
        load_workload("fastrl-example-7b-8gpu"), name="paper-7b-small", prompts_per_step=16, steps=2
    )
    return wl, load_profile(wl.profile)


@pytest.fixture()
def small_file(small, tmp_path):
    path = tmp_path / "small.yaml"
    save(small[0], path)
    return path


def _complete(study: optuna.Study) -> dict[int, float]:
    return {t.number: t.values[0] for t in study.get_trials(states=(TrialState.COMPLETE,))}


def test_search_space_builds_only_valid_policies_that_round_trip(small):
    wl, _ = small
    for allow in (False, True):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
        seen = set()
        for _ in range(300):
            trial = study.ask()
            pol = tune.suggest_policy(trial, wl, allow_warm_start=allow)
            pol.check()
            assert from_mapping(Policy, to_mapping(pol)) == pol
            assert pol.sd_threshold <= wl.max_batch
            assert allow or not pol.drafter.warm_start
            if pol.uses_sd:
                assert (
                    pol.schedule[0].min_batch == 1
                    and pol.schedule[-1].max_batch == pol.sd_threshold
                )
            seen.add((pol.drafter.kind, pol.bandit.algorithm, pol.drafter.warm_start))
            study.tell(trial, 0.0)
        assert {k for k, _, _ in seen} == {"none", "ngram", "eagle", "suffix"}
        assert {a for k, a, _ in seen if k != "none"} == set(tune.ALGORITHMS)
        assert any(w for _, _, w in seen) == allow


def test_the_real_space_never_yields_a_policy_the_real_backend_refuses(small):
    """`target="tlt-train"`: over many sampled trials, every policy passes `tlt train`'s own check
    (real/run/config.py -> refuse_unrunnable); the simulator's space, sampled the same way, does
    hold policies it refuses (EAGLE trees, suffix drafts), so the check can fail."""
    from real.rollout.spec_config import EngineConfigError, refuse_unrunnable

    wl, _ = small
    refused = {}
    for target in ("sim", "tlt-train"):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
        refused[target] = 0
        for _ in range(400):
            trial = study.ask()
            pol = tune.suggest_policy(trial, wl, allow_warm_start=True, target=target)
            try:
                refuse_unrunnable(pol)
            except EngineConfigError:
                refused[target] += 1
                assert tune.refusal(pol, "tlt-train") and tune.refusal(pol, "sim") is None
            study.tell(trial, 0.0)
    assert refused["tlt-train"] == 0 and refused["sim"] > 20, refused


def test_the_target_is_part_of_the_study_and_auto_follows_the_profile(small):
    wl, prof = small
    assert tune.default_target(prof, wl) == "sglang"  # the workload's engine
    assert tune.default_target(load_profile("cpu-tiny")) == "tlt-train"  # calibrated on real traces
    with pytest.raises(ValueError, match="target 'gpu'"):
        tune.TuneSpec(wl, prof, target="gpu")
    # EAGLE trees (the paper's 8_4_16 here) lie in the simulator's space, not in the real backend's.
    tree = Policy(
        name="t",
        sd_threshold=32,
        schedule=(ScheduleBucket(1, 4, 8, topk=4, tokens=16), ScheduleBucket(5, 32, 3)),
        bandit=BanditConfig(algorithm="fixed"),
        drafter=DrafterConfig(kind="eagle"),
    )
    assert tune.params_for(tree, wl, target="sim") == {
        "drafter": "eagle",
        "sd_threshold": 32,
        "bandit": "fixed",
        **{f"edge_{p}": p == 4 for p in (1, 2, 4, 8, 16)},
        "tree_4": "8_4_16",
        "tree_32": "chain",
        "draft_len_32": 3,
        "ngram_fallback": False,
        "training": False,
    }
    assert tune.params_for(tree, wl, target="tlt-train") is None
    assert (
        tune.params_for(
            replace(tree, schedule=(ScheduleBucket(1, 4, 8), ScheduleBucket(5, 32, 3))),
            wl,
            target="tlt-train",
        )
        is not None
    )
    store = optuna.storages.InMemoryStorage()
    tune.open_study(tune.TuneSpec(wl, prof, seeds=1, target="tlt-train"), "b", store)
    with pytest.raises(Exception, match="target was 'tlt-train', now 'sim'"):
        tune.open_study(tune.TuneSpec(wl, prof, seeds=1, target="sim"), "b", store)


def test_presets_in_the_space_are_enqueued_and_warm_start_is_not_by_default(small):
    wl, _ = small
    assert tune.params_for(load_policy("baseline"), wl) == {"drafter": "none"}
    assert tune.params_for(load_policy("tlt-cold"), wl) is not None
    assert tune.params_for(load_policy("tlt"), wl) is None  # bucket edges 4, 20: not powers of two
    # Warm start: outside the default space.
    assert tune.params_for(load_policy("static-sd"), wl) is None
    assert tune.params_for(load_policy("static-sd"), wl, allow_warm_start=True) is not None


def test_tuner_beats_the_best_preset_on_the_same_seeds(small):
    wl, prof = small
    # Warm start allowed: every preset lies in the space, so each is one of the first trials. No
    # pruning:
    # every trial scored on both seeds (pruning: test_hopeless_trials_are_pruned_after_a_seed).
    spec = tune.TuneSpec(wl, prof, seeds=2, allow_warm_start=True, prune=False)
    study = tune.open_study(spec, "beat-presets", storage=None, sampler_seed=0)
    tune.run_study(study, spec, 40)
    assert len(_complete(study)) == 40

    table = tune.comparison_frame(spec, tune.best_policy(study)).set_index("policy")
    tuned = table.loc[f"tuned-{study.study_name}", "step_time_s"]
    best_preset = table.loc[list(tune.PRESETS), "step_time_s"].min()
    assert tuned <= best_preset, table
    # Common random numbers: re-simulating the tuned policy gives exactly the trial's score,
    # and each enqueued preset scored what the table's fresh simulation says (a preset the SD
    # guard changed, workbench/tune/guard.py: what its guarded policy's simulation says).
    assert tuned == pytest.approx(tune.best_trial(study).value, rel=1e-12)
    for t in study.trials:
        if "preset" in t.user_attrs and "sd_guard" not in t.user_attrs:
            assert t.value == pytest.approx(
                table.loc[t.user_attrs["preset"], "step_time_s"], rel=1e-12
            )
        elif "preset" in t.user_attrs:
            guarded = tune.policy_of(t, t.user_attrs["preset"])
            assert t.value == pytest.approx(
                tune.evaluate(wl, guarded, prof, spec.seed_list).step_time_s, rel=1e-12)

    conv = tune.convergence_frame(study)
    assert list(conv["trial"]) == list(range(40))
    assert conv["best_so_far"].is_monotonic_decreasing
    assert conv["best_so_far"].iloc[-1] == pytest.approx(tuned, rel=1e-12)


def test_hopeless_trials_are_pruned_after_a_seed_and_count_towards_the_study(small):
    wl, prof = small
    spec = tune.TuneSpec(wl, prof, seeds=3, target="sim")
    study = tune.open_study(spec, "pruned", storage=None, sampler_seed=0)
    out = io.StringIO()
    tune.run_study(study, spec, 30, [tune.TrialPrinter(30, stream=out)])
    pruned = [t for t in study.trials if "pruned_after" in t.user_attrs]
    assert len(tune.finished_trials(study)) == 30 and pruned
    for t in pruned:
        k = t.user_attrs["pruned_after"]
        assert t.state == TrialState.PRUNED and 1 <= k < 3 and "preset" not in t.user_attrs
        # Behind by more than the margin on the seeds it ran, against a trial that completed before
        # it.
        best = min(
            (c for c in study.trials if c.state == TrialState.COMPLETE and c.number < t.number),
            key=lambda c: sum(c.user_attrs["per_seed_step_time_s"][:k]),
        )
        ran = t.user_attrs["per_seed_step_time_s"]
        assert len(ran) == k and sum(ran) > (1 + tune.PRUNE_MARGIN) * sum(
            best.user_attrs["per_seed_step_time_s"][:k]
        )
    assert "pruned (over 10% behind the best)" in out.getvalue()


def test_a_fresh_study_replays_from_its_sampler_seed_and_prints_each_trial(small):
    """The sampler is seeded from (sampler seed, trials already in the study): a fresh study with
    the same seed samples the same trials; TrialPrinter prints one line per finished trial."""
    wl, prof = small
    spec = tune.TuneSpec(wl, prof, seeds=1)
    sampled, out = {}, io.StringIO()
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        study = tune.open_study(spec, name, storage=None, sampler_seed=seed)
        tune.run_study(study, spec, 6, [tune.TrialPrinter(6, stream=out)] if name == "a" else [])
        sampled[name] = [t.params for t in study.trials]
    assert sampled["a"] == sampled["b"]
    assert sampled["a"][:2] == sampled["c"][:2]  # the enqueued presets
    assert sampled["a"] != sampled["c"]
    lines = out.getvalue().splitlines()
    assert (
        len(lines) == 6
        and lines[0].startswith("trial 1/6 (#0, ")
        and "[preset baseline]" in lines[0]
    )
    assert lines[-1].startswith("trial 6/6 (#5, ")


def test_multi_objective_front_is_non_dominated(small):
    wl, prof = small
    spec = tune.TuneSpec(wl, prof, seeds=1, multi_objective=True)
    study = tune.open_study(spec, "mo", storage=None, sampler_seed=0)
    tune.run_study(study, spec, 25)
    front = tune.pareto_frame(study)
    assert len(front) >= 1
    pts = list(zip(front["step_time_s"], front["train_gpu_s"]))
    for i, (s, g) in enumerate(pts):
        for j, (s2, g2) in enumerate(pts):
            assert i == j or not (s2 <= s and g2 <= g and (s2 < s or g2 < g)), front
    # Every trial is weakly dominated by a point of the front.
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        assert any(s <= t.values[0] and g <= t.values[1] for s, g in pts)
    # The written policy is the fastest point of the front.
    assert tune.best_policy(study).name == "tuned-mo"
    assert tune.best_trial(study).values[0] == pytest.approx(front["step_time_s"].min())


def test_written_policy_loads_and_runs_in_tlt_sim_unchanged(small_file, tmp_path):
    db = f"sqlite:///{tmp_path / 'studies.db'}"
    out = tmp_path / "tuned.yaml"
    res = runner.invoke(
        app,
        [
            "tune",
            "--workload",
            str(small_file),
            "--trials",
            "8",
            "--seeds",
            "1",
            "--storage",
            db,
            "--study",
            "rt",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "tuned-rt" in res.stdout and "baseline" in res.stdout and "speedup" in res.stdout

    study = optuna.load_study(study_name="rt", storage=db)
    loaded = load_policy(out)
    assert loaded.name == "tuned-rt"
    best = tune.best_trial(study)
    assert replace(loaded, name="x", description="") == replace(
        tune.policy_of(best), name="x", description=""
    )

    sim_out = tmp_path / "sim"
    res = runner.invoke(app, ["sim", "--workload", str(small_file), "--policy", f"baseline,{out}",
                              "--seed", "0", "--out", str(sim_out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((sim_out / "summary.json").read_text())
    # One seed (0), the workload's steps: `tlt sim` reproduces the trial's score exactly.
    assert summary["policies"]["tuned-rt"]["step_time_s"] == pytest.approx(best.value, rel=1e-12)


def test_bad_inputs_exit_2(small_file, tmp_path):
    db = f"sqlite:///{tmp_path / 'studies.db'}"
    base = ["tune", "--trials", "2", "--seeds", "1", "--storage", db]
    res = runner.invoke(
        app, base + ["--workload", "no-such-workload", "--out", str(tmp_path / "p.yaml")]
    )
    assert res.exit_code == 2 and "no-such-workload" in res.output
    res = runner.invoke(
        app, base + ["--workload", str(small_file), "--out", str(tmp_path / "p.txt")]
    )
    assert res.exit_code == 2 and "--out" in res.output
    res = runner.invoke(
        app,
        base + ["--workload", str(small_file), "--study", "s", "--out", str(tmp_path / "p.yaml")],
    )
    assert res.exit_code == 0, res.output
    # The same study with other seeds would mix incomparable scores: refused.
    res = runner.invoke(
        app,
        [
            "tune",
            "--trials",
            "4",
            "--seeds",
            "2",
            "--storage",
            db,
            "--workload",
            str(small_file),
            "--study",
            "s",
            "--out",
            str(tmp_path / "p.yaml"),
        ],
    )
    assert res.exit_code == 2 and "seeds" in res.output
    res = runner.invoke(app, base + ["--workload", str(small_file), "--target", "gpu", "--out",
                                     str(tmp_path / "q.yaml")])
    assert (
        res.exit_code == 2
        and "--target" in res.output
        and "auto, vllm, sglang, verl, tlt-train, sim" in res.output
    )
    # The same study for another target's space: refused, naming the target.
    res = runner.invoke(
        app,
        base
        + [
            "--workload",
            str(small_file),
            "--study",
            "s",
            "--target",
            "tlt-train",
            "--out",
            str(tmp_path / "q.yaml"),
        ],
    )
    assert res.exit_code == 2 and "target was 'sglang', now 'tlt-train'" in res.output
    assert not (tmp_path / "p.txt").exists() and not (tmp_path / "q.yaml").exists()


def _tune_cmd(workload: Path, db: str, trials: int, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "workbench.cli",
        "tune",
        "--workload",
        str(workload),
        "--trials",
        str(trials),
        "--seeds",
        "1",
        "--storage",
        db,
        "--study",
        "killed",
        "--out",
        str(out),
    ]


def test_killed_study_resumes_without_losing_finished_trials(small_file, tmp_path):
    db = f"sqlite:///{tmp_path / 'studies.db'}"
    out = tmp_path / "tuned.yaml"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_tune_cmd(small_file, db, 10_000, out), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240  # generous: a busy 2-core machine starts Python slowly
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no 3 complete trials within 240 s"
            try:
                if len(_complete(optuna.load_study(study_name="killed", storage=db))) >= 3:
                    break
            except KeyError:  # the study does not exist yet
                pass
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # no handler, no cleanup: as abrupt as a crash
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()

    before = _complete(optuna.load_study(study_name="killed", storage=db))
    assert len(before) >= 3
    total = len(before) + 4
    res = subprocess.run(
        _tune_cmd(small_file, db, total, out),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert f"{len(before)} trials done, running 4 more" in res.stderr

    after = _complete(optuna.load_study(study_name="killed", storage=db))
    assert len(after) == total
    assert {n: after[n] for n in before} == before  # finished trials kept, values unchanged
    assert load_policy(out).name == "tuned-killed"


def test_tune_page_runs_a_study_and_offers_the_policy():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    def page():
        from workbench.ui import tune_page

        tune_page.render()

    at = AppTest.from_function(page, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    at.selectbox(key="tune_wl").set_value("cpu-tiny").run()
    at.number_input(key="tune_trials").set_value(10)
    at.number_input(key="tune_seeds").set_value(1)
    at.text_input(key="tune_storage").set_value("memory")
    at.toggle(key="tune_multi").set_value(True)
    at.run()
    at.button(key="tune_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    res = at.session_state["tune_result"]
    assert len(res.convergence) == 10 and len(res.pareto) >= 1
    assert len(at.get("plotly_chart")) == 2  # convergence and the Pareto front
    tables = [d.value for d in at.dataframe]
    assert any(
        "policy" in t.columns and list(t["policy"]) == [*tune.PRESETS, res.best.name]
        for t in tables
    ), tables
    assert any(m.label == "Speedup vs baseline" for m in at.metric)
    assert at.get("download_button")
