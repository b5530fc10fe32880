"""The run log's tables, read into step rows for workbench/runlog/reader.py: a tracker's export
(CSV, JSONL, a JSON array, Parquet, TensorBoard's event file) and extracted metrics
(`NAME.metrics.json`, written by `tlt runlog extract`). The reader's module docstring says what each
holds; this module only turns the file into rows, checked, and says where a row came from.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.contracts.file_kind import describe
from workbench.contracts.schema import ConfigError
from workbench.contracts.tables import read_csv, read_jsonl, read_parquet
from workbench.runlog.command import LaunchCommand, Setting
from workbench.runlog.frameworks import tracker
from workbench.runlog.frameworks.base import GEN, TIMING, Parsed, check_timing
from workbench.runlog.frameworks.tb_events import read_events
from workbench.runlog.printed_config import ConfigValue, PrintedConfig

OLD_TIMING = "timing/"
TABLE_SUFFIXES = (".csv", ".jsonl", ".json", ".parquet")
EXTRACT_SUFFIXES = (".metrics.json", ".metrics.json.gz")
EXTRACT_SCHEMA = "tlt-runlog-metrics/1"
STEP_COLUMNS = ("step", "_step", "Step", "global_step", "training/global_step", "rollout/step",
                "trainer/global_step", "train/global_step")
EXPECTED = ("veRL's `step:N - key:value - ...` console lines, another framework's (slime, miles, "
            "NeMo-RL, SkyRL, OpenRLHF, AReaL, ROLL: docs/formats.md#run-logs), or a "
            "CSV/JSONL/Parquet table with a step column")


@dataclass(frozen=True)
class TableRows:
    """A veRL table's timed steps ({"step", "line", veRL's names...}) and what was passed over."""

    rows: dict[int, dict[str, float]]
    untimed: int
    repeated: int
    old_names: bool  # timings named timing/... (older veRL)


@dataclass(frozen=True)
class Extracted:
    """Extracted metrics: the steps, the launch command and printed config as the log had them."""

    rows: dict[int, dict[str, float]]
    command: LaunchCommand
    config: PrintedConfig
    skipped: dict  # reader.Skipped's fields, as the original log's reading counted them
    old_names: bool
    source: str  # the original log's provenance


def gunzipped(p: Path) -> bytes:
    """A .gz file's bytes, uncompressed; refused, saying what the file is, when it is no gzip."""
    try:
        with gzip.open(p, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error):
        kind = describe(p)
        raise ConfigError(str(p), "<file>", "is a damaged or cut-short gzip file"
                          if kind == "is gzip-compressed" else f"is named .gz but {kind[3:]}",
                          f"a text log, or one compressed with gzip: {EXPECTED}") from None


def _json_array(p: Path, raw: bytes, expected: str) -> pd.DataFrame:
    """A JSON array of objects (a W&B run's history saved as one JSON document)."""
    try:
        rows = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        raise ConfigError(str(p), "<file>", "is not JSON", f"{expected}: a JSON array of "
                          "objects, or one object per line") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ConfigError(str(p), "<file>", "is not a JSON array of objects",
                          f"{expected}: one object per step") from None
    return pd.DataFrame(rows)


def _frame(p: Path, suffix: str) -> pd.DataFrame:
    expected = f"a {suffix[1:]} table with a step column"
    raw = gunzipped(p) if p.suffix.lower() == ".gz" else None
    if suffix == ".tfevents":
        return read_events(p)
    if suffix == ".parquet":
        return read_parquet(p, expected)
    if suffix == ".csv":
        return read_csv(p, expected, raw)
    if suffix == ".json" and (raw or p.read_bytes()).lstrip()[:1] == b"[":
        return _json_array(p, raw or p.read_bytes(), expected)
    return pd.DataFrame(read_jsonl(p, expected, raw))


def read_table(p: Path, suffix: str, need: str = GEN) -> TableRows | Parsed:
    """A table's steps that have `need`; another framework's export, read by its own table."""
    df = _frame(p, suffix)
    step_col = next((c for c in STEP_COLUMNS if c in df.columns), None)
    if step_col is None:
        raise ConfigError(
            str(p),
            "<columns>",
            "has the columns " + ", ".join(map(str, df.columns))[:100],
            f"a step column ({', '.join(STEP_COLUMNS)}) beside veRL's metric names",
        )
    df = tracker.wide(df, step_col)
    first = 2 if suffix == ".csv" else 1  # the row numbers a user sees: CSV's header is line 1
    other = tracker.framework_of(df.columns)
    if other is not None:
        return tracker.read(other, df, step_col, str(p), first)
    old = any(str(c).startswith(OLD_TIMING) for c in df.columns)
    df = df.rename(columns={c: TIMING + c[len(OLD_TIMING):] for c in df.columns
                            if str(c).startswith(OLD_TIMING)})
    rows: dict[int, dict[str, float]] = {}
    untimed = repeated = 0
    for i, rec in enumerate(df.to_dict("records")):
        where = f"{p} (row {i + first})"
        if rec.get(need) is None or (isinstance(rec.get(need), float) and math.isnan(rec[need])):
            untimed += 1
            continue
        values = {k: check_timing(where, k, v) for k, v in rec.items()
                  if str(k).startswith(TIMING) and not (isinstance(v, float) and math.isnan(v))}
        values.update({k: float(v) for k, v in rec.items()
                       if not str(k).startswith(TIMING) and isinstance(v, (int, float))
                       and not isinstance(v, bool)})
        step = int(check_timing(where, step_col, rec[step_col]))
        repeated += step in rows
        rows[step] = {**values, "step": float(step), "line": float(i + first)}
    return TableRows(rows, untimed, repeated, old)


def read_extract(p: Path) -> Extracted:
    """Extracted metrics, refused naming the field that is wrong."""
    raw = gunzipped(p) if p.suffix.lower() == ".gz" else p.read_bytes()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(str(p), "<file>", f"is not JSON ({exc})",
                          f"extracted metrics ({EXTRACT_SCHEMA}, `tlt runlog extract`)") from None
    if not isinstance(doc, dict) or doc.get("schema") != EXTRACT_SCHEMA:
        raise ConfigError(str(p), "schema", doc.get("schema") if isinstance(doc, dict) else doc,
                          f"{EXTRACT_SCHEMA} (written by `tlt runlog extract`)")
    try:
        cols, data = doc["steps"]["columns"], doc["steps"]["rows"]
        frame = pd.DataFrame(data, columns=cols, dtype=float)
        command = LaunchCommand(tuple(Setting(*s) for s in doc["command"]["settings"]),
                                tuple(tuple(v) for v in doc["command"]["variables"]))
        c = doc["config"]
        config = PrintedConfig(tuple((k, ConfigValue(v, n)) for k, v, n in c["values"]),
                               c["engine_version"], c["engine_line"],
                               tuple(tuple(x) for x in c["engine_settings"]), c["first_line"])
        skipped = dict(doc["skipped"])
        src = doc["source"]
        source = (f"{src['repository']} {src['commit']} {src['path']} (sha256 {src['sha256']})"
                  if src["sha256"] else f"{src['repository']} {src['commit']} {src['path']} (an "
                  f"excerpt of {src['excerpt']['total_chars']} characters; sha256 not taken)")
        rows = {int(r["step"]): {k: v for k, v in r.items() if not pd.isna(v)}
                for r in frame.to_dict("records") if not pd.isna(r.get(GEN))}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(str(p), "<fields>", f"lacks or mistypes {exc}",
                          f"extracted metrics as `tlt runlog extract` writes them "
                          f"({EXTRACT_SCHEMA}: docs/formats.md)") from None
    for row in rows.values():
        for k, v in row.items():
            if str(k).startswith(TIMING):
                check_timing(f"{p} (step {int(row['step'])})", k, v)
    return Extracted(rows, command, config, skipped, bool(doc.get("old_names", False)), source)
