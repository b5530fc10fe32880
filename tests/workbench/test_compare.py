"""`tlt compare` and workbench.compare.policies: policies over seeds, with their spread."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.simulator import simulate
from workbench.cli import app
from workbench.compare.policies import GPU_STATES, METRICS, compare, summarize_runs, summary_frame
from workbench.contracts.policy import load_policy, policy_presets
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.contracts.timeline import rollout_split
from workbench.validate.waste import timeline_waste, waste_frame

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STATS = {"mean", "std", "min", "max", "ci95"}


def _compare(out, seeds="3", policies="baseline,static-sd,tlt"):
    return runner.invoke(
        app,
        [
            "compare",
            "--workload",
            "cpu-tiny",
            "--policies",
            policies,
            "--seeds",
            seeds,
            "--steps",
            "2",
            "--out",
            str(out),
        ],
    )


def test_compare_writes_json_and_png(tmp_path):
    out = tmp_path / "c"
    res = _compare(out)
    assert res.exit_code == 0, res.output
    assert (out / "compare.png").read_bytes()[:8] == PNG_MAGIC
    data = json.loads((out / "compare.json").read_text())
    assert data["workload"] == "cpu-tiny" and data["seeds"] == [0, 1, 2] and data["steps"] == 2
    assert data["reference_policy"] == "baseline" and data["common_random_numbers"] is True
    assert list(data["policies"]) == ["baseline", "static-sd", "tlt"]
    for name, entry in data["policies"].items():
        for metric in ("step_time_s", "rollout_time_s", "bubble_fraction", "mean_accept_len"):
            assert set(entry[metric]) == STATS, (name, metric)
            assert entry[metric]["min"] <= entry[metric]["mean"] <= entry[metric]["max"]
            assert entry[metric]["std"] >= 0 and entry[metric]["ci95"] >= 0
        assert [s["seed"] for s in entry["per_seed"]] == [0, 1, 2]
        paired = entry["speedup_vs_first"]["paired"]
        assert set(paired) == STATS
    base = data["policies"]["baseline"]
    assert base["speedup_vs_first"]["ratio_of_means"] == 1.0
    assert (
        base["speedup_vs_first"]["paired"]["mean"] == 1.0
        and base["speedup_vs_first"]["paired"]["std"] == 0.0
    )
    tlt = data["policies"]["tlt"]
    # The speedup is the ratio of mean step times (on the calibrated cpu-tiny profile SD barely
    # pays, so its sign is the profile's business, not compare's).
    assert tlt["speedup_vs_first"]["ratio_of_means"] == pytest.approx(
        base["step_time_s"]["mean"] / tlt["step_time_s"]["mean"], rel=1e-3)
    # The step-time spread is real: seeds draw different lengths.
    assert base["step_time_s"]["std"] > 0
    assert "speedup" in res.stdout and "tlt" in res.stdout
    assert not list(out.glob(".*")), "no temp files left behind"


def test_same_seeds_same_json(tmp_path):
    assert _compare(tmp_path / "a", seeds="2").exit_code == 0
    assert _compare(tmp_path / "b", seeds="2").exit_code == 0
    assert (tmp_path / "a" / "compare.json").read_text() == (
        tmp_path / "b" / "compare.json"
    ).read_text()


def test_bad_policy_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "o"
    res = _compare(out, policies="baseline,no-such-policy")
    assert res.exit_code == 2
    assert "no-such-policy" in res.output and "baseline" in res.output
    assert not out.exists()


def test_summary_paired_speedups_and_any_policy():
    """compare() only runs the simulator: every preset (april, rollpacker included) goes through."""
    wl = load_workload("cpu-tiny")
    names = policy_presets()
    result = compare(
        wl, [load_policy(n) for n in names], load_profile(wl.profile), seeds=2, steps=2
    )
    assert list(result.runs.columns) == ["policy", "seed", *METRICS, *GPU_STATES]
    assert len(result.runs) == 2 * len(names)
    s = result.summary()
    assert list(s.index) == names
    assert s.loc[names[0], "speedup"] == 1.0
    for name in names:
        per_seed = result.paired_speedups(name)
        assert s.loc[name, "speedup_paired_min"] == pytest.approx(per_seed.min())
        assert s.loc[name, "speedup_paired_max"] == pytest.approx(per_seed.max())
    fig = result.figure()
    assert len(fig.axes) == 4


def test_run_summaries_are_what_tlt_sim_reports(tmp_path):
    """One home for the per-policy summary: `tlt sim` writes it and the What-if page shows it."""
    wl = load_workload("cpu-tiny")
    prof = load_profile(wl.profile)
    runs = [simulate(wl, load_policy(n), prof, seed=1, steps=2) for n in ("baseline", "tlt")]
    summaries = summarize_runs(runs, ["base", "mine"])
    assert [s.policy for s in summaries] == ["base", "mine"]
    assert [s.policy for s in summarize_runs(runs)] == ["baseline", "tlt"]
    for s, run in zip(summaries, runs):
        for k, v in run.summary().items():
            assert getattr(s, k) == v
    assert summaries[0].speedup == 1.0
    assert summaries[1].speedup == runs[0].mean("step_time_s") / runs[1].mean("step_time_s")
    table = summary_frame(summaries)
    assert (
        list(table.index) == ["base", "mine"]
        and table.loc["mine", "speedup"] == summaries[1].speedup
    )
    res = runner.invoke(
        app,
        [
            "sim",
            "--workload",
            "cpu-tiny",
            "--policy",
            "baseline,tlt",
            "--steps",
            "2",
            "--seed",
            "1",
            "--out",
            str(tmp_path / "s"),
        ],
    )
    assert res.exit_code == 0, res.output
    written = json.loads((tmp_path / "s" / "summary.json").read_text())["policies"]
    assert written["tlt"]["speedup_vs_first"] == summaries[1].speedup
    assert written["tlt"]["step_time_s"] == summaries[1].step_time_s
    assert written["tlt"]["tail_fraction"] == summaries[1].tail_fraction
    header = next(line for line in res.output.splitlines() if line.lstrip().startswith("policy"))
    assert (
        header.split()[:5] == ["policy", "step", "s", "rollout", "s"] and "tail" in header.split()
    )


def test_compare_rejects_duplicate_names_and_no_seeds():
    wl = load_workload("cpu-tiny")
    tlt = load_policy("tlt")
    with pytest.raises(ValueError, match="tlt"):
        compare(wl, [tlt, tlt], load_profile(wl.profile), seeds=1)
    with pytest.raises(ValueError, match="seeds"):
        compare(wl, [tlt], load_profile(wl.profile), seeds=0)


def test_compare_page_runs():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    def page():
        from workbench.ui.compare_page import render

        render()

    at = AppTest.from_function(page, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    at.selectbox(key="compare_wl").set_value("cpu-tiny")
    at.multiselect(key="compare_policies").set_value(["baseline", "tlt"])
    at.number_input(key="compare_seeds").set_value(2)
    at.number_input(key="compare_steps").set_value(2)
    at.button(key="compare_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    assert list(table.index) == ["baseline", "tlt"]
    at.button(key="compare_regret_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    report = at.session_state["compare_regret_result"]
    assert report.algorithms == ["beg", "ucb1", "egreedy", "fixed"]


# ---------------------------------------------------------------- the waste: bubble and tail


def _interval(worker, start, end, state, batch=0, tokens=0.0):
    return {
        "rl_step": 3,
        "worker": worker,
        "start_s": start,
        "end_s": end,
        "state": state,
        "batch": batch,
        "draft_len": 0,
        "tokens": tokens,
        "passes": 0.0,
    }


def test_waste_of_a_timeline_worked_by_hand():
    """Two workers, full batch 64 (tail batch 8): worker 0 decodes at 64 then 8 (the tail), worker 1
    decodes at 16 (not the tail) and idles (the bubble); training and sync are outside the
    rollout."""
    rows = pd.DataFrame(
        [
            _interval(0, 10.0, 14.0, "decode", 64, 800.0),
            _interval(0, 14.0, 20.0, "decode_sd", 8, 100.0),
            _interval(1, 10.0, 15.0, "decode", 16, 300.0),
            _interval(1, 15.0, 20.0, "idle"),
            _interval(0, 20.0, 30.0, "train"),
            _interval(1, 20.0, 30.0, "train"),
        ]
    )
    w = rollout_split(rows)
    assert (w.workers, w.rollout_s, w.full_batch, w.tail_batch) == (2, 10.0, 64, 8)
    # Worker 0's 6 s at batch 8, of 2 x 10 worker-seconds.
    assert w.tail_fraction == pytest.approx(6.0 / 20.0)
    assert w.bubble_fraction == pytest.approx(5.0 / 20.0)
    assert w.tail_token_share == pytest.approx(100.0 / 1200.0)
    # One sequence more in the tail interval's batch and it is no longer the tail.
    rows.loc[1, "batch"] = 9
    assert rollout_split(rows).tail_fraction == 0.0


def test_waste_from_a_timeline_is_the_simulators_own():
    """What the Train page computes from a real run's trace is what the simulator reports: the same
    function of the same timeline columns, here fed a simulated run's timeline."""
    wl = load_workload("cpu-tiny")
    run = simulate(wl, load_policy("baseline"), load_profile(wl.profile), seed=2, steps=2)
    steps = timeline_waste(run.timeline)
    assert [w.rl_step for w in steps] == [m.rl_step for m in run.steps]
    assert any(m.tail_fraction > 0 for m in run.steps)  # the long tail is there to measure
    for w, m in zip((s.split for s in steps), run.steps):
        assert w.workers == wl.workers
        assert w.tail_fraction == pytest.approx(m.tail_fraction)
        assert w.tail_token_share == pytest.approx(m.tail_token_share)
        assert w.bubble_fraction == pytest.approx(m.bubble_fraction)
        assert 0.0 <= w.tail_fraction + w.bubble_fraction <= 1.0
    frame = waste_frame(steps)
    assert list(frame["tail_fraction"]) == [w.split.tail_fraction for w in steps]
    assert waste_frame([]).columns.tolist() == frame.columns.tolist()


def test_compare_says_what_each_policy_does_to_rl(tmp_path):
    """Lossless and off-policy policies side by side: the nature is in the table and the JSON."""
    out = tmp_path / "c"
    res = runner.invoke(
        app,
        [
            "compare",
            "--workload",
            "cpu-tiny",
            "--policies",
            "baseline,history-sd,async-1,april",
            "--seeds",
            "1",
            "--steps",
            "2",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    natures = {
        name: e["nature"]
        for name, e in json.loads((out / "compare.json").read_text())["policies"].items()
    }
    assert natures == {
        "baseline": "lossless",
        "history-sd": "lossless",
        "async-1": "off-policy (up to 1 behind)",
        "april": "off-policy (resumed responses)",
    }
    assert "off-policy (up to 1 behind)" in res.stdout and "what it does to RL" in res.stdout
