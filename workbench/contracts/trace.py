"""Trace: what a real run records, per engine step, per request and per RL step.

A trace is a directory (schema: `traces/README.md`):

    meta.json          run configuration, machine, trace_version
    steps.parquet      one row per engine step
    requests.parquet   one row per request (one response)
    rl_steps.parquet   one row per RL step (a capture-only run has one)
    timeline.parquet   optional: what each worker did when (the simulator writes the same table)

The row classes (`StepRow`, `RequestRow`, `RLStepRow`, `TimelineRow`) are the schema: the
column tables derive from them, and producers build rows of them.

`load_trace` refuses a malformed or truncated trace with an error naming the
file, the column and the fix; `write_trace` writes into a temporary sibling
directory and renames it, so a crash never leaves half a trace.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from workbench.contracts.file_kind import parquet_frame, text_problem
from workbench.contracts.fileio import write_dir_atomic

TRACE_VERSION = 2
# Older versions still read, and how their columns map to this one's, per table.
OLD_COLUMNS = {1: {"steps": {"engine": "worker", "step": "engine_step"},
                   "requests": {"engine": "worker"}, "timeline": {"step": "rl_step"}}}


def _col(doc: str) -> Any:
    return field(metadata={"doc": doc})


def _optional_col(doc: str, default: Any) -> Any:
    """A column a trace may lack (written before it existed, or by an engine that does not
    record it): `load_trace` fills it with `default`, the value that means "not recorded"."""
    factory = (lambda: list(default)) if isinstance(default, list) else (lambda: default)
    return field(default_factory=factory, metadata={"doc": doc, "optional": True})


class _Upgrades:
    """Rows unpickled under an older version's field names (the rows a `tlt train` checkpoint keeps,
    from a run begun before) take this version's."""

    _table = ""  # the OLD_COLUMNS table whose renames apply

    def __setstate__(self, state: dict[str, Any]) -> None:
        renames = {old: new for tables in OLD_COLUMNS.values()
                   for old, new in tables.get(self._table, {}).items()}
        self.__dict__.update({renames.get(k, k): v for k, v in state.items()})


@dataclass
class StepRow(_Upgrades):
    """One engine step (`steps.parquet`)."""

    _table = "steps"

    rl_step: int = _col("RL step this engine step belongs to")
    worker: int = _col("worker (engine) index")
    engine_step: int = _col("engine step index within the worker's engine, from 0")
    start_s: float = _col("seconds since the run started")
    wall_s: float = _col("wall time of the engine step")
    batch_size: int = _col("requests scheduled this step (decoding or prefilling)")
    num_waiting: int = _col("requests waiting for a slot")
    prefill_requests: int = _col("requests prefilling this step")
    prefill_tokens: int = _col("prompt tokens prefilled this step")
    decode_requests: int = _col("requests decoding this step")
    scheduled_tokens: int = _col("tokens scheduled this step, draft slots included")
    context_mean: float = _col("mean context length (prompt + generated) of the decoding requests")
    context_max: int = _col("longest context among the decoding requests")
    draft_len: int = _col("draft tokens proposed per decoding request (0: no SD this step)")
    num_drafts: int = _col("requests that got drafts this step")
    num_draft_tokens: int = _col("draft tokens proposed")
    num_accepted_tokens: int = _col("draft tokens accepted")
    accepted_per_pos: list = _col("list: accepted draft tokens at positions 1..draft_len")
    new_tokens: int = _col("response tokens emitted this step")


@dataclass
class RequestRow(_Upgrades):
    """One request: one response (`requests.parquet`)."""

    _table = "requests"

    rl_step: int = _col("RL step")
    worker: int = _col("worker (engine) index")
    request_id: str = _col("unique id")
    prompt_id: int = _col("prompt index within the RL step")
    sample: int = _col("sample index within the prompt's group")
    prompt_tokens: int = _col("prompt length")
    response_tokens: int = _col("response length")
    finish_reason: str = _col("'stop' (EOS) or 'length' (cut at the cap)")
    start_s: float = _col("seconds since the run started: request added")
    end_s: float = _col("seconds since the run started: request finished")
    reward: float = _col("task reward (NaN if not scored)")
    spec_passes_by_len: list = _optional_col(
        "list: at index k, the verify passes of this response that carried k draft tokens "
        "(empty: not recorded)", [])
    spec_accepted: float = _optional_col(
        "draft tokens of this response the target accepted (NaN: not recorded)", math.nan)


@dataclass
class RLStepRow:
    """One RL step (`rl_steps.parquet`)."""

    rl_step: int = _col("RL step")
    rollout_s: float = _col("rollout wall time")
    train_s: float = _col("policy update wall time (0 for a capture-only run)")
    sync_s: float = _col("weight sync wall time (0 for a capture-only run)")
    drafter_train_s: float = _col("spot drafter training worker-seconds (0 if none)")


# What a worker is doing during an interval of the timeline.
STATES = ("decode", "decode_sd", "idle", "drafter_train", "train", "sync", "tool_wait")


@dataclass
class TimelineRow(_Upgrades):
    """One worker interval (`timeline.parquet`): the simulator's output and `tlt train`'s alike."""

    _table = "timeline"

    rl_step: int = _col("RL step")
    worker: int = _col("worker (engine) index")
    start_s: float = _col("seconds since the run started")
    end_s: float = _col("seconds since the run started")
    state: str = _col("decode, decode_sd, idle, drafter_train, train, sync or tool_wait (STATES)")
    batch: int = _col("requests in the engine step (decode states)")
    draft_len: int = _col("draft length of the engine step (decode_sd)")
    tokens: float = _col("response tokens emitted (decode states); drafter steps (drafter_train)")
    passes: float = _col("verify passes (1 per engine step)")
    context: float = _col("mean context length of the engine step")
    strategy: str = _col("speculation of decode_sd rows: a chain's draft length ('4') or a tree "
                         "('8_4_48'); '' otherwise")


# Column -> (pandas kind: "i" int, "f" float, "O" text or list; what it means), from the row
# classes.
_KINDS = {"int": "i", "float": "f", "str": "O", "list": "O"}


def columns(row_class: type) -> dict[str, tuple[str, str]]:
    return {f.name: (_KINDS[str(f.type)], f.metadata["doc"]) for f in fields(row_class)}


def optional_defaults(row_class: type) -> dict[str, Any]:
    """The columns a trace may lack, with the value `load_trace` fills them with."""
    return {f.name: f.default_factory() for f in fields(row_class) if f.metadata.get("optional")}


STEP_COLUMNS = columns(StepRow)
REQUEST_COLUMNS = columns(RequestRow)
RL_STEP_COLUMNS = columns(RLStepRow)
TIMELINE_COLUMNS = columns(TimelineRow)


def rows_frame(rows: Sequence[Any], row_class: type) -> pd.DataFrame:
    """Rows (instances of `row_class` or of a subclass with more fields) as a table of exactly
    `row_class`'s columns, with their declared types."""
    cols = columns(row_class)
    df = pd.DataFrame([[getattr(r, c) for c in cols] for r in rows], columns=list(cols))
    for col, (kind, _) in cols.items():
        if kind == "i":
            df[col] = df[col].astype("int64")
        elif kind == "f":
            df[col] = df[col].astype("float64")
    return df


def accepted_length(accepted_tokens: float, drafts: float) -> float:
    """Tokens emitted per verify pass: 1 + accepted draft tokens / drafts (vLLM's mean accepted
    length; NaN when nothing was drafted)."""
    return 1.0 + accepted_tokens / drafts if drafts else math.nan


TABLES = {"steps": STEP_COLUMNS, "requests": REQUEST_COLUMNS, "rl_steps": RL_STEP_COLUMNS}
OPTIONAL = {"steps": optional_defaults(StepRow), "requests": optional_defaults(RequestRow),
            "rl_steps": optional_defaults(RLStepRow)}
META_FIELDS = ("trace_version", "model", "policy", "prompts", "samples", "max_tokens", "seed",
               "machine", "engine")


class TraceError(ValueError):
    """A trace directory that is missing, truncated or of the wrong schema."""

    def __init__(self, path: Path | str, field: str, problem: str, fix: str):
        # a place in angle brackets (<file>, <directory>) is the path itself: not repeated
        where = f"{path}: " if field.startswith("<") else f"{path}: {field}: "
        super().__init__(f"{where}{problem}; {fix}")


@dataclass
class Trace:
    meta: dict[str, Any]
    steps: pd.DataFrame
    requests: pd.DataFrame
    rl_steps: pd.DataFrame
    path: Path | None = None
    # optional: per-worker states (`tlt train`), TIMELINE_COLUMNS
    timeline: pd.DataFrame | None = None

    @property
    def name(self) -> str:
        return self.path.name if self.path else "<unsaved trace>"


def _check_table(path: Path, df: pd.DataFrame, columns: dict[str, tuple[str, str]]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TraceError(path, f"column '{missing[0]}'", "missing",
                         f"a trace v{TRACE_VERSION} table has columns {', '.join(columns)} "
                         "(traces/README.md)")
    for col, (kind, _) in columns.items():
        if len(df) and not _kind_ok(kind, df[col].dtype):
            raise TraceError(path, f"column '{col}'", f"has dtype {df[col].dtype}",
                             f"expected {_KIND_NAMES[kind]} values (traces/README.md)")


_KIND_NAMES = {"i": "integer", "f": "float", "O": "text or list"}


def _kind_ok(kind: str, dtype) -> bool:
    if kind == "f":
        return dtype.kind in "fiu"
    if kind == "i":
        return dtype.kind in "iu"
    return dtype.kind in "OSU" or str(dtype) in ("string", "str")


def _upgrade(file: Path, df: pd.DataFrame, version: int, renames: dict[str, str]) -> pd.DataFrame:
    """An older version's table under this version's column names (`renames`: old -> new)."""
    for old, new in renames.items():
        if old not in df.columns and new not in df.columns:
            raise TraceError(file, f"column '{old}'", "missing",
                             f"a trace v{version} table has it (v{TRACE_VERSION} calls it '{new}'; "
                             "traces/README.md)")
    return df.rename(columns=renames)


def _with_optional(table: str, df: pd.DataFrame) -> pd.DataFrame:
    """`df` with the optional columns it lacks, filled with their "not recorded" value."""
    missing = {c: d for c, d in OPTIONAL[table].items() if c not in df.columns}
    if not missing:
        return df
    df = df.copy()
    for col, default in missing.items():
        df[col] = [list(default) for _ in range(len(df))] if isinstance(default, list) else default
    return df


def _read_table(file: Path, fix: str) -> pd.DataFrame:
    """One of a trace's Parquet tables; refused, saying what the file is, when it is none."""
    frame, problem = parquet_frame(file)
    if problem is not None:
        raise TraceError(file, "<file>", problem, fix)
    return frame


def load_trace(path: str | Path) -> Trace:
    """A trace of this version or an older one (OLD_COLUMNS), its tables in this version's columns;
    `meta["trace_version"]` says which version the files are."""
    path = Path(path)
    if not path.is_dir():
        raise TraceError(path, "<directory>", "is not a directory" if path.exists() else
                         "does not exist",
                         "give a trace directory written by `tlt capture` or `tlt train`")
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise TraceError(meta_path, "<file>", "is missing",
                         "the trace is incomplete; capture it again")
    raw = meta_path.read_bytes()
    problem = text_problem(raw)
    try:
        meta = json.loads(raw.decode("utf-8")) if problem is None else None
    except json.JSONDecodeError as exc:
        problem = f"is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    if problem is not None or not isinstance(meta, dict):
        raise TraceError(meta_path, "<file>", problem or "is not a JSON object",
                         "the trace's meta.json as `tlt capture` or `tlt train` wrote it; the "
                         "trace is corrupt: capture it again")
    for f in META_FIELDS:
        if f not in meta:
            raise TraceError(meta_path, f"field '{f}'", "missing",
                             f"meta.json needs {', '.join(META_FIELDS)}")
    version = meta["trace_version"]
    if version != TRACE_VERSION and not (type(version) is int and version in OLD_COLUMNS):
        raise TraceError(meta_path, "field 'trace_version'", f"is {version!r}",
                         "this workbench reads versions "
                         f"{', '.join(map(str, [*OLD_COLUMNS, TRACE_VERSION]))}; re-capture or "
                         "upgrade")
    renames = OLD_COLUMNS.get(version, {}) if type(version) is int else {}
    tables = {}
    for name, columns in TABLES.items():
        file = path / f"{name}.parquet"
        if not file.is_file():
            raise TraceError(file, "<file>", "is missing",
                             "the trace is incomplete; capture it again")
        df = _read_table(file, "the trace is truncated or corrupt; capture it again")
        df = _with_optional(name, _upgrade(file, df, version, renames.get(name, {})))
        _check_table(file, df, columns)
        tables[name] = df
    if tables["steps"].empty or tables["requests"].empty:
        raise TraceError(path, "steps/requests", "empty",
                         "a trace needs at least one engine step and one request")
    timeline = None
    file = path / "timeline.parquet"
    if file.is_file():
        timeline = _read_table(file, "the file is truncated or corrupt; re-run or delete "
                                     "timeline.parquet")
        timeline = _upgrade(file, timeline, version, renames.get("timeline", {}))
        if "strategy" not in timeline.columns and "draft_len" in timeline.columns:
            # Timelines written before the column existed held chains only.
            timeline["strategy"] = [str(k) if k else "" for k in timeline["draft_len"]]
        _check_table(file, timeline, TIMELINE_COLUMNS)
    return Trace(meta, tables["steps"], tables["requests"], tables["rl_steps"], path, timeline)


def write_trace(trace: Trace, path: str | Path) -> Path:
    """Validate and write atomically: everything goes to a temp dir that is renamed at the end."""
    path = Path(path)
    tables = {name: _with_optional(name, getattr(trace, name)) for name in TABLES}
    for name, columns in TABLES.items():
        _check_table(path / f"{name}.parquet", tables[name], columns)
    # The tables are this version's, whatever version the trace was read from.
    meta = {"trace_version": TRACE_VERSION,
            **{k: v for k, v in trace.meta.items() if k != "trace_version"}}
    for f in META_FIELDS:
        if f not in meta:
            raise TraceError(path / "meta.json", f"field '{f}'", "missing",
                             f"meta needs {', '.join(META_FIELDS)}")

    def fill(tmp: Path) -> None:
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
        for name, columns in TABLES.items():
            tables[name][list(columns)].to_parquet(tmp / f"{name}.parquet", index=False)
        if trace.timeline is not None:
            tl = trace.timeline[list(TIMELINE_COLUMNS)].copy()
            tl["state"] = tl["state"].astype(str)
            tl.to_parquet(tmp / "timeline.parquet", index=False)

    write_dir_atomic(path, fill)
    trace.path = path
    return path
