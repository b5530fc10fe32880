"""What-if's cluster: engines x model x GPU x TP x framework, on the page
(workbench/ui/cluster_picker.py).

A preset keeps its own profile until a box changes; a changed box derives the cluster's profile; a
length file waits for the user to name the cluster; a picked profile that contradicts the workload
is refused, naming the field."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "app.py"
WL = "preset:fastrl-example-7b-8gpu"  # Qwen2.5-7B, 2 engines x TP4, H100, SGLang


@pytest.fixture()
def app() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.run()
    assert not at.exception, at.exception
    at.selectbox(key="whatif_wl_preset").set_value("fastrl-example-7b-8gpu").run()
    return at


def test_a_preset_opens_on_its_own_cluster_and_profile(app: AppTest) -> None:
    assert app.selectbox(key=f"whatif_cluster_model:{WL}").value == "qwen2.5-7b"
    assert app.selectbox(key=f"whatif_cluster_gpu:{WL}").value == "h100"
    assert app.selectbox(key=f"whatif_cluster_tp:{WL}").value == 4
    assert app.selectbox(key=f"whatif_cluster_fw:{WL}").value == "sglang"
    assert any("own profile **h100-qwen2.5-7b-tp4-sglang**" in c.value for c in app.caption)


def test_the_profile_derived_from_the_cluster_follows_tp_and_gpu(app: AppTest) -> None:
    app.selectbox(key=f"whatif_cluster_tp:{WL}").set_value(2)
    app.selectbox(key=f"whatif_cluster_gpu:{WL}").set_value("a100").run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    app.number_input(key="whatif_steps_n").set_value(1)
    app.button(key="whatif_run").click().run()
    assert not app.exception, app.exception
    res = app.session_state["whatif_result"]
    c = res.profile.cluster
    assert (c.gpu, c.tp, c.model) == ("a100", 2, "qwen2.5-7b")
    assert res.workload.gpu == "a100" and res.workload.gpus_per_worker == 2


def test_a_profile_of_another_cluster_is_refused_naming_the_field(app: AppTest) -> None:
    app.selectbox(key=f"whatif_profile:{WL}").set_value("h100-qwen2.5-32b-tp8").run()
    assert not app.exception, app.exception
    assert any("gpus_per_worker" in e.value for e in app.error), [e.value for e in app.error]
    assert app.button(key="whatif_run").disabled


def test_a_length_file_waits_for_its_cluster_and_takes_none_from_a_preset() -> None:
    at = AppTest.from_function(_length_page, default_timeout=90)
    at.run()
    assert not at.exception, at.exception
    boxes = [
        at.selectbox(key=f"whatif_cluster_{k}:{at.session_state['wl_id']}")
        for k in ("model", "gpu", "tp", "fw")
    ]
    assert all(b.value is None for b in boxes)  # nothing chosen for the user
    assert at.session_state["placed"] is None
    assert any("Choose the model, GPU, TP and framework" in i.value for i in at.info)
    assert {"1", "2", "4", "8"} <= set(boxes[2].options)  # TP offered
    for box, value in zip(boxes, ("qwen2.5-7b", "h100", 1, "vllm")):
        box.set_value(value)
    at.run()
    assert not at.exception, at.exception
    placed, prof = at.session_state["placed"]
    assert (prof.cluster.model, prof.cluster.gpu, prof.cluster.tp, prof.cluster.framework) == (
        "qwen2.5-7b",
        "h100",
        1,
        "vllm",
    )
    assert placed == (1, 1, "qwen2.5-7b")  # one engine until told more; TP1; the model asked for


def _length_page() -> None:
    """The What-if cluster section over an imported length file (AppTest cannot upload)."""
    import tempfile
    from pathlib import Path

    import streamlit as st

    from workbench.ui import cluster_picker
    from workbench.ui.length_upload import UNPLACED, import_upload

    lines = ["step,prompt,length"] + [
        f"{s},q{p},{100 + 37 * (p * m + s) % 900}"
        for s in range(2)
        for p in range(8)
        for m in range(4)
    ]
    into = Path(tempfile.mkdtemp(prefix="tlt-test-lengths-"))
    up = import_upload(
        [("mine.csv", ("\n".join(lines) + "\n").encode())], UNPLACED, "replay", None, into
    )
    st.session_state["wl_id"] = "lengths:test"
    wl, prof = cluster_picker.pick(up.workload, "lengths:test", ask=True)
    st.session_state["placed"] = (
        None if wl is None else ((wl.workers, wl.gpus_per_worker, wl.model), prof)
    )
