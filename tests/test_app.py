"""Drive the Streamlit front end once, headless, through streamlit.testing's AppTest."""

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

from workbench.ui.charts import gantt_figure, merge_intervals  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "app.py"


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
    for col in ("step_time_s", "rollout_time_s", "bubble_fraction", "mean_accept_len", "drafter_train_fraction", "speedup"):
        assert col in table.columns
    assert table.loc["baseline", "speedup"] == pytest.approx(1.0)
    assert table.loc["tlt", "speedup"] == pytest.approx(table.loc["baseline", "step_time_s"] / table.loc["tlt", "step_time_s"])
    assert table.loc["tlt", "speedup"] > 1.0  # TLT beats the baseline on the tiny preset

    tiles = {m.label: m.value for m in app.metric}
    assert any("speedup" in label.lower() and "tlt" in label and value.endswith("x") for label, value in tiles.items()), tiles

    charts = app.get("plotly_chart")
    assert len(charts) >= 4  # the per-step lines and one Gantt per policy

    # Moving a widget re-renders from session state, without simulating again.
    result = app.session_state["whatif_result"]
    app.selectbox(key="whatif_gantt_step:tlt").set_value(1).run()
    assert not app.exception, app.exception
    assert app.session_state["whatif_result"] is result


def test_whatif_rejects_bad_fields(app: AppTest) -> None:
    key = "whatif_wl:preset:paper-7b-8gpu:"
    app.number_input(key=key + "workers").set_value(0).run()
    assert not app.exception
    assert any("workers" in e.value for e in app.error)
    assert app.button(key="whatif_run").disabled

    app.number_input(key=key + "workers").set_value(2)
    app.number_input(key=key + "lengths.clip_ratio").set_value(0.7).run()
    assert not app.exception
    assert any("clip_ratio" in e.value for e in app.error)


def test_gantt_merges_back_to_back_rows() -> None:
    tl = pd.DataFrame(
        [(0, 0, 0.0, 1.0, "decode", 4, 0, 40.0, 10.0),
         (0, 0, 1.0, 2.0, "decode", 3, 0, 30.0, 10.0),
         (0, 0, 2.0, 3.0, "idle", 0, 0, 0.0, 0.0),
         (0, 1, 0.0, 3.0, "decode_sd", 2, 4, 60.0, 10.0),
         (0, 0, 3.0, 4.0, "train", 0, 0, 0.0, 0.0),
         (0, 1, 3.0, 4.0, "train", 0, 0, 0.0, 0.0)],
        columns=["step", "worker", "start_s", "end_s", "state", "batch", "draft_len", "tokens", "passes"],
    )
    merged = merge_intervals(tl)
    assert len(merged) == 5
    first = merged.iloc[0]
    assert (first.state, first.start_s, first.end_s, first.tokens, first.segments) == ("decode", 0.0, 2.0, 70.0, 2)
    fig = gantt_figure(tl)
    assert {t.name for t in fig.data} == {"decode", "decode (SD)", "idle (bubble)", "policy training"}
    assert all(t.orientation == "h" for t in fig.data)
    assert fig.layout.barmode == "overlay"
