"""The processes the app starts in the background (`tlt train` from the Train page, `tlt calibrate`
from the Calibrate page), known to every session of the app.

A launch is kept in this module's registry, one per page (`key`), not in a browser session's
state: a tab opened or reloaded while a run goes on shows it running, with its Stop, and a
finished one with how it ended. Each launch has a thread that waits for its process, so the
process is reaped the moment it exits (no zombie, whether or not a page is open) and its exit
code is kept. The process runs in its own session and process group (`start_new_session`): Stop
sends SIGTERM to the group, Ray's and vLLM's children included, and a closed tab or a Ctrl-C in
the Streamlit terminal does not end it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

STOP_WAIT_S = 5.0  # how long Stop waits for the run to exit before it reports "stopping"

_LOCK = threading.Lock()
_LAUNCHES: dict[str, "Launch"] = {}  # page key -> its latest launch, running or ended


@dataclass
class Launch:
    """A background process the app started."""

    proc: subprocess.Popen
    argv: list[str]
    out: Path  # its run directory (or the directory its log goes to)
    started: float
    steps: int  # RL steps planned in all (0: not a training run)
    stopping: bool = False
    # What the page's form held when it started the run (a tab opened later shows it again)
    form: object | None = None

    @property
    def running(self) -> bool:
        return self.proc.poll() is None


def launch(key: str, argv: list[str], out: Path, cwd: Path, resume: bool, steps: int,
           log_name: str, form: object | None = None) -> Launch:
    """Start `argv` in the background, its output going to `out/log_name` (appended to when
    resuming), as the launch of `key`. Refused (RuntimeError) while `key`'s last one runs: one run
    at a time per page, whichever tab asks."""
    with _LOCK:
        last = _LAUNCHES.get(key)
        if last is not None and last.running:
            raise RuntimeError(f"{key}: pid {last.proc.pid} is still running")
        out.mkdir(parents=True, exist_ok=True)
        with open(out / log_name, "ab" if resume else "wb") as log:
            log.write(f"$ {shlex.join(argv)}\n".encode())
            log.flush()
            # Plain Python tracebacks: typer's framed ones wrap the error across lines of box
            # drawing.
            env = {**os.environ, "_TYPER_STANDARD_TRACEBACK": "1"}
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, env=env)
        threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
        run = _LAUNCHES[key] = Launch(proc, argv, out, time.time(), steps, form=form)
    return run


def current(key: str) -> Launch | None:
    """`key`'s latest launch, running or ended (None: none since the app started)."""
    with _LOCK:
        return _LAUNCHES.get(key)


def is_running(key: str) -> bool:
    run = current(key)
    return run is not None and run.running


def stop(run: Launch) -> None:
    """SIGTERM to the run's process group; wait up to STOP_WAIT_S for it to end."""
    try:
        os.killpg(run.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return  # it had exited already
    run.stopping = True
    try:
        run.proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        pass  # still shutting Ray down: the status says "stopping" until it is gone


def rerun_once_finished(key: str, was_running_key: str) -> bool:
    """In a fragment that redraws a background run: whether it runs; once it has ended, one full
    rerun of the page (so its Start button comes back). `was_running_key`: the session's own
    memory of what it last saw."""
    running = is_running(key)
    if st.session_state.get(was_running_key) and not running:
        st.session_state[was_running_key] = False
        st.rerun()
    st.session_state[was_running_key] = running
    return running
