"""The decode and drafter cost fit, over every engine step of every trace (`fit_costs`).

      T = overhead + per_seq*B + kv*B*ctx + max(weights, compute*B*(K+1))
          + prefill*P + [n-gram] ngram*B + [EAGLE] max(K, 1)*(eagle_step + eagle_seq*B)
          + [K > 0] sd_step

B = decode_requests, ctx = context_mean, K = draft_len (0: no SD that step),
P = prefill_tokens; the drafter is the trace's (meta). Writing
weights = compute*knee turns max(weights, compute*N) into compute*max(knee, N):
for a given knee everything is linear and non-negative, so the fit is a 1-D
search over the knee (0 and quantiles of N = B*(K+1), refined between grid
neighbours) around a robust non-negative linear fit: NNLS start, then
scipy's soft-l1 loss on *relative* residuals minimised by iteratively
reweighted NNLS (step times span orders of magnitude and noise on a busy
machine is multiplicative; `least_squares`' exact trust-region solver forms
an n x n SVD, too big for long traces). A knee inside the data must pass a likelihood-ratio test
or weights_s stays the base's. Warm-up: the first `warmup_steps` engine steps
of every engine's first RL step leave the fit unless they fit like ordinary
steps (within 5 robust sds). A nuisance feature, requests finished in the
previous step, takes up vLLM's per-finish cost (a Profile has no field for
it, so it is reported, not stored). Last, the fitted parameters are scaled so
the fitted steps' predicted total equals their measured total (the robust fit
follows the typical step; a rollout is a sum, and outliers and finish costs
are part of it). Parameters the traces cannot identify (a feature that is all zero,
e.g. EAGLE costs with no EAGLE trace, or nearly collinear with the others,
e.g. kv cost when contexts barely vary, or per_seq vs compute when K never
varies) keep the base profile's value; `ParamFit.fitted` says which were fitted.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from sim.costs import draft_step_s, prefill_s, verify_step_s
from workbench.calibrate.captures.robust import identifiable, robust_fit, robust_scale
from workbench.contracts.fileio import sig
from workbench.contracts.profile import DecodeCost, DrafterCost, Profile
from workbench.contracts.policy import DrafterKind

# Linear cost parameters, in the order they are kept when features are collinear
# (earlier = kept: the target's own costs before the drafter's, which the trace
# can only separate from the target's with a second drafter kind or draft length).
COST_PARAMS: tuple[tuple[str, str], ...] = (
    ("decode", "overhead_s"),
    ("decode", "compute_s_per_token"),
    ("decode", "per_seq_s"),
    ("decode", "prefill_s_per_token"),
    ("decode", "kv_s_per_token"),
    ("drafter", "ngram_s_per_seq"),
    ("drafter", "eagle_s_per_seq"),
    ("drafter", "eagle_step_s"),
    ("drafter", "sd_step_s"),
    ("decode", "finish_s"),
)
# A step right after requests finished is slower (vLLM frees them and the driver builds their
# final outputs: ~5 ms per request on this machine). The fit always separates that cost
# ("finish_s" per request finished in the previous step) so it does not bias the others; a
# Profile has no field for it, so the mean-matching step spreads it over the form's parameters
# (see `fit_costs`) and `CostFit.finish_s` reports it.
FINISH = len(COST_PARAMS) - 1
COMPUTE = 1  # the compute_s_per_token column: the knee needs it
KNEE_QUANTILES = np.linspace(0.02, 0.9, 23)
CV_FOLDS = 5


@dataclass(frozen=True)
class ParamFit:
    """One profile parameter as the calibration set it: fitted, or kept from the base profile."""

    part: str  # the Profile part: decode, drafter, acceptance or phases
    name: str  # the field of that part
    value: float
    fitted: bool
    # relative standard error (cost parameters; nan: unknown or not fitted)
    rel_se: float = math.nan
    why_not_fitted: str | None = None

    @property
    def key(self) -> str:
        """'part.name', as the calibration report and the parameter table name it."""
        return f"{self.part}.{self.name}"


@dataclass(frozen=True)
class TraceFit:
    """How the cost fit does on one trace's fitted steps."""

    trace: str
    steps: int
    bias_pct: float  # 100 * (sum predicted / sum measured - 1)
    median_abs_error_pct: float


@dataclass
class CostFit:
    # the decode and drafter parameters, in table order: the fitted profile's values
    params: list[ParamFit]
    knee_tokens: float  # weights_s / compute_s_per_token
    f_scale: float  # soft-l1 scale of the relative residuals
    # measured total / the robust fit's total (form only): what mean-matching scaled by
    mean_scale: float
    # fitted cost per request finished in the previous step (reported; a Profile has no field for
    # it)
    finish_s: float
    steps_used: int
    steps_dropped: dict[str, int]  # reason -> count
    # time the dropped warm-up steps took beyond the fit's prediction (all engines)
    warmup_excess_s: float
    outliers: int  # used steps whose relative residual exceeds 5 robust sds
    mdape_pct: float  # in-sample median |error| per step, %
    cv_mdape_pct: float  # held-out (5-fold) median |error| per step, %
    bias_pct: dict[str,
                   float]  # per trace: 100 * (sum predicted / sum measured - 1) over used steps
    residuals: pd.DataFrame

    def decode(self) -> DecodeCost:
        return DecodeCost(**{p.name: p.value for p in self.params if p.part == "decode"})

    def drafter(self) -> DrafterCost:
        return DrafterCost(**{p.name: p.value for p in self.params if p.part == "drafter"})

    def per_trace(self) -> list[TraceFit]:
        r = self.residuals
        return [TraceFit(t, int((r["trace"] == t).sum()), b,
                         float(np.median(np.abs(r.loc[r["trace"] == t, "error_pct"]))))
                for t, b in self.bias_pct.items()]


def features(f: pd.DataFrame, knee: float) -> np.ndarray:
    """Columns in COST_PARAMS order; `knee` = weights_s / compute_s_per_token (tokens)."""
    b, ctx, k, p = (f[c].to_numpy(float) for c in ("B", "ctx", "K", "P"))
    sd = k > 0
    ngram = sd & (f["kind"].to_numpy() == DrafterKind.NGRAM)
    # An EAGLE engine's drafter runs a forward in every decoding step, K = 0 too (sim/costs.py).
    eagle = np.where((f["kind"].to_numpy() == DrafterKind.EAGLE) & (b > 0), np.maximum(k, 1), 0)
    return np.column_stack([
        np.ones(len(f)),                 # overhead_s
        np.maximum(knee, b * (k + 1)),   # compute_s_per_token (and weights_s = compute * knee)
        b,                               # per_seq_s
        p,                               # prefill_s_per_token
        b * ctx,                         # kv_s_per_token
        b * ngram,                       # ngram_s_per_seq
        eagle * b,                       # eagle_s_per_seq
        eagle,                           # eagle_step_s
        sd & (b > 0),                    # sd_step_s: a pass that speculates, either kind
        f["F"].to_numpy(float),          # finish_s (requests finished in the previous step)
    ])


def predict_steps(profile: Profile, f: pd.DataFrame) -> np.ndarray:
    """Step latency from the simulator's own cost functions (so the fit is judged in its exact
    form)."""
    dec, dr = profile.decode, profile.drafter
    out = np.empty(len(f))
    columns = (f[c].to_numpy() for c in ("B", "ctx", "K", "P", "kind"))
    for i, (b, ctx, k, p, kind) in enumerate(zip(*columns)):
        out[i] = (verify_step_s(dec, int(b), float(ctx), int(k))
                  + draft_step_s(dr, kind, int(b), int(k))
                  + prefill_s(dec, int(p)))
    return out


def base_vector(base: Profile) -> np.ndarray:
    """The base profile's values in COST_PARAMS order (0 for finish_s, which a Profile does not
    hold)."""
    return np.array([getattr(getattr(base, part), name, 0.0) for part, name in COST_PARAMS])


def _solve(X: np.ndarray, y: np.ndarray, base_vec: np.ndarray, active: list[int], f_scale: float,
           mean_match: bool = False) -> tuple[np.ndarray, float]:
    """Fit the `active` columns on relative residuals; the others stay at `base_vec` (their part is
    subtracted).

    mean_match: then drop what a Profile cannot store (finish_s) and scale the fitted parameters
    so the steps' predicted total equals their measured total (the robust fit follows the
    typical step; a rollout is a sum, which outliers and finishes add to)."""
    fixed = [j for j in range(X.shape[1]) if j not in active]
    fixed_part = X[:, fixed] @ base_vec[fixed]
    target = (y - fixed_part) / y
    A = X[:, active] / y[:, None]
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    xs, cost = robust_fit(A / norms, target, f_scale)
    theta = base_vec.copy()
    theta[active] = xs / norms
    if mean_match:
        theta[FINISH] = 0.0
        scaled = [j for j in active if j != FINISH]
        rest = float((X @ theta).sum() - (X[:, scaled] @ theta[scaled]).sum())
        fitted_part = float((X[:, scaled] @ theta[scaled]).sum())
        if fitted_part > 0:
            theta[scaled] *= max(0.0, float(y.sum()) - rest) / fitted_part
    return theta, cost


def _decode_tokens(g: pd.DataFrame) -> np.ndarray:
    """B*(K+1) of the steps that decode (B > 0)."""
    return (g["B"] * (g["K"] + 1)).to_numpy(float)[g["B"].to_numpy() > 0]


def _fit_knee(g: pd.DataFrame, y: np.ndarray, base_vec: np.ndarray, active: list[int],
              f_scale: float):
    """The 1-D search over knee = weights_s / compute_s_per_token: (knee, theta) of the lowest
    robust loss."""
    decode_n = _decode_tokens(g)
    knees = [0.0]
    if COMPUTE in active and len(decode_n):  # the knee needs the compute term
        knees += sorted({float(q) for q in np.quantile(decode_n, KNEE_QUANTILES) if q > 0})
    costs = []
    for knee in knees:
        theta, cost = _solve(features(g, knee), y, base_vec, active, f_scale)
        costs.append((cost, knee, theta))
    i = min(range(len(costs)), key=lambda j: costs[j][0])
    cost, knee, theta = costs[i]
    if len(knees) > 2 and knee > 0:  # refine between the grid neighbours
        lo, hi = knees[max(i - 1, 0)], knees[min(i + 1, len(knees) - 1)]
        res = minimize_scalar(lambda kn: _solve(features(g, kn), y, base_vec, active, f_scale)[1],
                              bounds=(lo, hi), method="bounded",
                              options={"xatol": max(1e-3 * knee, 1e-6), "maxiter": 25})
        if res.fun < cost:
            knee, cost = float(res.x), float(res.fun)
            theta, _ = _solve(features(g, knee), y, base_vec, active, f_scale)
    # A knee inside the data is one more parameter: keep it only if it lowers the loss
    # significantly (a likelihood-ratio test: the loss is ~ sum of squared residuals, noise ~
    # f_scale).
    min_n = float(decode_n.min()) if len(decode_n) else 0.0
    if knee > min_n and (costs[0][0] - cost) / f_scale**2 < max(10.83, math.log(len(y))):
        cost, knee, theta = costs[0]
    return knee, theta


@dataclass
class _RobustFit:
    """The robust fit before mean-matching: the steps it used and its solution."""

    g: pd.DataFrame  # the fitted steps
    y: np.ndarray  # their measured times
    active: list[int]  # identified COST_PARAMS columns
    why: dict[int, str]  # why each other column is not
    f_scale: float
    knee: float
    theta: np.ndarray
    warm_dropped: int  # warm-up steps left out
    warm_excess_s: float


def _robust_fit_steps(f: pd.DataFrame, ok: pd.Series, base_vec: np.ndarray) -> _RobustFit:
    """Steps 1 and 2 of `fit_costs`: fit outside warm-up, then let warm-up steps that fit rejoin."""
    g = f[ok & ~f["warmup"]].reset_index(drop=True)
    if len(g) < 10:
        raise ValueError("calibration needs at least 10 usable engine steps; the traces have "
                         f"{len(g)}")
    y = g["y"].to_numpy(float)
    active, why = identifiable(features(g, 0.0), y)
    # One soft-l1 scale for every knee so their losses compare: from a near-L2 fit at knee 0.
    theta0, _ = _solve(features(g, 0.0), y, base_vec, active, 1.0)
    f_scale = float(max(0.01, robust_scale(features(g, 0.0) @ theta0 / y - 1.0)))
    knee, theta = _fit_knee(g, y, base_vec, active, f_scale)

    # Warm-up candidates that look like ordinary steps rejoin.
    warm = f[ok & f["warmup"]]
    if not len(warm):
        return _RobustFit(g, y, active, why, f_scale, knee, theta, 0, 0.0)
    scale = robust_scale(features(g, knee) @ theta / y - 1.0)
    wrel = features(warm, knee) @ theta / warm["y"].to_numpy(float) - 1.0
    back = np.abs(wrel) <= 5 * scale
    warm_kept = int(back.sum())
    if warm_kept:
        g = pd.concat([f[ok & ~f["warmup"]], warm[back]]).sort_index().reset_index(drop=True)
        y = g["y"].to_numpy(float)
        active, why = identifiable(features(g, 0.0), y)
        knee, theta = _fit_knee(g, y, base_vec, active, f_scale)
    warm_out = warm[~back]
    warm_excess = float((warm_out["y"] - features(warm_out, knee) @ theta).sum())
    return _RobustFit(g, y, active, why, f_scale, knee, theta, len(warm) - warm_kept, warm_excess)


def _weights(fit: _RobustFit, theta: np.ndarray, base: Profile) -> tuple[float, bool, float]:
    """(weights_s, fitted, the knee the stored weights_s implies): a knee inside the traced range
    is fitted; else weights_s stays the base's, capped so it has no effect on the traced steps."""
    compute = theta[COMPUTE]
    decode_n = _decode_tokens(fit.g)
    min_n = float(decode_n.min()) if len(decode_n) else 0.0
    fitted = bool(COMPUTE in fit.active and fit.knee > min_n and compute > 0)
    at_min_n = compute * min_n if compute > 0 else base.decode.weights_s
    weights = compute * fit.knee if fitted else min(base.decode.weights_s, at_min_n)
    if not fitted and weights > 0 and compute > 0:
        return weights, fitted, weights / compute  # keep the form exact
    return weights, fitted, fit.knee


def _rel_se(X: np.ndarray, y: np.ndarray, rel: np.ndarray, inl: np.ndarray, active: list[int],
            theta: np.ndarray) -> np.ndarray:
    """Relative standard errors (COST_PARAMS order; nan: unknown) from the inliers' residual
    variance."""
    out = np.full(len(COST_PARAMS), np.nan)
    A = X[inl][:, active] / y[inl, None]
    if len(A) > len(active):
        s2 = float(np.sum(rel[inl] ** 2) / (len(A) - len(active)))
        try:
            cov = s2 * np.linalg.inv(A.T @ A)
            for idx, j in enumerate(active):
                se = float(math.sqrt(max(cov[idx, idx], 0.0)))
                out[j] = se / theta[j] if theta[j] > 0 else float("inf")
        except np.linalg.LinAlgError:
            pass
    return out


def _cv_errors(X: np.ndarray, y: np.ndarray, base_vec: np.ndarray, active: list[int],
               f_scale: float, folds: int) -> np.ndarray:
    """Held-out relative error per step: runs of consecutive steps (so neighbours, which share batch
    and context, are held out together) dealt round-robin to the folds (so every fold sees every
    trace); same knee and parameter set."""
    cv_err = np.full(len(y), np.nan)
    if folds >= 2 and len(y) >= 5 * folds:
        run = max(5, len(y) // (folds * 20))
        fold = (np.arange(len(y)) // run) % folds
        for k in range(folds):
            mask = fold != k
            th, _ = _solve(X[mask], y[mask], base_vec, active, f_scale, mean_match=True)
            cv_err[~mask] = X[~mask] @ th / y[~mask] - 1.0
    return cv_err


def _param_fits(fit: _RobustFit, theta: np.ndarray, weights: float, weights_fitted: bool,
                rel_se: np.ndarray) -> list[ParamFit]:
    """The profile's cost parameters (finish_s left out: a Profile has no field for it), weights_s
    last."""
    out = [ParamFit(part, name, sig(theta[j]), j in fit.active, float(rel_se[j]), fit.why.get(j))
           for j, (part, name) in enumerate(COST_PARAMS) if j != FINISH]
    why = None if weights_fitted else ("no saturation knee inside the traced batch*(K+1) range"
                                       if COMPUTE in fit.active else "compute cost not identified")
    return out + [ParamFit("decode", "weights_s", sig(weights), weights_fitted, math.nan, why)]


def fit_costs(f: pd.DataFrame, base: Profile, folds: int = CV_FOLDS) -> CostFit:
    """Robust non-negative fit of DecodeCost and DrafterCost over the usable engine steps of `f`
    (from `step_frame`).

    1. Fit on the steps outside warm-up: NNLS start, then soft-l1 on relative
       residuals, for each knee candidate; keep the knee of the lowest loss.
    2. Warm-up steps whose residual under that fit is within 5 robust sds are
       ordinary steps after all (the first prefill usually is): they rejoin,
       and the fit is redone; the others stay out (`steps_dropped['warm-up']`).
    3. Scale the fitted parameters so the fitted steps' predicted total equals
       the measured total (outliers included), since rollouts are sums of steps.
    """
    ok = f["why_dropped"] == ""
    base_vec = base_vector(base)
    fit = _robust_fit_steps(f, ok, base_vec)
    g, y = fit.g, fit.y
    form_theta = fit.theta.copy()
    form_theta[FINISH] = 0.0
    X = features(g, fit.knee)
    robust_total = float((X @ form_theta).sum())
    theta, _ = _solve(X, y, base_vec, fit.active, fit.f_scale, mean_match=True)
    mean_scale = float(y.sum() / robust_total) if robust_total > 0 else 1.0

    weights, weights_fitted, form_knee = _weights(fit, theta, base)
    X = features(g, form_knee)
    pred = X @ theta
    rel = pred / y - 1.0
    inl = np.abs(rel) <= 5 * robust_scale(rel)
    rel_se = _rel_se(X, y, rel, inl, fit.active, theta)
    cv_err = _cv_errors(X, y, base_vec, fit.active, fit.f_scale, folds)

    residuals = g[["trace", "rl_step", "worker", "engine_step", "B", "ctx", "K", "P", "F",
                   "kind"]].copy()
    residuals["measured_s"] = y
    residuals["predicted_s"] = pred
    residuals["error_pct"] = 100 * rel
    residuals["cv_error_pct"] = 100 * cv_err
    residuals["outlier"] = ~inl
    bias = {t: float(100 * (r["predicted_s"].sum() / r["measured_s"].sum() - 1))
            for t, r in residuals.groupby("trace", sort=False)}
    dropped = dict(Counter(f.loc[~ok, "why_dropped"]))
    if fit.warm_dropped:
        dropped["warm-up"] = int(fit.warm_dropped)
    cv_error = float(100 * np.nanmedian(np.abs(cv_err))) if np.isfinite(cv_err).any() else math.nan
    return CostFit(_param_fits(fit, theta, weights, weights_fitted, rel_se), float(fit.knee),
                   fit.f_scale, mean_scale,
                   sig(fit.theta[FINISH]), int(len(g)), dropped, fit.warm_excess_s,
                   int((~inl).sum()), float(100 * np.median(np.abs(rel))), cv_error, bias,
                   residuals)
