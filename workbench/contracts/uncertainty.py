"""How sure a profile's costs are: what the simulator-facing tools read to print every time and
speedup with an interval.

Any profile source may supply one (`Profile.uncertainty`; today `tlt calibrate --run-log` does).
It describes four cost components of the profile, as a log-normal over them (centre and
covariance in log space) truncated to each one's declared range (the centre may lie outside a range
where the data pull a component past it; draws: workbench/compare/cost_draws.py):

- `kernel_scale`: multiplies every per-token GPU cost (the decode step's per-sequence, weight,
  compute and KV terms, prefill, the learned drafter's forward); 1 is the profile's own;
- `step_overhead_s`: the fixed host cost of every engine step (the profile's `decode.overhead_s`):
  what speculative decoding divides by the tokens a pass emits;
- `rl_step_s`: the fixed cost of every RL step (the profile's `phases.weight_sync_s`), which SD
  leaves as it is;
- `train_scale`: multiplies the update's cost (1: the profile's own).

A profile without one still declares how sure its costs are by its fit error (`fit_error_pct`,
the median |error| of its cost form against what it was fitted on: for a measured-database
profile, the database's own steps), and every profile its acceptance by ACCEPT_ERROR_PCT; the
intervals draw both (workbench/compare/intervals.py).

A source that samples its posterior may give the draws themselves (`samples`), which the intervals
then resample. Besides: the scatter of single steps around the prediction that the components do
not explain (`step_scatter`, quantiles of log(measured / predicted)), for an interval on one step;
the bias a whole run may carry beyond the components (`run_scatter`), for an interval on a run's
time; named alternative splits (`splits`), the components if the cost the data could not place
were all of one kind, each a single answer printed beside the interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workbench.contracts.schema import require

COMPONENTS = ("kernel_scale", "step_overhead_s", "rl_step_s", "train_scale")
# A normal error's median |error| in its standard deviations: a declared median |error| of m% is
# a log-sd of m / 100 / MEDIAN_ABS_SD.
MEDIAN_ABS_SD = 0.6745
# How sure a profile's acceptance is, for every profile (none declares its own): the median |error|
# of the shipped profiles' EAGLE acceptance model against the TLT paper's eight published accepted
# lengths per verify pass (Table D's six top-k rows, the depth x TV grid's two;
# tests/workbench/test_intervals.py recomputes it), on accepted tokens per pass.
ACCEPT_ERROR_PCT = 2.24


@dataclass(frozen=True)
class CostPoint:
    """One value of each component."""

    kernel_scale: float = 1.0
    step_overhead_s: float = 0.0
    rl_step_s: float = 0.0
    train_scale: float = 1.0

    def as_array(self) -> np.ndarray:
        return np.array([getattr(self, c) for c in COMPONENTS])


@dataclass(frozen=True)
class CostSplit:
    """An alternative answer: the components if the unplaced cost were all of one kind."""

    name: str  # what it assumes, in words ("all per engine step")
    kernel_scale: float
    step_overhead_s: float
    rl_step_s: float
    train_scale: float = 1.0

    @property
    def point(self) -> CostPoint:
        return CostPoint(self.kernel_scale, self.step_overhead_s, self.rl_step_s,
                         self.train_scale)


@dataclass(frozen=True)
class CostUncertainty:
    """The components' spread (module docstring); log space, COMPONENTS' order."""

    method: str  # how the spread was found, in words
    log_center: tuple[float, ...]
    log_covariance: tuple[tuple[float, ...], ...]
    lower: tuple[float, ...]  # the declared range of each component
    upper: tuple[float, ...]
    step_scatter: tuple[float, ...] = (0.0, 0.0)  # 5% and 95% of log(measured / predicted)
    # log-sd of a bias shared by a whole run that the components do not explain (how far a stretch
    # of steps strays from the prediction): on every time of a run, not on a ratio of two policies
    run_scatter: float = 0.0
    splits: tuple[CostSplit, ...] = ()
    level: float = 0.9  # the intervals' coverage as printed
    # Draws of the components (COMPONENTS' order) from the source's own posterior, where it has
    # them: the intervals resample these, the log-normal above only summarises them
    samples: tuple[tuple[float, ...], ...] = ()

    def check(self) -> None:
        n = len(COMPONENTS)
        require(len(self.log_center) == n, "log_center", self.log_center,
                f"{n} numbers: log of {', '.join(COMPONENTS)}")
        require(len(self.log_covariance) == n and all(len(r) == n for r in self.log_covariance),
                "log_covariance", self.log_covariance, f"a {n} x {n} matrix")
        cov = np.array(self.log_covariance, dtype=float)
        require(bool(np.allclose(cov, cov.T, atol=1e-9)) and bool(
            np.all(np.linalg.eigvalsh(cov) > -1e-9)), "log_covariance", "<matrix>",
            "a symmetric positive semi-definite matrix")
        require(len(self.lower) == n and len(self.upper) == n and all(
            0 < lo <= hi for lo, hi in zip(self.lower, self.upper)), "lower",
            self.lower, f"{n} positive lower bounds, each at most its upper bound")
        require(len(self.step_scatter) == 2 and self.step_scatter[0] <= self.step_scatter[1],
                "step_scatter", self.step_scatter, "[5% quantile, 95% quantile] of log ratios")
        require(0.5 <= self.level < 1.0, "level", self.level, "a coverage from 0.5 to 1")
        require(0.0 <= self.run_scatter < 1.0, "run_scatter", self.run_scatter,
                "a log-sd from 0 to 1")
        require(all(len(s) == n and all(x > 0 for x in s) for s in self.samples), "samples",
                "<draws>", f"rows of {n} positive numbers ({', '.join(COMPONENTS)})")

    @property
    def center(self) -> CostPoint:
        return CostPoint(*(math.exp(x) for x in self.log_center))


def interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The central `level` interval of draws."""
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def describe(center: float, lo: float, hi: float, level: float, unit: str = "x",
             fmt: str = "{:.2f}") -> str:
    """'1.04x, 90%: 0.97-1.12x' (the form every tool prints)."""
    f = fmt.format
    return f"{f(center)}{unit}, {level:.0%}: {f(lo)}-{f(hi)}{unit}"
