"""`tlt workload import` for agentic runs: multi-turn trajectories in, as the turns table.

Reads, by content (a directory: every .jsonl, .jsonl.gz, .csv and .parquet in it):
- PolyTrace's multi-turn workload log (`multiturn_workload_step_N.jsonl`, Search-R1 on veRL with
  SGLang): one line per trajectory with `step`, `prompt_group_id`, `sample_id`, `turns` (per turn
  `prompt_tokens`, `cached_tokens`, `completion_tokens`, `finish_reason`, `engine_latency_s`) and
  `tool_calls` (per call the `turn` it follows, `latency_s`, `append_len`);
- the generic table for a team's own agent logs (CSV, JSONL or Parquet; docs/formats.md), one row
  per generation turn: `step`, `trajectory`, `turn`, `prompt_tokens`, `completion_tokens`, and
  optionally `group`, `cached_tokens`, `tool_latency_s`, `tool_tokens`, `tool_calls`,
  `engine_latency_s`, `rank`, `finish`.
A turn's tool tokens are what the next turn's prompt adds to this one's prompt and completion (the
tools' output and the chat template's tokens) unless the file gives `tool_tokens`; a turn's tool
latency is the sum of its calls' (veRL runs a turn's calls one after the other). A step whose
groups are not all of the run's group size (a run stopped mid-step) is left out, and said so.
Errors name the file, the line (or row) and the field.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.contracts.schema import ConfigError
from workbench.contracts.turn_data import COLUMNS, FINISH, UNKNOWN, ObservedTurns, from_frame

POLYTRACE_KEYS = ("turns", "tool_calls", "prompt_group_id", "sample_id")
GENERIC_REQUIRED = ("step", "trajectory", "turn", "prompt_tokens", "completion_tokens")
SUFFIXES = (".jsonl", ".gz", ".csv", ".parquet")


@dataclass(frozen=True)
class ImportedTurns:
    files: list[str]
    turns: ObservedTurns
    steps: list[int]  # the files' step numbers, one per batch
    cap: int | None  # the run's response cap where the files record it (PolyTrace)
    notes: list[str] = field(default_factory=list)


def _files(paths: list[str | Path]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in SUFFIXES)
            if not found:
                raise ConfigError(str(p), "<directory>", str(p),
                                  "a directory holding .jsonl(.gz), .csv or .parquet files")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(str(p), "<file>", str(p), "an existing file or directory")
    return out


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(
        encoding="utf-8")


def _jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        with _open(path) as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}", "<line>", line.strip()[:60],
                                      f"one JSON object per line ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise ConfigError(f"{path}:{n}", "<line>", row, "a JSON object")
                rows.append(row)
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise ConfigError(str(path), "<file>", "unreadable", f"UTF-8 JSON lines ({exc})") from None
    if not rows:
        raise ConfigError(str(path), "<file>", "empty", "at least one line")
    return rows


def _table(path: Path) -> list[dict] | pd.DataFrame:
    if path.suffix in (".jsonl", ".gz"):
        return _jsonl(path)
    try:
        return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    except Exception as exc:  # pandas and pyarrow raise several kinds for a malformed file
        raise ConfigError(str(path), "<file>", "unreadable",
                          f"a {path.suffix[1:]} table ({exc})") from None


def _keys(data: list[dict] | pd.DataFrame) -> set[str]:
    return set(data[0]) if isinstance(data, list) else set(data.columns)


def is_turn_data(paths: list[str | Path]) -> bool:
    """Whether the first file is multi-turn (PolyTrace's log or the generic turns table); a
    path that is not there or not readable is the length reader's to refuse."""
    try:
        keys = _keys(_table(_files(paths)[0]))
    except ConfigError:
        return False
    return set(POLYTRACE_KEYS) <= keys or set(GENERIC_REQUIRED) <= keys


def _num(value, where: str, name: str, whole: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    if not ok or (whole and value != int(value)) or value != value:
        raise ConfigError(where, name, value, "a whole number >= 0" if whole else "a number >= 0")
    return float(value)


def _polytrace(path: Path, rows: list[dict]) -> tuple[list[tuple], int, int | None]:
    """One tuple per turn (COLUMNS order, batch = the file's step), the validation lines skipped,
    and the cap the lines record."""
    out, skipped, cap = [], 0, None
    for n, row in enumerate(rows, 1):
        where = f"{path}:{n}"
        for name in ("step", *POLYTRACE_KEYS):
            if name not in row:
                raise ConfigError(where, name, "<missing>", "PolyTrace multi-turn fields step, "
                                  "prompt_group_id, sample_id, turns, tool_calls")
        if row.get("validate", False):
            skipped += 1
            continue
        if "max_response_len" in row:
            cap = int(_num(row["max_response_len"], where, "max_response_len"))
        turns, calls = row["turns"], row["tool_calls"]
        if not isinstance(turns, list) or not turns:
            raise ConfigError(where, "turns", turns, "a non-empty list of generation turns")
        if not isinstance(calls, list):
            raise ConfigError(where, "tool_calls", calls, "a list of tool calls")
        after: dict[int, list[float]] = {}
        for i, c in enumerate(calls):
            if not isinstance(c, dict) or "turn" not in c or "latency_s" not in c:
                raise ConfigError(where, f"tool_calls[{i}]", c, "a call with turn and latency_s")
            k = int(_num(c["turn"], where, f"tool_calls[{i}].turn"))
            after.setdefault(k, []).append(_num(c["latency_s"], where,
                                                f"tool_calls[{i}].latency_s", whole=False))
        step = int(_num(row["step"], where, "step"))
        group = int(_num(row["prompt_group_id"], where, "prompt_group_id"))
        member = int(_num(row["sample_id"], where, "sample_id"))
        for k, t in enumerate(turns):
            at = f"turns[{k}]"
            if not isinstance(t, dict):
                raise ConfigError(where, at, t, "a turn object")
            for name in ("prompt_tokens", "completion_tokens"):
                if name not in t:
                    raise ConfigError(where, f"{at}.{name}", "<missing>", "a number of tokens")
            last = k == len(turns) - 1
            lat = after.get(k, [])
            finish = str(t.get("finish_reason", "other"))
            out.append((step, group, member, UNKNOWN, k,
                        _num(t["prompt_tokens"], where, f"{at}.prompt_tokens"),
                        _num(t.get("cached_tokens", UNKNOWN), where, f"{at}.cached_tokens")
                        if t.get("cached_tokens") is not None else UNKNOWN,
                        _num(t["completion_tokens"], where, f"{at}.completion_tokens"),
                        0 if last else len(lat), np.nan,
                        FINISH.index(finish) if finish in FINISH else FINISH.index("other"),
                        0.0 if last else float(sum(lat)),
                        _num(t["engine_latency_s"], where, f"{at}.engine_latency_s", False)
                        if "engine_latency_s" in t else np.nan))
    return out, skipped, cap


def _generic(path: Path, data: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """The generic table's rows in COLUMNS (batch = the step, group and member to be numbered,
    tool_tokens NaN where to derive)."""
    df = pd.DataFrame(data) if isinstance(data, list) else data
    line0 = 1 if path.suffix in (".jsonl", ".gz") else 2 if path.suffix == ".csv" else 0
    missing = [c for c in GENERIC_REQUIRED if c not in df.columns]
    if missing:
        raise ConfigError(str(path), missing[0], "<missing column>",
                          f"a turns table with {', '.join(GENERIC_REQUIRED)} (docs/formats.md)")

    def column(name: str, whole: bool, default: float) -> np.ndarray:
        if name not in df.columns:
            return np.full(len(df), default, dtype=float)
        values = pd.to_numeric(df[name], errors="coerce")
        given = df[name].notna() & (df[name].astype(str).str.strip() != "")
        bad = given & (values.isna() | (values < 0) | ((values != values.round()) & whole))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            where = f"{path}:{row + line0}" if line0 else f"{path} (row {row})"
            kind = "a whole number >= 0" if whole else "a number >= 0 (or empty)"
            raise ConfigError(where, name, df[name].iloc[row], kind)
        return values.to_numpy(float)

    out = pd.DataFrame({"batch": column("step", True, 0)})
    for name in ("step", "turn", "prompt_tokens", "completion_tokens"):
        values = column(name, True, 0)
        if np.isnan(values).any():
            row = int(np.flatnonzero(np.isnan(values))[0])
            where = f"{path}:{row + line0}" if line0 else f"{path} (row {row})"
            raise ConfigError(where, name, "<empty>", "a whole number >= 0")
    traj = df["trajectory"].astype(str)
    group = df["group"].astype(str) if "group" in df.columns else traj
    step = column("step", True, 0)
    out["group"] = pd.factorize(pd.MultiIndex.from_arrays([step, group]))[0]
    # a trajectory's index in its group, by first appearance
    first = pd.factorize(pd.MultiIndex.from_arrays([step, group, traj]))[0]
    out["member"] = pd.Series(first).groupby(out["group"]).transform(
        lambda s: pd.factorize(s)[0]).to_numpy()
    out["rank"] = np.nan_to_num(column("rank", True, UNKNOWN), nan=UNKNOWN)
    out["turn"] = column("turn", True, 0)
    out["prompt_tokens"] = column("prompt_tokens", True, 0)
    out["cached_tokens"] = np.nan_to_num(column("cached_tokens", True, UNKNOWN), nan=UNKNOWN)
    out["completion_tokens"] = column("completion_tokens", True, 0)
    out["tool_calls"] = column("tool_calls", True, np.nan)
    out["tool_tokens"] = column("tool_tokens", True, np.nan)
    words = {w: i for i, w in enumerate(FINISH)}
    out["finish"] = (df["finish"].astype(str).map(words).fillna(words["other"]).to_numpy()
                     if "finish" in df.columns else words["other"])
    out["tool_s"] = column("tool_latency_s", False, np.nan)
    out["engine_s"] = column("engine_latency_s", False, np.nan)
    return out


def _derive(df: pd.DataFrame) -> pd.DataFrame:
    """Per turn: the next turn's prompt less this prompt and completion where the file gives no
    tool tokens; nothing after a trajectory's last turn."""
    df = df.sort_values(["batch", "group", "member", "turn"], kind="stable").reset_index(drop=True)
    key = ["batch", "group", "member"]
    nxt = df.groupby(key)["prompt_tokens"].shift(-1)
    last = nxt.isna()
    derived = (nxt - df["prompt_tokens"] - df["completion_tokens"]).clip(lower=0)
    df["tool_tokens"] = np.where(last, 0, df["tool_tokens"].fillna(derived))
    df["tool_calls"] = np.where(last, 0, df["tool_calls"].fillna(1))
    df["tool_s"] = np.where(last, 0.0, df["tool_s"])
    return df


def _check_numbering(df: pd.DataFrame, source: str) -> None:
    """Each trajectory's turns are 0, 1, ... (a gap or a repeat is refused, naming it)."""
    key = ["batch", "group", "member"]
    d = df.sort_values([*key, "turn"], kind="stable")
    expected = d.groupby(key).cumcount()
    bad = d["turn"].to_numpy() != expected.to_numpy()
    if bad.any():
        row = d.iloc[int(np.flatnonzero(bad)[0])]
        turns = d.loc[(d[key] == row[key]).all(axis=1), "turn"].astype(int).tolist()
        raise ConfigError(source, "turn", f"step {int(row['batch'])}, prompt {int(row['group'])}, "
                          f"trajectory {int(row['member'])}: turns {turns}",
                          "turns numbered 0, 1, ... within each trajectory")


def _whole_steps(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The steps whose groups all have the run's group size (the most common one)."""
    sizes = df[df["turn"] == 0].groupby(["batch", "group"]).size()
    size = Counter(sizes.tolist()).most_common(1)[0][0]
    odd = sorted({int(b) for (b, _), n in sizes.items() if n != size})
    if not odd:
        return df, []
    kept = df[~df["batch"].isin(odd)]
    if kept.empty:
        raise ConfigError("<files>", "group sizes", sorted(set(sizes.tolist())),
                          "at least one step whose groups all have one size")
    n = int(sizes[sizes.index.get_level_values(0).isin(odd)].sum())
    return kept, [f"left out step(s) {', '.join(map(str, odd))}: {n} trajectories in groups not "
                  f"of the run's size {size} (a run stopped mid-step)"]


def read_turn_files(paths: list[str | Path]) -> ImportedTurns:
    """Every file parsed and combined into one turns table."""
    files = _files(paths)
    frames, notes, cap, skipped = [], [], None, 0
    for path in files:
        data = _table(path)
        keys = _keys(data)
        if isinstance(data, list) and set(POLYTRACE_KEYS) <= keys:
            rows, n, c = _polytrace(path, data)
            skipped, cap = skipped + n, c if c is not None else cap
            frames.append(pd.DataFrame(rows, columns=list(COLUMNS)))
        elif set(GENERIC_REQUIRED) <= keys:
            frames.append(_generic(path, data))
        else:
            raise ConfigError(str(path), "<columns>", ", ".join(sorted(keys))[:120],
                              "PolyTrace multi-turn lines (step, prompt_group_id, sample_id, "
                              f"turns, tool_calls) or a turns table with "
                              f"{', '.join(GENERIC_REQUIRED)}")
    if skipped:
        notes.append(f"skipped {skipped} validation trajectories (validate: true)")
    df = pd.concat(frames, ignore_index=True)
    if df.empty:
        raise ConfigError(", ".join(map(str, files)), "<rows>", 0, "at least one training turn")
    _check_numbering(df, ", ".join(map(str, files)))
    df, dropped = _whole_steps(_derive(df))
    steps = sorted(int(s) for s in df["batch"].unique())
    df = df.assign(batch=np.searchsorted(np.array(steps), df["batch"].to_numpy()))
    if df["tool_s"].isna().any():
        notes.append("tool latency missing on some turns: replay draws it from the workload's "
                     "declared distribution (agentic.tool_latency_median_s, tool_latency_sigma)")
    turns = from_frame(df, ", ".join(map(str, files)))
    return ImportedTurns([str(f) for f in files], turns, steps, cap, notes + dropped)
