"""The Tune page's study: where it is kept, its name, and what the storage holds under that name,
said before "Run study" is pressed.

The name starts as one the inputs own (`tune.free_study_name`: tune-WORKLOAD, with the target when
it is not the workload's engine, `-mo` for two objectives, `-2`, ... where the storage holds that
name for other inputs), so the default never fails and a second target gets a study of its own.
Under the box the page says whether Run study starts a new study, resumes one (and how many of its
trials it runs), or would run none because the study already holds its trials; a name typed by the
user that holds a study of other inputs is refused there, naming what differs.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import streamlit as st

from workbench import tune


@st.cache_resource(show_spinner=False, max_entries=8)
def _shared(url: str) -> optuna.storages.BaseStorage:
    """One storage object per URL for the app's sessions (opening an RDB costs a schema check)."""
    return tune.make_storage(url)


def storage_input() -> str:
    storage = st.text_input("Storage", value=tune.DEFAULT_STORAGE, key="tune_storage",
                            help="An Optuna storage URL; a SQLite file keeps the study (and opens "
                                 "in optuna-dashboard); 'memory' keeps nothing.").strip()
    if storage.startswith("sqlite:///"):
        st.caption(f"The study is kept in `{Path(storage[len('sqlite:///'):]).resolve()}`.")
    elif storage in tune.MEMORY:
        st.caption("Kept in memory: the study ends with this page.")
    return storage


def unwritten(url: str) -> bool:
    """Whether the storage at `url` holds nothing yet: memory, or a file not written yet (the page
    reads a storage to say what it holds, and never makes one before Run study is pressed)."""
    for prefix in (tune.SQLITE_PREFIX, tune.JOURNAL_PREFIX):
        if url.startswith(prefix):
            return not Path(url[len(prefix):]).exists()
    return url in tune.MEMORY


def open_storage(url: str) -> optuna.storages.BaseStorage | None:
    """The storage at `url` (memory: a fresh one, each run its own study); None, with the error
    shown, when it cannot be opened."""
    try:
        return tune.make_storage(url) if url in tune.MEMORY else _shared(url)
    except Exception as exc:  # a URL SQLAlchemy or Optuna cannot open
        st.error(f"Cannot open storage {url!r}: {type(exc).__name__}: {exc}")
        return None


def name_and_status(spec: tune.TuneSpec, store: optuna.storages.BaseStorage | None,
                    trials: int) -> str | None:
    """The study name box and, under it, what Run study will do (`store` None: a storage that
    holds nothing yet); the name, or None when the study cannot run (no name, or a study of other
    inputs under it)."""
    default = tune.free_study_name(spec, store) if store else tune.default_study_name(spec)
    # The key follows the default, so the name follows the inputs until the user edits it.
    name = st.text_input("Study name", value=default, key=f"tune_study:{default}",
                         help="Run again with the same name to resume a study.").strip()
    if not name:
        st.warning("Give the study a name.")
        return None
    status = tune.study_status(spec, name, store) if store else tune.StudyStatus(name, False)
    if status.other_inputs:
        st.error(f"Study **{name}** in this storage was created for other inputs "
                 f"({status.other_inputs}): give another name (**{default}** is free).")
        return None
    if not status.exists:
        st.caption(f"A new study: Run study runs {_trials(trials)}.")
        return name
    held = (f"Study **{name}** holds {_trials(status.finished, 'finished ')} "
            f"({status.complete} complete, {status.pruned} pruned as hopeless)")
    if status.running > status.abandoned:
        held += f", {status.running - status.abandoned} running"
    if status.abandoned:
        held += (f", {status.abandoned} left running by a process that is gone (killed?), which "
                 "Run study marks failed")
    if status.finished >= trials:
        st.warning(f"{held}: Run study runs none and shows it. Raise **Trials** above "
                   f"{status.finished} to run more.")
    else:
        st.caption(f"{held}: Run study resumes it, {_trials(trials - status.finished)} more.")
    return name


def _trials(n: int, kind: str = "") -> str:
    return f"{n} {kind}trial" + ("" if n == 1 else "s")
