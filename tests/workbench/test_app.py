"""Drive the Streamlit front end once, headless, through streamlit.testing's AppTest."""

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

from workbench.ui.charts import gantt_figure, merge_intervals  # noqa: E402

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
