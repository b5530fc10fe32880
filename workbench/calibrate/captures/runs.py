"""Whole runs calibrated: what a `tlt train` run shows that rollout-only captures cannot.

`fit_runs(run_dirs, base)` reads run directories (`RUN/metrics.csv` and `RUN/trace/` with its
per-worker `timeline.parquet`) and fits, in exactly the forms the simulator uses:

- `phases.train_gpu_s_per_token`, `phases.weight_sync_s`: `fit_phases` over the runs' RL steps
  (update seconds x GPUs / prompt+response tokens; sync seconds), medians.
- `phases.spot_stop_s`, `phases.drafter_sync_s` (`fit_spot_phases`): over the runs whose policy
  spot-trains, the mean wait for the spot trainers to stop (metrics.csv `stop_latency_s`; none
  running: 0) and their mean sync beyond the mean sync of the runs that do not spot-train (the new
  drafter is pushed and judged only where one trains). Means, not medians: the wait is skewed (one
  step in three waits for a whole drafter step) and the simulator adds one constant per step, so
  only the mean keeps the mean step time right.
- `learning.train_tokens_per_s`, `learning.tokens_per_step`: the simulator's spot trainer
  (sim/rollout.py) counts only whole drafter steps in each `drafter_train` interval,
  floor(interval / step_s). The step time is the one whose count over the runs' intervals equals
  the drafter steps they did (metrics.csv `drafter_steps`): the real interval also holds judging
  the drafters and the fresh responses' hidden states, which the form has no field for, so they
  are folded into the step time (the fixed part is reported in `notes`). A drafter step trains
  on `SPOT_BATCH_SEQUENCES` sequences, so `tokens_per_step` is that times the runs' mean
  prompt+response length, and `train_tokens_per_s = tokens_per_step / step_s` per GPU.
- `acceptance.staleness_per_update`: `static_est`, the initial drafter kept static, judged on
  each step's responses (the policy after t updates). The simulator's quality decays as
  q0 (1 - s)^t and its alpha is cold + (fresh - cold) q, so log(alpha_t - cold) falls by
  log(1 - s) per update; alpha_t inverts the chain's E[L] at the judged draft length. Only the
  slope is used, so the estimate's own scale (greedy agreement on 8 responses, not the vLLM
  acceptance the captures fit `eagle_alpha_fresh` to) cancels.
- `learning.learn_tokens`: `eagle_est` (the spot-trained drafter the engines ran) over
  `static_est` on the same responses is q_E / q_S; the simulator's recursion (`sim.drafter`:
  `after_training` with each step's measured drafter steps, `after_policy_update`) predicts it
  for a learning scale L, fitted on a log grid. L is kept from the base unless the best L is
  inside the grid and beats "no learning" by a likelihood-ratio margin (the tiny runs' 5-8
  drafter steps per RL step usually move the estimate by less than its noise).

Not identified by a run, kept from the base and said so: `warm_start_quality` and
`eagle_alpha_fresh` (the estimates' scale is not the rollout's acceptance scale; the captures
fit those), `useful_epochs`, `lr_best`, `lr_tolerance` (one learning rate per run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from real.rollout.spec_config import adaptive_draft_cap
from sim.acceptance import alpha_for_mean
from sim.drafter import DrafterState, after_policy_update, after_training
from workbench.calibrate.captures.costs import ParamFit
from workbench.calibrate.captures.phases import fit_phases
from workbench.calibrate.captures.run_dir import Run, load_run, run_policy
from workbench.calibrate.captures.trace_view import fitted_name
from workbench.contracts.fileio import sig
from workbench.contracts.profile import Profile
from workbench.contracts.trace import Trace

# real/drafter/spot.py: SpotTrainer's minibatch (batch_size=8 sequences); real/run/worker.py
# does not override it.
SPOT_BATCH_SEQUENCES = 8
LEARN_GRID = np.logspace(2, 12, 101)  # learn_tokens candidates: instant to never, per the form
LR_CRITICAL = 3.84  # chi-square(1) at 5%: the learning curve must beat "no learning" by this
TABLE_HEADERS = ["parameter", "value", "set", "how"]


@dataclass(frozen=True)
class RunFit:
    """A Profile updated from whole runs, and how each run-level parameter was set."""

    profile: Profile
    params: list[ParamFit]
    how: dict[str, str]  # ParamFit.key -> how it was fitted, or why it was kept
    runs: list[str]
    notes: list[str] = field(default_factory=list)

    def table_rows(self) -> list[list[str]]:
        """Rows under TABLE_HEADERS: parameter, value, fitted or kept, how."""
        return [[p.key, f"{p.value:.5g}", "fitted" if p.fitted else "kept (base)",
                 self.how.get(p.key, "")]
                for p in self.params]

    def to_dict(self) -> dict[str, Any]:
        return {"runs": list(self.runs), "notes": list(self.notes),
                "params": [{"param": p.key, "value": p.value, "fitted": p.fitted,
                            "rel_se": None if math.isnan(p.rel_se) else p.rel_se,
                            "how": self.how.get(p.key, "")}
                           for p in self.params]}


# ------------------------------------------------------------ spot-trainer throughput

def spot_intervals(run: Run) -> list[tuple[list[float], int]]:
    """Per RL step: the durations of its drafter_train intervals (all workers) and the drafter
    steps it did (metrics.csv)."""
    tl = run.trace.timeline
    spot = tl[tl["state"] == "drafter_train"]
    done = dict(zip(run.metrics["rl_step"].astype(int),
                    run.metrics["drafter_steps"].fillna(0).astype(int)))
    out = []
    for step, n in done.items():
        s = spot[spot["rl_step"] == step]
        out.append(((s["end_s"] - s["start_s"]).astype(float).tolist(), int(n)))
    return out


def whole_steps(intervals: Sequence[tuple[list[float], int]], step_s: float) -> int:
    """The simulator's count: whole drafter steps in each interval (the one cut short is
    dropped)."""
    return sum(math.floor(d / step_s) for ds, _ in intervals for d in ds)


def fit_step_seconds(intervals: Sequence[tuple[list[float], int]]) -> float | None:
    """The drafter step time whose whole-step count over the intervals equals the steps done (the
    middle, geometrically, of the times that match best); None when no step was done."""
    durations = [d for ds, _ in intervals for d in ds if d > 0]
    target = sum(n for _, n in intervals)
    if target <= 0 or not durations:
        return None
    grid = np.geomspace(max(durations) / (10 * target + 10), max(durations), 4000)
    miss = np.array([abs(whole_steps(intervals, s) - target) for s in grid])
    best = grid[miss == miss.min()]
    return float(math.sqrt(best.min() * best.max()))


def fit_spot(
    runs: Sequence[Run], base: Profile
) -> tuple[Profile, list[ParamFit], dict[str, str], list[str]]:
    learn = base.learning
    intervals = [iv for r in runs for iv in spot_intervals(r)]
    step_s = fit_step_seconds(intervals)
    seqs = pd.concat([r.trace.requests for r in runs])
    seq_tokens = float((seqs["prompt_tokens"] + seqs["response_tokens"]).mean())
    tps = max(1, round(SPOT_BATCH_SEQUENCES * seq_tokens))
    tp = max(int((r.trace.meta.get("engine") or {}).get("tensor_parallel_size", 1) or 1)
             for r in runs)
    how, notes = {}, []
    if step_s is None:
        why = "no drafter step in the runs' drafter_train intervals"
        how["learning.train_tokens_per_s"] = how["learning.tokens_per_step"] = f"kept: {why}"
        return base, [ParamFit("learning", "train_tokens_per_s", learn.train_tokens_per_s, False,
                               why_not_fitted=why),
                      ParamFit("learning", "tokens_per_step", learn.tokens_per_step, False,
                               why_not_fitted=why)], how, notes
    rate = sig(tps / (step_s * tp))
    done = sum(n for _, n in intervals)
    how["learning.train_tokens_per_s"] = (f"tokens_per_step / {step_s:.3f} s per drafter step: "
                                          f"whole steps per drafter_train "
                                          f"interval ({sum(len(ds) for ds, _ in intervals)} "
                                          f"intervals) match the {done} done")
    how["learning.tokens_per_step"] = (f"{SPOT_BATCH_SEQUENCES} sequences x the runs' mean "
                                       "prompt+response tokens")
    idle = [d for ds, n in intervals if n == 0 for d in ds]
    if idle:
        notes.append(f"spot intervals with no drafter step last up to {max(idle):.2f} s (judging "
                     f"the drafters and the fresh "
                     "responses' hidden states come first); the form has no fixed cost, so it is "
                     "in the step time")
    prof = replace(base, learning=replace(learn, train_tokens_per_s=rate, tokens_per_step=tps))
    return prof, [ParamFit("learning", "train_tokens_per_s", rate, True),
                  ParamFit("learning", "tokens_per_step", float(tps), True)], how, notes


# ------------------------------------------------------------ what spot training adds to a step

def spot_wait(metrics: pd.DataFrame) -> np.ndarray:
    """Per RL step, the wait for the spot trainers to stop (`stop_latency_s`; NaN: none was
    running)."""
    if "stop_latency_s" not in metrics.columns:
        return np.zeros(len(metrics))
    return pd.to_numeric(metrics["stop_latency_s"], errors="coerce").fillna(0.0).to_numpy(float)


def fit_spot_phases(
    runs: Sequence[Run], base: Profile
) -> tuple[Profile, list[ParamFit], dict[str, str]]:
    spot = [r for r in runs if run_policy(r.trace).spot_training.enabled]
    plain = [r for r in runs if r not in spot]
    ph, how = base.phases, {}
    if spot and plain:
        sync = [float(x) for r in plain for x in r.trace.rl_steps["sync_s"] if x > 0]
        ph = replace(ph, weight_sync_s=sig(np.median(sync)) if sync else ph.weight_sync_s)
        how["phases.weight_sync_s"] = ("median sync_s over the runs that do not spot-train "
                                       "(weights only)")
    if not spot:
        why = "no run spot-trained a drafter"
        how["phases.spot_stop_s"] = how["phases.drafter_sync_s"] = f"kept: {why}"
        return base, [ParamFit("phases", "spot_stop_s", ph.spot_stop_s, False, why_not_fitted=why),
                      ParamFit("phases", "drafter_sync_s", ph.drafter_sync_s, False,
                               why_not_fitted=why)], how
    stop = sig(float(np.mean(np.concatenate([spot_wait(r.metrics) for r in spot]))))
    spot_sync = float(np.mean([float(x) for r in spot for x in r.trace.rl_steps["sync_s"]]))
    plain_sync = (float(np.mean([float(x) for r in plain for x in r.trace.rl_steps["sync_s"]]))
                  if plain else 0.0)
    extra = sig(max(0.0, spot_sync - plain_sync)) if plain else 0.0
    how["phases.spot_stop_s"] = ("mean over the spot-training runs' steps of stop_latency_s "
                                 "(none running: 0)")
    how["phases.drafter_sync_s"] = (
        "mean sync_s of the spot-training runs minus that of the others" if plain
        else "kept at 0: without a run that does not spot-train, weight_sync_s holds it")
    ph = replace(ph, spot_stop_s=stop, drafter_sync_s=extra)
    return replace(base, phases=ph), [ParamFit("phases", "spot_stop_s", stop, True),
                                      ParamFit("phases", "drafter_sync_s", extra, bool(plain))], how


# ------------------------------------------------------------ staleness and the learning curve

def judged_draft_len(trace: Trace) -> int:
    """The draft length the run judged its drafters at: the largest an adaptive engine may run
    (real/run/coordinator.py judges at `adaptive_draft_cap`)."""
    return max(1, adaptive_draft_cap(run_policy(trace)))


def _est_columns(run: Run) -> pd.DataFrame:
    m = run.metrics
    cols = [c for c in ("eagle_est", "static_est") if c in m.columns]
    return m[["rl_step", "drafter_steps", *cols]].copy()


def fit_staleness(runs: Sequence[Run], base: Profile) -> tuple[Profile, ParamFit, str]:
    """staleness_per_update from the decay of the static drafter's estimate (module docstring)."""
    acc = base.acceptance
    xs, ys = [], []
    for r in runs:
        m = _est_columns(r)
        if "static_est" not in m.columns:
            continue
        k = judged_draft_len(r.trace)
        pts = [(float(t), math.log(a - acc.eagle_alpha_cold))
               for t, e in zip(m["rl_step"], m["static_est"])
               if np.isfinite(e)
               and (a := alpha_for_mean(acc.eagle_shape, k, float(e))) > acc.eagle_alpha_cold]
        if len(pts) >= 3:  # per-run intercepts: demean within the run
            t, y = np.array(pts).T
            xs.append(t - t.mean())
            ys.append(y - y.mean())
    n = sum(len(x) for x in xs)
    if n - len(xs) < 2:
        why = ("fewer than 3 steps with a static_est (the static drafter is judged in "
               "warm-started runs only)")
        return base, ParamFit("acceptance", "staleness_per_update", acc.staleness_per_update, False,
                              why_not_fitted=why), f"kept: {why}"
    x, y = np.concatenate(xs), np.concatenate(ys)
    slope = float(np.sum(x * y) / np.sum(x * x))
    dof = n - len(xs) - 1
    se = (math.sqrt(float(np.sum((y - slope * x) ** 2)) / dof / float(np.sum(x * x)))
          if dof > 0 else math.nan)
    s = sig(min(0.99, max(0.0, 1.0 - math.exp(slope))))
    rel = se * math.exp(slope) / s if s > 0 else math.nan
    how = (f"static_est over {n} steps of {len(xs)} run(s): log(alpha - cold) falls {-slope:.4f} "
           "per update"
           + (" (it rose: no decay measured, 0)" if slope >= 0 else ""))
    prof = replace(base, acceptance=replace(acc, staleness_per_update=s))
    return prof, ParamFit("acceptance", "staleness_per_update", s, True, rel_se=rel), how


def quality_ratio(run: Run, prof: Profile, learn_tokens: float) -> np.ndarray:
    """The simulator's q_E / q_S per step of a run: the spot-trained drafter (with the run's own
    drafter steps and response tokens) over the static one, both from the warm start."""
    pol = run_policy(run.trace)
    p = replace(prof, learning=replace(prof.learning, learn_tokens=learn_tokens))
    tokens = run.trace.requests.groupby("rl_step")["response_tokens"].sum()
    q0, s = p.acceptance.warm_start_quality, p.acceptance.staleness_per_update
    state, out = DrafterState(q0), []
    for t, n in zip(run.metrics["rl_step"].astype(int), run.metrics["drafter_steps"].fillna(0)):
        out.append(state.quality / (q0 * (1.0 - s) ** t))
        state = after_training(state, pol, p, float(n) * p.learning.tokens_per_step,
                               int(tokens.get(t, 0)))
        state = after_policy_update(state, p)
    return np.array(out)


def fit_learning(runs: Sequence[Run], base: Profile) -> tuple[Profile, ParamFit, str]:
    """learn_tokens from eagle_est / static_est against the simulator's recursion (module
    docstring)."""
    acc, learn = base.acceptance, base.learning
    pairs = []  # (run, step mask, measured log q_E/q_S)
    for r in runs:
        m = _est_columns(r)
        judged = {"eagle_est", "static_est"} <= set(m.columns)
        if not judged or not run_policy(r.trace).spot_training.enabled:
            continue
        k = judged_draft_len(r.trace)
        y = np.full(len(m), np.nan)
        for i, (e, s) in enumerate(zip(m["eagle_est"], m["static_est"])):
            if np.isfinite(e) and np.isfinite(s):
                ae = alpha_for_mean(acc.eagle_shape, k, float(e))
                a_s = alpha_for_mean(acc.eagle_shape, k, float(s))
                if min(ae, a_s) > acc.eagle_alpha_cold:
                    y[i] = math.log((ae - acc.eagle_alpha_cold) / (a_s - acc.eagle_alpha_cold))
        if np.isfinite(y).sum() >= 3 and base.acceptance.warm_start_quality > 0:
            pairs.append((r, np.isfinite(y), y))
    n = sum(int(mask.sum()) for _, mask, _ in pairs)
    keep = ParamFit("learning", "learn_tokens", learn.learn_tokens, False)
    if n < 3:
        why = "fewer than 3 steps judged both the spot-trained and the static drafter"
        return base, replace(keep, why_not_fitted=why), f"kept: {why}"
    sse = np.array([sum(float(np.sum((y[mask] - np.log(quality_ratio(r, base, L)[mask])) ** 2))
                        for r, mask, y in pairs)
                    for L in LEARN_GRID])
    # L -> infinity: training changes nothing
    none = sum(float(np.sum(y[mask] ** 2)) for _, mask, y in pairs)
    best = int(np.argmin(sse))
    gain = (none - sse[best]) / max(sse[best] / max(1, n - 1), 1e-12)
    ratio = float(np.exp(np.mean(np.concatenate([y[mask] for _, mask, y in pairs]))))
    if 0 < best < len(LEARN_GRID) - 1 and gain > LR_CRITICAL:
        L = sig(float(LEARN_GRID[best]))
        how = (f"eagle_est/static_est over {n} steps against sim.drafter's recursion "
               f"(log grid; beats no learning by {gain:.1f})")
        fitted = ParamFit("learning", "learn_tokens", L, True)
        return replace(base, learning=replace(learn, learn_tokens=L)), fitted, how
    why = (f"spot training moved the estimate by less than its noise over {n} steps "
           f"(mean spot-trained / static ratio {ratio:.3f} in alpha - cold)")
    return base, replace(keep, why_not_fitted=why), f"kept: {why}"


# ------------------------------------------------------------ all of it

NOT_IDENTIFIED = (
    ("acceptance", "warm_start_quality",
     "the drafter estimates' scale is not the rollout's acceptance scale; captures fit it"),
    ("acceptance", "eagle_alpha_fresh",
     "fitted on captures (tlt calibrate TRACE), not on the runs' estimates"),
    ("learning", "useful_epochs", "no run trains past a few epochs of its buffer"),
    ("learning", "lr_best", "one learning rate per run"),
    ("learning", "lr_tolerance", "one learning rate per run"),
)


def fit_runs(run_dirs: Sequence[str | Path], base: Profile) -> RunFit:
    """`base` updated from whole `tlt train` runs (module docstring); each row says how."""
    if not run_dirs:
        raise ValueError("fit_runs: no run directory given; pass at least one `tlt train --out` "
                         "directory")
    return fit_loaded_runs([load_run(d) for d in run_dirs], base)


def fit_loaded_runs(runs: Sequence[Run], base: Profile) -> RunFit:
    """`fit_runs` on runs already read (`load_run`)."""
    phases, phase_params = fit_phases([r.trace for r in runs], base.phases)
    prof = replace(base, phases=phases)
    how = {"phases.train_gpu_s_per_token": "median over RL steps of train_s x GPUs / "
                                           "prompt+response tokens",
           "phases.weight_sync_s": "median over RL steps of sync_s (the runs' policies: drafter "
                                   "reloads and judging included)"}
    for p in phase_params:
        if not p.fitted:
            how[p.key] = "kept: no RL step timed it"
    prof, extra_params, extra_how = fit_spot_phases(runs, prof)
    how.update(extra_how)
    prof, spot_params, spot_how, notes = fit_spot(runs, prof)
    prof, stale, stale_how = fit_staleness(runs, prof)
    prof, learn, learn_how = fit_learning(runs, prof)
    how.update(spot_how)
    how[stale.key], how[learn.key] = stale_how, learn_how
    kept = [ParamFit(part, name, float(getattr(getattr(prof, part), name)), False,
                     why_not_fitted=why)
            for part, name, why in NOT_IDENTIFIED]
    how.update({p.key: f"kept: {p.why_not_fitted}" for p in kept})
    labels = [r.label for r in runs]
    prof = replace(prof,
                   fitted_on=tuple(base.fitted_on) + tuple(fitted_name(r.trace) for r in runs),
                   source=(base.source + "; " if base.source else "")
                   + f"run-level parameters fitted on runs {', '.join(labels)} (fit_runs)")
    prof.check()
    return RunFit(prof, [*phase_params, *extra_params, *spot_params, stale, learn, *kept], how,
                  labels, notes)
