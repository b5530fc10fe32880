"""Compare and Tune take the user's own workload and policy files, as What-if does
(workbench/ui/inputs.py).

AppTest cannot upload a file, so each script answers Streamlit's uploader with files it makes (by
the uploader's key) and puts the real uploader back before it ends.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _compare_with_files() -> None:
    import streamlit as st
    import yaml

    from workbench.contracts.policy import load_policy
    from workbench.contracts.schema import to_mapping
    from workbench.contracts.workload import load_workload
    from workbench.ui import compare_page

    class Upload:
        def __init__(self, name: str, data: dict):
            self.name, self._raw = name, yaml.safe_dump(data).encode()

        def getvalue(self) -> bytes:
            return self._raw

    wl = to_mapping(load_workload("cpu-tiny"))
    wl["name"] = "my-cluster"
    mine = to_mapping(load_policy("static-sd"))
    mine["name"] = "my-policy"
    files = {
        "compare_wl_file": Upload("my-cluster.yaml", wl),
        "compare_policy_files": [
            Upload("my-policy.yaml", mine),
            Upload("broken.yaml", {"nope": 1}),
        ],
    }
    real_uploader = st.file_uploader
    st.file_uploader = lambda *a, **k: files.get(k.get("key"))
    try:
        compare_page.render()
    finally:
        st.file_uploader = real_uploader


def test_compare_runs_an_uploaded_workload_and_policy_and_names_a_bad_file():
    at = AppTest.from_function(_compare_with_files, default_timeout=120)
    at.run()
    at.radio(key="compare_wl_source").set_value("File").run()
    at.multiselect(key="compare_policies").set_value(["baseline"])
    at.number_input(key="compare_seeds").set_value(1)
    at.number_input(key="compare_steps").set_value(1)
    at.button(key="compare_run").click().run()
    assert not at.exception, at.exception
    assert any("broken.yaml" in e.value and "nope" in e.value for e in at.error)
    result = at.session_state["compare_result"]
    assert result.workload == "my-cluster" and result.policies == ["baseline", "my-policy"]


def _tune_with_files() -> None:
    import streamlit as st
    import yaml

    from workbench.contracts.policy import load_policy
    from workbench.contracts.schema import to_mapping
    from workbench.ui import tune_page

    class Upload:
        def __init__(self, name: str, data: dict):
            self.name, self._raw = name, yaml.safe_dump(data).encode()

        def getvalue(self) -> bytes:
            return self._raw

    mine = to_mapping(load_policy("static-sd"))
    mine["name"] = "my-policy"
    files = {"tune_policy_files": [Upload("my-policy.yaml", mine)]}
    real_uploader = st.file_uploader
    st.file_uploader = lambda *a, **k: files.get(k.get("key"))
    try:
        tune_page.render()
    finally:
        st.file_uploader = real_uploader


def test_tune_compares_the_tuned_policy_with_an_uploaded_one():
    at = AppTest.from_function(_tune_with_files, default_timeout=300)
    at.run()
    at.selectbox(key="tune_wl").set_value("cpu-tiny").run()
    at.number_input(key="tune_trials").set_value(2)
    at.number_input(key="tune_seeds").set_value(1)
    at.number_input(key="tune_steps:cpu-tiny").set_value(1)
    at.text_input(key="tune_storage").set_value("memory")
    at.button(key="tune_run").click().run()
    assert not at.exception, at.exception
    policies = list(at.session_state["tune_result"].comparison["policy"])
    # Beside the presets, on the study's seeds.
    assert "my-policy" in policies and "baseline" in policies
