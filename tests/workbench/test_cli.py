"""The `tlt` command line: what a user runs and the files it leaves."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from workbench.cli import app

runner = CliRunner()


def test_sim_writes_summary_metrics_and_timelines(tmp_path):
    out = tmp_path / "s"
    res = runner.invoke(app, ["sim", "--workload", "cpu-tiny", "--policy", "baseline,static-sd,tlt",
                              "--steps", "2", "--seed", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workload"] == "cpu-tiny" and summary["seed"] == 1
    assert list(summary["policies"]) == ["baseline", "static-sd", "tlt"]
    for name, entry in summary["policies"].items():
        assert set(entry) == {
            "step_time_s",
            "rollout_time_s",
            "bubble_fraction",
            "tail_fraction",
            "mean_accept_len",
            "speedup_vs_first",
            "why",
            "interval",
        }
        assert entry["why"]["speedup"] == pytest.approx(entry["speedup_vs_first"])
        iv = entry["interval"]["speedup"]  # cpu-tiny's fit error, the acceptance, the 2 steps
        assert iv["low"] <= iv["value"] <= iv["high"] and iv["level"] == 0.9
        metrics = json.loads((out / name / "metrics.json").read_text())
        assert len(metrics["steps"]) == 2
        timeline = pd.read_parquet(out / name / "timeline.parquet")
        assert {"worker", "start_s", "end_s", "state"} <= set(timeline.columns)
    assert summary["policies"]["baseline"]["speedup_vs_first"] == 1.0
    assert summary["policies"]["baseline"]["mean_accept_len"] == 1.0
    assert summary["policies"]["static-sd"]["mean_accept_len"] > 1.0
    assert "speedup" in res.stdout
    # Why each speedup: a table and one sentence per policy, generated from its numbers.
    why = summary["policies"]["tlt"]["why"]
    assert why["sentence"] in res.stdout.replace("\n  ", " ") or why["sentence"][:60] in res.stdout
    assert why["sd_batch"] == 32 and "batch" in why["sentence"]
    assert "%" in res.stdout.split("why each speedup")[0]  # bubble and tail as percentages


def test_sim_is_reproducible(tmp_path):
    args = ["sim", "--workload", "cpu-tiny", "--policy", "tlt", "--steps", "2", "--seed", "7"]
    runner.invoke(app, args + ["--out", str(tmp_path / "a")])
    runner.invoke(app, args + ["--out", str(tmp_path / "b")])
    assert (tmp_path / "a" / "summary.json").read_text() == (
        tmp_path / "b" / "summary.json"
    ).read_text()


def test_bad_policy_file_fails_cleanly_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nsd_threshold: 8\nschedule: [[1, 8, 4]]\nbandit: {algorithm: beg, epsilon: "
        "1.5}\ndrafter: {kind: eagle}\n"
    )
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["sim", "--workload", "cpu-tiny", "--policy", f"baseline,{bad}", "--out", str(out)]
    )
    assert res.exit_code == 2
    assert str(bad) in res.output and "bandit.epsilon" in res.output and "1.5" in res.output
    assert not out.exists()


def test_unknown_preset_names_the_choices(tmp_path):
    res = runner.invoke(
        app, ["sim", "--workload", "no-such-workload", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2
    assert "fastrl-example-7b-8gpu" in res.output


def test_duplicate_policy_names_are_refused(tmp_path):
    res = runner.invoke(
        app, ["sim", "--workload", "cpu-tiny", "--policy", "tlt,tlt", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "tlt" in res.output


def test_check_prints_the_file_with_defaults(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(
        json.dumps(
            {
                "name": "mine",
                "sd_threshold": 4,
                "schedule": [[1, 4, 2]],
                "drafter": {"kind": "ngram"},
            }
        )
    )
    res = runner.invoke(app, ["check", "policy", str(f)])
    assert res.exit_code == 0, res.output
    assert "decision_interval" in res.stdout and "name: mine" in res.stdout


def test_bench_sim_ends_with_json(tmp_path):
    res = runner.invoke(app, ["bench", "sim", "--workload", "cpu-tiny", "--steps", "1"])
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["seconds_per_step"] > 0 and last["workload"] == "cpu-tiny"


def test_a_file_that_is_not_utf8_gets_a_clear_error(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_bytes(bytes(range(128, 256)) * 2)
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["sim", "--workload", "cpu-tiny", "--policy", str(bad), "--out", str(out)]
    )
    assert res.exit_code == 2
    assert str(bad) in res.output and "UTF-8" in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_a_workload_far_too_large_is_refused_before_it_starts(tmp_path):
    huge = tmp_path / "huge.yaml"
    huge.write_text(
        "name: huge\nprofile: h100-qwen2.5-7b-tp4\ngpus_per_worker: 4\nworkers: 100000\n"
        "prompts_per_step: 10000000\n"
        "group_size: 8\nmax_response_tokens: 32768\n"
    )
    out = tmp_path / "out"
    for args in (
        ["sim", "--policy", "baseline"],
        ["compare", "--seeds", "1"],
        ["tune", "--trials", "1"],
    ):
        dest = ["--out", str(out / "tuned.yaml")] if args[0] == "tune" else ["--out", str(out)]
        res = runner.invoke(app, [*args, "--workload", str(huge), *dest])
        assert res.exit_code == 2, res.output
        assert (
            "huge" in res.output
            and "TLT_SIM_MAX_WORK" in res.output
            and "prompts_per_step" in res.output
        )
    assert not out.exists()


def test_every_policy_preset_runs_in_tlt_sim(tmp_path):
    from workbench.contracts.policy import policy_presets

    names = policy_presets()
    assert {"async-1", "async-4", "history-sd", "tlt-async-1", "tlt-partial", "tlt", "tlt-base",
            "tlt-cold"} <= set(names)
    res = runner.invoke(
        app,
        [
            "sim",
            "--workload",
            "tlt-eval-qwen2.5-7b",
            "--policy",
            ",".join(names),
            "--steps",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["policies"]) == names


def test_presets_long_shows_where_each_presets_numbers_come_from():
    res = runner.invoke(app, ["presets", "--long"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "polytrace-dapo-qwen2.5-32b A real DAPO run of Qwen2.5-32B" in text
    assert "fastrl-example-7b-8gpu FastRL's example shape" in text and "hand-set" in text
    assert (
        "measured (measured database)" in text and "source: built by: tlt workload import" in text
    )
    assert "--long" in runner.invoke(app, ["presets"]).output


def test_a_renamed_preset_still_loads_with_a_notice(tmp_path):
    res = runner.invoke(app, ["check", "workload", "paper-7b-8gpu"])
    assert res.exit_code == 0, res.output
    assert "notice: workload preset 'paper-7b-8gpu' is now 'fastrl-example-7b-8gpu'" in res.output
    assert "name: fastrl-example-7b-8gpu" in res.output
