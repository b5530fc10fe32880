"""The What-if page's SD panel and its results under changing inputs (issue 44, items 1 and 2).

AppTest cannot upload a file, so a script answers Streamlit's uploader with files it makes (by the
uploader's key), as tests/workbench/test_page_uploads.py does.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from workbench.compare.sd_curve import Acceptance, sd_curve  # noqa: E402
from workbench.contracts.profile import load_profile  # noqa: E402
from workbench.contracts.strategy import Strategy  # noqa: E402
from workbench.ui.sd_curve_panel import BATCHES, curve_figure  # noqa: E402

DEFAULT = "polytrace-dapo-qwen2.5-32b"  # the page's default workload, on its own profile
PROFILE = "h100-qwen2.5-32b-tp8-sglang"


def test_the_sd_chart_spans_the_batches_it_plots():
    """The crossover's label sits at the crossover: on a log axis Plotly reads an annotation's x as
    log10 of the batch, and a batch given as is stretched the axis to 10^92."""
    c = sd_curve(load_profile("h100-qwen2.5-7b-tp4-sglang"), "eagle", Strategy.parse("8_4_16"),
                 Acceptance(), 2048.0, BATCHES)
    assert c.crossover_batch is not None and c.crossover_batch > 10
    fig = curve_figure(c)
    assert fig.layout.xaxis.type == "log"
    lo, hi = fig.layout.xaxis.range
    assert 10 ** lo == pytest.approx(1) and 10 ** hi == pytest.approx(512)
    marks = [a for a in fig.layout.annotations if a.xref == "x"]
    assert [a.text for a in marks] == [f"SD stops paying at {c.crossover_batch}"]
    assert 10 ** marks[0].x == pytest.approx(c.crossover_batch)
    lines = [s for s in fig.layout.shapes if s.xref == "x"]
    assert [s.x0 for s in lines] == [c.crossover_batch]  # a shape takes the batch itself


def _page() -> None:
    from workbench.ui import whatif_page

    whatif_page.render()


@pytest.fixture()
def whatif() -> AppTest:
    at = AppTest.from_function(_page, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def test_tokens_per_pass_shows_the_figure_the_sentence_uses(whatif: AppTest):
    at = whatif
    box = at.number_input(key=f"sdcurve_accept:preset:{DEFAULT}")
    sentence = next(m.value for m in at.markdown if "tokens per pass)" in m.value)
    used = re.search(r"\((\d+\.\d\d) tokens per pass\)", sentence).group(1)
    assert box.value is None  # not a 0.00 beside a sentence that says 5.67
    assert box.proto.placeholder.startswith(used), (box.proto.placeholder, sentence)
    assert float(used) > 1.0

    box.set_value(3.0).run()  # the user's figure, then, in the sentence
    assert not at.exception, at.exception
    assert any("(3.00 tokens per pass)" in m.value for m in at.markdown)


def _results_shown(at: AppTest) -> bool:
    return any(s.value == "Results" for s in at.subheader)


@pytest.mark.parametrize("source", ["Length file", "Run log", "Workload file"])
def test_the_presets_results_leave_with_the_preset(whatif: AppTest, source: str):
    """Another source with nothing valid yet: no result of the preset under it, and back on the
    preset its result comes back."""
    at = whatif
    assert _results_shown(at) and at.session_state["whatif_result"].workload.name == DEFAULT
    at.radio(key="whatif_wl_source").set_value(source).run()
    assert not at.exception, at.exception
    assert at.button(key="whatif_run").disabled
    assert not _results_shown(at)
    assert not any(m.label.startswith("Speedup:") for m in at.metric), [m.label for m in at.metric]
    at.radio(key="whatif_wl_source").set_value("Preset").run()
    assert _results_shown(at)


def test_another_preset_hides_the_last_result_until_run(whatif: AppTest):
    at = whatif
    at.selectbox(key="whatif_wl_preset").set_value("cpu-tiny").run()
    assert not at.exception, at.exception
    assert not _results_shown(at)
    assert any("Run simulation" in i.value and "cpu-tiny" in i.value for i in at.info), [
        i.value for i in at.info]
    at.number_input(key="whatif_steps_n").set_value(1)
    at.button(key="whatif_run").click().run()
    assert _results_shown(at)
    assert at.session_state["whatif_result"].workload.name == "cpu-tiny"


def _lengths_csv() -> bytes:
    rows = [f"{s},q{p},{80 + 53 * (p * 7 + m * 3 + s) % 2000}"
            for s in range(2) for p in range(16) for m in range(4)]
    return ("step,prompt,length\n" + "\n".join(rows) + "\n").encode()


def _page_with_a_length_file(name: str, data: bytes) -> None:
    import streamlit as st

    from workbench.ui import whatif_page

    class Upload:
        def __init__(self, name: str, data: bytes):
            self.name, self._raw = name, data

        def getvalue(self) -> bytes:
            return self._raw

    files = {"whatif_len_files": [Upload(name, data)]}
    real_uploader = st.file_uploader
    st.file_uploader = lambda *a, **k: files.get(k.get("key"))
    try:
        whatif_page.render()
    finally:
        st.file_uploader = real_uploader


@pytest.mark.parametrize("name, data", [
    ("mine.csv", _lengths_csv()),  # taken: it waits for its cluster
    ("broken.csv", b"step,prompt\n0,a\n"),  # rejected
])
def test_an_uploaded_length_file_never_shows_the_presets_result(name: str, data: bytes):
    at = AppTest.from_function(_page_with_a_length_file, args=(name, data), default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    assert _results_shown(at)  # the preset's, on arrival
    at.radio(key="whatif_wl_source").set_value("Length file").run()
    assert not at.exception, at.exception
    if name == "broken.csv":
        assert any("Length file rejected" in e.value for e in at.error), [e.value for e in at.error]
    else:
        assert any("Choose the model, GPU, TP and framework" in i.value for i in at.info)
    assert at.button(key="whatif_run").disabled
    assert not _results_shown(at)
    assert at.session_state["whatif_result"].workload.name == DEFAULT  # kept, not shown
