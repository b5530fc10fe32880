"""What a prediction misses on a log's steps: the measured phases, |error| over steps, the simplest
predictions' misses (the baselines) and the held-out error by block of steps (drift)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.runlog.engine import Predicted
from workbench.contracts.training_shape import PHASES
from workbench.runlog.reader import GEN, STEP, TIMING, RunLog

UNTIMED_IN_STEP = ("testing", "save_checkpoint")  # in veRL's step timer, not part of the RL step
DRIFT_BLOCK = 200


@dataclass(frozen=True)
class Measured:
    """Per step: veRL's rollout (timing_s/gen), the update (the rest of the step) and the step,
    validation and checkpoint saves taken out (NaN where the log has no step time); and each
    timed phase (`phases`: veRL's canonical names the log times, PHASES' order)."""

    gen_s: np.ndarray
    update_s: np.ndarray
    step_s: np.ndarray
    phases: tuple[str, ...] = ()
    phase_s: np.ndarray | None = None  # phases x steps

    def of(self, phase: str) -> np.ndarray:
        return self.phase_s[self.phases.index(phase)]


@dataclass(frozen=True)
class Errors:
    """|predicted - measured| / measured over some steps, %."""

    median: float
    p90: float
    steps: int

    @classmethod
    def of(cls, pred: np.ndarray, meas: np.ndarray) -> Errors:
        ok = np.isfinite(meas) & (meas > 0)
        e = np.abs(pred[ok] - meas[ok]) / meas[ok] * 100.0
        if not len(e):
            return cls(float("nan"), float("nan"), 0)
        return cls(float(np.median(e)), float(np.percentile(e, 90)), int(len(e)))


def timed_phases(log: RunLog) -> tuple[str, ...]:
    """The canonical phases (PHASES) the log times in at least one step."""
    return tuple(p for p in PHASES if np.isfinite(log.column(TIMING + p)).any())


def measured(log: RunLog) -> Measured:
    gen = log.column(GEN)
    step = log.column(STEP)
    for name in UNTIMED_IN_STEP:
        step = step - np.nan_to_num(log.column(TIMING + name), nan=0.0)
    phases = timed_phases(log)
    return Measured(gen, step - gen, step, phases,
                    np.stack([log.column(TIMING + p) for p in phases]))


@dataclass(frozen=True)
class Baselines:
    """What the simplest predictions miss on the held-out rollouts (median, p90 of |error|)."""

    first_median: Errors  # the fit steps' median timing_s/gen, held constant
    linear_mean: (
        Errors  # a straight line in the step's mean response length, fitted on the fit steps
    )


def baselines(meas: Measured, mean_length: np.ndarray, fit_steps: int) -> Baselines:
    y, x = meas.gen_s, mean_length
    held = slice(fit_steps, None)
    const = np.full(len(y) - fit_steps, np.median(y[:fit_steps]))
    slope, icept = np.polyfit(x[:fit_steps], y[:fit_steps], 1)
    return Baselines(Errors.of(const, y[held]), Errors.of(icept + slope * x[held], y[held]))


@dataclass(frozen=True)
class DriftRow:
    first_step: int  # veRL's step numbers
    last_step: int
    gen: Errors
    step: Errors
    gen_bias_pct: float  # median signed error


def _block(pred: Predicted, meas: Measured, steps: np.ndarray, a: int, b: int) -> DriftRow:
    sl = slice(a, b)
    bias = 100.0 * np.median((pred.gen_s[sl] - meas.gen_s[sl]) / meas.gen_s[sl])
    return DriftRow(int(steps[a]), int(steps[b - 1]), Errors.of(pred.gen_s[sl], meas.gen_s[sl]),
                    Errors.of(pred.step_s[sl], meas.step_s[sl]), float(bias))


def drift(pred: Predicted, meas: Measured, steps: np.ndarray, fit_steps: int) -> list[DriftRow]:
    """The held-out errors in blocks of DRIFT_BLOCK steps after the fit, then the run's last
    DRIFT_BLOCK steps: a factor that drifts shows as a trend, or as the last block off the rest."""
    n = len(steps)
    starts = [a for a in range(fit_steps, n, DRIFT_BLOCK)
              if min(n, a + DRIFT_BLOCK) - a >= DRIFT_BLOCK // 4]
    rows = [_block(pred, meas, steps, a, min(n, a + DRIFT_BLOCK)) for a in starts]
    if n - fit_steps > DRIFT_BLOCK and (not rows or rows[-1].last_step != int(steps[-1])):
        rows.append(_block(pred, meas, steps, n - DRIFT_BLOCK, n))
    return rows


@dataclass(frozen=True)
class PhaseErrors:
    gen: Errors
    update: Errors
    step: Errors
    phases: tuple[tuple[str, Errors], ...] = ()  # each phase the log times

    @classmethod
    def of(cls, pred: Predicted, meas: Measured, rows: slice) -> PhaseErrors:
        each = tuple((name, Errors.of(pred.of(name)[rows], meas.of(name)[rows]))
                     for name in pred.phases if name in meas.phases)
        return cls(
            Errors.of(pred.gen_s[rows], meas.gen_s[rows]),
            Errors.of(pred.update_s[rows], meas.update_s[rows]),
            Errors.of(pred.step_s[rows], meas.step_s[rows]),
            each,
        )
