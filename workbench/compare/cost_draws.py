"""Draws of a profile's cost components (workbench/contracts/uncertainty.py): the log-normal
truncated to the declared ranges.

Gibbs sampling of the truncated multivariate normal in log space: DRAW chains side by side, each
component in turn drawn from its normal given the others, truncated to its range; the last sweep's
points are the draws. A component pulled past its range's end by the data keeps its correlation
with the others (its draws pile up at the end, the others move as they must to fit the data),
which clipping draws of the untruncated normal would not.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import truncnorm

from workbench.contracts import seeds
from workbench.contracts.seeds import Stream
from workbench.contracts.uncertainty import CostPoint, CostUncertainty

SWEEPS = 40
MIN_VAR = 1e-14


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
