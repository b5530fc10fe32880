"""Another framework's launch settings read as the run's training side (workbench/contracts/
training_shape.py), so the phase model prices its timers as it prices veRL's.

Each framework's reader names its own settings, its defaults (read from its code at the tag it
follows) and how its timers hold its passes (its `training` function); `Settings` reads each
setting once and records where it came from: the log's name and line, or, where the log is silent,
the framework's default, flagged "not in the log". `build` keeps the passes of the phases the log
times, and the models they run.

What a log cannot say is left to the run's shape and filled there (workbench/runlog/prepared.py
`on_run`, so the shape's flags apply): a model whose architecture is RUN_MODEL is the run's (the
rollout's) model, a training on RUN_GPUS GPUs runs on the run's GPUs (colocated), and a response cap
of 0 is the run's.
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench.contracts.schema import ConfigError
from workbench.contracts.training_shape import (ModelShape, PhaseShape, TrainingShape,
                                                TrainingTaken)
from workbench.runlog.frameworks.base import TIMING

RUN_MODEL = ""  # the run's model (the shape's architecture)
RUN_GPUS = 0  # the run's GPUs (a colocated training)
TRUE = ("true", "1", "yes")


class Settings:
    """A framework's settings (their name -> (value, log line; 0: a fact or a default the reader
    added)), each read once and recorded in `taken`."""

    def __init__(self, found: dict[str, tuple[object, int]], framework: str,
                 defaults: dict[str, object], path: str):
        self.found, self.framework, self.defaults, self.path = found, framework, defaults, path
        self.taken: list[TrainingTaken] = []

    def has(self, name: str) -> bool:
        return name in self.found and self.found[name][0] is not None

    def name(self, *names: str) -> str:
        """The first of a setting's names (a newer release's, then older ones) the log has, else
        the first."""
        return next((n for n in names if self.has(n)), names[0])

    def value(self, name: str, default: object = None) -> object:
        """The log's setting, else the framework's default (`defaults`, else `default`)."""
        if self.has(name):
            v, line = self.found[name]
            src = f"log: {name}, line {line}" if line else f"{name} ({self.framework}'s default)"
        else:
            v = self.defaults.get(name, default)
            src = f"not in the log: {self.framework}'s default"
        if not any(t.field == name for t in self.taken):
            self.taken.append(TrainingTaken(name, str(v), src))
        return v

    def int(self, name: str, default: int = 1) -> int:
        v = self.value(name, default)
        try:
            out = int(float(v))  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(self.path, name, v, "a whole number") from None
        return out

    def number(self, name: str, default: float = 0.0) -> float:
        v = self.value(name, default)
        try:
            return float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(self.path, name, v, "a number") from None

    def flag(self, name: str, default: bool = False) -> bool:
        return str(self.value(name, default)).strip().lower() in TRUE

    def text(self, name: str, default: str = "") -> str:
        v = self.value(name, default)
        return "" if v is None else str(v)

    def note(self, field: str, value: object, why: str) -> None:
        """A field the reader worked out (from several settings, or a fact of the framework)."""
        self.taken.append(TrainingTaken(field, str(value), why))


def timed(rows: dict[int, dict[str, float]]) -> frozenset[str]:
    """veRL's phase names the log times in any step."""
    return frozenset(k[len(TIMING):] for r in rows.values() for k in r
                     if str(k).startswith(TIMING))


def micro(phase: str, role: str, sequences: int, tokens: int = 0, update: bool = False,
          epochs: int = 1, minis: int = 1) -> PhaseShape:
    """One pass: `tokens` > 0 packs micro-batches up to that many tokens, else `sequences` each."""
    return PhaseShape(phase, role, 0 if tokens else max(1, sequences), max(0, tokens), update,
                      max(1, epochs), max(1, minis))


def mini_batches(s: Settings, samples: int, global_name: str, default: int) -> int:
    """Optimizer steps per pass over the step's samples: the samples over the global batch."""
    size = s.int(global_name, default)
    return max(1, -(-samples // size)) if size else 1


def build(s: Settings, strategy: str, models: Iterable[ModelShape],
          passes: Iterable[PhaseShape], timed_phases: frozenset[str], gpus: int = RUN_GPUS,
          tp: int = 1, pp: int = 1, remove_padding: bool = True,
          max_prompt: int = 0, max_response: int = 0) -> TrainingShape:
    """The training shape of the passes whose timer the log has, and the models they run."""
    phases = tuple(p for p in passes if p.phase in timed_phases)
    roles = {p.role for p in phases} | {"actor"}
    return TrainingShape(strategy, max(0, gpus), tuple(m for m in models if m.role in roles),
                         phases, max(1, tp), max(1, pp), remove_padding, max(0, max_prompt),
                         max(0, max_response), taken=tuple(s.taken))
