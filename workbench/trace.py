"""Trace: what a real run records, per engine step, per request and per RL step.

A trace is a directory (schema: `traces/README.md`):

    meta.json          run configuration, machine, trace_version
    steps.parquet      one row per engine step
    requests.parquet   one row per request (one response)
    rl_steps.parquet   one row per RL step (a capture-only run has one)

`load_trace` refuses a malformed or truncated trace with an error naming the
file, the column and the fix; `write_trace` writes into a temporary sibling
directory and renames it, so a crash never leaves half a trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from workbench.config import write_dir_atomic

TRACE_VERSION = 1

# Column -> pandas kind ("i" int, "f" float, "O" object/str, "b" bool), and what it means.
STEP_COLUMNS: dict[str, tuple[str, str]] = {
    "rl_step": ("i", "RL step this engine step belongs to"),
    "engine": ("i", "engine (worker) index"),
    "step": ("i", "engine step index within the engine, from 0"),
    "start_s": ("f", "seconds since the run started"),
    "wall_s": ("f", "wall time of the engine step"),
    "batch_size": ("i", "requests scheduled this step (decoding or prefilling)"),
    "num_waiting": ("i", "requests waiting for a slot"),
    "prefill_requests": ("i", "requests prefilling this step"),
    "prefill_tokens": ("i", "prompt tokens prefilled this step"),
    "decode_requests": ("i", "requests decoding this step"),
    "scheduled_tokens": ("i", "tokens scheduled this step, draft slots included"),
    "context_mean": ("f", "mean context length (prompt + generated) of the decoding requests"),
    "context_max": ("i", "longest context among the decoding requests"),
    "draft_len": ("i", "draft tokens proposed per decoding request (0: no SD this step)"),
    "num_drafts": ("i", "requests that got drafts this step"),
    "num_draft_tokens": ("i", "draft tokens proposed"),
    "num_accepted_tokens": ("i", "draft tokens accepted"),
    "accepted_per_pos": ("O", "list: accepted draft tokens at positions 1..draft_len"),
    "new_tokens": ("i", "response tokens emitted this step"),
}
REQUEST_COLUMNS: dict[str, tuple[str, str]] = {
    "rl_step": ("i", "RL step"),
    "engine": ("i", "engine (worker) index"),
    "request_id": ("O", "unique id"),
    "prompt_id": ("i", "prompt index within the RL step"),
    "sample": ("i", "sample index within the prompt's group"),
    "prompt_tokens": ("i", "prompt length"),
    "response_tokens": ("i", "response length"),
    "finish_reason": ("O", "'stop' (EOS) or 'length' (cut at the cap)"),
    "start_s": ("f", "seconds since the run started: request added"),
    "end_s": ("f", "seconds since the run started: request finished"),
    "reward": ("f", "task reward (NaN if not scored)"),
}
RL_STEP_COLUMNS: dict[str, tuple[str, str]] = {
    "rl_step": ("i", "RL step"),
    "rollout_s": ("f", "rollout wall time"),
    "train_s": ("f", "policy update wall time (0 for a capture-only run)"),
    "sync_s": ("f", "weight sync wall time (0 for a capture-only run)"),
    "drafter_train_s": ("f", "spot drafter training worker-seconds (0 if none)"),
}
# Optional (written by `tlt train`): one row per worker interval, the simulator's timeline format.
TIMELINE_COLUMNS: dict[str, tuple[str, str]] = {
    "step": ("i", "RL step"),
    "worker": ("i", "worker (engine) index"),
    "start_s": ("f", "seconds since the run started"),
    "end_s": ("f", "seconds since the run started"),
    "state": ("O", "decode, decode_sd, idle, drafter_train, train or sync (sim/results.py STATES)"),
    "batch": ("i", "requests in the engine step (decode states)"),
    "draft_len": ("i", "draft length of the engine step (decode_sd)"),
    "tokens": ("f", "response tokens emitted (decode states); drafter steps (drafter_train)"),
    "passes": ("f", "verify passes (1 per engine step)"),
    "context": ("f", "mean context length of the engine step"),
}
TABLES = {"steps": STEP_COLUMNS, "requests": REQUEST_COLUMNS, "rl_steps": RL_STEP_COLUMNS}
META_FIELDS = ("trace_version", "model", "policy", "prompts", "samples", "max_tokens", "seed", "machine", "engine")


class TraceError(ValueError):
    """A trace directory that is missing, truncated or of the wrong schema."""

    def __init__(self, path: Path | str, field: str, problem: str, fix: str):
        super().__init__(f"{path}: {field}: {problem}; {fix}")


@dataclass
class Trace:
    meta: dict[str, Any]
    steps: pd.DataFrame
    requests: pd.DataFrame
    rl_steps: pd.DataFrame
    path: Path | None = None
    timeline: pd.DataFrame | None = None  # optional: per-worker states (`tlt train`), sim/results.py's columns

    @property
    def name(self) -> str:
        return self.path.name if self.path else "<unsaved trace>"


def _check_table(path: Path, df: pd.DataFrame, columns: dict[str, tuple[str, str]]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TraceError(path, f"column '{missing[0]}'", "missing",
                         f"a trace v{TRACE_VERSION} table has columns {', '.join(columns)} (traces/README.md)")
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


def load_trace(path: str | Path) -> Trace:
    path = Path(path)
    if not path.is_dir():
        raise TraceError(path, "<directory>", "not found", "give a trace directory written by `tlt capture` or `tlt train`")
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise TraceError(meta_path, "<file>", "missing", "the trace is incomplete; capture it again")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise TraceError(meta_path, "<file>", f"not valid JSON ({exc})", "the trace is corrupt; capture it again") from None
    for f in META_FIELDS:
        if f not in meta:
            raise TraceError(meta_path, f"field '{f}'", "missing", f"meta.json needs {', '.join(META_FIELDS)}")
    if meta["trace_version"] != TRACE_VERSION:
        raise TraceError(meta_path, "field 'trace_version'", f"is {meta['trace_version']!r}",
                         f"this workbench reads version {TRACE_VERSION}; re-capture or upgrade")
    tables = {}
    for name, columns in TABLES.items():
        file = path / f"{name}.parquet"
        if not file.is_file():
            raise TraceError(file, "<file>", "missing", "the trace is incomplete; capture it again")
        try:
            df = pq.read_table(file).to_pandas()
        except Exception as exc:  # pyarrow raises several types for a truncated file
            raise TraceError(file, "<file>", f"unreadable Parquet ({type(exc).__name__}: {exc})",
                             "the file is truncated or corrupt; capture it again") from None
        _check_table(file, df, columns)
        tables[name] = df
    if tables["steps"].empty or tables["requests"].empty:
        raise TraceError(path, "steps/requests", "empty", "a trace needs at least one engine step and one request")
    timeline = None
    file = path / "timeline.parquet"
    if file.is_file():
        try:
            timeline = pq.read_table(file).to_pandas()
        except Exception as exc:
            raise TraceError(file, "<file>", f"unreadable Parquet ({type(exc).__name__}: {exc})",
                             "the file is truncated or corrupt; re-run or delete timeline.parquet") from None
        _check_table(file, timeline, TIMELINE_COLUMNS)
    return Trace(meta, tables["steps"], tables["requests"], tables["rl_steps"], path, timeline)


def write_trace(trace: Trace, path: str | Path) -> Path:
    """Validate and write atomically: everything goes to a temp dir that is renamed at the end."""
    path = Path(path)
    for name, columns in TABLES.items():
        _check_table(path / f"{name}.parquet", getattr(trace, name), columns)
    meta = {"trace_version": TRACE_VERSION, **trace.meta}
    for f in META_FIELDS:
        if f not in meta:
            raise TraceError(path / "meta.json", f"field '{f}'", "missing", f"meta needs {', '.join(META_FIELDS)}")

    def fill(tmp: Path) -> None:
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
        for name, columns in TABLES.items():
            getattr(trace, name)[list(columns)].to_parquet(tmp / f"{name}.parquet", index=False)
        if trace.timeline is not None:
            tl = trace.timeline[list(TIMELINE_COLUMNS)].copy()
            tl["state"] = tl["state"].astype(str)
            tl.to_parquet(tmp / "timeline.parquet", index=False)

    write_dir_atomic(path, fill)
    trace.path = path
    return path
