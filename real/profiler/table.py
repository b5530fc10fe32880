"""The profiler's output: one Parquet file of measured points (one `Row` each, its columns
below), with what was measured where and how in the file's metadata (key `tlt-profiler`,
JSON: `measure.meta`). `workbench/calibrate/captures/operators.py` reads it to fit a Profile. No
torch
needed here, so the fit runs on a machine that never measured.

The file is written beside its destination and renamed into place, as
workbench.contracts.fileio's writers do (they write text, figures and directories; a Parquet
file with schema metadata needs pyarrow's own writer, hence this one)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from workbench.contracts.file_kind import describe, parquet_problem
from workbench.contracts.schema import ConfigError

SCHEMA = "tlt-profiler/1"
META_KEY = b"tlt-profiler"


@dataclass(frozen=True)
class Row:
    """One measured point (grid.py says what each op is)."""

    op: str
    batch: int
    context: int
    tokens: int
    topk: int
    mode: str  # "graph" (replayed CUDA graph) or "eager"
    step_s: float  # the op on one rank: layers x layer_s + head_s + collectives_s
    layer_s: float  # one decoder layer (the drafter: its whole forward), median
    head_s: float  # embedding, final norm, LM head and token choice, median (0 for the drafter)
    collectives_s: float  # assumed all-reduces and logit gather (shard.Link), 0 at TP 1
    layers: int  # decoder layers the step counts (the architecture's; the drafter: 1)
    copies: int  # distinct layers the layer timing cycled through (grid.distinct_layers)
    p10_s: float  # 10th and 90th percentile of the layer timing's runs
    p90_s: float
    runs: int
    # op "whole": the whole model's forward measured as one, to check step_s
    whole_s: float = math.nan


COLUMNS = tuple(f.name for f in fields(Row))


@dataclass(frozen=True)
class Measurements:
    rows: pd.DataFrame  # one row per measured point, COLUMNS
    meta: dict  # schema, architecture, tp, dtype, device, device_name, when, torch, grid, settings

    def of(self, op: str, mode: str | None = None) -> pd.DataFrame:
        r = self.rows[self.rows["op"] == op]
        return r if mode is None else r[r["mode"] == mode]


SHAPE_COLUMNS = ("batch", "context", "tokens", "topk", "layers", "copies", "runs")
# seconds that may be empty (a point the profiler timed as a whole has no per-layer spread)
SECONDS_COLUMNS = ("layer_s", "head_s", "collectives_s", "p10_s", "p90_s")
MAX_SHAPE = 1 << 24  # larger than any batch, context or count a profiler measures
MAX_SECONDS = 86_400.0  # no engine step lasts a day; a larger time would overflow the cost fit
TEXT_COLUMNS = ("op", "mode")


def bad_cell(rows: pd.DataFrame) -> tuple[str, int, object, str] | None:
    """The first cell of a measurements table that no profiler writes (column, row, value, what is
    allowed), or None: shapes and counts are whole numbers from 0 to MAX_SHAPE, `step_s` finite
    seconds >= 0 and under MAX_SECONDS, the other times the same or empty, `op` and `mode` text."""
    for c in TEXT_COLUMNS:
        text = rows[c].map(lambda v: isinstance(v, str)).to_numpy(bool)
        if not text.all():
            i = int((~text).nonzero()[0][0])
            return c, i, rows[c].iloc[i], "a name (text), as the profiler writes it"
    for cols, ok, allowed in (
            (SHAPE_COLUMNS, lambda v: (v >= 0) & (v <= MAX_SHAPE) & (v == v.round()),
             f"a whole number from 0 to {MAX_SHAPE:,}"),
            (("step_s",), lambda v: (v >= 0) & (v < MAX_SECONDS),
             f"seconds >= 0 and under {MAX_SECONDS:,.0f}"),
            (SECONDS_COLUMNS, lambda v: v.isna() | ((v >= 0) & (v < MAX_SECONDS)),
             f"seconds >= 0 and under {MAX_SECONDS:,.0f}, or empty")):
        for c in cols:
            values = pd.to_numeric(rows[c], errors="coerce")
            text = values.isna() & rows[c].notna()  # a value that is no number at all
            bad = (~ok(values).fillna(False) | text).to_numpy(bool)
            if bad.any():
                i = int(bad.nonzero()[0][0])
                return c, i, rows[c].iloc[i], allowed
    return None


def frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame([asdict(r) for r in rows], columns=list(COLUMNS))


def write_measurements(path: str | Path, m: Measurements) -> None:
    """The Parquet file, written beside `path` and renamed into place (never half a file)."""
    path = Path(path)
    table = pa.Table.from_pandas(m.rows[list(COLUMNS)], preserve_index=False)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), META_KEY: json.dumps(m.meta).encode()}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_measurements(path: str | Path) -> Measurements:
    """A profiler Parquet file; anything else is refused naming the file and what is wrong."""
    path = Path(path)
    fix = "a measurements .parquet file written by `python -m real.profiler` or `tlt profile`"
    if not path.is_file():
        raise ConfigError(str(path), "<file>", describe(path), fix)
    problem = parquet_problem(path)
    if problem is None:
        try:
            table = pq.read_table(path)
            table.validate(full=True)
            rows = table.to_pandas()  # parses the file's own pandas metadata, which may be damaged
        except Exception as exc:  # pyarrow raises several kinds for a damaged file
            problem = f"is a damaged Parquet file ({type(exc).__name__})"
    if problem is not None:
        raise ConfigError(str(path), "<file>", problem, fix)
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise ConfigError(
            str(path),
            "<metadata>",
            "has no profiler metadata",
            f"Parquet metadata key {META_KEY.decode()!r} "
            "(re-measure with `python -m real.profiler`)",
        )
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict):
        raise ConfigError(str(path), "<metadata>", "holds damaged profiler metadata",
                          f"{fix}; re-measure")
    if meta.get("schema") != SCHEMA:
        raise ConfigError(str(path), "schema", meta.get("schema"), SCHEMA)
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise ConfigError(
            str(path), missing[0], "<missing column>", "the columns " + ", ".join(COLUMNS)
        )
    bad = bad_cell(rows)
    if bad is not None:
        col, i, value, allowed = bad
        raise ConfigError(f"{path} (row {i})", col, value, f"{allowed}; {fix}")
    return Measurements(rows[list(COLUMNS)], meta)
