"""What-if on an agentic workload, headless (streamlit.testing's AppTest): the traced cluster is
offered as the preset's own, the tool calls' section shows each policy's split, and the
tool-latency sweep draws its chart (and says when it is stale)."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
PRESET = "polytrace-search-r1-qwen2.5-7b"


def _number(at: AppTest, label: str):
    return next(n for n in at.number_input if n.label == label)


def test_whatif_shows_the_tool_calls_and_sweeps_the_tools_latency() -> None:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    at.selectbox(key="whatif_wl_preset").set_value(PRESET).run()
    assert not at.error, [e.value for e in at.error]
    _number(at, "Prompts per step").set_value(16)
    at.number_input(key="whatif_steps_n").set_value(1)
    at.run()
    at.button(key="whatif_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert "Agentic: the tool calls" in [s.value for s in at.subheader]
    split = at.dataframe[-1].value
    assert list(split["policy"]) == ["baseline", "static-sd", "tlt"]
    assert "trajectory time in tools" in split.columns

    at.multiselect(key="whatif_tool_scales").set_value([0.1, 1.0, 10.0])
    at.button(key="whatif_tool_run").click().run()
    assert not at.exception, at.exception
    sweep = at.session_state["whatif_tool_sweep"][1]
    assert [p.scale for p in sweep.points] == [0.1, 1.0, 10.0]
    assert any("whatif_tool_fig" in str(c.proto.id) for c in at.get("plotly_chart"))
    assert not at.warning

    at.multiselect(key="whatif_tool_scales").set_value([1.0, 10.0]).run()
    assert any("other inputs" in w.value for w in at.warning)
