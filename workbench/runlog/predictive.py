"""Intervals on a log's step times from a calibration's uncertainty, and how often they hold.

A profile's cost uncertainty (workbench/contracts/uncertainty.py) is drawn DRAWS times; each draw
is turned into run-level factors over the log's own engine (its config's prior medians: the same
multiples as the fitted run's) and prices every step (workbench/runlog/engine.py: `predict`). A
step's interval adds the scatter of single steps the factors do not explain (each draw's step
times by a residual of the fit steps, drawn with the same seed); the interval on the run's median
rollout does not (a median over many steps averages that scatter away).

Coverage: the share of steps whose measured rollout falls inside its interval, and whether the
measured median falls inside the median's interval: the honesty check of every interval the
tools print.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from workbench.contracts import seeds
from workbench.contracts.profile import Profile, RunFactors
from workbench.contracts.seeds import Stream
from workbench.compare.cost_draws import draw_costs
from workbench.contracts.uncertainty import CostPoint, interval
from workbench.runlog.engine import StepWork, predict
from workbench.runlog.errors import Measured

DRAWS = 200


@dataclass(frozen=True)
class Coverage:
    """How the intervals did on some steps."""

    steps: int
    step_share: float  # share of steps whose measured rollout is inside its interval
    median_interval: tuple[float, float]  # the run's median rollout, seconds
    median_measured: float
    median_predicted: float  # at the profile's own factors
    level: float

    @property
    def median_inside(self) -> bool:
        lo, hi = self.median_interval
        return lo <= self.median_measured <= hi


def factors_at(f: RunFactors, own: CostPoint, point: CostPoint) -> RunFactors:
    """The run-level factors `f` (the profile's, over some run) moved to a draw of the profile's
    cost components, `own` being the profile's own values: the kernels and the update scaled, the
    per-step and per-RL-step costs in proportion to the draw's."""
    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else 1.0

    return replace(
        f,
        decode_speed=f.decode_speed * point.kernel_scale / own.kernel_scale,
        step_overhead_s=f.step_overhead_s * ratio(point.step_overhead_s, own.step_overhead_s),
        rl_step_s=f.rl_step_s * ratio(point.rl_step_s, own.rl_step_s),
        train_speed=f.train_speed * point.train_scale / own.train_scale,
    )


def coverage(profile: Profile, run: RunFactors, work: StepWork, meas: Measured, shape,
             rows: np.ndarray, seed: int = 0) -> Coverage | None:
    """The intervals `profile`'s uncertainty gives on `rows` of a log of this `shape` (its
    forwards) whose own factors (the profile's, transferred to its config) are `run` (None: the
    profile has no uncertainty)."""
    u = profile.uncertainty
    if u is None or not len(rows):
        return None
    center = profile.cost_point
    rng = seeds.rng(seed, Stream.COST_DRAWS, 1)
    bias = np.exp(rng.normal(0.0, u.run_scatter, size=(DRAWS, 1)))  # one per draw: the run's
    fw = (shape.train_forwards, shape.gen_forwards)
    preds = bias * np.array([predict(_rows(work, rows), factors_at(run, center, d), *fw).gen_s
                             for d in draw_costs(u, DRAWS, seed)])
    y = meas.gen_s[rows]
    ok = np.isfinite(y) & (y > 0)
    lo_q, hi_q = u.step_scatter
    # the scatter of single steps: log-uniform between the fit residuals' 5% and 95% quantiles
    # stretched to the same 90% (a residual drawn from a distribution of that central range)
    scatter = np.exp(rng.normal((lo_q + hi_q) / 2, max(1e-9, (hi_q - lo_q) / 3.29),
                                size=preds.shape))
    lo, hi = (np.percentile(preds * scatter, q, axis=0) for q in
              ((1 - u.level) / 2 * 100, (1 + u.level) / 2 * 100))
    inside = (y[ok] >= lo[ok]) & (y[ok] <= hi[ok])
    medians = np.median(preds[:, ok], axis=1)
    own = predict(_rows(work, rows), run, *fw).gen_s
    return Coverage(int(ok.sum()), float(inside.mean()) if ok.any() else float("nan"),
                    interval(medians, u.level), float(np.median(y[ok])),
                    float(np.median(own[ok])), u.level)


def _rows(work: StepWork, rows: np.ndarray) -> StepWork:
    return StepWork(work.engine_s[rows], work.passes[rows], work.train_s[rows],
                    work.tokens[rows])
