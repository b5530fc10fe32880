"""The run-level factors: a MAP fit under each factor's declared prior, on the logs' first steps.

Each factor is fitted as a multiple of what each run's config predicts (its prior's median,
workbench/runlog/priors.py), one multiple shared by the runs given: log-factor z_j, run r's factor
= median_rj x exp(z_j), prior z_j ~ N(0, log-sd_j), bounded to the declared range (+-RANGE_SDS
log-sds). Two groups, fitted in turn:

- the training factors (priors.py's TRAIN_FACTORS) on every phase the logs time outside the rollout
  (workbench/runlog/phases.py prices each from its bases), maximising

    -sum_p w_p sum_i rho(r_pi / sigma_p) / 2  -  sum_j (z_j / sd_j)^2 / 2,
    r_pi = log(predicted / measured) of phase p at fit step i;

- the rollout's (ROLLOUT_FACTORS) on `timing_s/gen`, what else its timer holds (an older veRL's
  old log-probs, an offloaded actor's weights) priced with the training factors' MAP.

rho is soft-L1 (half of it a normal's log-likelihood for small residuals, linear for large ones:
a warm-up step does not pull the fit); sigma_p the phase's residuals' robust scale; w_p = n_eff /
n, the steps' lag-1 autocorrelation counted, so 100 steps that move together do not weigh as 100
independent ones.

Each group's posterior is sampled (random-walk Metropolis inside the declared ranges, shaped by
the Laplace covariance at the MAP, seeded): every factor's standard error is its draws' sd; a
factor the data pull to its range's end piles its draws up there. A factor whose posterior sd is
IDENTIFIED_RATIO of its prior's or more is not identified by the data: its prior sets it, and the
report names the measurement that would. What the factors do not explain, per phase group (the
rollout, the update, the step): the single steps' scatter (the residuals' 5-95% range) and a
run's bias (the residuals' medians over blocks of DRIFT_STEPS steps stray by `drift_sd`), which
every interval on a step or a run's time adds. Two refits split what the rollout's data cannot:
the fixed cost put all per engine step (rl_step_s at its range's bottom) or all per RL step
(step_overhead_s at its range's bottom). Nothing of the steps after the fitted ones enters (a test
perturbs them and finds the factors unchanged).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from workbench.contracts import seeds
from workbench.contracts.run_factors import PhaseScatter
from workbench.contracts.seeds import Stream
from workbench.runlog.engine import Predicted, StepWork, predict, rollout_s
from workbench.runlog.errors import Measured
from workbench.runlog.priors import RANGE_SDS, ROLLOUT, TRAIN, RunPriors

IDENTIFIED_RATIO = 0.7
EDGE = 0.02  # within this (in log) of a range's end: at its edge
CHAIN, BURN_IN, THIN = 6000, 1000, 10  # each group's Metropolis chain: 500 draws kept
DRIFT_STEPS = 10
MIN_SIGMA = 0.01
GROUPS = ("gen", "update", "step")


@dataclass(frozen=True)
class FitSet:
    """One log's work and measured times, its first `steps` fitted on, its priors."""

    work: StepWork
    measured: Measured
    steps: int
    priors: RunPriors

    def values(self, z: np.ndarray) -> np.ndarray:
        return self.priors.medians * np.exp(z)


@dataclass(frozen=True)
class Posterior:
    """The fit in log-scales over the first log's prior medians (FACTORS' order)."""

    z: np.ndarray  # MAP log-scales (inside the declared ranges)
    draws: np.ndarray  # the posterior's draws of the log-scales, draws x FACTORS
    mean: np.ndarray  # the posterior's mean log-scales (its draws')
    covariance: np.ndarray  # the posterior's covariance (its draws'), log space
    prior_sd: np.ndarray
    scatter: tuple[PhaseScatter, ...]  # GROUPS' order, the first log's... all logs' residuals
    n_eff: float  # rollout fit steps, their autocorrelation counted

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(np.maximum(np.diag(self.covariance), 0.0))

    def group(self, name: str) -> PhaseScatter:
        return next(s for s in self.scatter if s.phase == name)

    def status(self, j: int) -> str:
        """'identified', 'prior' (the data leave it near its prior) or 'edge' (at its range's
        end: the data pull it past)."""
        if abs(abs(self.z[j]) - RANGE_SDS * self.prior_sd[j]) < EDGE:
            return "edge"
        return "prior" if self.sd[j] >= IDENTIFIED_RATIO * self.prior_sd[j] else "identified"


def _n_eff(r: np.ndarray) -> float:
    """Steps worth of independent information: n (1 - rho1) / (1 + rho1), rho1 >= 0."""
    n = len(r)
    if n < 3 or np.std(r) == 0:
        return float(n)
    rho = float(np.clip(np.corrcoef(r[:-1], r[1:])[0, 1], 0.0, 0.95))
    return max(2.0, n * (1 - rho) / (1 + rho))


def _robust_sigma(r: np.ndarray) -> float:
    return max(MIN_SIGMA, 1.4826 * float(np.median(np.abs(r - np.median(r)))))


def _log_ratio(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    ok = np.isfinite(meas) & (meas > 0) & (pred > 0)
    return np.log(pred[ok] / meas[ok])


def train_residuals(zt: np.ndarray, sets: list[FitSet]) -> list[np.ndarray]:
    """Per phase and log, log(predicted / measured) of the fit steps (the phases outside the
    rollout), at training log-scales `zt`."""
    out = []
    for fs in sets:
        v = fs.priors.medians[TRAIN] * np.exp(zt)
        rows = np.arange(fs.steps)
        b = fs.work.bases
        for name in b.phases:
            if name == "gen" or name not in fs.measured.phases:
                continue
            pred = b.of(name)[rows] @ v
            out.append(_log_ratio(pred, fs.measured.of(name)[rows]))
    return [r for r in out if len(r)]


def gen_residuals(z3: np.ndarray, sets: list[FitSet], zt: np.ndarray) -> np.ndarray:
    """log(predicted / measured) of every fit step's rollout, every log."""
    out = []
    for fs in sets:
        rows = np.arange(fs.steps)
        work = fs.work.rows(rows)
        extra = work.bases.of("gen") @ (fs.priors.medians[TRAIN] * np.exp(zt))
        pred = rollout_s(work, fs.priors.medians[ROLLOUT] * np.exp(z3)) + extra
        out.append(_log_ratio(pred, fs.measured.gen_s[rows]))
    return np.concatenate(out)


def _objective(resid: Callable[[np.ndarray], list[np.ndarray]], sd: np.ndarray,
               scale: list[tuple[float, float]]) -> Callable[[np.ndarray], float]:
    """-log posterior (up to a constant): soft-L1 likelihoods (each residual group with its
    sigma and weight) and the priors."""
    def f(z: np.ndarray) -> float:
        total = float(np.sum((z / sd) ** 2)) / 2
        for r, (sigma, w) in zip(resid(z), scale):
            x = r / sigma
            total += w * float(np.sum(np.sqrt(1 + x * x) - 1))
        return total
    return f


def _scales(groups: list[np.ndarray]) -> list[tuple[float, float]]:
    return [(_robust_sigma(r), _n_eff(r) / len(r)) for r in groups]


def fit_map(resid: Callable[[np.ndarray], list[np.ndarray]], sd: np.ndarray,
            pinned: dict[int, float] | None = None) -> tuple[np.ndarray, list]:
    """The MAP log-scales within the declared ranges (some pinned), and the residual groups'
    (sigma, weight) at it."""
    pinned = pinned or {}
    free = [j for j in range(len(sd)) if j not in pinned]

    def full(zf: np.ndarray) -> np.ndarray:
        z = np.zeros(len(sd))
        z[free] = zf
        for j, v in pinned.items():
            z[j] = v
        return z

    zf = np.zeros(len(free))
    scale = [(0.05, 1.0)] * len(resid(full(zf)))
    bounds = list(zip(-RANGE_SDS * sd[free], RANGE_SDS * sd[free]))
    for _ in range(3):  # sigma and the weights from the residuals, then the fit again
        f = _objective(resid, sd, scale)
        zf = minimize(lambda x: f(full(x)), zf, method="SLSQP", bounds=bounds).x
        scale = _scales(resid(full(zf)))
    return full(zf), scale


def _laplace(f: Callable[[np.ndarray], float], z: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """The covariance at the MAP from the objective's finite-difference Hessian (the priors'
    where it is not positive definite)."""
    n, h = len(z), 1e-3
    hess = np.zeros((n, n))
    f0 = f(z)
    for i in range(n):
        for j in range(i, n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            v = (f(z + ei + ej) - f(z + ei) - f(z + ej) + f0) / h**2
            hess[i, j] = hess[j, i] = v
    hess += np.diag(1e-9 / sd**2)
    try:
        cov = np.linalg.inv(hess)
        np.linalg.cholesky(cov)
        return cov
    except np.linalg.LinAlgError:
        return np.diag(sd**2)


def sample(f: Callable[[np.ndarray], float], z: np.ndarray, sd: np.ndarray,
           stream: int) -> np.ndarray:
    """Draws of the log-scales from their posterior inside the declared ranges: random-walk
    Metropolis from the MAP, its steps shaped by the Laplace covariance there."""
    rng = seeds.rng(0, Stream.RUNLOG_POSTERIOR, stream)
    n = len(z)
    chol = np.linalg.cholesky(_laplace(f, z, sd) * 2.38**2 / n + 1e-12 * np.eye(n))
    lo, hi = -RANGE_SDS * sd, RANGE_SDS * sd
    cur, e = z.copy(), f(z)
    kept = []
    for i in range(CHAIN):
        prop = cur + chol @ rng.standard_normal(n)
        if np.all(prop >= lo) and np.all(prop <= hi):
            ep = f(prop)
            if np.log(rng.random()) < e - ep:
                cur, e = prop, ep
        if i >= BURN_IN and (i - BURN_IN) % THIN == 0:
            kept.append(cur.copy())
    return np.array(kept)


def _drift(r: np.ndarray) -> float:
    """The sd of the residuals' medians over blocks of DRIFT_STEPS (the single steps' robust
    sigma where there are fewer than two blocks)."""
    k = len(r) // DRIFT_STEPS
    if k < 2:
        return _robust_sigma(r) if len(r) else 0.0
    blocks = r[: k * DRIFT_STEPS].reshape(k, DRIFT_STEPS)
    m = np.median(blocks, axis=1)
    return float(np.sqrt(np.mean((m - np.median(m)) ** 2)))


def scatter(sets: list[FitSet], z: np.ndarray) -> tuple[PhaseScatter, ...]:
    """GROUPS' scatter (module docstring): log(measured / predicted) over every log's fit steps."""
    out = []
    preds = [(fs, predict(fs.work.rows(np.arange(fs.steps)), fs.values(z))) for fs in sets]
    for g in GROUPS:
        per_log = [-_log_ratio(_group(p, g), getattr(fs.measured, f"{g}_s")[:fs.steps])
                   for fs, p in preds]
        r = np.concatenate(per_log)
        if not len(r):
            out.append(PhaseScatter(g, 0.0, 0.0, 0.0))
            continue
        drift = float(np.sqrt(np.mean([_drift(x) ** 2 for x in per_log if len(x)])))
        out.append(PhaseScatter(g, round(float(np.percentile(r, 5)), 4),
                                round(float(np.percentile(r, 95)), 4),
                                round(min(drift, 0.99), 4)))
    return tuple(out)


def _group(p: Predicted, g: str) -> np.ndarray:
    return getattr(p, f"{g}_s")


def fit_posterior(sets: list[FitSet]) -> Posterior:
    """The factors' posterior from each log's first steps (module docstring); several logs share
    the multiples, each over its own work and its own priors' medians."""
    sd = sets[0].priors.log_sds
    tres = lambda zt: train_residuals(zt, sets)  # noqa: E731
    zt, tscale = fit_map(tres, sd[TRAIN])
    tdraws = sample(_objective(tres, sd[TRAIN], tscale), zt, sd[TRAIN], 2)
    gres = lambda z3: [gen_residuals(z3, sets, zt)]  # noqa: E731
    z3, gscale = fit_map(gres, sd[ROLLOUT])
    gdraws = sample(_objective(gres, sd[ROLLOUT], gscale), z3, sd[ROLLOUT], 0)
    z, draws = np.zeros(len(sd)), np.zeros((min(len(gdraws), len(tdraws)), len(sd)))
    z[ROLLOUT], z[TRAIN] = z3, zt
    draws[:, ROLLOUT], draws[:, TRAIN] = gdraws[: len(draws)], tdraws[: len(draws)]
    return Posterior(z, draws, draws.mean(axis=0), np.cov(draws.T), sd, scatter(sets, z),
                     _n_eff(gres(z3)[0]))


def split_refit(sets: list[FitSet], post: Posterior, per_engine_step: bool) -> np.ndarray:
    """The log-scales if the fixed cost the rollout's data cannot place were all per engine step
    (the RL step's fixed cost at its range's bottom) or all per RL step (the per-step cost at its
    bottom)."""
    j = 2 if per_engine_step else 1  # rl_step_s or step_overhead_s (ROLLOUT_FACTORS' order)
    zt = post.z[TRAIN]
    gres = lambda z3: [gen_residuals(z3, sets, zt)]  # noqa: E731
    sd = post.prior_sd[ROLLOUT]
    z3, _ = fit_map(gres, sd, {j: -RANGE_SDS * sd[j]})
    z = post.z.copy()
    z[ROLLOUT] = z3
    return z
