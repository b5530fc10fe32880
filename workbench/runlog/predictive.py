"""Intervals on a log's step times from a calibration's posterior, and how often they hold.

A calibration's `RunFactors` hold the posterior's draws of every factor (log-multiples about its
values); each draw, over the log's own config (the same multiples of its priors' medians), prices
every step (workbench/runlog/engine.py: `predict`). Each draw's whole run is shifted by a bias the
factors do not explain: the run's own drift (how far a stretch of the fit steps strayed, per
group) and, where the log is not the run fitted on, the model's error under a change of run
(MODEL_ERROR, below). A step's interval then adds the scatter of single steps (the fit residuals'
5-95% range); the interval on the run's median does not (a median over many steps averages it).

MODEL_ERROR is declared, one term for every phase group: the root mean square of the whole step's
and the rollout's median log-errors over the leave-one-run-out pairs of the transfer table
(`tlt runlog transfer`, docs/results.md "Transfer table"), which prints it again from the logs it
reads beside the value declared here.

Coverage: the share of steps whose measured time falls inside its interval, and whether the
measured median falls inside the median's interval: the honesty check of every interval the
tools print.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.contracts import seeds
from workbench.contracts.run_factors import RunFactors
from workbench.contracts.seeds import Stream
from workbench.contracts.uncertainty import interval
from workbench.runlog.engine import StepWork, factor_values, predict
from workbench.runlog.errors import Measured

DRAWS = 200
LEVEL = 0.9
MODEL_ERROR = 0.32
GROUPS = ("gen", "update", "step")


@dataclass(frozen=True)
class Coverage:
    """How the intervals did on some steps, for one phase group."""

    steps: int
    step_share: float  # share of steps whose measured time is inside its interval
    median_interval: tuple[float, float]  # the run's median, seconds
    median_measured: float
    median_predicted: float  # at the factors' values
    level: float

    @property
    def median_inside(self) -> bool:
        lo, hi = self.median_interval
        return lo <= self.median_measured <= hi


@dataclass(frozen=True)
class Coverages:
    gen: Coverage | None
    update: Coverage | None
    step: Coverage | None
    model_error: float  # the log-sd added for a change of run (0: the run fitted on)


def _scatter(f: RunFactors, group: str) -> tuple[float, float, float]:
    for s in f.scatter:
        if s.phase == group:
            return s.low, s.high, s.drift_sd
    return 0.0, 0.0, 0.0


def coverage(f: RunFactors, work: StepWork, meas: Measured, rows: np.ndarray,
             change: bool, seed: int = 0, model_error: float | None = None) -> Coverages | None:
    """The intervals `f`'s posterior gives on `rows` of a log (its own factors, `f` transferred to
    its config), with the model's error where `change` (another run than the one fitted;
    `model_error` overrides the declared MODEL_ERROR). None: `f` has no draws."""
    if not f.draws or not len(rows):
        return None
    rng = seeds.rng(seed, Stream.COST_DRAWS, 1)
    me = (MODEL_ERROR if model_error is None else model_error) if change else 0.0
    draws = np.array(f.draws)[rng.integers(0, len(f.draws), DRAWS)]
    values = factor_values(f)
    sub = work.rows(rows)
    preds = [predict(sub, values * np.exp(d)) for d in draws]
    shift = rng.standard_normal((DRAWS, 1))  # one bias a draw, every group alike
    out = {}
    for g in GROUPS:
        lo_q, hi_q, drift = _scatter(f, g)
        bias = np.exp(shift * np.sqrt(drift**2 + me**2))
        p = bias * np.array([getattr(x, f"{g}_s") for x in preds])
        y = getattr(meas, f"{g}_s")[rows]
        ok = np.isfinite(y) & (y > 0)
        if not ok.any():
            out[g] = None
            continue
        scatter = np.exp(rng.normal((lo_q + hi_q) / 2, max(1e-9, (hi_q - lo_q) / 3.29),
                                    size=p.shape))
        lo, hi = (np.percentile(p * scatter, q, axis=0) for q in
                  ((1 - LEVEL) / 2 * 100, (1 + LEVEL) / 2 * 100))
        inside = (y[ok] >= lo[ok]) & (y[ok] <= hi[ok])
        own = getattr(predict(sub, values), f"{g}_s")
        out[g] = Coverage(int(ok.sum()), float(inside.mean()),
                          interval(np.median(p[:, ok], axis=1), LEVEL), float(np.median(y[ok])),
                          float(np.median(own[ok])), LEVEL)
    return Coverages(out["gen"], out["update"], out["step"], me)
