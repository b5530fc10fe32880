"""`tlt workload import`: real response lengths in, as the observed-lengths table and a Workload.

Reads, by content (a directory: every .jsonl, .csv and .parquet in it):
- PolyTrace `packed_lengths` JSONL (one line per prompt: step, rank, dp_rank, local_index,
  input, output, validate), with its `dapo_filter_indices.jsonl` (which groups DAPO kept);
- a generic table (CSV, JSONL or Parquet), one row per response: `step`, `prompt` (group id),
  `length`, optional `prompt_tokens`, `correct`, `rank`;
- a per-step summary with veRL's metric names (`response_length/mean`, `/max`, `/min`,
  `/clip_ratio`): no single lengths, so it can only be fitted (`SummaryTable`).

A directory is read as PolyTrace publishes a run: its known sibling files are read for the report
(`reward_timings_step_*.jsonl`: each rank's reward-scoring seconds per step; the simulator has no
reward phase, so they are reported, not simulated), and any other file in it is skipped, each named
in the report. A file named on its own must be one of the kinds above.
Errors name the file, the line and the field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.contracts.length_data import (
    COLUMNS,
    UNKNOWN,
    ObservedLengths,
    from_frame,
)
from workbench.contracts.schema import ConfigError
from workbench.contracts.tables import read_table

SUMMARY_MEAN = "response_length/mean"
SUMMARY_FIELDS = ("max", "min", "clip_ratio")
GENERIC_REQUIRED = ("step", "prompt", "length")
REWARD_TIMING = "reward_time_s"  # PolyTrace's reward_timings_step_*.jsonl (rllm runs)
POLYTRACE_REQUIRED = ("step", "output")
SUFFIXES = (".jsonl", ".csv", ".parquet")
# The largest count a file may give (a length, a step, a rank): a workload's cap is at most 2^20.
MAX_NUMBER = 1 << 20


@dataclass(frozen=True)
class SummaryTable:
    """veRL's per-step length metrics (NaN where a column is absent)."""

    step: np.ndarray
    mean: np.ndarray
    max: np.ndarray
    min: np.ndarray
    clip_ratio: np.ndarray


@dataclass(frozen=True)
class DapoFilter:
    """What DAPO's dynamic sampling kept, per generation batch (PolyTrace's dapo_filter_indices)."""

    kept: dict[int, list[int]]  # workload_step -> kept prompt indices
    train_batch_size: int
    prompt_count: int
    trainer_steps: int  # updates the batches fed


@dataclass(frozen=True)
class Imported:
    files: list[str]
    observed: ObservedLengths | None = None
    summary: SummaryTable | None = None
    dapo: DapoFilter | None = None
    steps: list[int] = field(default_factory=list)  # the file's step numbers, one per batch
    notes: list[str] = field(default_factory=list)


def expand(paths: list[str | Path]) -> list[Path]:
    """Files given, and each directory's .jsonl/.csv/.parquet files (sorted)."""
    return [f for f, _ in _listed(paths)]


def _listed(paths: list[str | Path]) -> list[tuple[Path, bool]]:
    """(file, whether it came from a directory listing): a listed file of no known kind is skipped,
    a named one refused."""
    out: list[tuple[Path, bool]] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file())
            if not found:
                raise ConfigError(str(p), "<directory>", f"holds no {', '.join(SUFFIXES)} file",
                                  "a directory of length files (PolyTrace's packed_lengths "
                                  "JSONL, or tables)")
            out += [(f, True) for f in found]
        elif p.is_file():
            out.append((p, False))
        else:
            raise ConfigError(str(p), "<file>", "does not exist", "an existing file or directory")
    return out


def _int(value, where: str, name: str, low: int = 0) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or not low <= value <= MAX_NUMBER):
        raise ConfigError(where, name, value, f"a whole number from {low} to {MAX_NUMBER:,}")
    return int(value)


LENGTHS = ("response lengths: PolyTrace packed_lengths JSONL, a CSV/JSONL/Parquet table with step, "
           "prompt, length, or veRL's per-step response_length/* metrics")
_CONSOLE_STEP = re.compile(rb"step:\s*\d+\s+-\s+\S+:")


def _table(path: Path) -> pd.DataFrame | list[dict]:
    if path.suffix.lower() != ".parquet" and _CONSOLE_STEP.search(path.read_bytes()[:1 << 20]):
        raise ConfigError(str(path), "<file>", "is a veRL console log (step:N - key:value lines)",
                          f"{LENGTHS}; a run log is read by `tlt calibrate --run-log` and "
                          "What-if's Run log, which model each step's lengths from its statistics")
    return read_table(path, LENGTHS)


def read_files(paths: list[str | Path]) -> Imported:
    """Every file parsed and combined (all of one kind: lengths, or a summary)."""
    listed = _listed(paths)
    files = [f for f, _ in listed]
    frames, summaries, dapo, notes, rewards, others = [], [], None, [], [], []
    for path, from_dir in listed:
        data = _table(path)
        keys = set(data[0]) if isinstance(data, list) else set(data.columns)
        if REWARD_TIMING in keys:
            rewards.append((path, data))
        elif "kept_prompt_indices" in keys:
            dapo = _dapo(path, data)
        elif isinstance(data, list) and {"output", "input"} <= keys:
            frame, skipped = _polytrace(path, data)
            frames.append(frame)
            if skipped:
                notes.append(f"{path.name}: skipped {skipped} validation lines (validate: true)")
        elif SUMMARY_MEAN in keys:
            summaries.append(_summary(path, data))
        elif set(GENERIC_REQUIRED) <= keys:
            frames.append(_generic(path, data))
        elif from_dir:
            others.append(path.name)
        else:
            raise ConfigError(str(path), "<columns>",
                              f"has the columns {', '.join(sorted(map(str, keys)))[:120]}",
                              "PolyTrace packed_lengths lines (step, input, output), a table with "
                              "step, prompt, length (optional prompt_tokens, correct, rank), or "
                              f"veRL's '{SUMMARY_MEAN}' per step")
    skipped = [f"skipped (not lengths): {', '.join(others)}"] if others else []
    notes += _reward_note(rewards) + skipped
    if frames and summaries:
        raise ConfigError(", ".join(map(str, files)), "<files>", "hold lengths and a summary",
                          "one kind per import: response lengths, or veRL's per-step summary")
    if summaries:
        s = pd.concat(summaries).sort_values("step")
        return Imported([str(f) for f in files],
                        summary=SummaryTable(*(s[c].to_numpy(float) for c in
                                               ("step", "mean", "max", "min", "clip_ratio"))),
                        notes=notes)
    if not frames:
        raise ConfigError(", ".join(map(str, files)), "<files>", "hold no response lengths",
                          "at least one lengths file")
    return _combine(files, frames, dapo, notes)


def _combine(files: list[Path], frames: list[pd.DataFrame], dapo: DapoFilter | None,
             notes: list[str]) -> Imported:
    df = pd.concat(frames, ignore_index=True)
    steps = sorted(df["step"].unique().tolist())
    df["batch"] = np.searchsorted(np.array(steps), df["step"].to_numpy())
    if dapo is not None:
        mixed = np.zeros(len(df), dtype=np.int8)
        for step, kept in dapo.kept.items():
            mixed[(df["step"] == step).to_numpy() & df["group"].isin(kept).to_numpy()] = 1
        known = df["step"].isin(list(dapo.kept)).to_numpy()
        df["mixed"] = np.where(known, mixed, df["mixed"])
        notes.append("correctness is not in the files: groups DAPO kept (dapo_filter_indices) are "
                     "marked mixed-reward, the others all-equal, so filtering replays what DAPO "
                     "kept")
    obs = from_frame(df[list(COLUMNS)], ", ".join(map(str, files)))
    return Imported([str(f) for f in files], observed=obs, dapo=dapo, steps=[int(s) for s in steps],
                    notes=notes)


def _polytrace(path: Path, rows: list[dict]) -> tuple[pd.DataFrame, int]:
    """One row per response; the prompt's index in its batch is dp_rank-major (veRL splits a batch
    contiguously over the dp ranks), which is how dapo_filter_indices numbers prompts."""
    per: list[tuple] = []
    skipped = 0
    for n, row in enumerate(rows, 1):
        where = f"{path}:{n}"
        for name in POLYTRACE_REQUIRED:
            if name not in row:
                raise ConfigError(where, name, "<missing>",
                                  "PolyTrace packed_lengths fields step, input, output")
        if row.get("validate", False):
            skipped += 1
            continue
        out = row["output"]
        if not isinstance(out, list) or not out:
            raise ConfigError(where, "output", out, "a non-empty list of response lengths")
        lengths = [_int(v, where, f"output[{i}]") for i, v in enumerate(out)]
        dp = _int(row.get("dp_rank", row.get("rank", 0)), where, "dp_rank")
        per.append((_int(row["step"], where, "step"), dp,
                    _int(row.get("local_index", n - 1), where, "local_index"),
                    _int(row.get("rank", dp), where, "rank"),
                    _int(row.get("input", UNKNOWN), where, "input", UNKNOWN), lengths))
    meta = pd.DataFrame([p[:5] for p in per],
                        columns=["step", "dp", "local", "rank", "prompt_tokens"])
    # prompts of lower dp ranks come first in the batch
    per_dp = meta.groupby(["step", "dp"]).size()
    counts = per_dp.groupby(level=0).cumsum() - per_dp
    offset = counts.reindex(pd.MultiIndex.from_frame(meta[["step", "dp"]])).to_numpy()
    meta["group"] = offset + meta["local"].to_numpy()
    sizes = [len(p[5]) for p in per]
    frame = meta.loc[meta.index.repeat(sizes),
                     ["step", "group", "rank", "prompt_tokens"]].reset_index(drop=True)
    frame["length"] = np.concatenate([p[5] for p in per]).astype(np.int64)
    frame["correct"], frame["mixed"] = UNKNOWN, UNKNOWN
    return frame, skipped


def _dapo(path: Path, data) -> DapoFilter:
    rows = data if isinstance(data, list) else data.to_dict("records")
    kept, tbs, count, updates = {}, 0, 0, set()
    for n, row in enumerate(rows, 1):
        where = f"{path}:{n}"
        for name in ("workload_step", "kept_prompt_indices", "train_batch_size", "prompt_count"):
            if name not in row:
                raise ConfigError(where, name, "<missing>",
                                  "dapo_filter_indices fields workload_step, prompt_count, "
                                  "train_batch_size, kept_prompt_indices")
        idx = row["kept_prompt_indices"]
        if not isinstance(idx, list):
            raise ConfigError(where, "kept_prompt_indices", idx, "a list of prompt indices")
        # The indices before the step: a row with both wrong names the indices.
        indices = [_int(i, where, "kept_prompt_indices") for i in idx]
        kept[_int(row["workload_step"], where, "workload_step")] = indices
        updates.add(_int(row.get("trainer_step", n), where, "trainer_step"))
        tbs = _int(row["train_batch_size"], where, "train_batch_size", 1)
        count = _int(row["prompt_count"], where, "prompt_count", 1)
    return DapoFilter(kept, tbs, count, len(updates))


def _generic(path: Path, data) -> pd.DataFrame:
    df = pd.DataFrame(data) if isinstance(data, list) else data
    # first data row's line (0: row number)
    line0 = 1 if path.suffix == ".jsonl" else 2 if path.suffix == ".csv" else 0
    out = pd.DataFrame()
    for name in ("step", "length", "prompt_tokens", "rank"):
        if name not in df.columns:
            out[name] = UNKNOWN
            continue
        values = pd.to_numeric(df[name], errors="coerce")
        bad = values.isna() | (values < 0) | (values > MAX_NUMBER) | (values != values.round())
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            where = f"{path}:{row + line0}" if line0 else f"{path} (row {row})"
            raise ConfigError(where, name, df[name].iloc[row],
                              f"a whole number from 0 to {MAX_NUMBER:,}")
        out[name] = values.astype(np.int64)
    # a prompt's id may be any text or number: (step, id) pairs are numbered by first appearance
    pairs = pd.MultiIndex.from_arrays([out["step"], df["prompt"].astype(str)])
    out["group"] = pd.factorize(pairs)[0]
    out["correct"] = _correct(path, df, line0) if "correct" in df.columns else UNKNOWN
    out["mixed"] = UNKNOWN
    if "correct" in df.columns:
        by = out.groupby(["step", "group"])["correct"]
        out["mixed"] = (by.transform("min") != by.transform("max")).astype(np.int8)
    return out


def _correct(path: Path, df: pd.DataFrame, line0: int) -> np.ndarray:
    raw = df["correct"]
    if raw.dtype == bool:
        return raw.to_numpy().astype(np.int8)
    words = {"true": 1, "false": 0, "1": 1, "0": 0, "1.0": 1, "0.0": 0}
    mapped = raw.astype(str).str.strip().str.lower().map(words)
    if mapped.isna().any():
        row = int(np.flatnonzero(mapped.isna().to_numpy())[0])
        where = f"{path}:{row + line0}" if line0 else f"{path} (row {row})"
        raise ConfigError(where, "correct", raw.iloc[row], "true/false or 1/0")
    return mapped.to_numpy().astype(np.int8)


def _summary(path: Path, data) -> pd.DataFrame:
    df = pd.DataFrame(data) if isinstance(data, list) else data
    if not len(df):
        raise ConfigError(str(path), "<rows>", "holds no rows", f"one row per step with "
                          f"veRL's '{SUMMARY_MEAN}'")
    step_col = next((c for c in ("step", "training/global_step", "_step") if c in df.columns), None)
    out = pd.DataFrame({"step": np.arange(len(df), dtype=float)})
    columns = [("mean", SUMMARY_MEAN)] + [(f, f"response_length/{f}") for f in SUMMARY_FIELDS]
    for name, col in ([("step", step_col)] if step_col else []) + columns:
        if col in df.columns:
            values = pd.to_numeric(df[col], errors="coerce")
        else:
            values = pd.Series(np.nan, index=df.index)
        bad = ~np.isfinite(values.to_numpy(float)) if col in df.columns else []
        if np.any(bad):
            row = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{path} (row {row})", col, df[col].iloc[row], "a finite number")
        out[name] = values.to_numpy(float)
    return out


def _reward_note(rewards: list[tuple[Path, list[dict] | pd.DataFrame]]) -> list[str]:
    """PolyTrace's reward timings, read for the report: the files, the steps and ranks, the
    seconds."""
    if not rewards:
        return []
    rows = [r for _, data in rewards
            for r in (data if isinstance(data, list) else data.to_dict("records"))]
    secs = [float(r[REWARD_TIMING]) for r in rows if isinstance(r.get(REWARD_TIMING), (int, float))]
    steps = {str(r.get("step")) for r in rows}  # as written: a step may be any JSON value
    more = f" and {len(rewards) - 3} more" if len(rewards) > 3 else ""
    names = ", ".join(p.name for p, _ in rewards[:3]) + more
    span = f"{min(secs):,.1f}-{max(secs):,.1f} s per rank and step" if secs else "no seconds"
    return [f"read (reported, not simulated: the simulator has no reward phase): {names}: reward "
            f"scoring {span} "
            f"over {len(steps)} step(s), {len(rows)} rank report(s)"]
