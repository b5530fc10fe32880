"""The app leaves nothing in the system's temporary folder: an upload's import or a run log's
calibration lives in a directory held while it is the session's input, removed when the next input
replaces it, when it is rejected, and when the session ends (workbench/ui/job_dirs.py); an uploaded
profile is read in memory (issue 44: "every upload leaves a tlt-* directory behind").

AppTest cannot upload a file: the script answers the uploader by its key with the files the test
put in the session's state under "test_uploads" (key -> [(name, bytes)])."""

from __future__ import annotations

import gc
import gzip
import tempfile
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from workbench.contracts.profile import load_profile
from workbench.contracts.schema import to_mapping


def _whatif_with_uploads() -> None:
    import streamlit as st

    from workbench.ui import whatif_page

    class Upload:
        def __init__(self, name: str, data: bytes):
            self.name, self._raw = name, data

        def getvalue(self) -> bytes:
            return self._raw

    given = st.session_state.get("test_uploads", {})
    real = st.file_uploader

    def uploader(*args, **kwargs):
        key = kwargs.get("key", "")
        for prefix, files in given.items():
            if key.startswith(prefix):
                ups = [Upload(n, d) for n, d in files]
                return ups if kwargs.get("accept_multiple_files") else ups[0]
        return real(*args, **kwargs)

    st.file_uploader = uploader
    try:
        whatif_page.render()
    finally:
        st.file_uploader = real


@pytest.fixture()
def tmp_root(tmp_path, monkeypatch) -> Path:
    """The system's temporary folder, for this test: a fresh one, to count what is left in it."""
    root = tmp_path / "systmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def _lengths(seed: int) -> bytes:
    rows = [f"{s},q{p},{80 + 53 * (p * 7 + m * 3 + s + seed) % 2000}"
            for s in range(2) for p in range(8) for m in range(4)]
    return ("step,prompt,length\n" + "\n".join(rows) + "\n").encode()


def _upload(at: AppTest, key: str, files: list[tuple[str, bytes]]) -> None:
    at.session_state["test_uploads"] = {key: files}
    at.run()
    assert not at.exception, at.exception


def test_length_uploads_leave_no_directory_behind(tmp_root: Path):
    at = AppTest.from_function(_whatif_with_uploads, default_timeout=120)
    at.run()
    at.radio(key="whatif_wl_source").set_value("Length file").run()
    _upload(at, "whatif_len_files", [("a.csv", _lengths(0))])
    first = _left(tmp_root)
    assert len(first) == 1 and first[0].startswith("tlt-lengths-"), first
    _upload(at, "whatif_len_files", [("b.csv", _lengths(1))])  # another file: the first goes
    second = _left(tmp_root)
    assert len(second) == 1 and second != first, second
    _upload(at, "whatif_len_files", [("bad.csv", b"step,prompt\n0,a\n")])
    assert any("Length file rejected" in e.value for e in at.error)
    assert _left(tmp_root) == []  # rejected: nothing kept, not even the one before
    _upload(at, "whatif_len_files", [("a.csv", _lengths(0))])
    assert len(_left(tmp_root)) == 1
    del at  # the session ends
    gc.collect()
    assert _left(tmp_root) == []


def test_an_uploaded_profile_is_read_without_a_file(tmp_root: Path):
    prof = to_mapping(load_profile("h100-qwen2.5-32b-tp8-sglang"))
    prof["name"] = "my-profile"
    at = AppTest.from_function(_whatif_with_uploads, default_timeout=120)
    at.session_state["test_uploads"] = {
        "whatif_profile_file:": [("mine.yaml", yaml.safe_dump(prof).encode())]}
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    at.button(key="whatif_run").click().run()
    assert at.session_state["whatif_result"].profile.name == "my-profile"
    assert _left(tmp_root) == []


def test_a_run_logs_calibration_leaves_no_directory_behind(repo_root, tmp_root: Path, tmp_path,
                                                           monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = repo_root / "traces" / "published" / "verl-runs" / "grpo_run_deepseek7b_llm.log.gz"
    lines, seen = [], 0
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        for line in fh:
            seen += line.startswith("step:")
            if seen > 12:
                break
            lines.append(line)
    at = AppTest.from_function(_whatif_with_uploads, default_timeout=240)
    at.run()
    at.radio(key="whatif_wl_source").set_value("Run log").run()
    at.number_input(key="whatif_runlog_fit").set_value(8).run()
    _upload(at, "whatif_runlog_file", [("grpo_run.log", "".join(lines).encode())])
    at.button(key="whatif_runlog_go").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    held = _left(tmp_root)
    assert len(held) == 1 and held[0].startswith("tlt-runlog-"), held
    _upload(at, "whatif_runlog_file", [("nothing.log", b"no steps here\n")])
    at.button(key="whatif_runlog_go").click().run()
    assert any("Run log rejected" in e.value for e in at.error), [e.value for e in at.error]
    assert _left(tmp_root) == []
