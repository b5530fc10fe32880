"""The length fit for length tables (`fit_mixture`): the simulator's length model from observed
lengths, and how well it fits.

The family is `sim.lengths`' model: log(length) is a two-component normal mixture (correct
answers, and wrong ones `wrong_factor` times longer in median) with a shared log-sd, a
per-prompt effect (the within-group correlation), drift over steps, censored at the cap (the
mass at the cap is the clip ratio). With a `correct` column the components are the labels;
without it they are fitted from the lengths alone (a mixture: a short and a long mode), and
what they mean is not identified. The fit is maximum likelihood on the censored lengths; its
goodness compares quantiles, the longest response and the clip ratio of the fitted model
(sampled with the observed batches' shape) with the observed, and gives the two-sample KS
statistic. Where it misses, the empirical model (whole observed groups) is the answer. Traces,
whose responses carry rewards and RL steps, get the censored regression instead (`tobit.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize
from scipy.special import ndtr
from scipy.stats import ks_2samp

from sim.lengths import clip_ratio_at, sample_step
from workbench.contracts.fileio import sig
from workbench.contracts.length_data import UNKNOWN, ObservedLengths
from workbench.contracts.workload import LengthModel

QUANTILES = (0.5, 0.9, 0.99)
REL_TOL = 0.10  # quantiles within 10%
CLIP_TOL = 0.02  # clip ratio within 0.02 absolute


@dataclass(frozen=True)
class FitRow:
    quantity: str  # p50, p90, p99, max, clip_ratio
    observed: float
    fitted: float

    @property
    def error(self) -> float:
        """Relative error (absolute for the clip ratio)."""
        if self.quantity == "clip_ratio":
            return self.fitted - self.observed
        return self.fitted / self.observed - 1.0 if self.observed else 0.0


@dataclass(frozen=True)
class MixtureFit:
    model: LengthModel
    rows: list[FitRow]
    ks: float  # two-sample KS statistic, observed vs the fitted model's draws
    # the components are correct/wrong from the file (else a mixture fitted from lengths alone)
    labelled: bool
    ok: bool  # p50/p90/p99 within 10% and the clip ratio within 0.02
    note: str


# the body and the tail, where waits come from
FIT_PROBS = np.array([0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995])


def _mixture_quantiles(theta: np.ndarray, probs: np.ndarray, log_cap: float) -> np.ndarray:
    """Quantiles of log-length under the censored mixture a N(mu, sd) + (1 - a) N(mu + w, sd)."""
    mu, log_sd, logit_a, log_w = theta
    sd, a, w = math.exp(log_sd), 1.0 / (1.0 + math.exp(-logit_a)), math.exp(log_w)
    grid = np.linspace(mu - 6 * sd, mu + w + 6 * sd, 800)
    # ndtr is norm.cdf without its argument checks (the same values, several times faster)
    cdf = a * ndtr((grid - mu) / sd) + (1 - a) * ndtr((grid - mu - w) / sd)
    return np.minimum(np.interp(probs, cdf, grid), log_cap)


def _quantile_loss(theta: np.ndarray, target: np.ndarray, probs: np.ndarray, log_cap: float,
                   clip_obs: float, a_fixed: float | None) -> float:
    if a_fixed is not None:
        theta = np.array([theta[0], theta[1], math.log(a_fixed / (1 - a_fixed)), theta[3]])
    if not (-5 < theta[1] < 1.2 and -8 < theta[2] < 8 and -4 < theta[3] < 2):
        return 1e9
    q = _mixture_quantiles(theta, probs, log_cap)
    mu, sd = theta[0], math.exp(theta[1])
    a, w = 1.0 / (1.0 + math.exp(-theta[2])), math.exp(theta[3])
    clip = a * ndtr(-((log_cap - mu) / sd)) + (1 - a) * ndtr(-((log_cap - mu - w) / sd))
    return float(((q - target) ** 2).sum() + 25.0 * (clip - clip_obs) ** 2)


def _icc(values: np.ndarray, starts: np.ndarray) -> float:
    """One-way ANOVA intraclass correlation of `values` over the groups (rows
    starts[i]:starts[i+1])."""
    sizes = np.diff(starts)
    keep = sizes >= 2
    if keep.sum() < 2:
        return 0.0
    sums = np.add.reduceat(values, starts[:-1])
    means = sums / sizes
    grand = values.mean()
    squares = float(((values - np.repeat(means, sizes)) ** 2).sum())
    within = squares / max(1, len(values) - len(sizes))
    between = float((sizes * (means - grand) ** 2).sum()) / max(1, len(sizes) - 1)
    n = float(np.mean(sizes))
    return float(np.clip((between - within) / (between + (n - 1) * within), 0.0, 0.95))


def _concentration(correct: np.ndarray, starts: np.ndarray, a: float) -> float:
    """Beta-binomial method of moments: a + b of the per-prompt accuracy."""
    sizes = np.diff(starts)
    acc = np.add.reduceat(correct.astype(float), starts[:-1]) / sizes
    n, v, base = float(np.mean(sizes)), float(np.var(acc)), a * (1 - a)
    if v * n <= base or base <= 0:
        return 100.0  # no more spread than binomial noise: every prompt about equally hard
    return float(np.clip((base * n - v * n) / (v * n - base), 0.05, 100.0))


def fit_mixture(obs: ObservedLengths, cap: int) -> MixtureFit:
    """Fit the mixture model to the observed lengths (cap: the run's max_response_tokens).

    Drift: the slope of each batch's log-median over the batches. Body and tail: the mixture's
    quantiles matched to the drift-removed observed ones (log space, p10 to p99.5) and its mass at
    the cap to the clip ratio; a likelihood fit would spend itself on the very short responses,
    which cost nothing in a rollout."""
    lengths = np.minimum(np.maximum(obs.length, 1), cap).astype(float)
    y, t, log_cap = np.log(lengths), obs.batch.astype(float), math.log(cap)
    medians = np.array([np.median(y[obs.batch == b]) for b in range(obs.batches)])
    drift = float(np.polyfit(np.arange(obs.batches), medians, 1)[0]) if obs.batches >= 2 else 0.0
    y0 = y - drift * t
    labelled = bool((obs.correct != UNKNOWN).all()) and 0 < (obs.correct == 1).mean() < 1
    a_fixed = float((obs.correct == 1).mean()) if labelled else None
    target, clip_obs = np.quantile(y0, FIT_PROBS), float(np.mean(lengths >= cap))
    best = None
    # the mixture has local optima
    for a0, log_w in ((0.9, 0.0), (0.8, 0.5), (0.6, -0.5), (0.95, 0.7)):
        a0 = a_fixed if a_fixed is not None else a0
        theta0 = np.array([float(np.median(y0)), math.log(0.6), math.log(a0 / (1 - a0)), log_w])
        res = minimize(_quantile_loss, theta0, args=(target, FIT_PROBS, log_cap, clip_obs, a_fixed),
                       method="Nelder-Mead",
                       options={"maxiter": 6000, "xatol": 1e-6, "fatol": 1e-9})
        if best is None or res.fun < best.fun:
            best = res
    mu, log_sd, logit_a, log_w = best.x
    a_free = a_fixed if a_fixed is not None else 1.0 / (1.0 + math.exp(-logit_a))
    a = float(np.clip(a_free, 0.01, 0.99))
    w = math.exp(log_w)
    label = obs.correct == 1
    resid = y0 - mu - (np.where(label, 0.0, w) if labelled else 0.0)
    rho = _icc(resid, obs.starts)
    conc = _concentration(label, obs.starts, a) if labelled else 2.0
    model = LengthModel(clip_ratio=0.0, sigma=sig(float(np.clip(math.exp(log_sd), 0.05, 3.0)), 4),
                        group_correlation=sig(rho, 4), mean_accuracy=sig(a, 4),
                        accuracy_concentration=sig(conc, 4),
                        wrong_factor=sig(max(1.0, math.exp(w)), 4),
                        drift_per_step=sig(float(np.clip(drift, -0.5, 0.5)), 4),
                        median_tokens=sig(math.exp(mu), 5))
    clip = min(0.49, clip_ratio_at(model, cap, math.log(model.median_tokens)))
    model = replace(model, clip_ratio=sig(clip, 4))
    return _goodness(obs, cap, model, labelled)


def _goodness(obs: ObservedLengths, cap: int, model: LengthModel, labelled: bool) -> MixtureFit:
    observed = np.minimum(obs.length, cap)
    drawn, maxes = _draws(obs, cap, model)
    rows = [FitRow(f"p{round(q * 100)}", float(np.quantile(observed, q)),
                   float(np.quantile(drawn, q)))
            for q in QUANTILES]
    rows.append(FitRow("max", float(observed.max()), float(np.median(maxes))))
    rows.append(FitRow("clip_ratio", float(np.mean(observed >= cap)), float(np.mean(drawn >= cap))))
    ks = float(ks_2samp(observed, drawn).statistic)
    misses = [r.quantity for r in rows if (r.quantity == "clip_ratio" and abs(r.error) > CLIP_TOL)
              or (r.quantity in ("p50", "p90", "p99") and abs(r.error) > REL_TOL)]
    parts = ["components: correct/wrong from the file's `correct` column" if labelled else
             "no correctness in the file: the two components are a short and a long mode fitted "
             "from the lengths alone; accuracy_concentration is not identified (left at 2.0)"]
    if misses:
        parts.append(f"the lognormal mixture misses {', '.join(misses)} (beyond 10% / 0.02): use "
                     "the empirical model (`--mode empirical`, or `--mode replay` for the observed "
                     "steps as they were)")
    return MixtureFit(model, rows, ks, labelled, not misses, "; ".join(parts))


def _draws(obs: ObservedLengths, cap: int, model: LengthModel) -> tuple[np.ndarray, np.ndarray]:
    """The fitted model sampled with the observed batches' shape (groups x group size per batch),
    enough times for stable quantiles (at least 3, at most 40, ~400k lengths); returns all lengths
    and each replicate's longest."""
    replicates = int(np.clip(400_000 // max(1, obs.responses), 3, 40))
    # fixed: the goodness of fit is a property of the fit, not of a seed
    rng = np.random.default_rng(0)
    sizes = np.diff(obs.starts)
    group = int(np.median(sizes))
    per_batch = [len(ids) for ids in obs.batch_groups]
    drawn, maxes = [], []
    for _ in range(replicates):
        rep = [sample_step(model, cap, n, group, b, rng).lengths for b, n in enumerate(per_batch)
               if n]
        rep_all = np.concatenate(rep)
        drawn.append(rep_all)
        maxes.append(rep_all.max())
    return np.concatenate(drawn), np.array(maxes)
