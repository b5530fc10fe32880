"""The length fit for traces (`fit_tobit`): the simulator's LengthModel (`sim/lengths.py`) from the
traces' responses, by a censored (Tobit) regression of log length on correctness and RL step.

A trace's responses carry what a length table may lack: each one's reward (so correctness is a
regressor, not a mixture component to guess), its RL step (drift is a slope) and whether the
engine cut it at the cap (censoring is exact). Maximum likelihood on that is `tlt calibrate
--lengths-out`'s fit; length tables without those columns get the mixture (`mixture.py`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.stats import norm

from sim.lengths import log_median
from workbench.contracts.fileio import sig
from workbench.contracts.trace import Trace
from workbench.contracts.workload import LengthModel


@dataclass
class TobitFit:
    model: LengthModel
    fitted: dict[str, bool]  # LengthModel field -> fitted (False: the base's)
    responses: int
    groups: int
    cap: int
    clip_ratio_observed: float  # at the first RL step
    clip_ratio_implied: float  # by the censored fit, at the first RL step
    log_median_fit: float  # fitted median log-length of correct answers (step 0)
    log_median_model: float  # what the LengthModel's clip_ratio implies
    notes: list[str] = field(default_factory=list)


@dataclass
class _Body:
    """The Tobit fit of log length on [1, wrong, rl_step]."""

    mu: float  # median log length of a correct answer at step 0
    wrong: float  # log wrong_factor (>= 0)
    drift: float  # per RL step
    sigma: float
    # log length minus the wrong effect and the drift, censored values at their conditional mean
    body: np.ndarray


def tobit(y: np.ndarray, cens: np.ndarray, logcap: np.ndarray,
          X: np.ndarray) -> tuple[np.ndarray, float]:
    """Censored normal regression: y = X beta + e, e ~ N(0, s^2), observed min(y, logcap)."""
    def nll(p):
        beta, s = p[:-1], math.exp(p[-1])
        m = X @ beta
        ll = np.where(cens, norm.logsf((logcap - m) / s), norm.logpdf((y - m) / s) - math.log(s))
        return -float(ll.sum())
    beta0, *_ = np.linalg.lstsq(X, y, rcond=None)
    s0 = max(float(np.std(y - X @ beta0)), 0.05)
    res = minimize(nll, np.r_[beta0, math.log(s0)], method="L-BFGS-B")
    return res.x[:-1], float(math.exp(res.x[-1]))


def _responses(traces: Sequence[Trace]) -> pd.DataFrame:
    """Every response: group (trace, rl_step, prompt), rl_step from 0, length, cap, clipped,
    reward."""
    frames = []
    for t in traces:
        r = t.requests
        frames.append(pd.DataFrame({
            "group": t.name + "/" + r["rl_step"].astype(str) + "/" + r["prompt_id"].astype(str),
            "rl_step": r["rl_step"].to_numpy(int) - int(r["rl_step"].min()),
            "L": np.maximum(r["response_tokens"].to_numpy(float), 1.0),
            "cap": float(t.meta["max_tokens"]),
            "clipped": (r["finish_reason"].astype(str) == "length").to_numpy()
            | (r["response_tokens"].to_numpy() >= t.meta["max_tokens"]),
            "reward": r["reward"].to_numpy(float),
        }))
    return pd.concat(frames, ignore_index=True)


def _fit_body(d: pd.DataFrame, wrong: np.ndarray, fit_wrong: bool, multi_step: bool,
              notes: list[str]) -> _Body:
    y = np.log(d["L"].to_numpy())
    logcap = np.log(d["cap"].to_numpy())
    cens = d["clipped"].to_numpy()
    steps = d["rl_step"].to_numpy(float)
    cols = [np.ones(len(d))] + ([wrong] if fit_wrong else []) + ([steps] if multi_step else [])
    beta, sigma = tobit(y, cens, logcap, np.column_stack(cols))
    mu = float(beta[0])
    w = float(beta[1]) if fit_wrong else 0.0
    drift = float(beta[-1]) if multi_step else 0.0
    if w < 0:
        notes.append(f"wrong answers are shorter here (log factor {w:.2f}); wrong_factor is "
                     "clipped to 1")
        w = 0.0
    sigma = float(np.clip(sigma, 0.05, 3.0))
    # Body: remove the wrong effect and the drift; censored values -> E[y | y > cap] under the fit.
    m = mu + w * wrong + drift * steps
    z = (logcap - m) / sigma
    # A censored response counts at its expected log length given that it passed the cap.
    expected = m + sigma * norm.pdf(z) / np.maximum(norm.sf(z), 1e-300)
    body = np.where(cens, expected, y) - w * wrong - drift * steps
    return _Body(mu, w, drift, sigma, body)


def _group_correlation(body: np.ndarray, inv: np.ndarray, sizes: np.ndarray,
                       base: float) -> tuple[float, bool]:
    """One-way ANOVA intra-class correlation of the body over the groups (the base's with < 2
    groups)."""
    k = len(sizes)
    if not (k >= 2 and sizes.max() >= 2):
        return base, False
    means = np.bincount(inv, body) / sizes
    n_tot = len(body)
    ssw = float(np.sum((body - means[inv]) ** 2))
    ssb = float(np.sum(sizes * (means - body.mean()) ** 2))
    msw, msb = ssw / max(n_tot - k, 1), ssb / (k - 1)
    n0 = (n_tot - np.sum(sizes ** 2) / n_tot) / (k - 1)
    var_b = max((msb - msw) / n0, 0.0)
    return (float(np.clip(var_b / (var_b + msw), 0.0, 0.95)) if var_b + msw > 0 else 0.0), True


def _accuracy_concentration(correct: np.ndarray, inv: np.ndarray, sizes: np.ndarray,
                            have_reward: bool, base: float) -> tuple[float, bool]:
    """Beta-binomial moment fit of per-prompt accuracy: Var(p_hat) = p(1-p)/n (1 + (n-1) rho), rho =
    1/(a+b+1)."""
    if not (have_reward and 0 < correct.mean() < 1 and len(sizes) >= 3 and sizes.min() >= 2):
        return base, False
    acc_g = np.bincount(inv, correct.astype(float)) / sizes
    p = correct.mean()
    nbar = sizes.mean()
    rho = (np.var(acc_g, ddof=1) * nbar / (p * (1 - p)) - 1) / max(nbar - 1, 1e-9)
    if 0 < rho < 1:
        return float(np.clip(1 / rho - 1, 0.05, 1e3)), True
    if rho >= 1:
        return 0.05, True
    return base, False


def _clip_ratio(d: pd.DataFrame, b: _Body, wrong: np.ndarray, cap: int, single_cap: bool,
                notes: list[str]) -> tuple[float, float, float]:
    """(clip_ratio for the model, observed, implied) at RL step 0, where the LengthModel states
    it."""
    first = d["rl_step"].to_numpy() == 0
    implied = float(np.mean(norm.sf((math.log(cap) - (b.mu + b.wrong * wrong[first])) / b.sigma)))
    observed = float(np.mean(d["clipped"][first]))
    n_clipped = int(d["clipped"][first].sum())
    if n_clipped >= 3 and single_cap:
        clip = observed
    else:
        clip = implied
        notes.append(f"{n_clipped} responses of the first RL step reached the cap: clip_ratio is "
                     f"the censored fit's {implied:.4f}, not the observed {observed:.4f}")
    if not 1e-4 <= clip <= 0.49:
        notes.append(f"clip ratio {clip:.4f} is outside what the length model takes (1e-4..0.49): "
                     "clipped")
    return float(np.clip(clip, 1e-4, 0.49)), observed, implied


def fit_tobit(traces: Sequence[Trace], base: LengthModel | None = None) -> TobitFit:
    """Fit the LengthModel to the traces' responses.

    - correctness: reward >= 0.5 (no rewards: wrong_factor 1, accuracy kept from the base);
    - a Tobit fit of log length on [1, wrong, rl_step] (censored at the cap) gives
      the median, log(wrong_factor), the drift per RL step (0 with one step) and sigma;
    - group_correlation: one-way ANOVA intra-class correlation of the body
      (log length minus the wrong effect, censored values replaced by their
      conditional mean under the fit), groups = (trace, rl_step, prompt_id);
    - accuracy_concentration: Beta-binomial moment fit of per-prompt accuracy;
    - clip_ratio: the share of the first RL step's responses cut at the cap
      (finish_reason 'length'), or, with fewer than 3 such responses, the
      share the censored fit implies.
    """
    base = base or LengthModel()
    notes: list[str] = []
    d = _responses(traces)
    caps = d["cap"].value_counts()
    cap = int(caps.index[0])
    if len(caps) > 1:
        notes.append(f"traces have different caps {sorted(caps.index.astype(int))}; clip ratio is "
                     f"stated at {cap}")
    have_reward = np.isfinite(d["reward"]).any()
    correct = (d["reward"].to_numpy() >= 0.5) if have_reward else np.ones(len(d), bool)
    wrong = (~correct).astype(float)
    multi_step = d["rl_step"].to_numpy(float).max() > 0
    fit_wrong = have_reward and 0 < wrong.mean() < 1
    b = _fit_body(d, wrong, fit_wrong, multi_step, notes)
    mean_acc = float(np.clip(correct.mean(), 0.01, 0.99)) if have_reward else base.mean_accuracy
    codes, inv = np.unique(d["group"].to_numpy(), return_inverse=True)
    sizes = np.bincount(inv)
    group_corr, icc_fitted = _group_correlation(b.body, inv, sizes, base.group_correlation)
    conc, conc_fitted = _accuracy_concentration(correct, inv, sizes, have_reward,
                                                base.accuracy_concentration)
    clip, observed, implied = _clip_ratio(d, b, wrong, cap, len(caps) == 1, notes)
    model = LengthModel(clip_ratio=sig(clip, 4), sigma=sig(b.sigma, 4),
                        group_correlation=sig(group_corr, 4), mean_accuracy=sig(mean_acc, 4),
                        accuracy_concentration=sig(conc, 4), wrong_factor=sig(math.exp(b.wrong), 4),
                        drift_per_step=sig(np.clip(b.drift, -0.5, 0.5), 4))
    model.check()
    fitted = {"clip_ratio": True, "sigma": True, "group_correlation": icc_fitted,
              "mean_accuracy": have_reward, "accuracy_concentration": conc_fitted,
              "wrong_factor": fit_wrong, "drift_per_step": multi_step}
    if not have_reward:
        notes.append("no rewards in the traces: wrong_factor = 1 (no correctness effect), "
                     "mean_accuracy from the base")
    return TobitFit(model, fitted, len(d), len(codes), cap, observed, implied, b.mu,
                    log_median(model, cap), notes)
