"""Observed agentic trajectories: the turns table `tlt workload import` writes and replay reads.

One row per generation turn, sorted by (batch, group, member, turn): `batch` the generation batch
(an observed RL step), `group` the prompt's index within it, `member` the trajectory's index in its
group, `rank` the data-parallel rank that generated it (-1: not in the file), `turn` from 0;
`prompt_tokens` the turn's whole prompt (the first turn's: the task prompt), `cached_tokens` of it
the engine's prefix cache held (-1: not in the file), `completion_tokens` generated; after the turn
(0 on a trajectory's last), `tool_calls` run, `tool_tokens` appended (the next turn's prompt less
this one's and its completion: tool output and chat-template tokens), `tool_s` their latency (NaN:
not in the file); `engine_s` the engine's latency for the turn, queueing included (NaN: not in the
file); `finish` why the turn ended (FINISH).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.contracts.fileio import write_parquet
from workbench.contracts.schema import ConfigError

INT_COLUMNS = ("batch", "group", "member", "rank", "turn", "prompt_tokens", "cached_tokens",
               "completion_tokens", "tool_calls", "tool_tokens", "finish")
FLOAT_COLUMNS = ("tool_s", "engine_s")
COLUMNS = INT_COLUMNS + FLOAT_COLUMNS
UNKNOWN = -1
FINISH = ("stop", "tool_calls", "length", "other")


@dataclass(frozen=True)
class ObservedTrajectory:
    """One observed trajectory's turns (arrays over its turns)."""

    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray
    completion: np.ndarray
    tool_tokens: np.ndarray  # after each turn (0 after the last)
    tool_s: np.ndarray  # after each turn (0 after the last; NaN unknown)
    engine_s: np.ndarray
    rank: int


@dataclass(frozen=True)
class ObservedTurns:
    """The table as columns (COLUMNS), with each trajectory's and each group's row range."""

    cols: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    @property
    def rows(self) -> int:
        return len(self.cols["batch"])

    @property
    def batches(self) -> int:
        return int(self.cols["batch"].max()) + 1 if self.rows else 0

    @cached_property
    def trajectory_starts(self) -> np.ndarray:
        """Row where each trajectory begins, plus the end."""
        c = self.cols
        return _starts(c["batch"], c["group"], c["member"])

    @cached_property
    def group_starts(self) -> np.ndarray:
        """Index (into trajectory_starts) of each group's first trajectory, plus the end."""
        first = self.trajectory_starts[:-1]
        c = self.cols
        return _starts(c["batch"][first], c["group"][first])

    @cached_property
    def batch_groups(self) -> list[np.ndarray]:
        """Per batch, the indices (into group_starts) of its groups, in group order."""
        first = self.trajectory_starts[self.group_starts[:-1]]
        batch = self.cols["batch"][first]
        return [np.flatnonzero(batch == b) for b in range(self.batches)]

    @property
    def groups(self) -> int:
        return len(self.group_starts) - 1

    def trajectory(self, index: int) -> ObservedTrajectory:
        a, b = int(self.trajectory_starts[index]), int(self.trajectory_starts[index + 1])
        c = self.cols
        return ObservedTrajectory(c["prompt_tokens"][a:b], c["cached_tokens"][a:b],
                                  c["completion_tokens"][a:b], c["tool_tokens"][a:b],
                                  c["tool_s"][a:b], c["engine_s"][a:b], int(c["rank"][a]))

    def group(self, index: int) -> list[ObservedTrajectory]:
        """The trajectories of group `index` (into group_starts)."""
        a, b = int(self.group_starts[index]), int(self.group_starts[index + 1])
        return [self.trajectory(t) for t in range(a, b)]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({c: self.cols[c] for c in COLUMNS})


def _starts(*keys: np.ndarray) -> np.ndarray:
    n = len(keys[0])
    if not n:
        return np.zeros(1, dtype=np.int64)
    change = np.zeros(n - 1, dtype=bool)
    for k in keys:
        change |= np.diff(k) != 0
    return np.concatenate([[0], np.flatnonzero(change) + 1, [n]]).astype(np.int64)


def from_frame(df: pd.DataFrame, source: str = "") -> ObservedTurns:
    """Validate and sort a table with COLUMNS; errors name the source, the column and the row."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(source, missing[0], "<missing column>",
                          f"a turns table with columns {', '.join(COLUMNS)}")
    if len(df) == 0:
        raise ConfigError(source, "<rows>", 0, "at least one turn")
    cols: dict[str, np.ndarray] = {}
    for c in COLUMNS:
        values = pd.to_numeric(df[c], errors="coerce")
        if c in INT_COLUMNS:
            bad = values.isna() | (values < UNKNOWN)
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                raise ConfigError(source, f"{c} (row {row})", df[c].iloc[row],
                                  "a whole number >= -1")
            cols[c] = values.to_numpy().astype(np.int64)
        else:
            arr = values.to_numpy().astype(float)
            if (arr < 0).any():
                row = int(np.flatnonzero(arr < 0)[0])
                raise ConfigError(source, f"{c} (row {row})", arr[row], "seconds >= 0 (or empty)")
            cols[c] = arr
    for c in ("batch", "group", "member", "turn", "prompt_tokens", "completion_tokens",
              "tool_calls", "tool_tokens", "finish"):
        if (cols[c] < 0).any():
            row = int(np.flatnonzero(cols[c] < 0)[0])
            raise ConfigError(source, f"{c} (row {row})", int(cols[c][row]), "a number >= 0")
    order = np.lexsort((cols["turn"], cols["member"], cols["group"], cols["batch"]))
    cols = {c: v[order] for c, v in cols.items()}
    turns = ObservedTurns(cols)
    starts = turns.trajectory_starts
    expected = np.arange(len(order)) - np.repeat(starts[:-1], np.diff(starts))
    if (cols["turn"] != expected).any():
        row = int(np.flatnonzero(cols["turn"] != expected)[0])
        raise ConfigError(source, f"turn (row {row})", int(cols["turn"][row]),
                          f"turns numbered 0, 1, ... within each trajectory (expected "
                          f"{int(expected[row])})")
    return turns


def write_turns(path: str | Path, turns: ObservedTurns) -> None:
    """The table as Parquet (32-bit whole numbers, zstd: a run's turns are tens of thousands of
    rows), atomically."""
    frame = turns.frame().astype({c: np.int32 for c in INT_COLUMNS})
    write_parquet(path, frame, compression="zstd")


def read_turns(path: str | Path) -> ObservedTurns:
    """The table written by `write_turns` (cached while the file is unchanged)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "agentic.data", str(p),
                          "an existing turns table (Parquet) written by `tlt workload import`")
    stat = os.stat(p)
    return _read(str(p.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int, size: int) -> ObservedTurns:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several kinds for a file that is not Parquet
        raise ConfigError(path, "<file>", "unreadable",
                          "a Parquet turns table written by `tlt workload import` "
                          f"({exc})") from None
    return from_frame(df, path)
