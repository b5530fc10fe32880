"""What-if's length-file panel: an upload imported as `tlt workload import` would, drawn beside the
model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest

from sim.simulator import simulate
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.ui.length_upload import (
    histogram_figure,
    import_upload,
    model_draw,
    tail_figure,
)

APP = Path(__file__).resolve().parents[2] / "app.py"


def csv_bytes() -> bytes:
    rng = np.random.default_rng(1)
    lines = ["step,prompt,length,correct"]
    for step in range(3):
        for p in range(6):
            for m in range(4):
                lines.append(f"{step},q{p},{int(np.ceil(rng.lognormal(5, 1.0)))},{int(m < p % 3)}")
    return ("\n".join(lines) + "\n").encode()


def test_an_upload_becomes_a_workload_with_charts_and_simulates(tmp_path):
    up = import_upload([("mine.csv", csv_bytes())], "cpu-tiny", "replay", 4096, tmp_path)
    assert up.workload.lengths.kind == "replay" and up.observed.responses == 72
    assert any("72 responses" in line for line in up.lines)
    drawn, batch = model_draw(up.observed, up.workload)
    assert len(drawn) == 72 and set(batch) == {0, 1, 2}
    hist, tail = histogram_figure(up.observed, drawn, 4096), tail_figure(up.observed, drawn, batch)
    assert [t.name for t in hist.data] == ["observed", "model (lognormal fit)"] and len(
        tail.data[0].y
    ) == 3
    run = simulate(up.workload, load_policy("baseline"), load_profile(up.workload.profile), seed=0)
    assert run.steps[0].longest_response == up.observed.length[up.observed.batch == 0].max()


def test_a_bad_upload_raises_the_import_error(tmp_path):
    with pytest.raises(Exception, match="mine.csv:2"):
        import_upload(
            [("mine.csv", b"step,prompt,length\n0,a,-4\n")], "cpu-tiny", "replay", None, tmp_path
        )


def test_the_page_offers_a_length_file_source():
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.radio(key="whatif_wl_source").set_value("Length file").run()
    assert not at.exception, at.exception
    assert any("tlt workload import" in i.value for i in at.info)


def _panel_with_an_upload() -> None:
    """The panel as What-if runs it, with the uploader answering one CSV (AppTest cannot upload)."""
    import numpy as np
    import streamlit as st

    from workbench.ui import length_upload

    class Upload:
        name = "mine.csv"

        def getvalue(self) -> bytes:
            rng = np.random.default_rng(1)
            rows = [f"{s},q{p},{int(np.ceil(rng.lognormal(5, 1.0)))},{int(m < p % 3)}"
                    for s in range(3) for p in range(6) for m in range(4)]
            return ("step,prompt,length,correct\n" + "\n".join(rows) + "\n").encode()

    # Restored at once: the AppTest scripts of later tests run in this process and use the real
    # uploader.
    real_uploader = st.file_uploader
    st.file_uploader = lambda *a, **k: [Upload()]
    try:
        wl, wl_id = length_upload.length_file_workload()
    finally:
        st.file_uploader = real_uploader
    st.session_state["panel_result"] = (wl.name if wl else None, wl_id)


def test_the_panel_shows_the_report_and_both_charts():
    at = AppTest.from_function(_panel_with_an_upload, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    name, wl_id = at.session_state["panel_result"]
    assert name == "uploaded-lengths" and wl_id.startswith("lengths:")
    assert "72 responses" in at.code[0].value
    assert len(at.get("plotly_chart")) == 2
