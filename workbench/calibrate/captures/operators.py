"""A Profile from operator-level measurements (`python -m real.profiler`): `fit_operators`.

The profiler times one TP rank's decode, verify, drafter and prefill forwards and the training
passes (real/profiler/grid.py). Each inference point is, to the cost fit, what an engine step
of a trace is, so the fit is `fit_costs` (workbench/calibrate/captures/costs.py) on a frame of
them, in
the simulator's own form (sim/costs.py):

- decode (B, C): a step of B sequences at context C, no drafts (K = 0);
- verify (B, C, T): B sequences verifying T tokens each (K = T - 1, no drafter cost);
- prefill (T): a step with no decoding and T prompt tokens.

The drafter's forward is measured on its own, so its two parameters are fitted on its points
alone (`fit_drafter`: non-negative least squares on relative residuals of `eagle_step_s +
eagle_s_per_seq x B x top-k`, the form `sim.costs.draft_step_s` uses), not folded into steps.

What a CUDA graph replays is what engines run, so on CUDA the graph rows are fitted and the
eager ones reported beside them. Training: `phases.train_gpu_s_per_token` = one forward+backward
plus two forwards (the old and the reference policy's log-probs, as GRPO computes them) per
token, without the optimiser step; the drafter's forward+backward sets
`learning.train_tokens_per_s`. What operators cannot show (acceptance, the learning curve's
shape, n-gram lookups, weight sync) stays the base profile's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from real.profiler.table import Measurements
from sim.costs import draft_forward_s, prefill_s, verify_step_s
from workbench.calibrate.captures.costs import CostFit, fit_costs
from workbench.calibrate.captures.robust import nnls
from workbench.contracts.fileio import sig
from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import DrafterCost, Profile
from workbench.contracts.provenance import MEASURED_PREFIX

INFER_OPS = ("decode", "verify", "drafter", "prefill")
# old and reference policy log-probs per token, beside the update's forward+backward
LOGPROB_FORWARDS = 2


def fitted_mode(m: Measurements) -> str:
    """The rows the profile is fitted on: replayed CUDA graphs where measured, else eager."""
    return "graph" if (m.rows["mode"] == "graph").any() else "eager"


def _step(op: str, b: int, ctx: float, k: int, p: int, kind: DrafterKind, y: float, i: int) -> dict:
    return {"trace": op, "rl_step": 0, "worker": 0, "engine_step": i, "B": b, "ctx": ctx, "K": k,
            "P": p, "F": 0, "kind": kind, "y": y, "warmup": False, "why_dropped": ""}


def step_frame(m: Measurements, mode: str) -> pd.DataFrame:
    """The measured inference points as engine steps (`fit_costs`' frame, one `trace` per op)."""
    rows = m.rows[m.rows["mode"].isin((mode, "eager"))]
    pick = lambda op: rows[(rows["op"] == op)
                           & (rows["mode"] == (mode if op != "prefill" else "eager"))]
    out: list[dict] = []
    for r in pick("decode").itertuples():
        out.append(_step("decode", r.batch, r.context, 0, 0, DrafterKind.NONE, r.step_s, len(out)))
    verify = pick("verify")
    for r in verify.itertuples():
        out.append(_step("verify", r.batch, r.context, r.tokens - 1, 0, DrafterKind.NONE, r.step_s,
                         len(out)))
    for r in pick("prefill").itertuples():
        out.append(_step("prefill", 0, 0.0, 0, r.tokens, DrafterKind.NONE, r.step_s, len(out)))
    return pd.DataFrame(out)


@dataclass(frozen=True)
class PointFit:
    """One measured point beside the fitted profile's prediction of it."""

    op: str
    mode: str
    batch: int
    context: int
    tokens: int
    topk: int
    measured_s: float
    predicted_s: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_s / self.measured_s - 1.0)


@dataclass
class OperatorFit:
    profile: Profile
    costs: CostFit
    points: list[PointFit]  # every fitted-mode inference point, each op on its own
    eager: list[PointFit]  # CUDA only: the eager rows against the same (graph-fitted) profile
    whole: pd.DataFrame  # the whole-model checks: batch, context, mode, sum_s, whole_s, error_pct
    train_s_per_token: dict[str, float]  # train_fwd, train_fwd_bwd, drafter_train

    @property
    def median_abs_error_pct(self) -> float:
        return float(np.median([abs(p.error_pct) for p in self.points]))

    @property
    def max_abs_error_pct(self) -> float:
        return float(max(abs(p.error_pct) for p in self.points))


def predict_point(prof: Profile, op: str, batch: int, context: float, tokens: int,
                  topk: int) -> float:
    """A point's time under a profile, in the simulator's functions (op as
    real/profiler/grid.py)."""
    if op == "drafter":  # one drafter forward over `topk` candidates per sequence
        return draft_forward_s(prof.drafter, batch, topk)
    if op == "prefill":
        return prefill_s(prof.decode, tokens) + verify_step_s(prof.decode, 0, 0.0, 0)
    return verify_step_s(prof.decode, batch, context, Strategy.chain(tokens - 1))


def point_fits(prof: Profile, rows: pd.DataFrame) -> list[PointFit]:
    return [PointFit(r.op, r.mode, int(r.batch), int(r.context), int(r.tokens), int(r.topk),
                     float(r.step_s),
                     predict_point(prof, r.op, r.batch, r.context, r.tokens, r.topk))
            for r in rows[rows["op"].isin(INFER_OPS)].itertuples()]


def fit_drafter(rows: pd.DataFrame, base: DrafterCost) -> DrafterCost:
    """eagle_step_s and eagle_s_per_seq from the drafter points (the base's when there are none)."""
    if not len(rows):
        return base
    y = rows["step_s"].to_numpy(float)
    cand = (rows["batch"] * rows["topk"]).to_numpy(float)
    if len(np.unique(cand)) < 2:  # one candidate count: the fixed part only
        return replace(base, eagle_step_s=sig(float(np.median(y))), eagle_s_per_seq=0.0)
    x = nnls(np.column_stack([np.ones_like(y), cand]) / y[:, None], np.ones_like(y))
    return replace(base, eagle_step_s=sig(x[0]), eagle_s_per_seq=sig(x[1]))


def whole_checks(m: Measurements) -> pd.DataFrame:
    w = m.of("whole")
    out = pd.DataFrame({"batch": w["batch"], "context": w["context"], "mode": w["mode"],
                        "sum_s": w["step_s"], "whole_s": w["whole_s"]})
    out["error_pct"] = 100.0 * (out["sum_s"] / out["whole_s"] - 1.0)
    return out.reset_index(drop=True)


def per_token(m: Measurements, op: str) -> float:
    r = m.of(op)
    if not len(r):
        return math.nan
    r = r.iloc[0]
    return float(r["step_s"] / (r["batch"] * r["tokens"]))


def describe(m: Measurements, mode: str) -> str:
    """The profile's `source`: what was measured, where, when and how."""
    t = m.meta
    link = t.get("link", {})
    tp = int(t.get("tp", 1))
    coll = (f"; TP {tp} collectives assumed, not measured: all-reduce "
            f"{1e6 * link.get('allreduce_latency_s', 0):.0f} us "
            f"+ ring transfer at {link.get('bus_bytes_per_s', 0) / 1e9:.0f} GB/s bus "
            "bandwidth") if tp > 1 else ""
    return ("measured by `python -m real.profiler` (operator level: one TP rank's decoder layer x "
            f"layers + head, random weights) on {t.get('device_name', '?')} at "
            f"{t.get('measured_at', '?')}, {t.get('dtype')}, torch {t.get('torch')}, grid "
            f"{t.get('grid')}, median of {t.get('repeats')} runs (clock {t.get('clock', '?')}), "
            f"fastest of {t.get('passes', 1)} interleaved passes, "
            f"{'CUDA-graph replays' if mode == 'graph' else 'eager'} for "
            f"decode/verify/drafter{coll}; fitted by workbench/calibrate/captures/operators.py "
            f"(fit_costs "
            "over the points); no engine scheduling or sampling overhead is in it (an engine's "
            "step costs more); fit_error_pct: median |error| over the measured points, in sample")


def fit_operators(m: Measurements, base: Profile, name: str) -> OperatorFit:
    """The Profile of the measured engine shape; base supplies what operators cannot measure."""
    mode = fitted_mode(m)
    frame = step_frame(m, mode)
    costs = fit_costs(frame, base)
    train = {op: per_token(m, op) for op in ("train_fwd", "train_fwd_bwd", "drafter_train")}
    phases, learning = base.phases, base.learning
    if math.isfinite(train["train_fwd_bwd"]) and math.isfinite(train["train_fwd"]):
        update = train["train_fwd_bwd"] + LOGPROB_FORWARDS * train["train_fwd"]
        phases = replace(phases, train_gpu_s_per_token=sig(update))
    if math.isfinite(train["drafter_train"]) and train["drafter_train"] > 0:
        learning = replace(learning, train_tokens_per_s=sig(1.0 / train["drafter_train"]))
    t = m.meta
    what = f"{t.get('architecture')} TP{t.get('tp')} on {t.get('device_name')}"
    drafter = fit_drafter(m.of("drafter", mode),
                          replace(costs.drafter(), ngram_s_per_seq=base.drafter.ngram_s_per_seq))
    prof = replace(base, name=name, decode=costs.decode(), drafter=drafter, phases=phases,
                   learning=learning,
                   description=f"{what}: operator-level measurement (base {base.name} for "
                               "acceptance, learning curve and weight sync)",
                   source=describe(m, mode),
                   fitted_on=(f"{MEASURED_PREFIX}{what}, {str(t.get('measured_at', '?'))[:10]}",))
    points = point_fits(prof, m.rows[m.rows["mode"].eq(mode) | m.rows["op"].eq("prefill")])
    prof = replace(prof, fit_error_pct=sig(float(np.median([abs(p.error_pct) for p in points])), 4))
    prof.check()
    eager_rows = m.rows[m.rows["mode"].eq("eager") & ~m.rows["op"].eq("prefill")]
    eager = point_fits(prof, eager_rows) if mode == "graph" else []
    return OperatorFit(prof, costs, points, eager, whole_checks(m), train)


def fit_report(fit: OperatorFit, m: Measurements, measurements_file: str) -> dict:
    """The fit error file written beside the profile (JSON)."""
    c = fit.costs
    pts = lambda ps: [{**{k: getattr(p, k) for k in p.__dataclass_fields__},
                       "error_pct": p.error_pct} for p in ps]
    return {
        "profile": fit.profile.name, "measurements": measurements_file, "meta": m.meta,
        "fit_error_pct": {"median_abs": fit.median_abs_error_pct, "max_abs": fit.max_abs_error_pct,
                          "cost_fit_in_sample_mdape": c.mdape_pct,
                          "cost_fit_cv_mdape": c.cv_mdape_pct},
        "params": [{"parameter": p.key, "value": p.value, "fitted": p.fitted,
                    "why_not": p.why_not_fitted}
                   for p in c.params],
        "knee_tokens": c.knee_tokens, "points": pts(fit.points), "eager_points": pts(fit.eager),
        "whole_model_check": fit.whole.to_dict(orient="records"),
        "train_s_per_token": fit.train_s_per_token,
    }
