"""Observed response lengths: the table `tlt workload import` writes and replay reads.

One row per response, sorted by (batch, group, member): `batch` is the generation batch (an
observed RL step, or one DAPO generation round), `group` the prompt's index within it, `rank` the
data-parallel rank that generated it (-1: not in the file), `prompt_tokens` (-1: not in the file),
`length` the response tokens, `correct` (1, 0; -1: not in the file) and `mixed` (the group's
rewards were not all equal: 1, 0; -1: unknown), the same on every row of a group.
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
from workbench.contracts.tables import read_parquet

COLUMNS = ("batch", "group", "rank", "prompt_tokens", "length", "correct", "mixed")
UNKNOWN = -1


@dataclass(frozen=True)
class ObservedGroup:
    """One prompt's observed responses."""

    lengths: np.ndarray  # int64
    prompt_tokens: int  # -1: unknown
    rank: int  # -1: unknown
    correct: np.ndarray  # int8 per response: 1, 0, -1 unknown
    mixed: int  # 1: rewards not all equal, 0: all equal, -1: unknown


@dataclass(frozen=True)
class ObservedLengths:
    """The table as columns, with each group's row range."""

    batch: np.ndarray
    group: np.ndarray
    rank: np.ndarray
    prompt_tokens: np.ndarray
    length: np.ndarray
    correct: np.ndarray
    mixed: np.ndarray

    @property
    def responses(self) -> int:
        return len(self.length)

    @property
    def batches(self) -> int:
        return int(self.batch.max()) + 1 if len(self.batch) else 0

    @cached_property
    def starts(self) -> np.ndarray:
        """Row where each group begins, plus the end: group i is rows starts[i]:starts[i+1]."""
        return _group_starts(self.batch, self.group)

    @property
    def groups(self) -> int:
        return len(self.starts) - 1

    @cached_property
    def batch_groups(self) -> list[np.ndarray]:
        """Per batch, the indices (into starts) of its groups, in group order."""
        first_batch = self.batch[self.starts[:-1]]
        return [np.flatnonzero(first_batch == b) for b in range(self.batches)]

    @cached_property
    def rank_values(self) -> np.ndarray:
        """The distinct ranks the table records (empty if any row has none)."""
        if len(self.rank) and (self.rank != UNKNOWN).all():
            return np.unique(self.rank)
        return np.zeros(0, np.int64)

    def group_at(self, index: int) -> ObservedGroup:
        a, b = int(self.starts[index]), int(self.starts[index + 1])
        return ObservedGroup(self.length[a:b], int(self.prompt_tokens[a]), int(self.rank[a]),
                             self.correct[a:b], int(self.mixed[a]))

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({c: getattr(self, c) for c in COLUMNS})


def _group_starts(batch: np.ndarray, group: np.ndarray) -> np.ndarray:
    if not len(batch):
        return np.zeros(1, dtype=np.int64)
    change = np.flatnonzero((np.diff(batch) != 0) | (np.diff(group) != 0)) + 1
    return np.concatenate([[0], change, [len(batch)]]).astype(np.int64)


def from_frame(df: pd.DataFrame, source: str = "") -> ObservedLengths:
    """Validate and sort a table with COLUMNS; errors name the source and the column."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(source, missing[0], "<missing column>",
                          f"a table with columns {', '.join(COLUMNS)}")
    cols = {}
    for c in COLUMNS:
        values = pd.to_numeric(df[c], errors="coerce")
        if values.isna().any():
            row = int(np.flatnonzero(values.isna().to_numpy())[0])
            raise ConfigError(source, f"{c} (row {row})", df[c].iloc[row], "a whole number")
        cols[c] = values.to_numpy().astype(np.int64)
    if len(df) == 0:
        raise ConfigError(source, "<rows>", 0, "at least one response")
    if (cols["length"] < 0).any():
        row = int(np.flatnonzero(cols["length"] < 0)[0])
        raise ConfigError(source, f"length (row {row})", int(cols["length"][row]),
                          "a number of tokens >= 0")
    if (cols["batch"] < 0).any() or (cols["group"] < 0).any():
        raise ConfigError(source, "batch, group", "a negative index", "indices >= 0")
    order = np.lexsort((cols["group"], cols["batch"]))  # stable: members keep their order
    cols = {c: v[order] for c, v in cols.items()}
    return ObservedLengths(cols["batch"], cols["group"], cols["rank"], cols["prompt_tokens"],
                           cols["length"],
                           cols["correct"].astype(np.int8), cols["mixed"].astype(np.int8))


def write_observed(path: str | Path, obs: ObservedLengths) -> None:
    """The table as Parquet, atomically."""
    write_parquet(path, obs.frame())


def read_observed(path: str | Path) -> ObservedLengths:
    """The table written by `write_observed` (cached while the file is unchanged)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "lengths.data", str(p),
                          "an existing Parquet file written by `tlt workload import` (a relative "
                          "path is read beside the workload file)")
    stat = os.stat(p)
    return _read(str(p.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int, size: int) -> ObservedLengths:
    df = read_parquet(path, "the observed-lengths Parquet file `tlt workload import` writes "
                            "beside a workload (lengths.data)")
    return from_frame(df, path)
