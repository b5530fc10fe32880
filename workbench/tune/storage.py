"""Where the tuner's studies live, and the trials a killed process left behind in them.

Storage URLs: an RDB URL (by default `sqlite:///runs/tlt-studies.db`, `runs/` of the current
directory made when missing), an Optuna journal file (`journal:PATH`), or 'memory'.

Abandoned trials. A process killed mid-trial (kill -9, a lost machine) leaves its trial RUNNING in
the storage, and nothing would ever finish it. Every trial records the process that runs it (host,
pid and the process's start time: `mark_process`); when a study is opened again,
`fail_abandoned_trials` marks failed the RUNNING trials whose process on this host is gone, at once
and in any storage, and an RDB storage's heartbeats do the same for other hosts' trials silent for
GRACE_S seconds. Trials of live processes (a parallel run's other workers) are left alone. A failed
trial counts towards nothing and is never sampled again; the caller says which were marked.
"""

from __future__ import annotations

import fcntl
import os
import socket
import warnings
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import FrozenTrial, TrialState

# under runs/ of the current directory (made when missing)
DEFAULT_STORAGE = "sqlite:///runs/tlt-studies.db"
JOURNAL_PREFIX = "journal:"
SQLITE_PREFIX = "sqlite:///"
MEMORY = ("", "memory", ":memory:")
HEARTBEAT_S = 10
GRACE_S = 30  # an RDB trial whose process has been silent this long is marked failed
PROCESS = "process"  # the user attribute a trial records its process in


class KernelLock:
    """A journal file's lock held as a kernel file lock (flock on PATH.flock), which the kernel
    drops the moment its holder dies. Optuna's own journal locks are files that a killed `tlt tune`
    leaves behind; the next process then waits their 30 s grace period before taking them. (The
    journal backend asks a lock for `acquire` and `release` only.)"""

    def __init__(self, journal: str):
        self._path = journal + ".flock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self._path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh descriptor each time: threads exclude too
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def make_storage(url: str | None) -> optuna.storages.BaseStorage:
    """An RDB storage for a URL (with heartbeats), a journal file for 'journal:PATH' (safe for
    several processes on one machine, or on a shared file system with locks), or in-memory for
    None/'memory'."""
    if url is None or url in MEMORY:
        return optuna.storages.InMemoryStorage()
    if url.startswith(JOURNAL_PREFIX):
        path = url[len(JOURNAL_PREFIX):]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(path, lock_obj=KernelLock(path)))
    if url.startswith(SQLITE_PREFIX) and url[len(SQLITE_PREFIX):] not in ("", ":memory:"):
        # runs/ of a fresh checkout
        Path(url[len(SQLITE_PREFIX):]).parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs,
                                          heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)


def _started(pid: int) -> str | None:
    """When process `pid` started, in the kernel's clock ticks since boot (Linux), so that a pid
    the system gave to another process since is not taken for the trial's; None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count from the last ')'
    return stat[stat.rindex(")") + 2:].split()[19]


def mark_process(trial: optuna.trial.Trial) -> None:
    """Record the process that runs `trial`."""
    pid = os.getpid()
    trial.set_user_attr(PROCESS, {"host": socket.gethostname(), "pid": pid,
                                  "started": _started(pid)})


def abandoned(trial: FrozenTrial) -> bool:
    """Whether a RUNNING trial's process has ended (only a process on this host can be told)."""
    process = trial.user_attrs.get(PROCESS)
    if trial.state != TrialState.RUNNING or not isinstance(process, dict):
        return False
    if process.get("host") != socket.gethostname():
        return False
    pid = process.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    started = process.get("started")
    return started is not None and _started(pid) not in (None, started)


def fail_abandoned_trials(study: optuna.Study) -> list[int]:
    """Mark failed the study's RUNNING trials whose process is gone; the numbers marked."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    gone = [t.number for t in running if abandoned(t)]
    for number in gone:
        study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # RDB storages: silent past GRACE_S (any host)
    still = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    return sorted(t.number for t in running if t.number not in still)
