"""The Train (real) page (workbench/ui/train_page.py) driven through Streamlit's AppTest: the form,
a run in the background seen from every session, its monitor, and the story of what its engines
ran (issue 44, item 5).

A run the page starts is a real process: `tlt train`'s executable is replaced by a Python that
sleeps (the page cannot tell), so Start, Stop, another tab's view of the run and the reaping of
the ended process are all real.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from workbench.ui import background_runs as runs  # noqa: E402
from workbench.ui import train_page  # noqa: E402
from workbench.ui.charts import STATE_COLORS  # noqa: E402
from workbench.ui.train_page import DEFAULT_POLICY  # noqa: E402

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _train_script() -> None:
    # The page alone: AppTest cannot switch to an st.Page built from a function (no script path to
    # name).
    from workbench.ui import train_page

    train_page.render()


@pytest.fixture(autouse=True)
def no_runs(monkeypatch, tmp_path):
    """Every test starts with no run known to the app and an empty runs/ of its own, and ends with
    none running."""
    monkeypatch.setattr(train_page, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(train_page, "tlt_executable", lambda: list(SLEEPER))
    yield
    for key in ("train", "calibrate"):
        run = runs._LAUNCHES.pop(key, None)  # the registry is the app's: this test's cleanup
        if run is not None and run.running:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait(timeout=30)


@pytest.fixture()
def train_app() -> AppTest:
    at = AppTest.from_function(_train_script, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def _out_key(at: AppTest) -> str:
    return next(t.key for t in at.text_input if t.key.startswith("train_out:"))


def test_train_page_renders_with_defaults(train_app: AppTest, tmp_path: Path) -> None:
    at = train_app
    assert at.title[0].value == "Train (real)"
    assert at.text_input(key="train_model").value == "traces/reference/model"
    assert at.selectbox(key="train_policy_preset").value == DEFAULT_POLICY
    assert at.text_input(key=_out_key(at)).value == str(tmp_path / "runs" / f"{DEFAULT_POLICY}-0")
    assert not at.error, [e.value for e in at.error]  # the reference model and tlt are a valid run
    assert not at.button(key="train_start").disabled
    assert any(
        "train --model" in c.value and f"--policy {DEFAULT_POLICY}" in c.value for c in at.caption
    )
    assert runs.current("train") is None


def test_a_finished_run_does_not_greet_the_page_with_a_refusal(tmp_path: Path) -> None:
    """runs/tlt-vllm-0 holds a finished run: the form offers the next directory, Start is enabled;
    with Resume it offers the finished run's, to continue it."""
    done = tmp_path / "runs" / f"{DEFAULT_POLICY}-0"
    (done / "checkpoints" / "step-000019").mkdir(parents=True)
    (done / "train.log").write_text("$ tlt train ...\n")
    at = AppTest.from_function(_train_script, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert at.text_input(key=_out_key(at)).value == str(done) + "-2"
    assert not at.button(key="train_start").disabled
    assert at.text_input(key="train_monitor_dir").value == str(done)  # the newest run, watched
    at.checkbox(key="train_resume").check().run()
    assert at.text_input(key=_out_key(at)).value == str(done)
    assert not at.error, [e.value for e in at.error]
    assert not at.button(key="train_start").disabled


def test_train_page_invalid_model_starts_nothing(train_app: AppTest, tmp_path: Path) -> None:
    at = train_app
    missing = str(tmp_path / "no-model")
    at.text_input(key="train_model").set_value(missing)
    at.text_input(key=_out_key(at)).set_value(str(tmp_path / "run"))
    at.run()
    assert not at.exception, at.exception
    assert any(missing in e.value and "config.json" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    assert at.button(key="train_start").disabled  # AppTest, like a browser, cannot click it
    assert runs.current("train") is None
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


def _gone(pid: int, within_s: float = 20.0) -> bool:
    """Whether process `pid` has ended and been reaped (no zombie left) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.1)
    return False


def test_train_page_starts_a_run_every_tab_sees_and_stops(train_app: AppTest,
                                                          tmp_path: Path) -> None:
    at = train_app
    run_dir = tmp_path / "run"
    at.number_input(key="train_steps").set_value(3)
    at.text_input(key=_out_key(at)).set_value(str(run_dir))
    at.run()
    at.button(key="train_start").click().run()
    assert not at.exception, at.exception

    run = runs.current("train")
    argv = run.argv
    assert argv[:len(SLEEPER) + 1] == [*SLEEPER, "train"]
    opts = dict(zip(argv[argv.index("--model")::2], argv[argv.index("--model") + 1::2]))
    assert opts["--model"] == str(train_page.ROOT / "traces" / "reference" / "model")
    assert (opts["--policy"], opts["--steps"], opts["--workers"], opts["--out"]) == (
        DEFAULT_POLICY, "3", "2", str(run_dir))
    assert "--resume" not in argv
    assert os.getpgid(run.proc.pid) == run.proc.pid  # its own process group: Stop reaches all
    assert (run_dir / "train.log").read_text().startswith("$ ")
    pid = run.proc.pid
    assert any(f"running (pid {pid})" in i.value for i in at.info), [i.value for i in at.info]
    assert at.button(key="train_start").disabled  # one run at a time
    assert at.text_input(key="train_monitor_dir").value == str(run_dir)

    # Another tab, or this one reloaded (a fresh session): the run is there, with its Stop.
    other = AppTest.from_function(_train_script, default_timeout=60)
    other.run()
    assert not other.exception, other.exception
    assert any(f"running (pid {pid})" in i.value for i in other.info), [
        i.value for i in other.info]
    assert not other.error, [e.value for e in other.error]
    assert other.button(key="train_start").disabled
    assert other.text_input(key="train_monitor_dir").value == str(run_dir)
    other.button(key="train_stop").click().run()
    assert not other.exception, other.exception
    assert any("stopped" in w.value for w in other.warning), [w.value for w in other.warning]
    assert run.proc.returncode == -signal.SIGTERM
    assert _gone(pid)


def test_an_ended_run_is_reaped_without_a_page_asking(tmp_path: Path) -> None:
    """No page polls the process: it is still reaped the moment it exits (not left a zombie until
    the app stops)."""
    run = runs.launch("train", [sys.executable, "-c", "pass"], tmp_path / "run", tmp_path,
                      resume=False, steps=1, log_name="train.log")
    assert _gone(run.proc.pid), open(f"/proc/{run.proc.pid}/status").read()


def _table_row(columns: dict) -> dict:
    """One row of a trace table, a value of each column's kind."""
    value = {"i": 1, "f": 0.5, "O": "x"}
    return {
        name: ([1, 0] if name == "accepted_per_pos" else value[kind])
        for name, (kind, _) in columns.items()
    }


def _write_run(run_dir: Path, kinds=("eagle",) * 3, sd_speedup=(float("nan"),) * 3) -> list:
    """A finished run directory as `tlt train` leaves it: metrics.csv, trace/ with a timeline,
    train.log. `kinds`: the drafter each step ran; `sd_speedup`: SD's measured speed on each
    step's rollout; the drafters are judged from step 1 on (NaN estimates at step 0)."""
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
            drafter_kind=kinds[s],
            tokens=1000,
            longest=300,
            grpo_loss=0.1,
            kl=0.0,
            stop_latency_s=0.01,
            eagle_est=2.5 if s else float("nan"),
            ngram_est=1.2 if s else float("nan"),
            sd_speedup=sd_speedup[s],
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

    # The metrics in words and units; a column no step filled is not shown, one some steps did not
    # fill reads '-', never None.
    table = at.dataframe[0]
    config = json.loads(table.proto.columns)
    labels = {c: config[c]["label"] for c in table.value.columns}
    assert labels["rl_step"] == "Step" and labels["step_s"] == "Step (s)"
    assert labels["mean_accept_len"] == "Accepted length" and labels["drafter_kind"] == "Drafter"
    assert config["bubble_fraction"]["type_config"]["format"] == "percent"
    assert "style_share" not in labels and "sd_speedup" not in labels  # never measured here
    assert list(table.value["rl_step"]) == [r.rl_step for r in records]
    assert list(table.value["mean_accept_len"]) == pytest.approx([r.mean_accept_len
                                                                 for r in records])
    assert list(table.value["eagle_est"]) == ["-", "2.50", "2.50"]
    assert not any(v is None for v in table.value.to_numpy().ravel())
    assert {m.label: m.value for m in at.metric}["Steps done"] == "3"

    # The metric lines, in words (the table's), the Gantt chart.
    lines, gantt = (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
    assert {t["name"] for t in lines["data"]} == {
        "Step (s)",
        "Rollout (s)",
        "Accepted length",
        "Reward",
    }
    assert lines["layout"]["xaxis"]["title"]["text"] == "Step"
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
    # tail batch max(1, 4 // 8) = 1) of 2 workers x 6 s; it idles 2 s; its 100 tokens are 1/5 of
    # the step's.
    assert any(s.value == "Where the rollout's worker-time went" for s in at.subheader)
    waste = at.dataframe[1].value.set_index("rl_step")
    assert list(waste.index) == [1, 2]
    assert waste.loc[2, ["tail_fraction", "bubble_fraction", "tail_token_share"]].tolist() == \
        pytest.approx([2 / 12, 2 / 12, 0.2])
    # Worker 1 spot-trains 2 s.
    assert waste.loc[2, "drafter_train_fraction"] == pytest.approx(2 / 12)
    assert (waste.loc[2, "full_batch"], waste.loc[2, "tail_batch"]) == (4, 1)
    assert {m.label: m.value for m in at.metric}["Tail (last step)"] == f"{2 / 12:.1%}"


def test_a_run_that_switched_sd_off_says_so_and_why(train_app: AppTest, tmp_path: Path) -> None:
    """Step 0 ran EAGLE at 0.50x a plain engine's speed; the SD guard turned SD off, so steps 1-2
    ran without a drafter: the page says it, with the measured speed, above the metrics."""
    at = train_app
    run_dir = tmp_path / "guarded"
    _write_run(run_dir, kinds=("eagle", "none", "none"), sd_speedup=(0.5, float("nan"),
                                                                   float("nan")))
    at.text_input(key="train_monitor_dir").set_value(str(run_dir))
    at.button(key="train_refresh").click().run()
    assert not at.exception, at.exception
    said = [w.value for w in at.warning]
    assert any(w.startswith("**2 of 3 steps ran without SD.**")
               and "SD switched off after step 0" in w and "0.50x a plain engine's speed" in w
               and "steps 1-2 ran without a drafter" in w for w in said), said


def test_a_failed_run_shows_its_error(tmp_path: Path) -> None:
    """A run that crashes (a real process, ending on a Python traceback) is shown as failed, with
    the exception, not as a log line among others."""
    run_dir = tmp_path / "crashed"
    argv = [sys.executable, "-c", "import sys; print('step 0 starts', flush=True); "
                                  "raise RuntimeError('vLLM engine died: out of memory')"]
    run = runs.launch("train", argv, run_dir, tmp_path, resume=False, steps=3,
                      log_name="train.log")
    assert run.proc.wait(timeout=60) == 1
    at = AppTest.from_function(_train_script, default_timeout=60)
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

    # The same directory watched when the app knows no run (started elsewhere): the log alone
    # says it failed.
    runs._LAUNCHES.pop("train")
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


# ---------------------------------------------------------------- Calibrate's background run


def _calibrate_script() -> None:
    from workbench.ui import calibrate_page

    calibrate_page.render()


def test_calibrate_page_checks_the_form_then_starts_tlt_calibrate(monkeypatch,
                                                                  tmp_path: Path) -> None:
    from workbench.ui import calibrate_page

    monkeypatch.setattr(calibrate_page, "tlt_executable", lambda: list(SLEEPER))
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
    argv = runs.current("calibrate").argv
    assert argv[argv.index("calibrate") + 1 :] == [
        "--model",
        str(calibrate_page.resolve(calibrate_page.DEFAULT_MODEL)),
        "--out",
        str(tmp_path / "me.yaml"),
        "--drafter",
        str(calibrate_page.resolve(calibrate_page.DEFAULT_DRAFTER)),
    ]
    assert (tmp_path / "me.calibrate.log").read_text().startswith("$ ")
    assert any(i.value.startswith("calibrating (pid") for i in at.info), [i.value for i in at.info]
    assert at.text_input(key="calibrate_report_path").value == str(tmp_path / "me.calibration.json")
