"""Draws of a profile's cost components (workbench/contracts/uncertainty.py): the log-normal
truncated to the declared ranges.

Gibbs sampling of the truncated multivariate normal in log space: DRAW chains side by side, each
component in turn drawn from its normal given the others, truncated to its range; the last sweep's
points are the draws. A component pulled past its range's end by the data keeps its correlation
with the others (its draws pile up at the end, the others move as they must to fit the data),
which clipping draws of the untruncated normal would not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import truncnorm

from workbench.contracts import seeds
from workbench.contracts.profile import Profile
from workbench.contracts.seeds import Stream
from workbench.contracts.uncertainty import (ACCEPT_ERROR_PCT, MEDIAN_ABS_SD, CostPoint,
                                             CostUncertainty)

SWEEPS = 40
MIN_VAR = 1e-14
TRUNCATE_SD = 3.0  # a declared median |error|'s draws stay within this many standard deviations
LEVEL = 0.9  # the intervals' coverage where the profile's uncertainty does not set it


def draw_costs(u: CostUncertainty, n: int, seed: int = 0) -> list[CostPoint]:
    """`n` points: the source's own posterior draws where it gives them (resampled), else the
    truncated log-normal's (module docstring); the same seed, the same points."""
    rng = seeds.rng(seed, Stream.COST_DRAWS)
    if u.samples:
        pick = rng.permutation(len(u.samples)) if n <= len(u.samples) else rng.integers(
            len(u.samples), size=n)
        return [CostPoint(*u.samples[i]) for i in pick[:n]]
    mean = np.array(u.log_center, dtype=float)
    cov = np.array(u.log_covariance, dtype=float)
    lo, hi = np.log(np.array(u.lower)), np.log(np.array(u.upper))
    k = len(mean)
    x = np.tile(np.clip(mean, lo, hi), (n, 1))
    cond = []
    for j in range(k):  # each component's regression on the others, and what is left of its var
        rest = [i for i in range(k) if i != j]
        s_rr = cov[np.ix_(rest, rest)]
        s_jr = cov[j, rest]
        w = np.linalg.lstsq(s_rr, s_jr, rcond=None)[0] if rest else np.zeros(0)
        cond.append((rest, w, max(MIN_VAR, cov[j, j] - float(s_jr @ w))))
    for _ in range(SWEEPS):
        for j, (rest, w, var) in enumerate(cond):
            m = mean[j] + (x[:, rest] - mean[rest]) @ w
            sd = np.sqrt(var)
            a, b = (lo[j] - m) / sd, (hi[j] - m) / sd
            x[:, j] = truncnorm.rvs(a, b, loc=m, scale=sd, random_state=rng)
    return [CostPoint(*map(float, row)) for row in np.exp(x)]


@dataclass(frozen=True)
class Declared:
    """Draws of what a profile declares of how sure it is (workbench/compare/intervals.py)."""

    costs: str  # what the cost draws are, in words ("": none declared)
    points: list[CostPoint]  # the cost components, one per draw (the profile's own where none)
    accept: np.ndarray  # accepted tokens per pass, times the run's, one per draw
    bias: np.ndarray  # a run's time, times this, one per draw
    level: float


def declared(profile: Profile, n: int, seed: int = 0) -> Declared:
    """`n` draws: the profile's cost posterior where it has one, else its fit error as one
    log-normal scale on every kernel cost; the acceptance's declared error; seeded."""
    own = profile.cost_point
    u = profile.uncertainty
    accept = _lognormal(ACCEPT_ERROR_PCT, n, seeds.rng(seed, Stream.COST_DRAWS, 4))
    if u is not None:
        bias = np.exp(seeds.rng(seed, Stream.COST_DRAWS, 2).normal(0.0, u.run_scatter, n))
        return Declared("its calibrated costs (a run log's posterior)", draw_costs(u, n, seed),
                        accept, bias, u.level)
    if profile.fit_error_pct:
        k = _lognormal(profile.fit_error_pct, n, seeds.rng(seed, Stream.COST_DRAWS, 3))
        points = [CostPoint(float(x), own.step_overhead_s, own.rl_step_s, own.train_scale)
                  for x in k]
        return Declared(f"its costs' fit error ({profile.fit_error_pct:g}% median |error|, one "
                        "scale on every kernel cost)", points, accept, np.ones(n), LEVEL)
    return Declared("", [own] * n, accept, np.ones(n), LEVEL)


def _lognormal(median_abs_pct: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Factors around 1 whose log is normal with that median |error|, cut at TRUNCATE_SD."""
    sd = median_abs_pct / 100.0 / MEDIAN_ABS_SD
    return np.exp(np.clip(rng.normal(0.0, sd, n), -TRUNCATE_SD * sd, TRUNCATE_SD * sd))
