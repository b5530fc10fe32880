"""Read a veRL run log: the console output as printed, or the same metrics exported as a table.

Console: veRL's console logger prints one line per RL step, `step:N - key:value - key:value ...`
(possibly behind a Ray prefix such as `(main_task pid=123)` and in ANSI colours), among warnings,
validation samples and the launch command. Older veRL versions name the phase timings `timing/gen`,
newer ones `timing_s/gen`: both read as `timing_s/...`. A `.gz` file is read through gzip.

Table: CSV, JSONL, a JSON array or Parquet with a step column (`step`, `_step`, `Step`,
`global_step`, `training/global_step`, ...) and veRL's metric names as columns, as a wandb or
TensorBoard export gives (TensorBoard's long form, `step, tag, value`, pivoted; its event file,
`events.out.tfevents.*`, read by workbench/runlog/frameworks/tb_events.py). Another framework's
log or export is recognised and read by its own module (workbench/runlog/frameworks/). Tables
and extracts are turned into rows by workbench/runlog/table_log.py.

Extracted metrics (`NAME.metrics.json`, gzip read too; schema EXTRACT_SCHEMA, written by
`tlt runlog extract`, workbench/runlog/extract.py): a console log's step metrics, its launch
command's overrides and its printed config, with the original file's provenance: read exactly as
that log would be.

Kept: the step lines (rows) that time a rollout (`timing_s/gen`). Skipped and counted: lines that
are not step lines, step lines without timings (validation-only, such as veRL's last line), a last
line cut short, a step logged twice (a resumed run: the later line is kept), and stray bytes of a
text log (NUL bytes, which NCCL's debug output leaves, and bytes that are not UTF-8: dropped or
replaced, the text around them read). Refused, naming the file, the line and the key: a file that
is mostly binary (BINARY_SHARE of its bytes or more), no step line, no timed step, a timing that is
not a number or is negative.

A step without `timing_s/step` (older veRL prints the phases only) is timed as the sum of its
top-level phases (TOP_PHASES: the phases veRL's trainer times one after another; phases it times
inside another, such as `generate_sequences` inside `gen`, are not added), counted as such.

Before the first step line: the launch command (workbench/runlog/command.py) and the resolved
config veRL prints at start (workbench/runlog/printed_config.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.contracts.schema import ConfigError
from workbench.contracts.training_shape import TrainingShape
from workbench.runlog.command import LaunchCommand, parse_command
from workbench.runlog.frameworks import recognise
from workbench.runlog.frameworks.base import (GEN, STEP, Parsed, Recognised, check_timing,
                                              version_in)
from workbench.runlog.frameworks.engine_lines import RunningBatch, engine_lines
from workbench.runlog.printed_config import PrintedConfig, parse_printed_config
from workbench.runlog.table_log import (EXPECTED, EXTRACT_SUFFIXES, OLD_TIMING, TABLE_SUFFIXES,
                                        TIMING, gunzipped, read_extract, read_table)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_STEP_LINE = re.compile(r"(?:^|[\s)\]])step:\s*(\d+)\s+-\s+(.*)$")
# The phases veRL's trainer times one after another within a step (its `_timer` blocks at the top
# level of `fit`); their sum is the step where the log lacks timing_s/step.
TOP_PHASES = ("gen", "gen_max", "reward", "old_log_prob", "ref", "values", "adv", "update_critic",
              "update_actor", "update_weights", "testing", "save_checkpoint")
BINARY_SHARE = 0.3  # a file with this share of binary bytes or more is not a text log
_TEXT_CONTROLS = b"\t\n\r\x0b\x0c\x1b"
_BINARY = bytes(c for c in range(32) if bytes([c]) not in _TEXT_CONTROLS) + b"\x7f"
VERL_CODE = "veRL's console logger: verl/utils/tracking.py, `step:N - key:value - ...`"


@dataclass(frozen=True)
class Skipped:
    """What the reader passed over, counted."""

    other_lines: int = (
        0  # lines that are not step lines (the command, warnings, validation samples)
    )
    untimed_steps: int = 0  # step lines without a rollout time (validation-only lines)
    truncated: int = 0  # a last line cut short
    repeated: int = 0  # steps logged again (a resumed run): the later one kept
    stray_bytes: int = 0  # NUL bytes dropped and bytes that are not UTF-8 replaced
    steps_from_phases: int = 0  # steps without timing_s/step, timed as their phases' sum

    def describe(self) -> str:
        parts = [
            f"{self.other_lines} other lines",
            f"{self.untimed_steps} step lines without a rollout time (validation-only)",
        ]
        if self.truncated:
            parts.append(f"{self.truncated} last line cut short")
        if self.repeated:
            parts.append(f"{self.repeated} steps logged twice (the later kept)")
        if self.stray_bytes:
            parts.append(f"{self.stray_bytes} stray bytes (NUL or not UTF-8) in the text")
        out = "skipped: " + ", ".join(parts)
        if self.steps_from_phases:
            out += (f"; {self.steps_from_phases} steps without timing_s/step timed as the sum of "
                    "their phases")
        return out


@dataclass(frozen=True)
class RunLog:
    """One run's timed steps: `metrics` has a row per step, columns `step`, `line` (where it was
    read: the file's line, or the table's row) and veRL's metric names (timings as timing_s/)."""

    path: str
    kind: str  # console or table
    metrics: pd.DataFrame
    command: LaunchCommand
    skipped: Skipped
    old_names: bool  # the file named timings timing/... (older veRL)
    config: PrintedConfig = PrintedConfig()  # the resolved config the log printed at start
    source: str = ""  # extracted metrics: the original log's provenance (repository, path, ...)
    # how the run trains, where a reader of another framework's logs fills it from its config
    # (None: read from veRL's config, workbench/runlog/training.py)
    training: TrainingShape | None = None
    framework: Recognised = Recognised("veRL", code=VERL_CODE)  # who wrote the log
    unmapped: tuple[str, ...] = ()  # its timers with no veRL counterpart, kept under their names
    notes: tuple[str, ...] = ()  # how the framework's timing semantics were honoured
    asynchronous: bool = False  # its rollout timer is waiting for rollouts, not generation
    running: RunningBatch | None = None  # the engines' periodic lines: the running batch over time

    @property
    def steps(self) -> int:
        return len(self.metrics)

    def column(self, name: str) -> np.ndarray:
        """A metric per step (NaN where a step lacks it, or the log never has it)."""
        if name not in self.metrics.columns:
            return np.full(self.steps, np.nan)
        return self.metrics[name].to_numpy(float)

    def where(self, i: int) -> str:
        """`file:line` (or `file (row N)`) of the i-th timed step."""
        n = int(self.metrics["line"].iloc[i])
        if self.kind == "extract":
            whose = "the excerpt's" if "(an excerpt" in self.source else "the original log's"
            return f"{self.path} ({whose} line {n})"
        return f"{self.path}:{n}" if self.kind == "console" else f"{self.path} (row {n})"


def read_run_log(path: str | Path, need: str = GEN) -> RunLog:
    """A console log or a table, by its suffix (module docstring): its steps that have `need` (a
    rollout time; `tlt workload import` asks for response_length/mean instead, timed or not)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "<file>", str(p), "an existing veRL log file")
    if p.name.lower().endswith(EXTRACT_SUFFIXES):
        x = read_extract(p)
        try:
            skipped = Skipped(**x.skipped)
        except TypeError as exc:
            raise ConfigError(str(p), "skipped", x.skipped, f"reader.Skipped's fields ({exc})"
                              ) from None
        log = _finish(p, "extract", x.rows, x.command, skipped, x.old_names, x.config)
        return replace(log, source=x.source)
    suffix = p.suffix.lower() if p.suffix.lower() != ".gz" else Path(p.stem).suffix.lower()
    if "tfevents" in p.name:  # TensorBoard's event file: its scalars as a long table
        suffix = ".tfevents"
    elif suffix not in TABLE_SUFFIXES or p.name.endswith(".log.gz"):
        return _read_console(p, need)
    got = read_table(p, suffix, need)
    if isinstance(got, Parsed):
        return _from_parsed(p, "table", got, 0, need)
    return _finish(p, "table", got.rows, LaunchCommand(), Skipped(0, got.untimed, 0, got.repeated),
                   got.old_names, PrintedConfig(), need)


def _text(p: Path) -> tuple[str, int]:
    """The file's text and its stray bytes (module docstring); a mostly binary file refused."""
    raw = gunzipped(p) if p.suffix.lower() == ".gz" else p.read_bytes()
    binary = len(raw) - len(raw.translate(None, _BINARY))
    text = raw.replace(b"\x00", b"").decode("utf-8", errors="replace")
    undecodable = text.count("\ufffd")
    if raw and (binary + undecodable) / len(raw) >= BINARY_SHARE:
        raise ConfigError(str(p), "<file>", f"binary ({binary + undecodable} of {len(raw)} bytes "
                          "are not text)", f"a text log: {EXPECTED}")
    return text, raw.count(b"\x00") + undecodable


def _parse_step_line(where: str, body: str) -> dict[str, float]:
    """The key:value pairs of one step line (timings checked; other values not numbers are
    dropped)."""
    out: dict[str, float] = {}
    for part in body.split(" - "):
        key, sep, value = part.strip().partition(":")
        if not sep or not key:
            continue
        key = TIMING + key[len(OLD_TIMING) :] if key.startswith(OLD_TIMING) else key
        if key.startswith(TIMING):
            out[key] = check_timing(where, key, value.strip())
            continue
        try:
            out[key] = float(value)
        except ValueError:
            continue  # a text value (veRL logs a few): not a metric the calibration reads
    return out


def _read_console(p: Path, need: str = GEN) -> RunLog:
    text, stray = _text(p)
    other = recognise.framework(text)
    if other is not None:
        return _from_parsed(p, "console", other.read(text, str(p)), stray, need)
    lines = text.split("\n")
    cut = not text.endswith("\n")
    rows: dict[int, dict[str, float]] = {}
    other = untimed = truncated = repeated = 0
    first_step_line, old_names = None, False
    for n, raw in enumerate(lines, 1):
        line = _ANSI.sub("", raw).rstrip("\r")
        m = _STEP_LINE.search(line)
        if not m:
            other += 1 if line.strip() else 0
            continue
        first_step_line = first_step_line or n
        last = cut and n == len(lines)
        where = f"{p}:{n}"
        try:
            values = _parse_step_line(where, m.group(2))
        except ConfigError:
            if last:  # a cut-short timing is no error: the line was never finished
                truncated += 1
                continue
            raise
        old_names = old_names or OLD_TIMING + "gen" in m.group(2)
        if last and rows and len(values) < len(rows[max(rows)]) - 1:
            truncated += 1
            continue
        if need not in values:
            untimed += 1
            continue
        step = int(m.group(1))
        repeated += step in rows
        rows[step] = {"step": float(step), "line": float(n), **values}
    head = [_ANSI.sub("", x) for x in lines[: (first_step_line or len(lines) + 1) - 1]]
    skipped = Skipped(other, untimed, truncated, repeated, stray)
    version, where = version_in(text, ("verl",))
    log = _finish(p, "console", rows, parse_command(head), skipped, old_names,
                  parse_printed_config(head), need)
    running = engine_lines([_ANSI.sub("", x) for x in lines])
    return replace(log, framework=Recognised("veRL", version, where, VERL_CODE), running=running)


def _from_parsed(p: Path, kind: str, parsed: Parsed, stray: int = 0, need: str = GEN) -> RunLog:
    """Another framework's log, read by its own reader (workbench/runlog/frameworks/)."""
    timed = {s: r for s, r in parsed.rows.items()
             if need in r and not (need == GEN and STEP in r and math.isnan(r[STEP]))}
    untimed = len(parsed.rows) - len(timed)
    skipped = Skipped(parsed.other_lines, untimed, parsed.truncated, parsed.repeated, stray)
    if not timed and need == GEN:
        recognise.refuse_untimed(p, parsed)
    log = _finish(p, kind, timed, parsed.command, skipped, False, parsed.config, need)
    return replace(log, framework=parsed.identity, unmapped=parsed.unmapped, notes=parsed.notes,
                   asynchronous=parsed.asynchronous, running=parsed.extra.get("running"),
                   training=parsed.training)


def _finish(
    p: Path,
    kind: str,
    rows: dict[int, dict[str, float]],
    command: LaunchCommand,
    skipped: Skipped,
    old_names: bool,
    config: PrintedConfig = PrintedConfig(),
    need: str = GEN,
) -> RunLog:
    if not rows:
        if skipped.untimed_steps == 0:
            raise ConfigError(str(p), "<file>", "no step lines", EXPECTED)
        raise ConfigError(
            str(p),
            need,
            "<missing in every step>",
            f"at least one step with a rollout time ({GEN}, or timing/gen in older veRL)"
            if need == GEN else f"at least one step with {need}",
        )
    summed = 0
    for row in rows.values():
        if STEP not in row:
            row[STEP] = sum(row.get(TIMING + ph, 0.0) for ph in TOP_PHASES)
            summed += 1
    frame = pd.DataFrame([rows[s] for s in sorted(rows)])
    skipped = replace(skipped, steps_from_phases=summed)
    return RunLog(str(p), kind, frame.reset_index(drop=True), command, skipped, old_names, config)
