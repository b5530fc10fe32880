"""Atomic run checkpoints for `tlt train`, so a killed run resumes from its last finished RL step.

Layout under a run directory:

    run_dir/LATEST                          "checkpoints/step-000042\\n" (relative to run_dir)
    run_dir/checkpoints/step-000042/        one checkpoint
        state.json                          {"version": 1, "step": 42, "state": {...}}
        model/, drafter/, trainer.pt, ...   whatever the caller's writers put there

A step directory is built in a temporary directory beside it and renamed into place
(`write_dir_atomic`), `state.json` last, so a step directory is either complete or absent; only
then does LATEST move (`write_atomic`: temp file + rename), and only after that are older step
directories deleted (the last 2 are kept). A crash at any point leaves LATEST naming a complete
checkpoint. `load_latest` trusts LATEST when it names a complete directory, else takes the
newest complete step directory; a `state.json` that does not parse is an error naming it.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from workbench.contracts.fileio import write_atomic, write_dir_atomic

CHECKPOINT_VERSION = 1
KEEP = 2  # checkpoints kept
STATE_FILE = "state.json"
LATEST_FILE = "LATEST"
CHECKPOINTS_DIR = "checkpoints"
_STEP_DIR = re.compile(r"^step-(\d{6,})$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; the message names the file."""


@dataclass
class Checkpoint:
    step: int  # the last finished RL step
    dir: Path  # run_dir/checkpoints/step-000042
    state: dict  # the JSON-able run state saved with it

    def path(self, name: str) -> Path:
        """An entry inside the checkpoint (model/, drafter/, trainer.pt, spot.pt, ...)."""
        return self.dir / name


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"step-{step:06d}"


def save_checkpoint(run_dir: str | Path, step: int, state: dict,
                    files: dict[str, Callable[[Path], None]] | None = None) -> Checkpoint:
    """Write checkpoint `step` atomically and point LATEST at it; then prune to the last 2.

    `files[name](path)` writes the entry `name` at `path` (a directory or a file) inside the
    checkpoint being built. `state` must be JSON-able. Step directories other than this one
    and the newest complete one before it are deleted, including any of later steps (left by
    a run that was resumed from an earlier checkpoint)."""
    if STATE_FILE in (files or {}):
        raise ValueError(f"{STATE_FILE!r} is the checkpoint's own file; name the entry otherwise")
    run_dir = Path(run_dir)
    text = (
        json.dumps({"version": CHECKPOINT_VERSION, "step": int(step), "state": state}, indent=2)
        + "\n"
    )
    target = step_dir(run_dir, step)

    def fill(tmp: Path) -> None:
        for name, write in (files or {}).items():
            write(tmp / name)
        (tmp / STATE_FILE).write_text(text)  # last: its presence marks a complete checkpoint

    write_dir_atomic(target, fill)
    write_atomic(run_dir / LATEST_FILE, f"{CHECKPOINTS_DIR}/{target.name}\n")
    older = [d for s, d in _complete_steps(run_dir) if s < step][: KEEP - 1]
    for entry in (run_dir / CHECKPOINTS_DIR).iterdir():
        # stale temp dirs too
        if entry != target and entry not in older and entry.is_dir() and (
                _STEP_DIR.match(entry.name) or entry.name.startswith(".step-")):
            shutil.rmtree(entry, ignore_errors=True)
    return Checkpoint(int(step), target, state)


def load_latest(run_dir: str | Path) -> Checkpoint | None:
    """The checkpoint LATEST names when it is complete, else the newest complete step
    directory; None when there is none."""
    run_dir = Path(run_dir)
    pointer = run_dir / LATEST_FILE
    if pointer.is_file():
        named = Path(pointer.read_text().strip())
        named = named if named.is_absolute() else run_dir / named
        if (named / STATE_FILE).is_file():
            return _read(named)
    complete = _complete_steps(run_dir)
    return _read(complete[0][1]) if complete else None


def _complete_steps(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, dir) of the step directories holding a state.json, newest first."""
    root = run_dir / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), d)
        for d in root.iterdir()
        if (m := _STEP_DIR.match(d.name)) and (d / STATE_FILE).is_file()
    ]
    return sorted(found, reverse=True)


def _read(directory: Path) -> Checkpoint:
    path = directory / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            f"{path}: unreadable checkpoint state ({exc}); delete that checkpoint "
            "directory to resume from the one before"
        ) from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("step"), int)
        or not isinstance(data.get("state"), dict)
    ):
        raise CheckpointError(
            f"{path}: not a checkpoint state (want a mapping with an integer 'step' and a 'state' "
            f"mapping)"
        )
    if data.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {data.get('version')!r}; this code reads "
            f"{CHECKPOINT_VERSION}"
        )
    return Checkpoint(data["step"], directory, data["state"])

