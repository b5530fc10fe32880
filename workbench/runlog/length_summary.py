"""A run log's per-step length statistics, as `tlt workload import` and What-if's length upload take
them: any framework's console log or tracker export the run-log reader recognises (veRL's,
slime/miles, NeMo-RL, SkyRL, OpenRLHF, AReaL, ROLL: workbench/runlog/frameworks/), its steps with
a mean response length (timed or not: an asynchronous run's lengths are as good as any), written as
veRL's per-step summary table (`response_length/mean`, `/max`, `/min`, `/clip_ratio`, the
workload reader's `SummaryTable`). A column some step lacks is left out (the length fit then uses
what the framework logs: the clip ratio where it has no longest response). The run's prompts x
responses per prompt come with it where its launch config names them.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.runlog.frameworks import recognise, tracker
from workbench.runlog.reader import RunLog, read_run_log

MEAN = "response_length/mean"
COLUMNS = (MEAN, "response_length/max", "response_length/min", "response_length/clip_ratio")
_VERL_STEP = re.compile(r"(?:^|[\s)\]])step:\s*\d+\s+-\s+\S+:", re.MULTILINE)
HEAD_BYTES = 1 << 22  # a console log is recognised by its first 4 MiB


@dataclass(frozen=True)
class LengthSummary:
    table: Path  # the summary table written
    log: RunLog
    shape: tuple[int, int, int] | None  # prompts, group size, cap from the log's config (None)

    @property
    def responses_per_step(self) -> int | None:
        return self.shape[0] * self.shape[1] if self.shape else None

    @property
    def columns(self) -> list[str]:
        """The length statistics every step of the log gives (the table's columns)."""
        return [c for c in COLUMNS if c in pd.read_csv(self.table, nrows=0).columns]

    def describe(self) -> str:
        fw = self.log.framework
        return (f"{self.log.path}: a {fw.name} run log ({fw.describe()}); its {self.log.steps} "
                f"steps' length statistics ({', '.join(self.columns)}) as veRL's per-step summary")


def _head(path: Path) -> bytes:
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            return fh.read(HEAD_BYTES)
    except (OSError, EOFError):
        return b""


def _columns(path: Path, head: bytes) -> list[str]:
    """A table's column names from its first line (CSV header, or the first JSON object)."""
    first = head.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if first.startswith("{") or first.startswith("["):
        try:
            obj = json.loads(first.rstrip(",").lstrip("[")) if first.startswith("[{") else (
                json.loads(first))
        except ValueError:
            return []
        return list(obj) if isinstance(obj, dict) else []
    return [c.strip().strip('"') for c in first.split(",")]


def is_run_log(path: Path) -> bool:
    """Whether the file is a run log the run-log reader takes for lengths: any framework's console
    log (veRL's step lines or another framework's markers), a tracker export of another framework,
    or a TensorBoard event file."""
    if not path.is_file():
        return False
    if "tfevents" in path.name:
        return True
    head = _head(path)
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".csv", ".jsonl", ".json")):
        return tracker.framework_of(_columns(path, head)) is not None
    if name.endswith(".parquet") or b"\x00" in head[:4096]:
        return False
    text = head.decode("utf-8", "replace")
    return recognise.framework(text) is not None or bool(_VERL_STEP.search(text))


SHAPE_KEYS = ("data.train_batch_size", "actor_rollout_ref.rollout.n", "data.max_response_length")


def _shape(log: RunLog) -> tuple[int, int, int] | None:
    """Prompts per step, responses per prompt and the cap, where the log's config names all three
    (veRL's keys: another framework's settings are read onto them)."""
    said = [log.command.get(k) or log.config.get(k) for k in SHAPE_KEYS]
    try:
        p, n, cap = (int(float(s.value)) for s in said)
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None
    return (p, n, cap) if min(p, n, cap) >= 1 else None


def summary_table(path: Path, into: Path) -> LengthSummary:
    """The log's steps with a mean length, written as veRL's per-step summary in `into`."""
    log = read_run_log(path, need=MEAN)
    frame = pd.DataFrame({"step": log.metrics["step"].to_numpy()})
    for col in COLUMNS:
        v = log.column(col)
        if np.isfinite(v).all():
            frame[col] = v
    into.mkdir(parents=True, exist_ok=True)
    out = into / (Path(path).name.replace(".", "-") + ".steps.csv")
    frame.to_csv(out, index=False)
    return LengthSummary(out, log, _shape(log))


def run_log_summaries(files: list[Path], into: Path) -> tuple[list[Path], list[LengthSummary]]:
    """Run logs among the files (any framework's console log or tracker export) replaced by
    their per-step length summaries, written in `into` (workbench/runlog/length_summary.py)."""
    out, summaries = [], []
    for f in files:
        if not is_run_log(Path(f)):
            out.append(f)
            continue
        summaries.append(summary_table(Path(f), into))
        out.append(summaries[-1].table)
    return out, summaries
