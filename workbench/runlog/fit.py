"""The run-level factors: a MAP fit under each factor's declared prior, on the logs' first steps.

Each factor is fitted as a multiple of what each run's config predicts (its prior's median,
workbench/runlog/priors.py), one multiple shared by the runs of one cluster: log-factor z_j, run
r's factor = median_rj x exp(z_j), prior z_j ~ N(0, log-sd_j), bounded to the declared range
(+-RANGE_SDS log-sds). The rollout's three (decode_speed, step_overhead_s, rl_step_s) maximise

    -w sum_i rho(r_i / sigma) / 2  -  sum_j (z_j / sd_j)^2 / 2,   r_i = log(predicted / measured)

over the fit steps (rho: soft-L1, half of it a normal's log-likelihood for small residuals and
linear for large ones, so a warm-up step does not pull them; sigma: the residuals' robust scale;
w = n_eff / n, the steps' lag-1 autocorrelation counted, so 100 steps that move together do not
weigh as 100 independent ones). train_speed, fitted first, is the precision-weighted mean of its
prior and the fit steps' log(measured / database update) (robust centre, its standard error with
n_eff); where the run's veRL recomputes the old log-probs inside the rollout timer, their forward
at that train speed is part of each step's predicted rollout.

The posterior is sampled (random-walk Metropolis inside the declared ranges, shaped by the
Laplace covariance at the MAP, seeded): every factor's standard error is its draws' sd, their mean
and covariance what the intervals draw from (workbench/contracts/uncertainty.py); a factor the data
pull to its range's end piles its draws up there, the others moving with it as the data require.
A factor whose posterior sd is IDENTIFIED_RATIO of its prior's or more is not identified by the
data: its prior sets it, and the report names the measurement that would. What the factors do not
explain: the single steps' scatter (the residuals' 5-95% range) and a run's bias (the residuals'
medians over blocks of DRIFT_STEPS steps stray by `drift_sd`), which every interval on a step or a
run's time adds. Two refits split what
the data cannot: the fixed cost put all per engine step (rl_step_s at its range's bottom) or all
per RL step (step_overhead_s at its range's bottom). Nothing of the steps after the fitted ones
enters (a test perturbs them and finds the factors unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize

from workbench.contracts import seeds
from workbench.contracts.seeds import Stream
from workbench.runlog.engine import StepWork, log_prob_s
from workbench.runlog.errors import Measured
from workbench.runlog.priors import FACTORS, RANGE_SDS, RunPriors

ROLLOUT = FACTORS[:3]
IDENTIFIED_RATIO = 0.7
EDGE = 0.02  # within this (in log) of a range's end: at its edge
CHAIN, BURN_IN, THIN = 6000, 1000, 10  # the posterior's Metropolis chain: 500 draws kept
DRIFT_STEPS = 10
MIN_SIGMA = 0.01


@dataclass(frozen=True)
class FitSet:
    """One log's simulated work and measured times, its first `steps` fitted on, its priors."""

    work: StepWork
    measured: Measured
    steps: int
    forwards: int  # the update's forwards per token in this run
    priors: RunPriors
    gen_forwards: int = 0  # forwards per token inside the rollout timer (RunShape.gen_forwards)
    log_prob_s: np.ndarray | None = None  # per step, their cost at the fitted train speed


@dataclass(frozen=True)
class Posterior:
    """The fit in log-scales over the first log's prior medians (FACTORS' order)."""

    z: np.ndarray  # MAP log-scales (inside the declared ranges)
    draws: np.ndarray  # the posterior's draws of the log-scales, draws x FACTORS
    mean: np.ndarray  # the posterior's mean log-scales (its draws')
    covariance: np.ndarray  # the posterior's covariance (its draws'), log space
    prior_sd: np.ndarray
    sigma: float  # the fit residuals' robust log-sd
    residual_q: tuple[float, float]  # their 5% and 95% quantiles (log): per-step scatter
    drift_sd: float  # sd of the residuals' medians over blocks of DRIFT_STEPS: a run's bias
    n_eff: float  # fit steps, their autocorrelation counted

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(np.maximum(np.diag(self.covariance), 0.0))

    def status(self, j: int) -> str:
        """'identified', 'prior' (the data leave it near its prior) or 'edge' (at its range's
        end: the data pull it past)."""
        if abs(abs(self.z[j]) - RANGE_SDS * self.prior_sd[j]) < EDGE:
            return "edge"
        return "prior" if self.sd[j] >= IDENTIFIED_RATIO * self.prior_sd[j] else "identified"


def _rollout(scales: np.ndarray, fs: FitSet, rows: np.ndarray) -> np.ndarray:
    s, o, c = fs.priors.medians[:3] * scales
    extra = fs.log_prob_s[rows] if fs.log_prob_s is not None else 0.0
    return (s * fs.work.engine_s[rows] + o * fs.work.passes[rows]).max(axis=1) + c + extra


def residuals(z3: np.ndarray, sets: list[FitSet]) -> np.ndarray:
    """log(predicted / measured) of every fit step, every log."""
    scales = np.exp(z3)
    out = []
    for fs in sets:
        rows = np.arange(fs.steps)
        y = fs.measured.gen_s[rows]
        ok = np.isfinite(y) & (y > 0)
        out.append(np.log(_rollout(scales, fs, rows[ok]) / y[ok]))
    return np.concatenate(out)


def _n_eff(r: np.ndarray) -> float:
    """Steps worth of independent information: n (1 - rho1) / (1 + rho1), rho1 >= 0."""
    n = len(r)
    if n < 3 or np.std(r) == 0:
        return float(n)
    rho = float(np.clip(np.corrcoef(r[:-1], r[1:])[0, 1], 0.0, 0.95))
    return max(2.0, n * (1 - rho) / (1 + rho))


def _robust_sigma(r: np.ndarray) -> float:
    return max(MIN_SIGMA, 1.4826 * float(np.median(np.abs(r - np.median(r)))))


def neg_log_posterior(z3: np.ndarray, sets: list[FitSet], sd: np.ndarray, sigma: float,
                      weight: float) -> float:
    """-log of the rollout factors' posterior (up to a constant): the soft-L1 likelihood of the fit
    steps (half rho: a normal's for small residuals), weighted by n_eff / n, and the priors."""
    r = residuals(z3, sets) / sigma
    return weight * float(np.sum(np.sqrt(1 + r * r) - 1)) + float(np.sum((z3 / sd) ** 2)) / 2


def _map(sets: list[FitSet], sd: np.ndarray, pinned: dict[int, float]
         ) -> tuple[np.ndarray, float, float]:
    """The rollout MAP (log-scales) within the declared ranges, with some log-scales pinned;
    (z, sigma, weight)."""
    free = [j for j in range(3) if j not in pinned]
    lo, hi = -RANGE_SDS * sd, RANGE_SDS * sd

    def full(zf: np.ndarray) -> np.ndarray:
        z = np.zeros(3)
        z[free] = zf
        for j, v in pinned.items():
            z[j] = v
        return z

    zf, sigma, weight = np.zeros(len(free)), 0.05, 1.0
    for _ in range(3):  # sigma and the weight from the residuals, then the fit again
        res = minimize(lambda x: neg_log_posterior(full(x), sets, sd, sigma, weight), zf,
                       method="L-BFGS-B", bounds=list(zip(lo[free], hi[free])))
        zf = res.x
        r = residuals(full(zf), sets)
        sigma, weight = _robust_sigma(r), _n_eff(r) / len(r)
    return full(zf), sigma, weight


def _jacobian(z3: np.ndarray, sets: list[FitSet]) -> np.ndarray:
    r0, h = residuals(z3, sets), 1e-4
    cols = []
    for j in range(3):
        dz = np.zeros(3)
        dz[j] = h
        cols.append((residuals(z3 + dz, sets) - r0) / h)
    return np.stack(cols, axis=1)


def _sample(sets: list[FitSet], sd: np.ndarray, z3: np.ndarray, sigma: float,
            weight: float) -> np.ndarray:
    """Draws of the rollout log-scales from their posterior inside the declared ranges:
    random-walk Metropolis from the MAP, its steps shaped by the Laplace covariance there."""
    rng = seeds.rng(0, Stream.RUNLOG_POSTERIOR)
    jac = _jacobian(z3, sets)
    laplace = np.linalg.inv(weight * jac.T @ jac / sigma**2 + np.diag(1 / sd**2))
    chol = np.linalg.cholesky(laplace * 2.38**2 / 3 + 1e-12 * np.eye(3))
    lo, hi = -RANGE_SDS * sd, RANGE_SDS * sd
    z, e = z3.copy(), neg_log_posterior(z3, sets, sd, sigma, weight)
    kept = []
    for i in range(CHAIN):
        prop = z + chol @ rng.standard_normal(3)
        if np.all(prop >= lo) and np.all(prop <= hi):
            ep = neg_log_posterior(prop, sets, sd, sigma, weight)
            if np.log(rng.random()) < e - ep:
                z, e = prop, ep
        if i >= BURN_IN and (i - BURN_IN) % THIN == 0:
            kept.append(z.copy())
    return np.array(kept)


def _train(sets: list[FitSet], prior_sd: float) -> tuple[float, float]:
    """train_speed's log-scale over its prior median and its posterior sd."""
    logs = []
    for fs in sets:
        rows = np.arange(fs.steps)
        upd = fs.measured.update_s[rows]
        db = fs.work.train_s[rows] * fs.forwards / 6.0
        ok = np.isfinite(upd) & (upd > 0) & (db > 0)
        logs.append(np.log(upd[ok] / db[ok]) - np.log(fs.priors["train_speed"].median))
    x = np.concatenate(logs)
    if not len(x):
        return 0.0, prior_sd
    se = 1.2533 * _robust_sigma(x) / np.sqrt(_n_eff(x - np.median(x)))
    w_data, w_prior = 1 / se**2, 1 / prior_sd**2
    z = float(np.median(x)) * w_data / (w_data + w_prior)
    return float(np.clip(z, -RANGE_SDS * prior_sd, RANGE_SDS * prior_sd)), float(
        (w_data + w_prior) ** -0.5)


def _drift_sd(sets: list[FitSet], z3: np.ndarray, sigma: float) -> float:
    """How far a stretch of DRIFT_STEPS fit steps strays from the prediction: the sd of the
    residuals' medians over such blocks, each log's own (the single steps' sigma where a log has
    fewer than two blocks)."""
    medians = []
    for fs in sets:
        r = residuals(z3, [fs])
        k = len(r) // DRIFT_STEPS
        if k >= 2:
            blocks = r[: k * DRIFT_STEPS].reshape(k, DRIFT_STEPS)
            medians.append(np.median(blocks, axis=1) - np.median(blocks))
    if not medians:
        return sigma
    return float(np.sqrt(np.mean(np.concatenate(medians) ** 2)))


def with_log_probs(sets: list[FitSet], zt: float) -> list[FitSet]:
    """Each log's rollout given the old log-probs' forward its veRL times inside it, at the train
    speed fitted on the update (log-scale `zt` over its prior's median)."""
    return [replace(fs, log_prob_s=log_prob_s(
        fs.work, fs.priors["train_speed"].median * float(np.exp(zt)), fs.gen_forwards))
        for fs in sets]


def fit_posterior(sets: list[FitSet]) -> Posterior:
    """The factors' posterior from each log's first steps (module docstring); several logs of one
    cluster share the scales, each over its own engine and its own priors' medians."""
    sd = sets[0].priors.log_sds
    zt, sdt = _train(sets, sd[3])
    sets = with_log_probs(sets, zt)
    z3, sigma, weight = _map(sets, sd[:3], {})
    draws = _sample(sets, sd[:3], z3, sigma, weight)
    cov = np.zeros((4, 4))
    cov[:3, :3] = np.cov(draws.T)
    cov[3, 3] = sdt**2
    r = residuals(z3, sets)
    q = (float(np.percentile(r, 5)), float(np.percentile(r, 95)))
    rng = seeds.rng(0, Stream.RUNLOG_POSTERIOR, 1)
    draws4 = np.column_stack([draws, zt + sdt * rng.standard_normal(len(draws))])
    return Posterior(np.append(z3, zt), draws4, np.append(draws.mean(axis=0), zt), cov, sd, sigma,
                     q, _drift_sd(sets, z3, sigma), _n_eff(r))


def split_refit(sets: list[FitSet], post: Posterior, per_engine_step: bool) -> np.ndarray:
    """The log-scales if the fixed cost the data cannot place were all per engine step (the RL
    step's fixed cost at its range's bottom) or all per RL step (the per-step cost at its
    bottom)."""
    j = 2 if per_engine_step else 1
    sets = with_log_probs(sets, post.z[3])
    z3, _, _ = _map(sets, post.prior_sd[:3], {j: -RANGE_SDS * post.prior_sd[j]})
    return np.append(z3, post.z[3])
