"""Drive the Streamlit front end once, headless, through streamlit.testing's AppTest."""

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

from workbench.ui.charts import STATE_COLORS, gantt_figure, merge_intervals  # noqa: E402
from workbench.ui.train_page import DEFAULT_POLICY  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"


@pytest.fixture()
def app() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_whatif_runs_three_policies(app: AppTest) -> None:
    app.selectbox(key="whatif_wl_preset").set_value("cpu-tiny")
    app.number_input(key="whatif_steps_n").set_value(2)
    app.run()
    assert app.multiselect(key="whatif_policies").value == ["baseline", "static-sd", "tlt"]

    app.button(key="whatif_run").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]

    table = app.dataframe[0].value
    assert list(table.index) == ["baseline", "static-sd", "tlt"]
    for col in (
        "step_time_s",
        "rollout_time_s",
        "bubble_fraction",
        "mean_accept_len",
        "drafter_train_fraction",
        "speedup",
    ):
        assert col in table.columns
    assert table.loc["baseline", "speedup"] == pytest.approx(1.0)
    assert table.loc["tlt", "speedup"] == pytest.approx(
        table.loc["baseline", "step_time_s"] / table.loc["tlt", "step_time_s"]
    )

    tiles = {m.label: m.value for m in app.metric}
    assert any("speedup" in label.lower() and "tlt" in label and value.endswith("x") for label,
               value in tiles.items()), tiles

    charts = app.get("plotly_chart")
    assert len(charts) >= 4  # the per-step lines and one Gantt per policy

    # Moving a widget re-renders from session state, without simulating again.
    result = app.session_state["whatif_result"]
    app.selectbox(key="whatif_gantt_step:tlt").set_value(1).run()
    assert not app.exception, app.exception
    assert app.session_state["whatif_result"] is result


def test_whatif_shows_the_default_comparison_on_arrival(app: AppTest) -> None:
    """Nothing pressed: the first run of the page simulated the defaults and shows them, tail
    included."""
    assert not app.error, [e.value for e in app.error]
    result = app.session_state["whatif_result"]
    assert list(result.labels) == ["baseline", "static-sd", "tlt"]
    table = app.dataframe[0].value
    assert list(table.index) == ["baseline", "static-sd", "tlt"]
    assert (table["tail_fraction"] > 0).all() and (
        table["tail_fraction"] + table["bubble_fraction"] <= 1
    ).all()
    tiles = {m.label: m.value for m in app.metric}
    assert tiles["Tail: tlt"] == f"{table.loc['tlt', 'tail_fraction']:.1%}", tiles
    # A later rerun keeps that result rather than simulating again.
    app.run()
    assert app.session_state["whatif_result"] is result


def test_whatif_rejects_bad_fields(app: AppTest) -> None:
    app.selectbox(key="whatif_wl_preset").set_value("fastrl-example-7b-8gpu").run()
    key = "whatif_wl:preset:fastrl-example-7b-8gpu:"
    app.number_input(key=key + "prompts_per_step").set_value(0).run()
    assert not app.exception
    assert any("prompts_per_step" in e.value for e in app.error)
    assert app.button(key="whatif_run").disabled

    app.number_input(key=key + "prompts_per_step").set_value(8)
    app.number_input(key=key + "lengths.clip_ratio").set_value(0.7).run()
    assert not app.exception
    assert any("clip_ratio" in e.value for e in app.error)


def test_gantt_merges_back_to_back_rows() -> None:
    tl = pd.DataFrame(
        [
            (0, 0, 0.0, 1.0, "decode", 4, 0, 40.0, 10.0),
            (0, 0, 1.0, 2.0, "decode", 3, 0, 30.0, 10.0),
            (0, 0, 2.0, 3.0, "idle", 0, 0, 0.0, 0.0),
            (0, 1, 0.0, 3.0, "decode_sd", 2, 4, 60.0, 10.0),
            (0, 0, 3.0, 4.0, "train", 0, 0, 0.0, 0.0),
            (0, 1, 3.0, 4.0, "train", 0, 0, 0.0, 0.0),
        ],
        columns=[
            "rl_step",
            "worker",
            "start_s",
            "end_s",
            "state",
            "batch",
            "draft_len",
            "tokens",
            "passes",
        ],
    )
    merged = merge_intervals(tl)
    assert len(merged) == 5
    first = merged.iloc[0]
    assert (first.state, first.start_s, first.end_s, first.tokens, first.segments) == (
        "decode",
        0.0,
        2.0,
        70.0,
        2,
    )
    fig = gantt_figure(tl)
    assert {t.name for t in fig.data} == {
        "decode",
        "decode (SD)",
        "idle (bubble)",
        "policy training",
    }
    assert all(t.orientation == "h" for t in fig.data)
    assert fig.layout.barmode == "overlay"


# ---------------------------------------------------------------- Train (real)


def _train_script() -> None:
    # The page alone: AppTest cannot switch to an st.Page built from a function (no script path to
    # name).
    from workbench.ui import train_page

    train_page.render()


class _FakeProc:
    """Stands in for subprocess.Popen: records the launch, starts nothing."""

    calls: list = []
    pid = 424242

    def __init__(self, argv, **kwargs):
        self.calls.append((list(argv), kwargs))
        self.returncode = None

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        self.returncode = -15  # as SIGTERM leaves it
        return self.returncode


@pytest.fixture()
def train_app(monkeypatch) -> AppTest:
    from workbench.ui import train_page

    _FakeProc.calls = []
    monkeypatch.setattr(train_page.subprocess, "Popen", _FakeProc)
    at = AppTest.from_function(_train_script, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_train_page_renders_with_defaults(train_app: AppTest) -> None:
    at = train_app
    assert at.title[0].value == "Train (real)"
    assert at.text_input(key="train_model").value == "traces/reference/model"
    assert at.selectbox(key="train_policy_preset").value == DEFAULT_POLICY
    assert at.text_input(key=f"train_out:{DEFAULT_POLICY}:0").value == f"runs/{DEFAULT_POLICY}-0"
    assert not at.error, [e.value for e in at.error]  # the reference model and tlt are a valid run
    assert not at.button(key="train_start").disabled
    assert any(
        "train --model" in c.value and f"--policy {DEFAULT_POLICY}" in c.value for c in at.caption
    )
    assert not _FakeProc.calls


def test_train_page_invalid_model_starts_nothing(train_app: AppTest, tmp_path: Path) -> None:
    at = train_app
    missing = str(tmp_path / "no-model")
    at.text_input(key="train_model").set_value(missing)
    at.text_input(key=f"train_out:{DEFAULT_POLICY}:0").set_value(str(tmp_path / "run"))
    at.run()
    assert not at.exception, at.exception
    assert any(missing in e.value and "config.json" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    assert at.button(key="train_start").disabled  # AppTest, like a browser, cannot click it
    assert not _FakeProc.calls
    assert "train_launch" not in at.session_state
    assert not (tmp_path / "run").exists()


def test_train_page_shows_a_policy_load_error(train_app: AppTest) -> None:
    at = train_app
    at.radio(key="train_policy_source").set_value("File").run()
    at.text_input(key="train_policy_path").set_value("no/such-policy.yaml").run()
    assert not at.exception, at.exception
    assert any(
        "no/such-policy.yaml" in e.value and "does not exist" in e.value for e in at.error
    ), [e.value for e in at.error]
    assert at.button(key="train_start").disabled


def test_train_page_starts_and_stops_tlt_train(
    train_app: AppTest, tmp_path: Path, monkeypatch
) -> None:
    from workbench.ui import train_page

    killed = []
    monkeypatch.setattr(train_page.os, "killpg", lambda pid, sig: killed.append((pid, sig)))
    at = train_app
    run_dir = tmp_path / "run"
    at.number_input(key="train_steps").set_value(3)
    at.text_input(key=f"train_out:{DEFAULT_POLICY}:0").set_value(str(run_dir))
    at.run()
    at.button(key="train_start").click().run()
    assert not at.exception, at.exception

    (argv, kwargs), = _FakeProc.calls
    exe = train_page.tlt_executable()  # the venv's tlt
    assert argv[:len(exe) + 1] == [*exe, "train"]
    opts = dict(zip(argv[argv.index("--model")::2], argv[argv.index("--model") + 1::2]))
    assert opts["--model"] == str(train_page.ROOT / "traces" / "reference" / "model")
    assert (opts["--policy"], opts["--steps"], opts["--workers"], opts["--out"]) == (
        DEFAULT_POLICY,
        "3",
        "2",
        str(run_dir),
    )
    assert "--resume" not in argv
    assert kwargs["start_new_session"] is True
    assert Path(kwargs["stdout"].name) == run_dir / "train.log"
    assert (run_dir / "train.log").read_text().startswith("$ ")

    assert any(f"running (pid {_FakeProc.pid})" in i.value for i in at.info), [
        i.value for i in at.info
    ]
    assert at.button(key="train_start").disabled  # one run at a time
    assert at.text_input(key="train_monitor_dir").value == str(run_dir)

    at.button(key="train_stop").click().run()
    assert not at.exception, at.exception
    assert killed == [(_FakeProc.pid, train_page.signal.SIGTERM)]
    assert any("stopped" in w.value for w in at.warning), [w.value for w in at.warning]


def _table_row(columns: dict) -> dict:
    """One row of a trace table, a value of each column's kind."""
    value = {"i": 1, "f": 0.5, "O": "x"}
    return {
        name: ([1, 0] if name == "accepted_per_pos" else value[kind])
        for name, (kind, _) in columns.items()
    }


def _write_run(run_dir: Path) -> list:
    """A finished run directory as `tlt train` leaves it: metrics.csv, trace/ with a timeline,
    train.log."""
    from real.run.records import METRIC_COLUMNS, StepRecord
    from workbench.contracts.trace import (
        REQUEST_COLUMNS,
        RL_STEP_COLUMNS,
        STEP_COLUMNS,
        TIMELINE_COLUMNS,
        Trace,
        write_trace,
    )

    records = [
        StepRecord(
            rl_step=s,
            step_s=10.0 - s,
            rollout_s=8.0 - s,
            train_s=1.5,
            sync_s=0.5,
            bubble_fraction=0.3,
            drafter_train_fraction=0.2,
            mean_accept_len=1.5 + 0.5 * s,
            reward=0.2 * s,
            pass_at_g=0.5,
            drafter_loss=2.0,
            drafter_steps=10 * s,
            drafter_kind="eagle",
            tokens=1000,
            longest=300,
            grpo_loss=0.1,
            kl=0.0,
            stop_latency_s=0.01,
        )
        for s in range(3)
    ]
    run_dir.mkdir(parents=True)
    pd.DataFrame([r.__dict__ for r in records], columns=list(METRIC_COLUMNS)).to_csv(
        run_dir / "metrics.csv", index=False
    )
    timeline = pd.DataFrame(
        [
            (
                step,
                w,
                t0 + a,
                t0 + b,
                state,
                batch,
                draft,
                tok,
                passes,
                100.0,
                str(draft) if draft else "",
            )
            for step, t0 in ((1, 10.0), (2, 20.0))
            for w, a, b, state, batch, draft, tok, passes in (
                (0, 0.0, 6.0, "decode_sd", 4, 3, 400.0, 100.0),
                (1, 0.0, 2.0, "decode", 1, 0, 100.0, 100.0),
                (1, 2.0, 4.0, "drafter_train", 0, 0, 5.0, 0.0),
                (1, 4.0, 6.0, "idle", 0, 0, 0.0, 0.0),
                (0, 6.0, 8.0, "train", 0, 0, 0.0, 0.0),
                (1, 6.0, 8.0, "train", 0, 0, 0.0, 0.0),
                (0, 8.0, 9.0, "sync", 0, 0, 0.0, 0.0),
                (1, 8.0, 9.0, "sync", 0, 0, 0.0, 0.0),
            )
            if step == 2 or state != "drafter_train"
        ],  # only the last step trains the drafter
        columns=list(TIMELINE_COLUMNS),
    )
    meta = {
        "model": "m",
        "policy": {"name": "tlt"},
        "prompts": 2,
        "samples": 2,
        "max_tokens": 8,
        "seed": 0,
        "machine": {},
        "engine": {},
    }
    frames = [
        pd.DataFrame([_table_row(cols)])
        for cols in (STEP_COLUMNS, REQUEST_COLUMNS, RL_STEP_COLUMNS)
    ]
    write_trace(Trace(meta, *frames, timeline=timeline), run_dir / "trace")
    (run_dir / "train.log").write_text("".join(f"log line {i}\n" for i in range(100)))
    return records


def test_train_monitor_shows_a_run_directory(train_app: AppTest, tmp_path: Path) -> None:
    at = train_app
    run_dir = tmp_path / "finished"
    records = _write_run(run_dir)
    at.text_input(key="train_monitor_dir").set_value(str(run_dir))
    at.button(key="train_refresh").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]

    from real.run.records import METRIC_COLUMNS

    table = at.dataframe[0].value
    assert list(table.columns) == list(METRIC_COLUMNS)
    assert list(table["rl_step"]) == [r.rl_step for r in records]
    assert list(table["mean_accept_len"]) == pytest.approx([r.mean_accept_len for r in records])
    assert {m.label: m.value for m in at.metric}["Steps done"] == "3"

    # The metric lines, the Gantt chart.
    lines, gantt = (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
    assert {t["name"] for t in lines["data"]} == {
        "step_s",
        "rollout_s",
        "mean_accept_len",
        "reward",
    }
    assert any(s.value == "Worker timeline: RL step 2" for s in at.subheader), [
        s.value for s in at.subheader
    ]
    bars = {t["name"]: t for t in gantt["data"]}
    assert set(bars) == {
        "decode",
        "decode (SD)",
        "idle (bubble)",
        "drafter spot training",
        "policy training",
        "weight sync",
    }  # drafter_train happens in step 2 only: the chart is the last step's
    # red, as on the What-if page.
    assert bars["idle (bubble)"]["marker"]["color"] == STATE_COLORS["idle"]

    log = at.code[0].value
    assert log.splitlines()[-1] == "log line 99" and len(log.splitlines()) == 40

    # The waste per step, from the trace: worker 1 decodes 2 s at batch 1 (the tail: full batch 4,
    # tail batch max(1, 4 // 8) = 1) of 2 workers x 6 s; it idles 2 s; its 100 tokens are 1/5 of the
    # step's.
    assert any(s.value == "Where the rollout's worker-time went" for s in at.subheader)
    waste = at.dataframe[1].value.set_index("rl_step")
    assert list(waste.index) == [1, 2]
    assert waste.loc[2, ["tail_fraction", "bubble_fraction", "tail_token_share"]].tolist() == \
        pytest.approx([2 / 12, 2 / 12, 0.2])
    # Worker 1 spot-trains 2 s.
    assert waste.loc[2, "drafter_train_fraction"] == pytest.approx(2 / 12)
    assert (waste.loc[2, "full_batch"], waste.loc[2, "tail_batch"]) == (4, 1)
    assert {m.label: m.value for m in at.metric}["Tail (last step)"] == f"{2 / 12:.1%}"


def test_train_page_shows_a_failed_run_with_its_error(tmp_path: Path) -> None:
    """A run that crashes (a real process, ending on a Python traceback) is shown as failed, with
    the exception, not as a log line among others."""
    import sys

    from workbench.ui import train_page

    run_dir = tmp_path / "crashed"
    argv = [sys.executable, "-c", "import sys; print('step 0 starts', flush=True); "
                                  "raise RuntimeError('vLLM engine died: out of memory')"]
    run = train_page.launch(argv, run_dir, resume=False, steps=3)
    assert run.proc.wait(timeout=60) == 1
    at = AppTest.from_function(_train_script, default_timeout=60)
    at.session_state["train_launch"] = run
    at.session_state["train_monitor_dir"] = str(run_dir)
    at.run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith(f"failed (pid {run.proc.pid})") and "exit code 1" in e
               and "RuntimeError: vLLM engine died: out of memory" in e for e in errors), errors
    assert any(
        "Traceback (most recent call last)" in c.value
        and c.value.rstrip().endswith("out of memory")
        for c in at.code
    ), [c.value for c in at.code]
    assert not at.button(key="train_start").disabled  # a failed run does not hold the page

    # The same directory watched from a fresh session (the run started elsewhere): the log alone
    # says it failed.
    other = AppTest.from_function(_train_script, default_timeout=60)
    other.session_state["train_monitor_dir"] = str(run_dir)
    other.run()
    assert not other.exception, other.exception
    assert any(
        "The log ends with an error: RuntimeError: vLLM engine died" in e.value for e in other.error
    ), [e.value for e in other.error]



def test_train_page_predicts_a_finished_run_beside_its_measurement(
    tmp_path: Path, synthetic_run
) -> None:
    """A finished run, re-simulated with a profile: per phase, predicted next to measured; a profile
    that does not load is an error naming it, not a crash."""
    from workbench.contracts.profile import load_profile

    run_dir = synthetic_run(
        tmp_path / "run", load_profile("cpu-tiny"), {"name": "baseline"}, seed=1
    )
    at = AppTest.from_function(_train_script, default_timeout=60)
    at.session_state["train_monitor_dir"] = str(run_dir)
    at.run()
    assert not at.exception, at.exception
    at.button(key="train_predict").click().run()
    assert not at.exception, at.exception
    phases = next(d.value for d in at.dataframe if "phase" in d.value.columns)
    assert list(phases["phase"]) == [
        "Rollout",
        "Update",
        "Sync (with the spot stop)",
        "Other",
        "Step",
    ]
    assert (phases["measured_s"].iloc[[0, 1, 4]] > 0).all() and (
        phases["predicted_s"].iloc[[0, 1, 4]] > 0
    ).all()
    assert any("held out: the profile was not fitted on this run" in m.value for m in at.markdown)

    at.text_input(key="train_predict_profile").set_value("no-such-profile.yaml").run()
    at.button(key="train_predict").click().run()
    assert not at.exception, at.exception
    assert any("no-such-profile.yaml" in e.value for e in at.error), [e.value for e in at.error]


# ---------------------------------------------------------------- Calibrate


def _calibrate_script() -> None:
    from workbench.ui import calibrate_page

    calibrate_page.render()


def test_calibrate_page_shows_the_shipped_self_calibration(monkeypatch) -> None:
    """On arrival: the shipped self-calibration's report (held-out captures, per-bucket latency)."""
    from workbench.ui import calibrate_page

    report = calibrate_page.resolve(calibrate_page.SHIPPED_REPORT)
    monkeypatch.setattr(calibrate_page, "DEFAULT_OUT", "runs/no-such-dir/profile.yaml")
    at = AppTest.from_function(_calibrate_script, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    assert at.text_input(key="calibrate_report_path").value == calibrate_page.SHIPPED_REPORT
    tables = [d.value for d in at.dataframe]
    held = next(t for t in tables if "raw_error_pct" in t.columns)
    shipped = json.loads(report.read_text())["self_calibration"]["heldout"]
    assert list(held["capture"]) == [h["trace"] for h in shipped]
    assert any("measured_ms" in t.columns and len(t) > 3 for t in tables)
    assert {m.label for m in at.metric} >= {
        "Held-out captures, worst |error|",
        "Step latency, held-out steps",
    }


def test_calibrate_page_checks_the_form_then_starts_tlt_calibrate(
    monkeypatch, tmp_path: Path
) -> None:
    from workbench.ui import calibrate_page, train_page

    _FakeProc.calls = []
    monkeypatch.setattr(train_page.subprocess, "Popen", _FakeProc)
    at = AppTest.from_function(_calibrate_script, default_timeout=60)
    at.run()
    at.text_input(key="calibrate_model").set_value(str(tmp_path / "nope")).run()
    assert any("has no config.json" in e.value and "nope" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    assert at.button(key="calibrate_start").disabled
    at.text_input(key="calibrate_model").set_value(calibrate_page.DEFAULT_MODEL)
    at.text_input(key="calibrate_out").set_value(str(tmp_path / "me.yaml")).run()
    assert not at.button(key="calibrate_start").disabled
    at.button(key="calibrate_start").click().run()
    assert not at.exception, at.exception
    argv, kwargs = _FakeProc.calls[-1]
    assert argv[argv.index("calibrate") + 1 :] == [
        "--model",
        str(calibrate_page.resolve(calibrate_page.DEFAULT_MODEL)),
        "--out",
        str(tmp_path / "me.yaml"),
        "--drafter",
        str(calibrate_page.resolve(calibrate_page.DEFAULT_DRAFTER)),
    ]
    assert kwargs["stdout"].name == str(tmp_path / "me.calibrate.log")
    assert any(i.value.startswith("calibrating (pid") for i in at.info), [i.value for i in at.info]
    assert at.text_input(key="calibrate_report_path").value == str(tmp_path / "me.calibration.json")


# ------------------------------------------------------------ Compare and Tune: the policy exported


def _compare_script() -> None:
    from workbench.ui import compare_page

    compare_page.render()


def _tune_script() -> None:
    from workbench.ui import tune_page

    tune_page.render()


def _downloads(at: AppTest) -> dict[str, str]:
    """Download buttons shown: label -> file name."""
    return {b.proto.label: b.proto.url for b in at.get("download_button")}


def test_compare_offers_the_fastest_policy_for_each_stack() -> None:
    at = AppTest.from_function(_compare_script, default_timeout=120)
    at.run()
    at.selectbox(key="compare_wl").set_value("cpu-tiny")
    at.multiselect(key="compare_policies").set_value(["baseline", "tlt-base"])
    at.number_input(key="compare_seeds").set_value(1)
    at.number_input(key="compare_steps").set_value(1)
    at.button(key="compare_run").click().run()
    assert not at.exception, at.exception
    # First offered: the fastest policy with an engine setting to export (SD, lossless), not a
    # rollout mode.
    assert at.selectbox(key="compare_export_pick").value == "tlt-base"
    at.selectbox(key="compare_export_pick").set_value("tlt-base").run()
    labels = set(_downloads(at))
    assert {"Download for vLLM", "Download for SGLang / FastRL", "Download for veRL"} <= labels
    # SGLang's n-gram worker has one draft length: the approximation is listed under the buttons.
    notes = next(e for e in at.expander if e.label.startswith("What the targets cannot express"))
    assert any("SGLang / FastRL: approximated" in m.value for m in notes.markdown)


def test_tune_offers_the_tuned_policy_for_each_stack() -> None:
    """cpu-tiny's profile is this machine's: the study searches what `tlt train` runs (chains),
    which every target expresses."""
    at = AppTest.from_function(_tune_script, default_timeout=300)
    at.run()
    at.selectbox(key="tune_wl").set_value("cpu-tiny").run()
    at.number_input(key="tune_trials").set_value(2)
    at.number_input(key="tune_seeds").set_value(1)
    at.number_input(key="tune_steps:cpu-tiny").set_value(1)
    at.text_input(key="tune_storage").set_value("memory")
    at.button(key="tune_run").click().run()
    assert not at.exception, at.exception
    assert {"Download policy (YAML)", "Download for vLLM", "Download for SGLang / FastRL",
            "Download for veRL"} <= set(_downloads(at))


def test_an_older_runs_metrics_read_under_the_new_names(tmp_path: Path) -> None:
    """metrics.csv from before the rename (step, bubble_frac, spot_frac): the Train page reads them
    as rl_step, bubble_fraction and drafter_train_fraction."""
    from workbench.ui.run_monitor import read_metrics

    pd.DataFrame({"step": [0, 1], "bubble_frac": [0.3, 0.25], "spot_frac": [0.2, 0.1]}).to_csv(
        tmp_path / "metrics.csv", index=False
    )
    df = read_metrics(tmp_path)
    assert list(df.columns) == ["rl_step", "bubble_fraction", "drafter_train_fraction"]
    assert df["bubble_fraction"].tolist() == [0.3, 0.25] and df[
        "drafter_train_fraction"
    ].tolist() == [0.2, 0.1]


def _plan_script() -> None:
    from workbench.ui import plan_page

    plan_page.render()


def test_plan_page_shows_the_front_and_offers_the_chosen_files(tmp_path: Path, monkeypatch) -> None:
    """A small plan (one TP, two batch sizes, a few shapes, 1 step): the front, the chosen shape and
    its files."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    at = AppTest.from_function(_plan_script, default_timeout=180)
    at.run()
    at.selectbox(key="plan_wl").set_value("tlt-eval-qwen2.5-7b")
    at.number_input(key="plan_gpus").set_value(8)
    at.multiselect(key="plan_policies:sglang").set_value(["baseline", "tlt"])
    at.multiselect(key="plan_tp").set_value([4])
    at.multiselect(key="plan_batch").set_value([128, 256])
    at.number_input(key="plan_trials").set_value(4)
    at.number_input(key="plan_steps").set_value(1)
    at.run()
    assert not at.error, [e.value for e in at.error]
    at.button(key="plan_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert any(m.label == "Run time" for m in at.metric)
    labels = set(_downloads(at))
    assert {
        "Download workload.yaml",
        "Download policy.yaml",
        "Download profile.yaml",
        "Download plan.json",
    } <= labels
    front = at.dataframe[0].value  # the front (the infeasible shapes, if any, come after)
    assert len(front) >= 1 and set(front["TP"]) == {"TP4"}


def test_plan_page_refuses_an_empty_tp_list(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    at = AppTest.from_function(_plan_script, default_timeout=60)
    at.run()
    at.multiselect(key="plan_tp").set_value([]).run()
    assert any("--tp" in e.value for e in at.error)
    assert at.button(key="plan_run").disabled


def test_whatif_shows_where_sd_stops_paying_on_the_cluster(app: AppTest) -> None:
    key = next(e.key for e in app.text_input if e.key.startswith("sdcurve_strategy:"))
    app.text_input(key=key).set_value("3")
    app.number_input(key=key.replace("strategy", "accept")).set_value(2.79)
    app.run()
    assert not app.exception, app.exception
    text = " ".join(m.value for m in app.markdown)
    assert "stops paying" in text and "turn SD off above batch" in text
    app.text_input(key=key).set_value("8_x").run()
    assert any("Strategy" in e.value for e in app.error)
