"""Extracted run-log metrics: what the calibration reads of a console log (its step metrics, its
launch command's overrides, its printed config and engine line, what the reader skipped), with the
original file's provenance, as one JSON file the reader takes exactly as it takes that log
(workbench/runlog/reader.py; docs/formats.md, "Extracted run-log metrics").

For public logs whose licence is unclear: the metrics and config fields are shipped, not the log.
KEPT_PREFIXES say which metrics: the phase timings and the length statistics; every step's line
in the original is kept, so an error still names where the step was.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from workbench.contracts.fileio import jsonable, write_atomic
from workbench.contracts.schema import ConfigError
from workbench.runlog.reader import STEP, TIMING, TOP_PHASES, RunLog, read_run_log
from workbench.runlog.table_log import EXTRACT_SCHEMA, EXTRACT_SUFFIXES

KEPT_PREFIXES = (TIMING, "response_length/", "prompt_length/")


@dataclass(frozen=True)
class Provenance:
    """Where the original log is published."""

    repository: str  # owner/name on GitHub, or a URL
    commit: str
    path: str  # the file's path in the repository


def _steps(log: RunLog) -> tuple[list[str], list[list]]:
    """The kept columns and rows; a step time the reader summed from the phases (the log had
    none) is left out, so the extract reads with the same count of such steps."""
    cols = ["step", "line"] + sorted(c for c in log.metrics.columns
                                     if str(c).startswith(KEPT_PREFIXES))
    frame = log.metrics[cols].copy()
    if log.skipped.steps_from_phases and STEP in frame:
        summed = sum(np.nan_to_num(log.column(TIMING + ph), nan=0.0) for ph in TOP_PHASES)
        frame.loc[frame[STEP].to_numpy() == summed, STEP] = np.nan
    rows = [[None if isinstance(v, float) and np.isnan(v) else float(v) for v in r]
            for r in frame.itertuples(index=False)]
    return cols, rows


def extract(log_path: str | Path, where: Provenance, out: str | Path) -> dict:
    """Read the log, write its extract to `out` (a NAME.metrics.json); returns what was written."""
    p = Path(log_path)
    out = Path(out)
    if not out.name.lower().endswith(EXTRACT_SUFFIXES[0]):
        raise ConfigError("--out", "<file>", str(out), f"a file named NAME{EXTRACT_SUFFIXES[0]}")
    log = read_run_log(p)
    if log.kind != "console":
        raise ConfigError(str(p), "<file>", f"is a {log.kind}, not a console log",
                          "a veRL console log (a table or an extract is already its metrics)")
    if log.framework.name != "veRL":
        raise ConfigError(str(p), "<file>", f"is a {log.framework.name} log",
                          "a veRL console log (another framework's log is read as it is: "
                          "`tlt calibrate --run-log` takes it directly)")
    raw = p.read_bytes()
    cols, rows = _steps(log)
    c = log.config
    doc = {
        "schema": EXTRACT_SCHEMA,
        "source": {"repository": where.repository, "commit": where.commit, "path": where.path,
                   "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw),
                   "extracted_by": f"tlt runlog extract {p.name} --repository "
                                   f"{where.repository} --commit {where.commit} --path "
                                   f"{where.path} --out {out.name}"},
        "old_names": log.old_names,
        "skipped": {k: v for k, v in asdict(log.skipped).items() if k != "steps_from_phases"},
        "command": {"settings": [[s.key, s.value, s.written, s.line, s.unresolved]
                                 for s in log.command.settings],
                    "variables": [list(v) for v in log.command.variables]},
        "config": {"values": [[k, v.value, v.line] for k, v in c.values],
                   "engine_version": c.engine_version, "engine_line": c.engine_line,
                   "engine_settings": [list(x) for x in c.engine_settings],
                   "first_line": c.first_line},
        "steps": {"columns": cols, "rows": rows},
    }
    # one step a line: the file reads (and diffs) as the table it is
    head = json.dumps(jsonable({**doc, "steps": {"columns": cols, "rows": "ROWS"}}), indent=1)
    body = "[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n  ]"
    write_atomic(out, head.replace('"ROWS"', body) + "\n")
    return doc
