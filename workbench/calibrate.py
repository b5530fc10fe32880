"""Calibration: fit a Profile (and a LengthModel) to captured traces.

`calibrate(traces, base)` fits, in exactly the functional forms the simulator
uses (`sim/costs.py`, `sim/acceptance.py`, `sim/lengths.py`):

- decode cost, over every engine step of every trace (`fit_costs`):
      T = overhead + per_seq*B + kv*B*ctx + max(weights, compute*B*(K+1))
          + prefill*P + [n-gram] ngram*B + [EAGLE] K*(eagle_step + eagle_seq*B)
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
  varies) keep the base profile's value; `fitted` says which were fitted.
- per-position acceptance per drafter kind (`fit_acceptance`), then
  (alpha, shape) of r_i = alpha ** (i ** shape).
- the length model (`fit_lengths`): a censored (Tobit) fit of log lengths.

The fit error stored in the profile (`fit_error_pct`) is the median absolute
per-step latency error on held-out steps (5-fold cross-validation; runs of
consecutive steps are held out together).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, minimize, minimize_scalar, nnls
from scipy.stats import norm

from sim.costs import draft_step_s, prefill_s, verify_step_s
from sim.lengths import log_median
from workbench.contracts.profile import DecodeCost, DrafterCost, PhaseCost, Profile
from workbench.contracts.fileio import jsonable
from workbench.contracts.trace import Trace, TraceError
from workbench.contracts.workload import LengthModel


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
    ("decode", "finish_s"),
)
# A step right after requests finished is slower (vLLM frees them and the driver builds their
# final outputs: ~5 ms per request on this machine). The fit always separates that cost
# ("finish_s" per request finished in the previous step) so it does not bias the others; a
# Profile stores it only if DecodeCost has a `finish_s` field, and otherwise the mean-matching
# step spreads it over the form's parameters (see `fit_costs`).
FINISH = len(COST_PARAMS) - 1
HAS_FINISH = "finish_s" in DecodeCost.__dataclass_fields__
WARMUP_STEPS = 5
COLLINEAR_TOL = 0.05  # a feature whose part not explained by the others is < 5% of it is not identified
KNEE_QUANTILES = np.linspace(0.02, 0.9, 23)
CV_FOLDS = 5
MIN_DRAFTS_PER_POS = 20
DRAFTER_KINDS = ("none", "ngram", "eagle")


# --------------------------------------------------------------------------- trace helpers

def trace_drafter_kind(meta: dict) -> str:
    """The drafter the traced engine ran: from meta['engine']['speculative_config'] (None: no SD;
    else its method) when the capture recorded it, else meta['engine']['drafter'] if that names a
    kind, else the policy's."""
    eng = meta.get("engine") or {}
    if "speculative_config" in eng:
        spec = eng["speculative_config"]
        if not spec:
            return "none"
        method = str(spec.get("method", "")).lower() if isinstance(spec, dict) else ""
        if method == "ngram":
            return "ngram"
        if method.startswith("eagle"):
            return "eagle"
    d = eng.get("drafter")
    if isinstance(d, dict):
        d = d.get("kind") or d.get("method")
    if isinstance(d, str) and d.lower() in DRAFTER_KINDS:
        return d.lower()
    kind = ((meta.get("policy") or {}).get("drafter") or {}).get("kind", "none")
    if kind not in DRAFTER_KINDS:
        raise TraceError("meta.json", "field 'policy.drafter.kind'", f"is {kind!r}", f"one of {', '.join(DRAFTER_KINDS)}")
    return kind


def parse_positions(value) -> np.ndarray:
    """accepted_per_pos as an int array: a list/array, or its JSON text."""
    if value is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(value, (bytes, str)):
        value = value.strip()
        value = json.loads(value) if value else []
    if isinstance(value, float) and math.isnan(value):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(list(value), dtype=np.float64).astype(np.int64)


def scheduled_draft_len(meta: dict, batch_size: np.ndarray) -> np.ndarray | None:
    """Draft length the traced policy's fixed schedule gives each step's batch (None: no fixed schedule)."""
    try:
        from workbench.contracts.schema import from_mapping
        from workbench.contracts.policy import Policy
        pol = from_mapping(Policy, {"name": "trace", **(meta.get("policy") or {})})
    except Exception:
        return None
    if not pol.uses_sd or pol.bandit.algorithm != "fixed" or trace_drafter_kind(meta) == "none":
        return None
    k = np.zeros(len(batch_size), dtype=np.int64)
    for row in pol.schedule:
        hit = (batch_size >= row.min_batch) & (batch_size <= min(row.max_batch, pol.sd_threshold))
        k[hit] = row.draft_len
    return k


def step_draft_len(steps: pd.DataFrame, meta: dict | None = None) -> np.ndarray:
    """Draft length per engine step, as the simulator sees it.

    The captured draft_len (the longest draft any request got), or, where a
    capture left it 0 though requests got drafts, the length of
    accepted_per_pos. With `meta`, a decoding step where the policy's fixed
    schedule asked for drafts but no request got one (n-gram found no match)
    counts as drafting the schedule's length with nothing accepted: the
    simulator runs the schedule, so its costs and acceptance must average over
    such steps too.
    """
    k = steps["draft_len"].to_numpy(np.int64).copy()
    odd = (k == 0) & (steps["num_drafts"].to_numpy() > 0)
    if odd.any():
        k[odd] = [len(parse_positions(v)) for v in steps.loc[odd, "accepted_per_pos"]]
    if meta is not None:
        sched = scheduled_draft_len(meta, steps["batch_size"].to_numpy())
        if sched is not None:
            missed = (k == 0) & (steps["decode_requests"].to_numpy() > 0) & (sched > 0)
            k[missed] = sched[missed]
    return k


def _finished_before(s: pd.DataFrame, requests: pd.DataFrame) -> np.ndarray:
    """Per step (of `s`, sorted by rl_step, engine, step): requests of the same engine that finished
    at the end of its previous step (a request's end_s is the end of the step that finished it)."""
    out = np.zeros(len(s), dtype=np.int64)
    req = requests[np.isfinite(requests["end_s"].to_numpy(float))]
    groups = req.groupby(["rl_step", "engine"])["end_s"]
    for (rl, eng), idx in s.groupby(["rl_step", "engine"]).indices.items():
        if (rl, eng) not in groups.groups:
            continue
        ends = (s["start_s"].to_numpy(float) + s["wall_s"].to_numpy(float))[idx]
        done = groups.get_group((rl, eng)).to_numpy(float)
        at = np.clip(np.searchsorted(ends, done - 1e-6), 0, len(idx) - 1)  # the step that finished each request
        per_step = np.bincount(at, minlength=len(idx))
        out[idx[1:]] = per_step[:-1]
    return out


def step_frame(traces: Sequence[Trace], warmup_steps: int = WARMUP_STEPS, target: str = "cycle") -> pd.DataFrame:
    """Every engine step of every trace, with the fit's inputs and whether it is used.

    target "wall": the step's own wall time. "cycle": wall time plus the gap to
    the same engine's next step in the same RL step (host-side work between
    steps), which is what a rollout's wall time is made of, so a profile fitted
    on it predicts rollouts, not just steps (a capture whose wall_s runs from
    one engine output to the next, as `real/engine.py`'s does, has no gap).
    `warmup` marks the first `warmup_steps` steps of every engine's first RL step.
    """
    if target not in ("wall", "cycle"):
        raise ValueError(f"target {target!r}: allowed: wall, cycle")
    frames = []
    for t in traces:
        s = t.steps.sort_values(["rl_step", "engine", "step"]).reset_index(drop=True)
        kind = trace_drafter_kind(t.meta)
        wall = s["wall_s"].to_numpy(float)
        start = s["start_s"].to_numpy(float)
        same = (s["engine"].to_numpy()[1:] == s["engine"].to_numpy()[:-1]) & (s["rl_step"].to_numpy()[1:] == s["rl_step"].to_numpy()[:-1])
        gap = np.zeros(len(s))
        gap[:-1] = np.where(same, np.clip(start[1:] - start[:-1] - wall[:-1], 0.0, None), 0.0)
        first_rl = s.groupby("engine")["rl_step"].transform("min")
        rank = s.groupby(["engine", "rl_step"]).cumcount()
        b = s["decode_requests"].to_numpy(np.int64)
        p = s["prefill_tokens"].to_numpy(np.int64)
        finished = _finished_before(s, t.requests)
        f = pd.DataFrame({
            "trace": t.name, "rl_step": s["rl_step"], "engine": s["engine"], "step": s["step"],
            "kind": kind, "B": b, "ctx": s["context_mean"].to_numpy(float), "K": step_draft_len(s, t.meta), "P": p,
            "wall_s": wall, "gap_s": gap, "y": wall + gap if target == "cycle" else wall, "F": finished,
            "warmup": ((s["rl_step"] == first_rl) & (rank < warmup_steps)).to_numpy(),
        })
        f.loc[f["B"] == 0, "ctx"] = 0.0
        f.loc[f["B"] == 0, "K"] = 0
        f["ctx"] = f["ctx"].fillna(0.0)
        f["why_dropped"] = np.select([~np.isfinite(f["y"]) | (f["y"] <= 0), (b == 0) & (p == 0)],
                                     ["no time", "empty step"], "")
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------- decode cost

def features(f: pd.DataFrame, knee: float) -> np.ndarray:
    """Columns in COST_PARAMS order; `knee` = weights_s / compute_s_per_token (tokens)."""
    b, ctx, k, p = (f[c].to_numpy(float) for c in ("B", "ctx", "K", "P"))
    sd = k > 0
    ngram = sd & (f["kind"].to_numpy() == "ngram")
    eagle = sd & (f["kind"].to_numpy() == "eagle")
    return np.column_stack([
        np.ones(len(f)),                 # overhead_s
        np.maximum(knee, b * (k + 1)),   # compute_s_per_token (and weights_s = compute * knee)
        b,                               # per_seq_s
        p,                               # prefill_s_per_token
        b * ctx,                         # kv_s_per_token
        b * ngram,                       # ngram_s_per_seq
        k * b * eagle,                   # eagle_s_per_seq
        k * eagle,                       # eagle_step_s
        f["F"].to_numpy(float),          # finish_s (requests finished in the previous step)
    ])


def predict_steps(profile: Profile, f: pd.DataFrame) -> np.ndarray:
    """Step latency from the simulator's own cost functions (so the fit is judged in its exact form)."""
    dec, dr = profile.decode, profile.drafter
    out = np.empty(len(f))
    for i, (b, ctx, k, p, kind) in enumerate(zip(f["B"].to_numpy(), f["ctx"].to_numpy(), f["K"].to_numpy(),
                                                 f["P"].to_numpy(), f["kind"].to_numpy())):
        out[i] = (verify_step_s(dec, int(b), float(ctx), int(k)) + draft_step_s(dr, kind, int(b), int(k))
                  + prefill_s(dec, int(p)))
    return out + getattr(dec, "finish_s", 0.0) * f["F"].to_numpy(float)


def _base_vector(base: Profile) -> np.ndarray:
    return np.array([getattr(getattr(base, part), name, 0.0) for part, name in COST_PARAMS])


def identifiable(X: np.ndarray, y: np.ndarray, tol: float = COLLINEAR_TOL) -> tuple[list[int], dict[int, str]]:
    """Columns the data can fit: nonzero, and not (nearly) a combination of the others.

    Works on relative-residual weighted, unit-norm columns; when several are
    collinear, the one latest in COST_PARAMS order is given up first."""
    A = X / y[:, None]
    norms = np.linalg.norm(A, axis=0)
    why = {j: "no such steps among those fitted (warm-up and empty steps are left out)" for j in range(A.shape[1]) if norms[j] <= 1e-12 * max(norms.max(), 1e-300)}
    active = [j for j in range(A.shape[1]) if j not in why]
    while len(active) > 1:
        An = A[:, active] / norms[active]
        unexplained = []
        for idx in range(len(active)):
            others = np.delete(An, idx, axis=1)
            coef, *_ = np.linalg.lstsq(others, An[:, idx], rcond=None)
            unexplained.append(float(np.linalg.norm(An[:, idx] - others @ coef)))
        bad = [idx for idx, u in enumerate(unexplained) if u < tol]
        if not bad:
            break
        drop = max(bad, key=lambda idx: active[idx])  # latest in keep order
        why[active[drop]] = f"collinear with the other features (unexplained part {unexplained[drop]:.1%})"
        active.pop(drop)
    return active, why


def _nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares through the normal equations: with A'A = L L', ||L' x - L^-1 A'b||
    has the same minimiser on a p x p system (fast for many rows; columns come unit-scaled)."""
    g = A.T @ A
    g[np.diag_indices_from(g)] += 1e-12 * max(np.trace(g), 1e-300)
    try:
        low = np.linalg.cholesky(g)
    except np.linalg.LinAlgError:
        x, _ = nnls(A, b, maxiter=50 * A.shape[1])
        return x
    x, _ = nnls(low.T, np.linalg.solve(low, A.T @ b), maxiter=50 * A.shape[1])
    return x


def _robust_fit(A: np.ndarray, b: np.ndarray, f_scale: float, iters: int = 50) -> tuple[np.ndarray, float]:
    """min sum soft_l1(A x - b) with x >= 0: iteratively reweighted NNLS from the plain NNLS solution.

    soft_l1 is rho(r) = 2 f^2 (sqrt(1 + (r/f)^2) - 1) (scipy's `least_squares` loss of that
    name); each reweighted NNLS step (weights 1/sqrt(1 + (r/f)^2)) is a majorise-minimise step,
    so the loss never rises. Returns (x, loss)."""
    x = _nnls(A, b)
    loss = lambda r: float(np.sum(2 * f_scale**2 * (np.sqrt(1 + (r / f_scale) ** 2) - 1)))  # noqa: E731
    cur = loss(A @ x - b)
    for _ in range(iters):
        r = A @ x - b
        w = (1 + (r / f_scale) ** 2) ** -0.25  # square root of the IRLS weight
        x_new = _nnls(A * w[:, None], b * w)
        new = loss(A @ x_new - b)
        if new > cur - 1e-12 * max(cur, 1e-300):
            if new < cur:
                x, cur = x_new, new
            break
        x, cur = x_new, new
    return x, cur


@dataclass
class CostFit:
    params: dict[str, float]  # "decode.overhead_s" etc., the fitted profile's values
    fitted: dict[str, bool]  # which were fitted (False: kept from the base profile)
    not_fitted_why: dict[str, str]
    rel_se: dict[str, float]  # relative standard error of each fitted parameter (nan if unknown)
    knee_tokens: float  # weights_s / compute_s_per_token
    f_scale: float  # soft-l1 scale of the relative residuals
    mean_scale: float  # measured total / the robust fit's total (form only): what mean-matching scaled by
    finish_s: float  # fitted cost per request finished in the previous step (stored only if DecodeCost has finish_s)
    finish_rel_se: float
    steps_used: int
    steps_dropped: dict[str, int]  # reason -> count
    warmup_excess_s: float  # time the dropped warm-up steps took beyond the fit's prediction (all engines)
    outliers: int  # used steps whose relative residual exceeds 5 robust sds
    mdape_pct: float  # in-sample median |error| per step, %
    cv_mdape_pct: float  # held-out (5-fold) median |error| per step, %
    bias_pct: dict[str, float]  # per trace: 100 * (sum predicted / sum measured - 1) over used steps
    residuals: pd.DataFrame


def _solve(X: np.ndarray, y: np.ndarray, base_vec: np.ndarray, active: list[int], f_scale: float,
           mean_match: bool = False) -> tuple[np.ndarray, float]:
    """Fit the `active` columns on relative residuals; the others stay at `base_vec` (their part is subtracted).

    mean_match: then drop what a Profile cannot store (finish_s, unless DecodeCost has it) and
    scale the fitted parameters so the steps' predicted total equals their measured total (the
    robust fit follows the typical step; a rollout is a sum, which outliers and finishes add to)."""
    fixed = [j for j in range(X.shape[1]) if j not in active]
    fixed_part = X[:, fixed] @ base_vec[fixed]
    target = (y - fixed_part) / y
    A = X[:, active] / y[:, None]
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    xs, cost = _robust_fit(A / norms, target, f_scale)
    theta = base_vec.copy()
    theta[active] = xs / norms
    if mean_match:
        if not HAS_FINISH:
            theta[FINISH] = 0.0
        scaled = [j for j in active if HAS_FINISH or j != FINISH]
        rest = float((X @ theta).sum() - (X[:, scaled] @ theta[scaled]).sum())
        fitted_part = float((X[:, scaled] @ theta[scaled]).sum())
        if fitted_part > 0:
            theta[scaled] *= max(0.0, float(y.sum()) - rest) / fitted_part
    return theta, cost


def _fit_knee(g: pd.DataFrame, y: np.ndarray, base_vec: np.ndarray, active: list[int], f_scale: float):
    """The 1-D search over knee = weights_s / compute_s_per_token: (knee, theta) of the lowest robust loss."""
    n_tok = (g["B"] * (g["K"] + 1)).to_numpy(float)
    decode_n = n_tok[g["B"].to_numpy() > 0]
    knees = [0.0]
    if 1 in active and len(decode_n):  # the knee needs the compute term
        knees += sorted({float(q) for q in np.quantile(decode_n, KNEE_QUANTILES) if q > 0})
    costs = []
    for knee in knees:
        theta, cost = _solve(features(g, knee), y, base_vec, active, f_scale)
        costs.append((cost, knee, theta))
    i = min(range(len(costs)), key=lambda j: costs[j][0])
    cost, knee, theta = costs[i]
    if len(knees) > 2 and knee > 0:  # refine between the grid neighbours
        lo, hi = knees[max(i - 1, 0)], knees[min(i + 1, len(knees) - 1)]
        res = minimize_scalar(lambda kn: _solve(features(g, kn), y, base_vec, active, f_scale)[1], bounds=(lo, hi),
                              method="bounded", options={"xatol": max(1e-3 * knee, 1e-6), "maxiter": 25})
        if res.fun < cost:
            knee, cost = float(res.x), float(res.fun)
            theta, _ = _solve(features(g, knee), y, base_vec, active, f_scale)
    # A knee inside the data is one more parameter: keep it only if it lowers the loss
    # significantly (a likelihood-ratio test: the loss is ~ sum of squared residuals, noise ~ f_scale).
    min_n = float(decode_n.min()) if len(decode_n) else 0.0
    if knee > min_n and (costs[0][0] - cost) / f_scale**2 < max(10.83, math.log(len(y))):
        cost, knee, theta = costs[0]
    return knee, theta


def _sig(x: float, digits: int = 5) -> float:
    """Round to `digits` significant digits (profiles are read by people too)."""
    return float(f"{float(x):.{digits - 1}e}")


def _robust_scale(rel: np.ndarray) -> float:
    return float(max(1.4826 * np.median(np.abs(rel - np.median(rel))), 1e-4))


def fit_costs(f: pd.DataFrame, base: Profile, folds: int = CV_FOLDS, mean_match: bool = True) -> CostFit:
    """Robust non-negative fit of DecodeCost and DrafterCost over the usable engine steps of `f` (from `step_frame`).

    1. Fit on the steps outside warm-up: NNLS start, then soft-l1 on relative
       residuals, for each knee candidate; keep the knee of the lowest loss.
    2. Warm-up steps whose residual under that fit is within 5 robust sds are
       ordinary steps after all (the first prefill usually is): they rejoin,
       and the fit is redone; the others stay out (`steps_dropped['warm-up']`).
    3. mean_match: scale the fitted parameters so the fitted steps' predicted
       total equals the measured total (outliers included), since rollouts are
       sums of steps.
    """
    ok = f["why_dropped"] == ""
    base_vec = _base_vector(base)
    names = [f"{part}.{name}" for part, name in COST_PARAMS]
    g = f[ok & ~f["warmup"]].reset_index(drop=True)
    if len(g) < 10:
        raise ValueError(f"calibration needs at least 10 usable engine steps; the traces have {len(g)}")
    y = g["y"].to_numpy(float)
    active, why = identifiable(features(g, 0.0), y)
    # One soft-l1 scale for every knee so their losses compare: from a near-L2 fit at knee 0.
    theta0, _ = _solve(features(g, 0.0), y, base_vec, active, 1.0)
    f_scale = float(max(0.01, _robust_scale(features(g, 0.0) @ theta0 / y - 1.0)))
    knee, theta = _fit_knee(g, y, base_vec, active, f_scale)

    # Warm-up candidates that look like ordinary steps rejoin.
    warm = f[ok & f["warmup"]]
    warm_kept = 0
    if len(warm):
        scale = _robust_scale(features(g, knee) @ theta / y - 1.0)
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
    else:
        warm_excess = 0.0
    finish_fit = float(theta[FINISH])
    form_theta = theta.copy()
    if not HAS_FINISH:
        form_theta[FINISH] = 0.0
    X = features(g, knee)
    robust_total = float((X @ form_theta).sum())
    if mean_match:
        theta, _ = _solve(X, y, base_vec, active, f_scale, mean_match=True)
    else:
        theta = form_theta
    mean_scale = float(y.sum() / robust_total) if mean_match and robust_total > 0 else 1.0

    compute = theta[1]
    decode_n = (g["B"] * (g["K"] + 1)).to_numpy(float)[g["B"].to_numpy() > 0]
    min_n = float(decode_n.min()) if len(decode_n) else 0.0
    weights_fitted = 1 in active and knee > min_n and compute > 0
    weights = compute * knee if weights_fitted else min(base.decode.weights_s, compute * min_n if compute > 0 else base.decode.weights_s)
    if not weights_fitted and weights > 0 and compute > 0:
        # keep the form exact: the knee the stored weights_s implies, with no effect on the traced steps
        X = features(g, weights / compute)

    pred = X @ theta
    rel = pred / y - 1.0
    scale = _robust_scale(rel)
    inl = np.abs(rel) <= 5 * scale

    # Relative standard errors from the inliers' residual variance.
    rel_se = {n: float("nan") for n in names}
    A = X[inl][:, active] / y[inl, None]
    if len(A) > len(active):
        s2 = float(np.sum(rel[inl] ** 2) / (len(A) - len(active)))
        try:
            cov = s2 * np.linalg.inv(A.T @ A)
            for idx, j in enumerate(active):
                rel_se[names[j]] = float(math.sqrt(max(cov[idx, idx], 0.0)) / theta[j]) if theta[j] > 0 else float("inf")
        except np.linalg.LinAlgError:
            pass

    # Held-out error: runs of consecutive steps (so neighbours, which share batch and context, are
    # held out together) dealt round-robin to the folds (so every fold sees every trace); same
    # knee and parameter set.
    cv_err = np.full(len(g), np.nan)
    if folds >= 2 and len(g) >= 5 * folds:
        run = max(5, len(g) // (folds * 20))
        fold = (np.arange(len(g)) // run) % folds
        for k in range(folds):
            mask = fold != k
            th, _ = _solve(X[mask], y[mask], base_vec, active, f_scale, mean_match)
            cv_err[~mask] = X[~mask] @ th / y[~mask] - 1.0

    params = {n: _sig(v) for n, v in zip(names, theta)}
    params["decode.weights_s"] = _sig(weights)
    fitted = {n: j in active for j, n in enumerate(names)}
    fitted["decode.weights_s"] = bool(weights_fitted)
    not_fitted = {names[j]: w for j, w in why.items()}
    finish_se = rel_se.get(names[FINISH], float("nan"))
    if not HAS_FINISH:  # not a Profile field: reported, not stored
        for d in (params, fitted, not_fitted, rel_se):
            d.pop(names[FINISH], None)
    if not weights_fitted:
        not_fitted["decode.weights_s"] = ("no saturation knee inside the traced batch*(K+1) range"
                                          if 1 in active else "compute cost not identified")
    residuals = g[["trace", "rl_step", "engine", "step", "B", "ctx", "K", "P", "F", "kind"]].copy()
    residuals["measured_s"] = y
    residuals["predicted_s"] = pred
    residuals["error_pct"] = 100 * rel
    residuals["cv_error_pct"] = 100 * cv_err
    residuals["outlier"] = ~inl
    bias = {t: float(100 * (r["predicted_s"].sum() / r["measured_s"].sum() - 1)) for t, r in residuals.groupby("trace", sort=False)}
    dropped = dict(Counter(f.loc[~ok, "why_dropped"]))
    if len(warm) - warm_kept:
        dropped["warm-up"] = int(len(warm) - warm_kept)
    return CostFit(params, fitted, not_fitted, rel_se, float(knee), f_scale, mean_scale, _sig(finish_fit), finish_se,
                   int(len(g)), dropped,
                   warm_excess, int((~inl).sum()), float(100 * np.median(np.abs(rel))),
                   float(100 * np.nanmedian(np.abs(cv_err))) if np.isfinite(cv_err).any() else float("nan"), bias, residuals)


# --------------------------------------------------------------------------- acceptance

@dataclass
class AcceptanceFit:
    kind: str
    alpha: float
    shape: float
    shape_fitted: bool
    r: list[float]  # per position: accepted / decoding requests offered that position
    offered: list[int]  # decoding requests offered each position (steps with draft_len >= i)
    r_per_draft: list[float]  # vLLM's definition: accepted / drafts (requests that got drafts)
    sd_steps: int
    rmse: float  # of the fitted curve against r (positions with enough drafts)
    tokens_per_pass: float  # 1 + sum(r) at the traced draft lengths' mix: measured E[L]

    def curve(self, n: int | None = None) -> list[float]:
        n = n or len(self.r)
        return [self.alpha ** (i ** self.shape) for i in range(1, n + 1)]


def per_position_acceptance(steps: pd.DataFrame, meta: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Cumulative acceptance per position over the SD steps (draft_len > 0).

    With Dynamic SD steps have different draft lengths: position i counts only
    steps that drafted at least i tokens. The denominator is the decoding
    requests of those steps (a request the n-gram drafter found no match for
    counts as a draft with nothing accepted), because that is what the
    simulator's E[L] = 1 + sum r_i per sequence per pass means; vLLM's own
    per-draft rate (denominator num_drafts) is returned too. With `meta`,
    steps the schedule asked to draft but that got no draft count (see
    `step_draft_len`).
    Returns (accepted, offered, drafts, r, sd_steps), per position.
    """
    k = step_draft_len(steps, meta)
    sd = k > 0
    if not sd.any():
        z = np.zeros(0)
        return z, z, z, z, 0
    kmax = int(k[sd].max())
    acc, offered, drafts = np.zeros(kmax), np.zeros(kmax), np.zeros(kmax)
    b = steps["decode_requests"].to_numpy(float)
    nd = steps["num_drafts"].to_numpy(float)
    for kk, v, bb, dd in zip(k[sd], steps.loc[sd, "accepted_per_pos"], b[sd], nd[sd]):
        a = parse_positions(v)[:kk]
        acc[:len(a)] += a
        offered[:kk] += max(bb, dd)
        drafts[:kk] += dd
    r = np.divide(acc, offered, out=np.zeros(kmax), where=offered > 0)
    return acc, offered, drafts, r, int(sd.sum())


def fit_alpha_shape(r: np.ndarray, weight: np.ndarray, base_shape: float) -> tuple[float, float, bool]:
    """Weighted least squares of r_i = alpha ** (i ** shape); shape stays at the base with one position."""
    pos = np.arange(1, len(r) + 1, dtype=float)
    ok = weight >= MIN_DRAFTS_PER_POS
    if not ok.any():
        ok = weight > 0
    pos, r, w = pos[ok], r[ok], np.sqrt(weight[ok] / weight[ok].max())
    r = np.clip(r, 0.0, 0.999)
    if len(pos) == 1 or r[0] <= 0:
        return float(np.clip(r[0], 0.0, 0.999)), base_shape, False
    res = least_squares(lambda x: w * (x[0] ** (pos ** x[1]) - r), [float(np.clip(r[0], 0.01, 0.99)), 0.8],
                        bounds=([1e-4, 0.1], [0.999, 2.0]), method="trf")
    return float(res.x[0]), float(res.x[1]), True


def fit_acceptance(traces: Sequence[Trace], base: Profile) -> dict[str, AcceptanceFit]:
    """Per drafter kind present in the traces (pooled over its traces)."""
    by_kind: dict[str, list[tuple[np.ndarray, ...]]] = {}
    for t in traces:
        kind = trace_drafter_kind(t.meta)
        if kind != "none":
            by_kind.setdefault(kind, []).append(per_position_acceptance(t.steps, t.meta))
    out = {}
    for kind, parts in by_kind.items():
        n = sum(p[4] for p in parts)
        if n == 0:
            continue
        kmax = max(len(p[0]) for p in parts)
        pad = lambda v: np.pad(v, (0, kmax - len(v)))  # noqa: E731
        acc, offered, drafts = (sum(pad(p[i]) for p in parts) for i in range(3))
        r = np.divide(acc, offered, out=np.zeros(kmax), where=offered > 0)
        base_shape = base.acceptance.ngram_shape if kind == "ngram" else base.acceptance.eagle_shape
        alpha, shape, shape_fitted = fit_alpha_shape(r, offered, base_shape)
        ok = offered >= MIN_DRAFTS_PER_POS
        curve = np.array([alpha ** (i ** shape) for i in range(1, len(r) + 1)])
        rmse = float(np.sqrt(np.mean((curve[ok] - r[ok]) ** 2))) if ok.any() else float("nan")
        per_draft = np.divide(acc, drafts, out=np.zeros(len(acc)), where=drafts > 0)
        # Measured tokens per verify pass (per decoding request), over all SD steps.
        out[kind] = AcceptanceFit(kind, alpha, shape, shape_fitted, r.tolist(), offered.astype(int).tolist(),
                                  per_draft.tolist(), n, rmse, float(1 + acc.sum() / offered[0]) if offered[0] else 1.0)
    return out


# --------------------------------------------------------------------------- lengths

@dataclass
class LengthFit:
    model: LengthModel
    fitted: dict[str, bool]
    responses: int
    groups: int
    cap: int
    clip_ratio_observed: float  # at the first RL step
    clip_ratio_implied: float  # by the censored fit, at the first RL step
    log_median_fit: float  # fitted median log-length of correct answers (step 0)
    log_median_model: float  # what the LengthModel's clip_ratio implies
    notes: list[str] = field(default_factory=list)


def _tobit(y: np.ndarray, cens: np.ndarray, logcap: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, float]:
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


def fit_lengths(traces: Sequence[Trace], base: LengthModel | None = None) -> LengthFit:
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
    frames = []
    for t in traces:
        r = t.requests
        frames.append(pd.DataFrame({
            "group": t.name + "/" + r["rl_step"].astype(str) + "/" + r["prompt_id"].astype(str),
            "rl_step": r["rl_step"].to_numpy(int) - int(r["rl_step"].min()),
            "L": np.maximum(r["response_tokens"].to_numpy(float), 1.0),
            "cap": float(t.meta["max_tokens"]),
            "clipped": (r["finish_reason"].astype(str) == "length").to_numpy() | (r["response_tokens"].to_numpy() >= t.meta["max_tokens"]),
            "reward": r["reward"].to_numpy(float),
        }))
    d = pd.concat(frames, ignore_index=True)
    caps = d["cap"].value_counts()
    cap = int(caps.index[0])
    if len(caps) > 1:
        notes.append(f"traces have different caps {sorted(caps.index.astype(int))}; clip ratio is stated at {cap}")
    y = np.log(d["L"].to_numpy())
    logcap = np.log(d["cap"].to_numpy())
    cens = d["clipped"].to_numpy()
    have_reward = np.isfinite(d["reward"]).any()
    correct = (d["reward"].to_numpy() >= 0.5) if have_reward else np.ones(len(d), bool)
    wrong = (~correct).astype(float)
    steps = d["rl_step"].to_numpy(float)
    multi_step = steps.max() > 0
    fit_wrong = have_reward and 0 < wrong.mean() < 1
    cols = [np.ones(len(d))] + ([wrong] if fit_wrong else []) + ([steps] if multi_step else [])
    beta, sigma = _tobit(y, cens, logcap, np.column_stack(cols))
    mu = float(beta[0])
    w = float(beta[1]) if fit_wrong else 0.0
    drift = float(beta[-1]) if multi_step else 0.0
    if w < 0:
        notes.append(f"wrong answers are shorter here (log factor {w:.2f}); wrong_factor is clipped to 1")
        w = 0.0
    sigma = float(np.clip(sigma, 0.05, 3.0))
    mean_acc = float(np.clip(correct.mean(), 0.01, 0.99)) if have_reward else base.mean_accuracy

    # Body: remove the wrong effect and the drift; censored values -> E[y | y > cap] under the fit.
    m = mu + w * wrong + drift * steps
    z = (logcap - m) / sigma
    body = np.where(cens, m + sigma * norm.pdf(z) / np.maximum(norm.sf(z), 1e-300), y) - w * wrong - drift * steps
    grp = d["group"].to_numpy()
    codes, inv = np.unique(grp, return_inverse=True)
    sizes = np.bincount(inv)
    icc_fitted = False
    group_corr = base.group_correlation
    if len(codes) >= 2 and sizes.max() >= 2:
        means = np.bincount(inv, body) / sizes
        n_tot, k = len(body), len(codes)
        ssw = float(np.sum((body - means[inv]) ** 2))
        ssb = float(np.sum(sizes * (means - body.mean()) ** 2))
        msw, msb = ssw / max(n_tot - k, 1), ssb / (k - 1)
        n0 = (n_tot - np.sum(sizes ** 2) / n_tot) / (k - 1)
        var_b = max((msb - msw) / n0, 0.0)
        group_corr = float(np.clip(var_b / (var_b + msw), 0.0, 0.95)) if var_b + msw > 0 else 0.0
        icc_fitted = True

    conc, conc_fitted = base.accuracy_concentration, False
    if have_reward and 0 < correct.mean() < 1 and len(codes) >= 3 and sizes.min() >= 2:
        acc_g = np.bincount(inv, correct.astype(float)) / sizes
        p = correct.mean()
        nbar = sizes.mean()
        # Var(p_hat) = p(1-p)/n (1 + (n-1) rho), rho = 1/(a+b+1)
        rho = (np.var(acc_g, ddof=1) * nbar / (p * (1 - p)) - 1) / max(nbar - 1, 1e-9)
        if 0 < rho < 1:
            conc, conc_fitted = float(np.clip(1 / rho - 1, 0.05, 1e3)), True
        elif rho >= 1:
            conc, conc_fitted = 0.05, True

    # The LengthModel states clip_ratio at RL step 0 (then lengths drift): the first step's share.
    first = d["rl_step"].to_numpy() == 0
    implied = float(np.mean(norm.sf((math.log(cap) - (mu + w * wrong[first])) / sigma)))
    observed = float(np.mean(d["clipped"][first]))
    n_clipped = int(d["clipped"][first].sum())
    if n_clipped >= 3 and len(caps) == 1:
        clip = observed
    else:
        clip = implied
        notes.append(f"{n_clipped} responses of the first RL step reached the cap: clip_ratio is the censored "
                     f"fit's {implied:.4f}, not the observed {observed:.4f}")
    if not 1e-4 <= clip <= 0.49:
        notes.append(f"clip ratio {clip:.4f} is outside what the length model takes (1e-4..0.49): clipped")
    clip = float(np.clip(clip, 1e-4, 0.49))
    model = LengthModel(clip_ratio=_sig(clip, 4), sigma=_sig(sigma, 4), group_correlation=_sig(group_corr, 4),
                        mean_accuracy=_sig(mean_acc, 4), accuracy_concentration=_sig(conc, 4),
                        wrong_factor=_sig(math.exp(w), 4), drift_per_step=_sig(np.clip(drift, -0.5, 0.5), 4))
    model.check()
    fitted = {"clip_ratio": True, "sigma": True, "group_correlation": icc_fitted, "mean_accuracy": have_reward,
              "accuracy_concentration": conc_fitted, "wrong_factor": fit_wrong, "drift_per_step": multi_step}
    if not have_reward:
        notes.append("no rewards in the traces: wrong_factor = 1 (no correctness effect), mean_accuracy from the base")
    return LengthFit(model, fitted, len(d), len(codes), cap, observed, implied, mu, log_median(model, cap), notes)


# --------------------------------------------------------------------------- phases

def fit_phases(traces: Sequence[Trace], base: PhaseCost) -> tuple[PhaseCost, dict[str, bool]]:
    """Policy-update and weight-sync costs from RL steps that trained (train_s > 0); else the base's."""
    per_token, sync = [], []
    for t in traces:
        gpus = int(t.steps["engine"].nunique()) * int((t.meta.get("engine") or {}).get("tensor_parallel_size", 1) or 1)
        tokens = t.requests.groupby("rl_step")[["prompt_tokens", "response_tokens"]].sum().sum(axis=1)
        for _, row in t.rl_steps.iterrows():
            n = tokens.get(row["rl_step"], 0)
            if row["train_s"] > 0 and n > 0:
                per_token.append(row["train_s"] * gpus / n)
            if row["sync_s"] > 0:
                sync.append(row["sync_s"])
    out = replace(base, train_gpu_s_per_token=_sig(np.median(per_token)) if per_token else base.train_gpu_s_per_token,
                  weight_sync_s=_sig(np.median(sync)) if sync else base.weight_sync_s)
    return out, {"phases.train_gpu_s_per_token": bool(per_token), "phases.weight_sync_s": bool(sync)}


# --------------------------------------------------------------------------- all together

@dataclass
class Calibration:
    profile: Profile
    lengths: LengthModel | None
    errors: dict[str, float]  # per-part fit errors (see `table`)
    fitted: dict[str, bool]  # dotted profile field -> fitted (False: kept from the base)
    residuals: pd.DataFrame  # per used engine step: measured, predicted, error
    costs: CostFit
    acceptance: dict[str, AcceptanceFit]
    length_fit: LengthFit | None
    notes: list[str]

    def report(self, base: Profile) -> dict:
        """Everything the fit found, JSON-ready (`tlt calibrate` writes it next to the profile)."""
        c = self.costs
        params = {k: {"value": getattr(getattr(self.profile, k.split(".")[0]), k.split(".")[1]),
                      "base": getattr(getattr(base, k.split(".")[0]), k.split(".")[1]), "fitted": v,
                      "rel_se": c.rel_se.get(k), "why_not_fitted": c.not_fitted_why.get(k)}
                  for k, v in self.fitted.items()}
        lf = self.length_fit
        return jsonable({
            "schema": "tlt-calibration/1", "profile": self.profile.name, "base_profile": base.name,
            "fitted_on": list(self.profile.fitted_on), "fit_error_pct": self.profile.fit_error_pct,
            "errors": self.errors, "parameters": params,
            "decode": {"steps_used": c.steps_used, "steps_dropped": c.steps_dropped, "outliers": c.outliers,
                       "knee_tokens": c.knee_tokens, "soft_l1_scale": c.f_scale, "mean_scale": c.mean_scale,
                       "finish_s": c.finish_s, "finish_s_stored": HAS_FINISH,
                       "warmup_excess_s": c.warmup_excess_s, "mdape_pct": c.mdape_pct, "cv_mdape_pct": c.cv_mdape_pct,
                       "bias_pct": c.bias_pct},
            "acceptance": {k: {"alpha": a.alpha, "shape": a.shape, "shape_fitted": a.shape_fitted, "r": a.r,
                               "offered": a.offered, "r_per_draft": a.r_per_draft, "r_fitted": a.curve(),
                               "sd_steps": a.sd_steps, "rmse": a.rmse, "tokens_per_pass": a.tokens_per_pass}
                           for k, a in self.acceptance.items()},
            "lengths": None if lf is None else {
                "model": {f: getattr(lf.model, f) for f in ("clip_ratio", "sigma", "group_correlation", "mean_accuracy",
                                                            "accuracy_concentration", "wrong_factor", "drift_per_step")},
                "fitted": lf.fitted, "responses": lf.responses, "groups": lf.groups, "cap": lf.cap,
                "clip_ratio_observed": lf.clip_ratio_observed, "clip_ratio_implied": lf.clip_ratio_implied,
                "median_fit": math.exp(lf.log_median_fit), "median_model": math.exp(lf.log_median_model)},
            "notes": self.notes,
        })

    def param_rows(self, base: Profile) -> list[list[str]]:
        rows = []
        for key, was_fitted in self.fitted.items():
            part, name = key.split(".")
            new, old = getattr(getattr(self.profile, part), name), getattr(getattr(base, part), name)
            se = self.costs.rel_se.get(key, float("nan"))
            how = "fitted" + (f" ±{100 * se:.0f}%" if was_fitted and math.isfinite(se) else "") if was_fitted else "base"
            rows.append([key, f"{new:.4g}", f"{old:.4g}", how])
        return rows


def calibrate(traces: Sequence[Trace], base: Profile, name: str | None = None, warmup_steps: int = WARMUP_STEPS,
              target: str = "cycle") -> Calibration:
    """Fit a Profile (on `base`: what the traces cannot identify is kept) and a LengthModel."""
    if not traces:
        raise ValueError("calibration needs at least one trace")
    notes: list[str] = []
    machines = {json.dumps(t.meta.get("machine"), sort_keys=True, default=str) for t in traces}
    models = {json.dumps(t.meta.get("model"), sort_keys=True, default=str) for t in traces}
    if len(machines) > 1 or len(models) > 1:
        notes.append("the traces come from more than one machine or model: one profile describes one engine on one machine")
    frame = step_frame(traces, warmup_steps, target)
    costs = fit_costs(frame, base)
    p = costs.params
    decode = DecodeCost(**{n: p[f"decode.{n}"] for n in ("overhead_s", "per_seq_s", "weights_s", "compute_s_per_token",
                                                            "kv_s_per_token", "prefill_s_per_token")
                           + (("finish_s",) if HAS_FINISH else ())})
    if decode.overhead_s + decode.weights_s + decode.per_seq_s <= 0:
        decode = replace(decode, overhead_s=base.decode.overhead_s)
        notes.append("the fit found no fixed step cost; overhead_s kept from the base")
    drafter = DrafterCost(**{n: p[f"drafter.{n}"] for n in ("eagle_step_s", "eagle_s_per_seq", "ngram_s_per_seq")})

    acc_fits = fit_acceptance(traces, base)
    acc = base.acceptance
    fitted_acc = {f"acceptance.{n}": False for n in ("eagle_alpha_fresh", "eagle_alpha_cold", "eagle_shape", "ngram_alpha",
                                                     "ngram_shape", "staleness_per_update")}
    if "ngram" in acc_fits:
        a = acc_fits["ngram"]
        acc = replace(acc, ngram_alpha=_sig(a.alpha, 4), ngram_shape=_sig(a.shape, 4))
        fitted_acc["acceptance.ngram_alpha"], fitted_acc["acceptance.ngram_shape"] = True, a.shape_fitted
    if "eagle" in acc_fits:
        a = acc_fits["eagle"]
        acc = replace(acc, eagle_alpha_fresh=_sig(a.alpha, 4), eagle_shape=_sig(a.shape, 4),
                      eagle_alpha_cold=min(acc.eagle_alpha_cold, _sig(a.alpha, 4)))
        fitted_acc["acceptance.eagle_alpha_fresh"], fitted_acc["acceptance.eagle_shape"] = True, a.shape_fitted
        notes.append("EAGLE traces are taken as a drafter aligned with the traced policy: their acceptance sets "
                     "eagle_alpha_fresh; eagle_alpha_cold, staleness and the learning curve stay the base's")

    phases, fitted_phases = fit_phases(traces, base.phases)
    try:
        length_fit = fit_lengths(traces)
        notes += length_fit.notes
    except Exception as exc:  # a length model the traces cannot support (e.g. every response at the cap)
        length_fit = None
        notes.append(f"length model not fitted: {exc}")

    fitted = {**costs.fitted, **fitted_acc, **fitted_phases}
    kept = [k for k, v in fitted.items() if not v]
    errors = {"decode_mdape_pct": costs.mdape_pct, "decode_cv_mdape_pct": costs.cv_mdape_pct}
    for kind, a in acc_fits.items():
        errors[f"acceptance_{kind}_rmse"] = a.rmse
    if length_fit:
        errors["lengths_clip_ratio_gap"] = abs(length_fit.clip_ratio_observed - length_fit.clip_ratio_implied)
    names = tuple(t.name for t in traces)
    source = (f"tlt calibrate on {len(traces)} trace(s) ({', '.join(names)}), {costs.steps_used} engine steps: "
              f"decode and drafter costs by a robust (soft-l1, relative residual) non-negative least-squares fit "
              f"of sim/costs.py's form to each step's {'wall time plus the gap to the next step' if target == 'cycle' else 'wall time'}, "
              f"1-D search over weights_s/compute (knee {costs.knee_tokens:.0f} tokens), first {warmup_steps} steps per engine "
              f"dropped as warm-up; acceptance alpha**(i**shape) fitted per drafter kind ({', '.join(acc_fits) or 'none traced'}); "
              f"kept from base profile {base.name}: {', '.join(kept) or 'nothing'}. "
              f"fit_error_pct: median |error| of per-step latency on held-out steps ({CV_FOLDS}-fold cross-validation)")
    cv = costs.cv_mdape_pct if math.isfinite(costs.cv_mdape_pct) else costs.mdape_pct
    profile = Profile(name=name or f"{base.name}-calibrated", decode=decode, drafter=drafter, acceptance=acc,
                      learning=base.learning, phases=phases,
                      description=f"Calibrated on {', '.join(names)} (base {base.name}).",
                      source=source, fitted_on=names, fit_error_pct=round(float(cv), 3))
    profile.check()
    return Calibration(profile, length_fit.model if length_fit else None, errors, fitted, costs.residuals, costs,
                       acc_fits, length_fit, notes)


def trace_workload_spec(trace: Trace, lengths: LengthModel, profile_path, workload_path, profile_name: str):
    """A Workload with the trace's shape, the fitted length model and the fitted profile (by its path,
    relative to the workload file, as `load_workload` reads it)."""
    import os
    from pathlib import Path

    from workbench.contracts.workload import Workload

    eng = trace.meta.get("engine") or {}
    rel = os.path.relpath(Path(profile_path).resolve(), Path(workload_path).resolve().parent)
    wl = Workload(name=f"{profile_name}-workload", profile=rel, workers=int(trace.steps["engine"].nunique()),
                  prompts_per_step=int(trace.meta["prompts"]), group_size=int(trace.meta["samples"]),
                  max_response_tokens=int(trace.meta["max_tokens"]),
                  prompt_tokens=max(1, int(round(float(trace.requests["prompt_tokens"].mean())))),
                  max_batch=int(eng.get("max_num_seqs") or trace.steps["batch_size"].max()),
                  steps=max(1, int(trace.requests["rl_step"].nunique())),
                  gpus_per_worker=int(eng.get("tensor_parallel_size", 1) or 1), lengths=lengths,
                  description=f"Shape of trace {trace.name}; length model fitted by tlt calibrate.",
                  source=f"tlt calibrate (lengths fitted on the traces; profile {profile_name})")
    wl.check()
    return wl
