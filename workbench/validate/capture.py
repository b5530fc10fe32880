"""Validation: re-simulate a traced run with a Profile and compare rollout times.

`validate(profile, trace)` builds the simulated run from the trace itself:

- Workload: workers = the trace's engines, prompts / samples / cap from meta,
  prompt_tokens = the mean traced prompt length, max_batch =
  meta['engine']['max_num_seqs'] (else the largest traced batch), steps = the
  traced RL steps, profile = the one under test.
- Policy: meta['policy'] with `bandit.algorithm` forced to `fixed`: the traced
  engine ran a Dynamic SD schedule with a given drafter, so the simulator runs
  that schedule (if the traced steps' draft lengths disagree with it on most
  steps of a bucket, the bucket takes the traced majority draft length, and
  `details` says so). The drafter kind is the one the engine ran
  (`calibrate.trace_drafter_kind`: meta['engine']['speculative_config'],
  else the policy's); an EAGLE drafter is
  warm-started with training and n-gram fallback off, the rollout is `sync`
  (the replay holds every response of each RL step), and the profile's
  staleness is set to 0 for the run: calibration fits `eagle_alpha_fresh` to
  the acceptance the traced drafter actually had, over the whole trace.
- Response lengths: replayed exactly (`simulate(..., replay=...)`), one array
  per RL step, prompt-major (groups ordered by the engine that served them,
  then prompt_id; samples by `sample`), so the simulator's contiguous shards
  put each group on the engine that ran it where the split allows
  (`details.shards_match`).
- Measured rollout time: the sum of rl_steps.rollout_s; the span of each RL
  step's requests (first start to last end) is reported alongside
  (`details.span_s`), and used when rollout_s is missing or 0.

error_pct = 100 * (predicted - measured) / measured (signed). `details` splits it:
`step_cost_rollout_s` is what the profile predicts for the traced engine steps themselves, so
`cost_error_pct` (step costs vs measured) is the cost model's share and `pace_error_pct`
(simulated vs step costs) the simulator's pacing share (it advances every request of a batch at
the mean accepted length; real requests run at their own pace, and the last one ends later).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from sim.simulator import simulate
from workbench.calibrate.captures.costs import predict_steps
from workbench.calibrate.captures.probe_drift import warp_to_profile
from workbench.calibrate.captures.trace_view import (
    step_draft_len,
    step_frame,
)
from workbench.contracts.fileio import save_figure, write_json
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.trace import Trace
from workbench.validate.trace_inputs import (
    ScheduleOverride,
    rl_index,
    trace_policy,
    trace_replay,
    trace_workload,
)

SCHEMA = "tlt-validate/1"


@dataclass(frozen=True)
class ValidationDetails:
    """One validated run in detail (validate.json's `details`; the field order is the file's)."""

    trace: str
    profile: str
    workers: int
    prompts: int
    samples: int
    max_tokens: int
    max_batch: int
    prompt_tokens: int
    rl_steps: int
    policy: str
    drafter: str
    # None: not checked (no SD schedule); not written
    schedule_overridden: list[ScheduleOverride] | None
    off_threshold_sd_steps: int
    shards_match: float  # share of responses the simulator's shards put on their traced engine
    measured_basis: str  # "rl_steps.rollout_s" or "request span"
    predicted_per_step_s: list[float]
    rollout_s: list[float]
    span_s: list[float]
    span_vs_rollout_pct: float | None
    tokens_traced: int
    tokens_simulated: int
    accept_len_traced: float
    accept_len_simulated: float
    engine_steps_traced: int
    engine_steps_simulated: float
    step_cost_rollout_s: float  # the profile on the traced steps (see `step_cost_rollout`)
    step_cost_per_rl_step_s: list[float]
    cost_error_pct: float | None  # step costs vs measured: the cost model's share of the error
    pace_error_pct: float | None  # simulated vs step costs: the simulator's pacing share

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.schedule_overridden is None:
            del out["schedule_overridden"]
        else:
            out["schedule_overridden"] = [o.to_dict() for o in self.schedule_overridden]
        return out


@dataclass
class Validation:
    trace: str
    predicted_rollout_s: float
    measured_rollout_s: float  # at the profile's machine speed (scaled by drift_factor)
    error_pct: float  # against measured_rollout_s: the model's error
    details: ValidationDetails
    raw_measured_rollout_s: float | None = None  # as the clock read it (None: same as measured)
    drift_factor: float | None = None  # profile's speed probe / the trace's (None: not measured)

    @property
    def raw_error_pct(self) -> float:
        """Against the time the clock read: the model's error plus the machine's drift."""
        raw = self.raw_measured_rollout_s or self.measured_rollout_s
        return 100.0 * (self.predicted_rollout_s - raw) / raw if raw > 0 else math.nan

    def summary(self) -> dict[str, float]:
        out = {"predicted_rollout_s": round(self.predicted_rollout_s, 4),
               "measured_rollout_s": round(self.measured_rollout_s, 4),
               "error_pct": round(self.error_pct, 3)}
        if self.drift_factor is not None:
            out.update(raw_error_pct=round(self.raw_error_pct, 3),
                       drift_factor=round(self.drift_factor, 4))
        return out


def measured_rollout(trace: Trace) -> tuple[float, list[float], list[float], str]:
    """(measured total, rollout_s per RL step, request span per RL step, which one the total
    uses)."""
    spans = []
    for rl in rl_index(trace):
        r = trace.requests[trace.requests["rl_step"] == rl]
        s = trace.steps[trace.steps["rl_step"] == rl]
        start = min(r["start_s"].min(), s["start_s"].min()) if len(s) else r["start_s"].min()
        end = max(r["end_s"].max(),
                  (s["start_s"] + s["wall_s"]).max()) if len(s) else r["end_s"].max()
        spans.append(float(end - start))
    rl = trace.rl_steps.sort_values("rl_step")
    rollout = [float(v) for v in rl["rollout_s"]] if len(rl) else []
    if len(rollout) == len(spans) and all(v > 0 for v in rollout):
        return float(sum(rollout)), rollout, spans, "rl_steps.rollout_s"
    return float(sum(spans)), rollout, spans, "request span"


def step_cost_rollout(profile: Profile, trace: Trace) -> tuple[float, list[float]]:
    """The rollout time the profile gives the *traced* engine steps (per RL step, the slowest
    engine's sum of predicted step times plus its traced lead time before the first step): (total,
    per RL step).

    Against the measured time it isolates the cost model's error; against the simulated time, the
    error of the simulator's pace (it moves every request of a batch at the mean accepted length,
    so it cannot reproduce requests that run faster or slower than the mean)."""
    f = step_frame([trace], warmup_steps=0, target="wall")
    f["pred"] = predict_steps(profile, f)
    s = trace.steps.sort_values(["rl_step", "worker", "engine_step"]).reset_index(drop=True)
    f["start_s"] = s["start_s"].to_numpy(float)
    total, per_step = 0.0, []
    for rl in rl_index(trace):
        r = trace.requests[trace.requests["rl_step"] == rl]
        t0 = float(r["start_s"].min())
        g = f[f["rl_step"] == rl]
        ends = [float(e["start_s"].min()) - t0 + float(e["pred"].sum())
                for _, e in g.groupby("worker")]
        per_step.append(max(ends) if ends else 0.0)
        total += per_step[-1]
    return total, per_step


def _accept_lens(trace: Trace, run) -> tuple[float, float]:
    """Tokens per verify pass over the SD steps: traced, and simulated (mean over steps)."""
    s = trace.steps
    sd = step_draft_len(s, trace.meta) > 0
    passes = float(s.loc[sd, "decode_requests"].sum())
    tokens = float((s.loc[sd, "new_tokens"] - s.loc[sd, "prefill_requests"]).sum())
    traced = tokens / passes if passes else 1.0
    return traced, float(np.mean([m.mean_accept_len for m in run.steps]))


def validate(profile: Profile, trace: Trace, seed: int = 0) -> Validation:
    """The trace re-simulated under `profile` (module docstring). Where both the profile and the
    trace timed the machine's speed, the trace's times are first brought to the profile's speed
    (`warp_to_profile`: each stretch at its probe sample's speed), so the error is the model's;
    `raw_error_pct` keeps the drift in."""
    factor = raw_measured = None
    warped = warp_to_profile(profile.speed_probe_ms, trace, profile.speed_probe_exponent)
    if warped is not None:
        raw_measured = measured_rollout(trace)[0]
        trace, factor = replace(warped[0], path=trace.path), warped[1]
    wl = trace_workload(trace, profile)
    tp = trace_policy(trace)
    pol = tp.policy
    replay, shards_match = trace_replay(trace, wl)
    prof = profile
    if pol.drafter.kind == DrafterKind.EAGLE:
        prof = replace(profile, acceptance=replace(profile.acceptance, staleness_per_update=0.0))
    run = simulate(wl, pol, prof, seed=seed, steps=wl.steps, replay=replay)
    predicted = [m.rollout_time_s for m in run.steps]
    measured, rollout_s, spans, basis = measured_rollout(trace)
    pred = float(sum(predicted))
    err = 100.0 * (pred - measured) / measured if measured > 0 else math.nan
    step_cost, step_cost_per_rl_step = step_cost_rollout(profile, trace)
    traced_accept, sim_accept = _accept_lens(trace, run)
    dec = run.timeline[run.timeline["state"].isin(["decode", "decode_sd"])]
    details = ValidationDetails(
        trace=trace.name, profile=profile.name, workers=wl.workers, prompts=wl.prompts_per_step,
        samples=wl.group_size, max_tokens=wl.max_response_tokens, max_batch=wl.max_batch,
        prompt_tokens=wl.prompt_tokens, rl_steps=wl.steps, policy=pol.name, drafter=tp.drafter,
        schedule_overridden=tp.schedule_overridden,
        off_threshold_sd_steps=tp.off_threshold_sd_steps,
        shards_match=shards_match, measured_basis=basis, predicted_per_step_s=predicted,
        rollout_s=rollout_s, span_s=spans,
        span_vs_rollout_pct=((100 * (sum(spans) - sum(rollout_s)) / sum(rollout_s))
                             if rollout_s and sum(rollout_s) > 0 else None),
        tokens_traced=int(trace.requests["response_tokens"].sum()),
        tokens_simulated=int(sum(m.tokens for m in run.steps)),
        accept_len_traced=traced_accept, accept_len_simulated=sim_accept,
        engine_steps_traced=int(len(trace.steps)),
        engine_steps_simulated=float((dec["passes"] / dec["batch"]).sum()),
        step_cost_rollout_s=step_cost, step_cost_per_rl_step_s=step_cost_per_rl_step,
        cost_error_pct=100.0 * (step_cost - measured) / measured if measured > 0 else None,
        pace_error_pct=100.0 * (pred - step_cost) / step_cost if step_cost > 0 else None,
    )
    return Validation(trace.name, pred, measured, err, details, raw_measured, factor)


def validations_summary(results: list[Validation]) -> dict[str, Any]:
    """The summary `tlt validate` prints last, as JSON: one run's `summary()`; for several, the
    totals, the median |error| and each run's summary."""
    if len(results) == 1:
        return results[0].summary()
    pred = sum(v.predicted_rollout_s for v in results)
    meas = sum(v.measured_rollout_s for v in results)
    out = {"predicted_rollout_s": round(pred, 4), "measured_rollout_s": round(meas, 4),
           "error_pct": round(100 * (pred - meas) / meas, 3),
           "median_abs_error_pct": round(float(np.median([abs(v.error_pct) for v in results])), 3)}
    if any(v.drift_factor is not None for v in results):
        raw = float(np.median([abs(v.raw_error_pct) for v in results]))
        out["median_abs_raw_error_pct"] = round(raw, 3)
    return {**out, "traces": {v.trace: v.summary() for v in results}}


def validation_figure(results: list[Validation], profile: Profile,
                      median_abs_error_pct: float | None) -> Figure:
    """Measured vs simulated rollout time per run, each annotated with its error."""
    fig = Figure(figsize=(max(5.0, 1.1 * len(results) + 2), 3.6))
    ax = fig.subplots()
    x = np.arange(len(results))
    ax.bar(x - 0.2, [v.measured_rollout_s for v in results], 0.4, label="measured", color="#4c72b0")
    ax.bar(x + 0.2, [v.predicted_rollout_s for v in results], 0.4, label="simulated",
           color="#dd8452")
    for i, v in enumerate(results):
        in_fit = "" if v.trace not in profile.fitted_on else "\n(fit)"
        ax.annotate(f"{v.error_pct:+.1f}%" + in_fit,
                    (i, max(v.measured_rollout_s, v.predicted_rollout_s)), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(x, [v.trace for v in results], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("rollout time, s")
    ax.set_title(f"profile {profile.name}: median |error| {median_abs_error_pct:.1f}%", fontsize=10)
    ax.margins(y=0.15)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_validations(results: list[Validation], out: str | Path, profile: Profile) -> None:
    """`out/validate.json` (every run's summary and details) and `out/validate.png` (measured vs
    predicted)."""
    out = Path(out)
    errs = [abs(v.error_pct) for v in results]
    doc = {"schema": SCHEMA, "profile": profile.name, "fitted_on": list(profile.fitted_on),
           "median_abs_error_pct": float(np.median(errs)) if errs else None,
           "runs": [{**v.summary(), "trace": v.trace, "held_out": v.trace not in profile.fitted_on,
                     "details": v.details.to_dict()} for v in results]}
    write_json(out / "validate.json", doc)
    save_figure(validation_figure(results, profile, doc["median_abs_error_pct"]),
                out / "validate.png")
