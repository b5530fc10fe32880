"""What-if takes a veRL run log as a third kind of input: calibrated on its first steps, measured
against predicted per step and the factors shown, then the policies compared on that run with its
profile.

AppTest cannot upload a file: the script answers the uploader (by its key) with an excerpt of the
shipped GRPO log and puts the real uploader back before it ends."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _whatif_with_a_log() -> None:
    import gzip as gz
    from pathlib import Path

    import streamlit as st

    from workbench.ui import whatif_page

    src = Path(st.session_state["log_path"])
    with gz.open(src, "rt", encoding="utf-8") as fh:
        lines, seen = [], 0
        for line in fh:
            seen += line.startswith("step:")
            if seen > 12:
                break
            lines.append(line)

    class Upload:
        name = "grpo_run.log"

        def getvalue(self) -> bytes:
            return "".join(lines).encode()

    real = st.file_uploader
    st.file_uploader = lambda *a, **k: (
        Upload() if k.get("key") == "whatif_runlog_file" else real(*a, **k)
    )
    try:
        whatif_page.render()
    finally:
        st.file_uploader = real


def test_a_run_log_is_calibrated_then_its_policies_compared(repo_root, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    at = AppTest.from_function(_whatif_with_a_log, default_timeout=240)
    at.session_state["log_path"] = str(
        repo_root / "traces" / "published" / "verl-runs" / "grpo_run_deepseek7b_llm.log.gz"
    )
    at.run()
    at.radio(key="whatif_wl_source").set_value("Run log").run()
    at.number_input(key="whatif_runlog_fit").set_value(8).run()
    at.button(key="whatif_runlog_go").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    factors = next(c for c in at.code if "decode_speed" in c.value and "declared range" in c.value)
    assert factors.proto.wrap_lines  # wrapped: no line cut off on the right
    assert any("measured (the run's log" in c.value for c in at.caption)
    # the page's Steps follow the calibrated run's sample (all 12 steps of this excerpt)
    assert at.number_input(key="whatif_steps_n").value == 12
    at.multiselect(key="whatif_policies").set_value(["baseline", "tlt-base"])
    at.number_input(key="whatif_steps_n").set_value(1)
    at.button(key="whatif_run").click().run()
    assert not at.exception, at.exception
    result = at.session_state["whatif_result"]
    assert result.profile.run_factors is not None and result.workload.group_size == 5
    assert result.labels == ["baseline", "tlt-base"]
    # the speedup with its interval from the calibration's uncertainty, as tlt compare prints it
    assert any("How sure" in m.value for m in at.markdown)
    assert any("tlt-base" in c.value and "90%:" in c.value for c in at.code)
