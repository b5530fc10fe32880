"""The run-level factors, fitted on the log's first steps only, and the errors on the steps after.

Declared factors (RunFactors), each step's prediction a simulation of it
(workbench/runlog/engine.py):
- decode_speed: the run's engine step over the database's (GPU, engine version, eager mode,
  sampling);
- step_overhead_s: a fixed cost per engine step on top (launches, the scheduler);
- rl_step_s: a fixed cost per RL step inside veRL's rollout timer (weight sync, the KV cache's
  re-allocation, padding the batch), which the simulator pays as its sync;
- train_speed: the update's cost per token and forward over the database's.

The three rollout factors are fitted by least squares on log(predicted / measured) over the fit
steps' `timing_s/gen`, with a soft-L1 loss (scale 5%) so a warm-up step does not pull them; the
train speed is the median ratio of measured to predicted update over the same steps. Nothing of the
steps after `fit_steps` enters the fit (a test perturbs them and finds the factors unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from workbench.contracts.profile import RunFactors
from workbench.runlog.engine import Predicted, StepWork
from workbench.runlog.reader import GEN, STEP, TIMING, RunLog

LOSS_SCALE = 0.05
UNTIMED_IN_STEP = ("testing", "save_checkpoint")  # in veRL's step timer, not part of the RL step
FACTOR_NAMES = ("decode_speed", "step_overhead_s", "rl_step_s")
DRIFT_BLOCK = 200


@dataclass(frozen=True)
class Measured:
    """Per step: veRL's rollout (timing_s/gen), the update (the rest of the step) and the step,
    validation and checkpoint saves taken out (NaN where the log has no step time)."""

    gen_s: np.ndarray
    update_s: np.ndarray
    step_s: np.ndarray


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


@dataclass(frozen=True)
class FactorFit:
    factors: RunFactors
    spread: tuple[float, ...]  # one standard error of each rollout factor (FACTOR_NAMES)


def measured(log: RunLog) -> Measured:
    gen = log.column(GEN)
    step = log.column(STEP)
    for name in UNTIMED_IN_STEP:
        step = step - np.nan_to_num(log.column(TIMING + name), nan=0.0)
    return Measured(gen, step - gen, step)


@dataclass(frozen=True)
class FitSet:
    """One log's simulated work and measured times, its first `steps` fitted on."""

    work: StepWork
    measured: Measured
    steps: int
    forwards: int  # the update's forwards per token in this run


def _rollout(x: np.ndarray, work: StepWork, rows: np.ndarray) -> np.ndarray:
    s, o, c = x
    return (s * work.engine_s[rows] + o * work.passes[rows]).max(axis=1) + c


def fit_factors(sets: list[FitSet], fitted_on: str, database_profile: str) -> FactorFit:
    """The factors from each log's first steps alone (module docstring); several logs of one
    cluster share them, each over its own engine."""
    rows = [np.arange(fs.steps) for fs in sets]
    ys = [fs.measured.gen_s[r] for fs, r in zip(sets, rows)]
    s0 = float(
        np.median(
            np.concatenate(
                [y / fs.work.engine_s[r].max(axis=1) for fs, r, y in zip(sets, rows, ys)]
            )
        )
    )

    def resid(x: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [np.log(_rollout(x, fs.work, r) / y) for fs, r, y in zip(sets, rows, ys)]
        )

    res = least_squares(
        resid,
        np.array([s0, 0.0, 0.0]),
        bounds=([1e-6, 0.0, 0.0], [np.inf] * 3),
        loss="soft_l1",
        f_scale=LOSS_SCALE,
        x_scale=np.array([s0, 1e-3, 1.0]),
    )
    ratios = []
    for fs, r in zip(sets, rows):
        upd, db = fs.measured.update_s[r], fs.work.train_s[r] * fs.forwards / 6.0
        ok = np.isfinite(upd) & (upd > 0)
        ratios.append(upd[ok] / db[ok])
    ratio = np.concatenate(ratios)
    f = RunFactors(
        decode_speed=float(res.x[0]),
        step_overhead_s=float(res.x[1]),
        rl_step_s=float(res.x[2]),
        train_speed=float(np.median(ratio)) if len(ratio) else 1.0,
        train_forwards=sets[0].forwards,
        database_profile=database_profile,
        fitted_on=fitted_on,
    )
    return FactorFit(f, _standard_errors(resid, res.x))


def _standard_errors(resid, x: np.ndarray) -> tuple[float, ...]:
    """One standard error per factor from the Jacobian at the fit, the residuals' scale taken
    robustly (1.4826 x their median absolute deviation): how well the fit steps pin each factor."""
    r = resid(x)
    jac = np.empty((len(r), len(x)))
    for j in range(len(x)):
        h = max(1e-6, abs(x[j]) * 1e-4)
        dx = np.zeros(len(x))
        dx[j] = h
        jac[:, j] = (resid(x + dx) - resid(np.maximum(x - dx, [1e-9, 0.0, 0.0]))) / (
            h + min(h, x[j] - (1e-9 if j == 0 else 0.0))
        )
    scale = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    cov = np.linalg.pinv(jac.T @ jac) * scale**2
    return tuple(float(np.sqrt(max(0.0, cov[j, j]))) for j in range(len(x)))


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
