"""Extracted run-log metrics: what the calibration reads of a console log (its step metrics, its
launch command's overrides, its printed config and engine line, what the reader skipped), with the
original file's provenance, as one JSON file the reader takes exactly as it takes that log
(workbench/runlog/reader.py; docs/formats.md, "Extracted run-log metrics").

For public logs whose licence is unclear: the metrics and config fields are shipped, not the log.
KEPT_PREFIXES say which metrics: the phase timings and the length statistics; every step's line
in the original is kept, so an error still names where the step was.

A log served only as text (a code index that pages a file without its bytes) is extracted from an
Excerpt: its lines the reader uses copied verbatim into a file of their own. The original's sha256
cannot be taken then; its size in characters, the index's file ids and the excerpt's own sha256
stand in, and the `line` column numbers the excerpt's lines.
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


@dataclass(frozen=True)
class Excerpt:
    """The log given is a verbatim excerpt of the original, read through a text index."""

    total_chars: int  # the original's size in characters, as the index reports it
    read_ids: tuple[str, ...]  # the index's ids of the file read
    why: str = ("the original is not in the repository's fetchable snapshot: it was read through "
                "a text index, 16,000 characters a page, so its bytes (and sha256) are not here")


def _excerpt_source(log: RunLog, raw: bytes, ex: Excerpt) -> dict:
    """What the excerpt kept, counted from the log as the reader read it."""
    c, sk = log.config, log.skipped
    config_lines = max(v.line for _, v in c.values) - c.first_line + 1 if c.values else 0
    step_lines = log.steps + sk.untimed_steps + sk.truncated + sk.repeated
    command = sorted({s.line for s in log.command.settings})
    lines = raw.count(b"\n")
    return {"total_chars": ex.total_chars, "read_file_ids": list(ex.read_ids),
            "sha256_not_taken": ex.why, "excerpt_sha256": hashlib.sha256(raw).hexdigest(),
            "excerpt_bytes": len(raw),
            "kept": f"{lines} lines copied verbatim, nothing else: the launch "
                    f"command (overrides on lines {command[0] if command else 0}-"
                    f"{command[-1] if command else 0}), the printed config ({config_lines} "
                    f"lines), every step line ({step_lines}: {log.steps} timed, "
                    f"{sk.untimed_steps} validation-only)",
            "lines": "the `line` column and the config's lines number the excerpt's lines"}


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


def extract(log_path: str | Path, where: Provenance, out: str | Path,
            excerpt: Excerpt | None = None) -> dict:
    """Read the log (or an Excerpt of it), write its extract to `out` (a NAME.metrics.json);
    returns what was written."""
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
    by = (f"tlt runlog extract {p.name} --repository {where.repository} --commit "
          f"{where.commit} --path {where.path} --out {out.name}")
    source = {"repository": where.repository, "commit": where.commit, "path": where.path,
              "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw), "extracted_by": by}
    if excerpt is not None:
        ids = "".join(f" --read-id {i}" for i in excerpt.read_ids)
        source.update(sha256=None, bytes=None,
                      extracted_by=f"{by} --excerpt-of-chars {excerpt.total_chars}{ids}",
                      excerpt=_excerpt_source(log, raw, excerpt))
    doc = {
        "schema": EXTRACT_SCHEMA,
        "source": source,
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
