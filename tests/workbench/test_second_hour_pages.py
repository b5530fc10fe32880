"""What a user met in the pages' second hour, headless (streamlit.testing's AppTest): each page
says what it waits for, and reads its own numbers back as the user would."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402


def _compare_page() -> None:
    from workbench.ui import compare_page

    compare_page.render()


def test_compare_with_no_workload_file_asks_for_the_file_not_a_policy():
    at = AppTest.from_function(_compare_page, default_timeout=120)
    at.run()
    at.radio(key="compare_wl_source").set_value("File").run()
    assert not at.exception, at.exception
    assert len(at.multiselect(key="compare_policies").value) == 5
    warnings = " ".join(w.value for w in at.warning)
    assert "workload" in warnings and "policy" not in warnings, warnings
    assert at.button(key="compare_run").disabled
    # no policy and no file: both named
    at.multiselect(key="compare_policies").set_value([]).run()
    warnings = " ".join(w.value for w in at.warning)
    assert "workload" in warnings and "policy" in warnings, warnings


# ---------------------------------------------------------------- Train (real)

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _train_page() -> None:
    from workbench.ui import train_page

    train_page.render()


@pytest.fixture()
def no_runs(monkeypatch, tmp_path):
    """No run known to the app and an empty runs/ of the test's own; none left running."""
    from workbench.ui import background_runs as runs
    from workbench.ui import train_page

    monkeypatch.setattr(train_page, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(train_page, "UPLOAD_DIR", tmp_path / "runs" / "policies")
    monkeypatch.setattr(train_page, "tlt_executable", lambda: list(SLEEPER))
    yield runs
    run = runs._LAUNCHES.pop("train", None)  # the registry is the app's: this test's cleanup
    if run is not None and run.running:
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait(timeout=30)


def test_train_refuses_a_cap_no_prediction_takes_and_a_reload_shows_the_running_form(no_runs):
    at = AppTest.from_function(_train_page, default_timeout=60)
    at.run()
    assert at.number_input(key="train_max_tokens").min == 16  # a prediction takes 16 and more
    at.number_input(key="train_steps").set_value(2)
    at.number_input(key="train_max_tokens").set_value(64)
    at.selectbox(key="train_policy_preset").set_value("baseline")
    at.run()
    at.button(key="train_start").click().run()
    assert not at.exception, at.exception
    assert no_runs.is_running("train")
    # The page reloaded mid-run (a fresh session): the form is the running run's, not the defaults.
    again = AppTest.from_function(_train_page, default_timeout=60)
    again.run()
    assert not again.exception, again.exception
    assert again.number_input(key="train_steps").value == 2
    assert again.number_input(key="train_max_tokens").value == 64
    assert again.selectbox(key="train_policy_preset").value == "baseline"
    assert not again.warning, [w.value for w in again.warning]  # no widget-state warning


def test_run_config_refuses_a_one_token_cap(tmp_path):
    from real.run.config import RunConfig, TrainError
    from workbench.contracts.policy import load_policy
    from workbench.ui.train_page import DEFAULT_MODEL, ROOT

    cfg = RunConfig(ROOT / DEFAULT_MODEL, load_policy("baseline"), tmp_path, max_tokens=1)
    with pytest.raises(TrainError, match="--max-tokens 1: must be >= 16"):
        cfg.check()


def test_a_rollout_that_decoded_nothing_gives_no_verdict_not_a_nan_speedup():
    from real.rollout.requests import EngineStepRow
    from real.run.sd_pricing import PlainCost, rollout_verdict

    # A 1-token cap: the engines prefill and stop, no step decodes.
    prefill = EngineStepRow(rl_step=0, worker=0, engine_step=0, start_s=0.0, wall_s=0.01,
                            batch_size=4, num_waiting=0, prefill_requests=4, prefill_tokens=80,
                            decode_requests=0, scheduled_tokens=80, context_mean=20.0,
                            context_max=20, draft_len=0, num_drafts=0, num_draft_tokens=0,
                            num_accepted_tokens=0, accepted_per_pos=[], new_tokens=4,
                            draft_s=0.0)
    assert rollout_verdict([(PlainCost(0.004, 0.0001, 16), [prefill])]) is None


def test_a_bad_uploaded_policy_is_named_once_by_its_own_name(no_runs, tmp_path):
    from workbench.ui import train_page

    copy = train_page.UPLOAD_DIR / "0123456789-my-policy.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text("name: mine\nnope: 1\n")
    form = train_page.TrainForm(train_page.DEFAULT_MODEL, str(copy), 2, 1, 0, 2, 2, 64,
                                str(tmp_path / "out"))
    _, problems = train_page.check_form(form)
    text = " ".join(problems)
    assert "my-policy.yaml" in text and "nope" in text, text
    assert str(train_page.UPLOAD_DIR) not in text and "0123456789" not in text, text


# ---------------------------------------------------------------- bad files


def test_a_bad_length_file_is_named_as_uploaded_not_by_the_apps_copy(tmp_path):
    from workbench.ui.length_upload import import_upload
    from workbench.workloads.build import UNPLACED

    copy = tmp_path / "tlt-lengths-abc"
    with pytest.raises(ValueError) as err:
        import_upload([("my.jsonl", b'{"a": 1}\n')], UNPLACED, "fit", None, copy)
    assert str(err.value).startswith("my.jsonl: "), str(err.value)
    assert str(copy) not in str(err.value)
    rows = "step,prompt,length\n" + "".join(f"{s},{p},{100 + 7 * p * s + p}\n"
                                            for s in range(3) for p in range(16))
    up = import_upload([("mine.csv", rows.encode())], UNPLACED, "fit", None, tmp_path / "ok")
    assert not [line for line in up.lines if str(tmp_path) in line], up.lines


def _compare_with_a_jsonl() -> None:
    import streamlit as st

    from workbench.ui import compare_page

    class Upload:  # what st.file_uploader returns: a name and the bytes
        def __init__(self, name: str, data: bytes):
            self.name, self._raw = name, data

        def getvalue(self) -> bytes:
            return self._raw

    real_uploader = st.file_uploader

    def uploader(*args, **kwargs):
        # the browser's type filter: a file of a type the uploader does not take never arrives
        types = kwargs.get("type")
        upload = Upload("lengths.jsonl", b'{"step": 0, "input": 10, "output": 20}\n')
        if kwargs.get("key") != "compare_wl_file" or (types and "jsonl" not in types):
            return None
        return upload

    st.file_uploader = uploader
    try:
        compare_page.render()
    finally:
        st.file_uploader = real_uploader


def test_a_length_file_on_the_workload_uploader_is_told_where_it_goes():
    at = AppTest.from_function(_compare_with_a_jsonl, default_timeout=120)
    at.run()
    at.radio(key="compare_wl_source").set_value("File").run()
    assert not at.exception, at.exception
    errors = " ".join(e.value for e in at.error)
    assert "lengths.jsonl" in errors and "tlt workload import" in errors, errors
    assert not [i for i in at.info if "Upload a workload" in i.value]


# ---------------------------------------------------------------- Plan


def test_plan_rows_say_any_for_a_screened_shape_and_no_engine_count_tp_does_not_divide():
    from workbench.plan import ANY, PlanTrial, Shape, shape_rows

    screened = PlanTrial(-1, Shape(8, 0, 256, ANY), "infeasible", "a full batch does not fit")
    odd = PlanTrial(3, Shape(8, 4, 64, "tlt"), "infeasible", "TP8 does not divide 4 GPUs")
    fine = PlanTrial(4, Shape(2, 8, 64, "tlt"), "ok")
    rows = shape_rows([screened, odd, fine], 4096)
    assert rows[0][:4] == ["screened", "TP8", "any", "any"]
    assert rows[1][:4] == ["3", "TP8", "-", "4"]
    assert rows[2][:4] == ["4", "TP2", "4", "8"]
    assert "0x" not in odd.shape.label and "TP8 on 4 GPUs" in odd.shape.label
    assert fine.shape.label.startswith("4x TP2 (8 GPUs)")


# ---------------------------------------------------------------- Tune


def _tune_page() -> None:
    from workbench.ui import tune_page

    tune_page.render()


def test_a_one_trial_study_says_it_has_not_tuned_anything_yet(tmp_path):
    from workbench.ui.tune_page import convergence_figure

    at = AppTest.from_function(_tune_page, default_timeout=300)
    at.run()
    at.selectbox(key="tune_wl").set_value("cpu-tiny").run()
    at.number_input(key="tune_trials").set_value(1)
    at.number_input(key="tune_seeds").set_value(1)
    at.number_input(key="tune_steps:cpu-tiny").set_value(1)
    at.text_input(key="tune_storage").set_value(f"sqlite:///{tmp_path / 'studies.db'}")
    at.run()
    assert any(c.value == "A new study: Run study runs 1 trial." for c in at.caption)
    at.button(key="tune_run").click().run()
    assert not at.exception, at.exception
    said = " ".join(w.value for w in at.warning)
    assert "the preset **baseline** it started from" in said, said
    assert "1 complete trial" in said and "1 complete trials" not in said, said
    # the storage now holds the study: its status in the singular
    status = " ".join(c.value for c in [*at.caption, *at.warning])
    assert "holds 1 finished trial (" in status, status
    fig = convergence_figure(at.session_state["tune_result"].convergence)
    assert fig.layout.xaxis.range[0] == -0.5 and fig.layout.xaxis.tickformat == "d"


# ---------------------------------------------------------------- the app's server


def test_the_app_as_make_app_starts_it_watches_no_folder(monkeypatch):
    """`make app` runs `streamlit run app.py` in the repository: under its .streamlit/config.toml
    Streamlit watches no file, so the runs the app starts (writing under the repository, which a
    watcher would watch recursively) cannot flood the log with 'Inotify queue overflowed'."""
    from streamlit import config
    from streamlit.watcher.path_watcher import NoOpPathWatcher, get_default_path_watcher_class

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    try:
        config.get_config_options(force_reparse=True)
        assert config.get_option("server.fileWatcherType") == "none"
        assert get_default_path_watcher_class() is NoOpPathWatcher
    finally:
        monkeypatch.undo()
        config.get_config_options(force_reparse=True)


# ---------------------------------------------------------------- the bubble of one worker


def _engine_steps(start: float, n: int, wall: float) -> list:
    from real.rollout.requests import EngineStepRow

    return [EngineStepRow(rl_step=0, worker=0, engine_step=i, start_s=start + i * wall,
                          wall_s=wall, batch_size=4, num_waiting=0, prefill_requests=0,
                          prefill_tokens=0, decode_requests=4, scheduled_tokens=4,
                          context_mean=50.0, context_max=60, draft_len=0, num_drafts=0,
                          num_draft_tokens=0, num_accepted_tokens=0, accepted_per_pos=[],
                          new_tokens=4, draft_s=0.0) for i in range(n)]


def test_one_worker_has_no_bubble_and_its_wait_to_start_is_shown_as_such():
    """A real run's worker idles from the step's start until its prompts reach its engine: no
    worker has finished its share then, so that is no bubble (with one worker there is none at
    all); it is the split's `wait_fraction`. A second worker that finishes early does idle in
    the bubble, waiting for the slowest."""
    from real.run.records import StepTimes, WorkerRollout, rows_frame, step_timeline
    from workbench.contracts.timeline import rollout_split
    from workbench.contracts.trace import TimelineRow
    from workbench.validate.waste import timeline_waste

    times = StepTimes(start=100.0, rollout_end=110.0, train_start=110.0, train_end=112.0,
                      sync_end=113.0)

    def split(rollouts):  # as a run's record (its window) and as the waste tool (the trace) see it
        tl = rows_frame(step_timeline(0, rollouts, [], times, 100.0), TimelineRow)
        return rollout_split(tl, len(rollouts), window=(0.0, 10.0)), timeline_waste(tl)[0].split

    alone = {0: WorkerRollout(0, 103.0, 110.0, _engine_steps(3.0, 7, 1.0), [], {})}
    for got in split(alone):
        assert got.bubble_fraction == pytest.approx(0.0)
        assert got.wait_fraction == pytest.approx(0.3)
    pair = {**alone, 1: WorkerRollout(1, 101.0, 105.0, _engine_steps(1.0, 4, 1.0), [], {})}
    for got in split(pair):
        assert got.bubble_fraction == pytest.approx(5.0 / 20.0)  # worker 1, from 105 to 110
        assert got.wait_fraction == pytest.approx((3.0 + 1.0) / 20.0)


# ---------------------------------------------------------------- What-if's cluster


def test_the_model_box_lists_each_model_once():
    """A preset and the database's config of the same model (Qwen/Qwen3-30B-A3B is the preset
    qwen3-30b-a3b) are one entry: the preset, naming the other."""
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"),
                           default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    box = next(s for s in at.selectbox if s.key.startswith("whatif_cluster_model:"))
    options = list(box.options)
    assert "qwen3-30b-a3b (also Qwen/Qwen3-30B-A3B)" in options, options
    assert "Qwen/Qwen3-30B-A3B" not in options and "deepseek-ai/DeepSeek-V3" not in options
    assert "r1-distill-qwen-7b" in options  # a preset of its own, though shaped as qwen2.5-7b
    assert box.value == "qwen2.5-32b"  # the default workload's own model, picked


# ---------------------------------------------------------------- agentic


def test_the_tool_latency_sweep_at_x1_is_the_headline_and_reads_off_its_axes():
    """One decision path: the sweep runs the results' own seed and steps, so at x1 it gives their
    speedup; its chart has a tick at each scale swept (none left of the first) and a speedup tick
    above its highest point."""
    import json

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"),
                           default_timeout=180)
    at.run()
    at.selectbox(key="whatif_wl_preset").set_value("polytrace-search-r1-qwen2.5-7b").run()
    next(n for n in at.number_input if n.label == "Prompts per step").set_value(16)
    at.number_input(key="whatif_steps_n").set_value(2)
    at.multiselect(key="whatif_policies").set_value(["baseline", "tlt"])
    at.run()
    at.button(key="whatif_run").click().run()
    at.multiselect(key="whatif_tool_scales").set_value([0.1, 1.0, 10.0])
    at.button(key="whatif_tool_run").click().run()
    assert not at.exception, at.exception
    headline = at.session_state["whatif_result"]
    step = [run.mean("step_time_s") for run in headline.runs]
    sweep = at.session_state["whatif_tool_sweep"][1]
    at_one = next(p for p in sweep.points if p.scale == 1.0)
    assert at_one.speedup["tlt"] == pytest.approx(step[0] / step[1], rel=1e-9)
    fig = json.loads(next(c for c in at.get("plotly_chart")
                          if "whatif_tool_fig" in str(c.proto.id)).proto.spec)
    x, y = fig["layout"]["xaxis"], fig["layout"]["yaxis"]
    assert x["tickvals"] == [0.1, 1.0, 10.0] and x["range"][0] > -1.2  # log10: right of 0.063
    assert max(y["tickvals"]) >= max(p.speedup["tlt"] for p in sweep.points)
    assert y["range"][1] == max(y["tickvals"])


def test_tlt_sim_prints_the_tool_calls_as_tlt_compare_does(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    res = CliRunner().invoke(app, ["sim", "--workload", "polytrace-search-r1-qwen2.5-7b",
                                   "--policy", "baseline,tlt", "--steps", "1",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "around the tool calls (seed 0;" in res.output
    assert "trajectory time in tools" in res.output


# ---------------------------------------------------------------- how sure (intervals)


def _metric(at: AppTest, starts: str):
    return next(m for m in at.metric if m.label.startswith(starts))


def test_whatif_on_arrival_shows_each_figure_with_its_interval():
    """No run log: the measured-database profile's fit error, the acceptance and the lengths'
    sampling give the speedup tile, How sure and the whole run their 90% intervals."""
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"),
                           default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    assert _metric(at, "Speedup:").proto.delta.startswith("90%: ")
    sure = next(m.value for m in at.markdown if m.value.startswith("**How sure:**"))
    assert "fit error" in sure and "accepted length" in sure and "lengths' sampling" in sure
    code = next(c for c in at.code if "90%:" in c.value)
    assert code.proto.wrap_lines  # long lines wrap, not cut off on the right
    totals = next(d.value for d in at.dataframe if "Days" in d.value.columns)
    assert "Days, 90%" in totals.columns
    # the report to send says the same
    from workbench.ui import whatif_results

    res = at.session_state["whatif_result"]
    report = whatif_results._report(res, whatif_results._metrics_table(res))
    assert any(kind == "p" and "tlt 1." in text and "90%:" in text for kind, text in report.parts)


def test_compare_shows_how_sure_each_speedup_is():
    at = AppTest.from_function(_compare_page, default_timeout=180)
    at.run()
    at.selectbox(key="compare_wl").set_value("cpu-tiny")
    at.multiselect(key="compare_policies").set_value(["baseline", "static-sd"])
    at.number_input(key="compare_seeds").set_value(2)
    at.number_input(key="compare_steps").set_value(1)
    at.run()
    at.button(key="compare_run").click().run()
    assert not at.exception, at.exception
    sure = next(m.value for m in at.markdown if m.value.startswith("**How sure:**"))
    assert "2 simulated steps" in sure, sure  # 2 seeds x 1 step, resampled
    assert any("static-sd" in c.value and "90%:" in c.value for c in at.code)
    totals = next(d.value for d in at.dataframe if "Days" in d.value.columns)
    assert "Days, 90%" in totals.columns


def _plan_page() -> None:
    from workbench.ui import plan_page

    plan_page.render()


def test_plan_gives_the_chosen_shapes_days_and_cost_their_interval(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    at = AppTest.from_function(_plan_page, default_timeout=240)
    at.run()
    at.selectbox(key="plan_wl").set_value("tlt-eval-qwen2.5-7b")
    at.number_input(key="plan_gpus").set_value(8)
    at.multiselect(key="plan_policies:sglang").set_value(["tlt"])
    at.multiselect(key="plan_tp").set_value([4])
    at.multiselect(key="plan_batch").set_value([128])
    at.number_input(key="plan_trials").set_value(1)
    at.number_input(key="plan_steps").set_value(1)
    at.run()
    at.button(key="plan_run").click().run()
    assert not at.exception, at.exception
    assert _metric(at, "Run time").proto.delta.startswith("90%: ")
    assert _metric(at, "Cost").proto.delta.startswith("90%: ")
    assert any("fit error" in c.value for c in at.caption)
