"""What every framework's reader shares: the recognised framework, the declared table that maps its
metric names onto veRL's, and what a reader hands back to `workbench/runlog/reader.py`.

A framework's reader turns its log into veRL's per-step columns (`timing_s/gen`, ...,
`response_length/mean`, ...) by its table (`KeyMap` rows: their key, veRL's, the file of the
framework's code that logs it); a timer the table does not map is kept under its own name and
listed as unmapped. Its launch config is turned into veRL's dotted keys the same way (`ConfigKey`
rows), each value keeping the name and line the log gave it, so the run's shape reads any framework
as it reads veRL (workbench/runlog/shape.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from workbench.contracts.schema import ConfigError
from workbench.contracts.training_shape import TrainingShape
from workbench.runlog.command import LaunchCommand
from workbench.runlog.printed_config import ConfigValue, PrintedConfig

TIMING = "timing_s/"
GEN = TIMING + "gen"
STEP = TIMING + "step"
# An asynchronous run's rollout timer: the trainer's wait for trajectories, not their generation
WAIT = TIMING + "gen_wait"
ROLLOUT = "actor_rollout_ref.rollout."  # veRL's config keys a framework's settings map onto
MODEL = "actor_rollout_ref.model.path"
CHECKPOINTING = "actor_rollout_ref.model.enable_gradient_checkpointing"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A Ray worker's prefix, `(TaskRunner pid=12)` or `(MegatronTrainRayActor pid=3, ip=10.0.0.1)`
RAY_PREFIX = re.compile(r"^\s*\(([^()]*?)\s+pid=\d+[^()]*\)\s?")


@dataclass(frozen=True)
class Recognised:
    """The framework a log was written by: its name, its version and where that came from, and the
    logging code its metric names were read from (path and tag)."""

    name: str
    version: str = ""
    version_source: str = "not in the log"
    code: str = ""  # the framework's logging code the reader follows, with its tag

    def describe(self) -> str:
        version = f"{self.version} ({self.version_source})" if self.version else (
            f"version {self.version_source}")
        return f"{self.name}, {version}" + (f"; read as {self.code}" if self.code else "")


@dataclass(frozen=True)
class KeyMap:
    """One of a framework's metrics as veRL names it."""

    theirs: str
    ours: str
    source: str  # the framework's file that logs it


@dataclass(frozen=True)
class ConfigKey:
    """One of a framework's launch settings as veRL's config names it."""

    theirs: str
    ours: str


@dataclass(frozen=True)
class Parsed:
    """One log read by a framework's reader: its timed steps in veRL's names, what was skipped,
    its config in veRL's keys, and what it could not map."""

    rows: dict[int, dict[str, float]]  # every step record: {"step", "line", veRL's names...}
    identity: Recognised
    config: PrintedConfig = PrintedConfig()
    command: LaunchCommand = LaunchCommand()
    other_lines: int = 0
    truncated: int = 0
    repeated: int = 0
    unmapped: tuple[str, ...] = ()  # their timers with no veRL counterpart, kept as named
    notes: tuple[str, ...] = ()  # how the framework's semantics were honoured
    asynchronous: bool = False  # its rollout timer is waiting for rollouts, not generation
    extra: dict = field(default_factory=dict)  # reader-specific results (the running batch)
    # how it trains, from its launch settings (workbench/runlog/frameworks/train_config.py)
    training: TrainingShape | None = None


def check_timing(where: str, key: str, value: object) -> float:
    """A timing: a number of seconds >= 0 (refused otherwise, naming the line and the key)."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(where, key, value, "a number of seconds >= 0") from None
    if not (v >= 0 and math.isfinite(v)):
        raise ConfigError(where, key, value, "a number of seconds >= 0")
    return v


def number(value: object) -> float | None:
    """A metric's value as a float (None: not a number, such as a text or a list)."""
    if isinstance(value, bool):
        return float(value)
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return v


def to_verl(values: dict[str, object], table: tuple[KeyMap, ...], is_timer, where: str
            ) -> tuple[dict[str, float], list[str]]:
    """Their metrics in veRL's names (timings checked), in the table's order: where two of their
    keys give one veRL key (a newer name and an older one), the first row present wins. Their
    timers the table lacks are kept under their own names and returned as unmapped."""
    out: dict[str, float] = {}
    for m in table:
        if m.theirs not in values or m.ours in out:
            continue
        value = values[m.theirs]
        if m.ours.startswith(TIMING):
            out[m.ours] = check_timing(where, m.theirs, value)
        elif (v := number(value)) is not None:
            out[m.ours] = v
    known = {m.theirs for m in table}
    unmapped = [k for k in values if k not in known and is_timer(k)]
    for k in unmapped:
        out[k] = check_timing(where, k, values[k])
    return out, unmapped


def config_from(settings: dict[str, tuple[object, int]], keys: tuple[ConfigKey, ...],
                default: str = "") -> PrintedConfig:
    """Their launch settings (name -> (value, line)) as veRL's dotted keys, each value keeping its
    own name and line; the first row to give a veRL key wins. A setting at line 0 is not in the
    log: the framework's default (`default` names it: "SkyRL's default") or a fact of the
    framework (a name in parentheses)."""
    values: list[tuple[str, ConfigValue]] = []
    seen = set()
    for k in keys:
        if k.ours in seen or k.theirs not in settings:
            continue
        value, line = settings[k.theirs]
        if value is None:
            continue
        name = k.theirs
        if line == 0 and default and not name.startswith("("):
            name = f"{name} ({default})"
        values.append((k.ours, ConfigValue(value, line, name)))
        seen.add(k.ours)
    first = min((v.line for _, v in values if v.line), default=0)
    return PrintedConfig(tuple(values), first_line=first)


def version_in(text: str, names: tuple[str, ...]) -> tuple[str, str]:
    """The framework's version where the log prints it (a package listing, `name==X`, `name X`):
    (version, where), or ('', 'not in the log')."""
    lower = text.lower()
    if not any(n.lower() in lower for n in names):
        return "", "not in the log"
    alts = "|".join(re.escape(n) for n in names)
    pat = re.compile(rf"(?<![\w/.-])(?:{alts})(?:==|-|\s+version\s+|\s+v|\s+)v?(\d+\.\d+(?:\.\d+)?"
                     rf"(?:rc\d+|\.post\d+|\.dev\d+)?)\b", re.IGNORECASE)
    for n, line in enumerate(text.split("\n"), 1):
        m = pat.search(line) if any(x.lower() in line.lower() for x in names) else None
        if m:
            return m.group(1), f"line {n}: {line.strip()[:80]}"
    return "", "not in the log"


def clean(line: str) -> tuple[str, str]:
    """(the Ray worker's name or '', the line without ANSI colours, carriage return and prefix)."""
    text = ANSI.sub("", line).rstrip("\r")
    m = RAY_PREFIX.match(text)
    return (m.group(1), text[m.end():]) if m else ("", text)
