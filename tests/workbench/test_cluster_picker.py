"""What-if's cluster: model x GPU x TP x framework, derived or checked (workbench/ui/cluster_picker.py)."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "app.py"
KEY = "whatif_wl:preset:fastrl-example-7b-8gpu:"  # the default workload: Qwen2.5-7B, TP4, H100


@pytest.fixture()
def app() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.run()
    assert not at.exception, at.exception
    return at


def test_changing_gpus_per_worker_refuses_the_old_profile_naming_the_field(app: AppTest) -> None:
    app.number_input(key=KEY + "gpus_per_worker").set_value(8).run()
    assert not app.exception, app.exception
    assert any("gpus_per_worker" in e.value for e in app.error), [e.value for e in app.error]
    assert app.button(key="whatif_run").disabled


def test_the_profile_derived_from_the_cluster_follows_tp_and_gpu(app: AppTest) -> None:
    app.number_input(key=KEY + "gpus_per_worker").set_value(2)
    app.toggle(key="whatif_cluster_on:preset:fastrl-example-7b-8gpu").set_value(True).run()
    app.selectbox(key="whatif_cluster_gpu:preset:fastrl-example-7b-8gpu").set_value("a100").run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    app.number_input(key="whatif_steps_n").set_value(1)
    app.button(key="whatif_run").click().run()
    assert not app.exception, app.exception
    res = app.session_state["whatif_result"]
    c = res.profile.cluster
    assert (c.gpu, c.tp, c.model) == ("a100", 2, "qwen2.5-7b")
    assert res.workload.gpu == "a100" and res.workload.gpus_per_worker == 2
