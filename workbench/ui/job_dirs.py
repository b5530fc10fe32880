"""Temporary directories for the app's jobs: an uploaded length file's import, a run log's
calibration.

A job's files must outlive the script run that writes them (an imported workload names its lengths
file, which the simulator reads when the user presses Run), but not the job. So each key of the
session's state holds one job: its name (what it was made of), its result, and its directory as a
`tempfile.TemporaryDirectory`. The directory is removed when the key's next job starts, at once
when a job fails, when the session ends (its state is dropped and the object collected) and, for
those still held, when the app exits.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import streamlit as st

T = TypeVar("T")


@dataclass(frozen=True)
class _Held:
    job: str
    directory: tempfile.TemporaryDirectory
    result: Any


def result(key: str, job: str) -> Any | None:
    """The result of `job` if it is the one held under `key` (None otherwise)."""
    held: _Held | None = st.session_state.get(key)
    return held.result if held is not None and held.job == job else None


def run(key: str, job: str, prefix: str, work: Callable[[Path], T]) -> T:
    """`job`'s result: the one held under `key`, or `work` run in a fresh directory (`prefix`
    starts its name), which `key` then holds in place of the job before; if `work` raises, its
    directory is removed and `key` holds nothing."""
    held: _Held | None = st.session_state.get(key)
    if held is not None and held.job == job:
        return held.result
    release(key)
    directory = tempfile.TemporaryDirectory(prefix=prefix)
    try:
        value = work(Path(directory.name))
    except BaseException:
        directory.cleanup()
        raise
    st.session_state[key] = _Held(job, directory, value)
    return value


def release(key: str) -> None:
    """Remove the job held under `key` and its directory, if any."""
    held: _Held | None = st.session_state.get(key)
    if held is not None:
        del st.session_state[key]
        held.directory.cleanup()
