"""Predict a whole `tlt train` run: every RL step's rollout, update and sync, against what it
measured.

`predict_run(trace, profile)` re-simulates the run (`sim.simulator.simulate`) from what was decided
before it ran, never from what it measured:

- the workload from the run's meta, as `workbench.validate.trace_inputs.trace_workload` builds it
  (engines, prompts x samples, the cap, `max_num_seqs`, the mean prompt length);
- each RL step's own response lengths (`replay=`, `workbench.validate.trace_inputs.trace_replay`):
  the lengths are the RL algorithm's output, the same whatever the speed, so they are an input here;
- the policy as the run's meta records it, run by the simulator's own models, adaptive parts
  included: the bandit starts from the run's start table for its drafter (meta `start_tables`,
  `run_start_table`), a warm-started drafter starts at the profile's `warm_start_quality`, spot
  training on idle workers and its learning curve, staleness per update and the n-gram switch
  are the profile's (`fit_runs` fits them from other runs). Where the run's SD guard turned SD
  off in set-up (the probe before step 0: meta `sd_probe.sd_off`), the engines are simulated
  without a drafter; the simulator has no guard of its own, so SD's later return (metrics.csv
  `drafter_kind`) is not predicted and shows as the per-step drafter predicted vs measured.
  Unlike `validate` (a capture: the traced draft lengths forced, alpha fitted to the traced
  acceptance, staleness 0), nothing is taken from the run's own acceptance or draft lengths: a
  training run's point is that the drafter and the bandit move, and predicting that is the job.

Measured per step: `rl_steps.parquet`'s rollout_s, train_s and sync_s, the sync with the wait for
the spot trainers to stop added (metrics.csv `stop_latency_s`: up to one drafter step or judging
forward; the simulator puts `phases.spot_stop_s` on its timeline as sync); the step from
`metrics.csv`'s step_s when the trace sits in a run directory (else their sum). The rest,
`other_s` (rewards, the checkpoint), has no counterpart in the simulator, which predicts 0.

A profile whose `fitted_on` names the run (`run:` and its directory's full path, as `fit_runs`
and a trace fit of RUN/trace record it) makes the prediction in-sample; `in_sample` says so and
the CLI labels it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.simulator import simulate
from workbench.calibrate.captures.trace_view import fitted_name
from workbench.calibrate.captures.run_dir import (
    TRACE_DIR,
    is_run_dir,
    run_label,
    run_policy,
    trace_metrics,
)
from workbench.calibrate.captures.runs import spot_wait
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.trace import Trace, TraceError, load_trace
from workbench.validate.trace_inputs import trace_replay, trace_workload

PHASES = ("rollout", "train", "sync", "other", "step")


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds of one RL step (or the mean over steps) per phase."""

    rollout_s: float
    train_s: float
    sync_s: float
    # the step beyond rollout + update + sync (measured only; the simulator has none)
    other_s: float
    step_s: float

    def get(self, phase: str) -> float:
        return float(getattr(self, f"{phase}_s"))


def mean_times(rows: list[PhaseTimes]) -> PhaseTimes:
    return PhaseTimes(*(float(np.mean([r.get(p) for r in rows])) for p in PHASES))


def error_pct(predicted: float, measured: float) -> float:
    """Signed: 100 * (predicted - measured) / measured (nan when nothing was measured)."""
    return 100.0 * (predicted - measured) / measured if measured > 0 else math.nan


@dataclass(frozen=True)
class RunStep:
    """One RL step, predicted and measured."""

    rl_step: int
    predicted: PhaseTimes
    measured: PhaseTimes
    accept_len_predicted: float
    accept_len_measured: float  # metrics.csv mean_accept_len (nan without it)
    drafter_predicted: str  # the drafter the simulated engines ran
    drafter_measured: str  # metrics.csv drafter_kind ('' without it)
    drafter_tokens_predicted: float  # tokens the simulated spot trainers put in
    drafter_steps_measured: float  # metrics.csv drafter_steps (nan without it)


@dataclass(frozen=True)
class RunPrediction:
    run: str
    profile: str
    policy: str
    in_sample: bool  # the profile was fitted on this run
    steps: list[RunStep]
    predicted: PhaseTimes  # means over steps
    measured: PhaseTimes
    # share of responses the simulator's shards put on the engine that served them
    shards_match: float

    @property
    def error_pct(self) -> float:
        """Mean step time, predicted vs measured, %."""
        return error_pct(self.predicted.step_s, self.measured.step_s)

    def phase_error_pct(self, phase: str) -> float:
        return error_pct(self.predicted.get(phase), self.measured.get(phase))

    def summary(self) -> dict[str, Any]:
        """The JSON line `tlt validate RUN_DIR` ends with."""
        return {
            "run": self.run,
            "predicted_step_s": round(self.predicted.step_s, 4),
            "measured_step_s": round(self.measured.step_s, 4),
            "error_pct": _round(self.error_pct),
            "in_sample": self.in_sample,
            "phases": {
                p: {
                    "predicted_s": round(self.predicted.get(p), 4),
                    "measured_s": round(self.measured.get(p), 4),
                    "error_pct": _round(self.phase_error_pct(p)),
                }
                for p in PHASES
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "profile": self.profile, "policy": self.policy,
                "shards_match": self.shards_match,
                "steps": [_jsonable(asdict(s)) for s in self.steps]}


def _round(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 3)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """NaN is not JSON: None instead, recursively."""
    return {k: _jsonable(v) if isinstance(v, dict)
            else (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in d.items()}


def is_in_sample(trace: Trace, profile: Profile) -> bool:
    """The profile was fitted on this run (its trace or the run itself: `fitted_name`)."""
    return fitted_name(trace) in set(profile.fitted_on)


def measured_times(trace: Trace) -> tuple[list[PhaseTimes], dict[str, list[Any]]]:
    """Per RL step, the measured phases; and metrics.csv's other columns the rows show (if any)."""
    rl = trace.rl_steps.sort_values("rl_step").reset_index(drop=True)
    metrics = trace_metrics(trace)
    n = len(rl)
    extra: dict[str, list[Any]] = {
        "mean_accept_len": [math.nan] * n,
        "drafter_kind": [""] * n,
        "drafter_steps": [math.nan] * n,
    }
    step_s = [float(r.rollout_s + r.train_s + r.sync_s) for r in rl.itertuples()]
    if metrics is not None:
        by_step = metrics.set_index("rl_step")
        for i, s in enumerate(rl["rl_step"].astype(int)):
            if s in by_step.index:
                row = by_step.loc[s]
                step_s[i] = float(row["step_s"])
                for c, values in extra.items():
                    if c in by_step.columns:
                        values[i] = row[c] if c != "drafter_kind" else str(row[c])
    # The wait for the spot trainers to stop is sync on both sides (the simulator's timeline puts it
    # there).
    if metrics is not None:
        by_rl = metrics.set_index("rl_step").reindex(rl["rl_step"].astype(int)).reset_index()
        wait = spot_wait(by_rl)
    else:
        wait = np.zeros(n)
    times = [PhaseTimes(float(r.rollout_s), float(r.train_s), float(r.sync_s) + wait[i],
                        max(0.0, step_s[i] - float(r.rollout_s + r.train_s + r.sync_s) - wait[i]),
                        step_s[i])
             for i, r in enumerate(rl.itertuples())]
    return times, extra


def run_start_table(trace: Trace, policy: Policy) -> tuple[int, ...] | None:
    """The draft length each schedule row of `policy` started at in the run (meta `start_tables`,
    for the policy's own drafter kind; None: the run started at the policy's schedule)."""
    table = (trace.meta.get("start_tables") or {}).get(policy.drafter.kind)
    if table is None or len(table) != len(policy.schedule):
        return None
    return tuple(int(k) for k in table)


def predict_run(trace: Trace, profile: Profile, policy: Policy | None = None,
                seed: int = 0) -> RunPrediction:
    """Re-simulate a `tlt train` run with `profile` (module docstring); `policy` replaces the one
    the run's meta records (a what-if on the same responses)."""
    if trace.rl_steps.empty or float(trace.rl_steps["train_s"].sum()) <= 0:
        raise TraceError(trace.path or trace.name, "rl_steps.parquet",
                         "no RL step trained (a capture, not a run)",
                         "give a `tlt train` run; `tlt validate TRACE_DIR` judges a capture's "
                         "rollout")
    wl = trace_workload(trace, profile)
    pol = policy if policy is not None else run_policy(trace)
    if policy is None and (trace.meta.get("sd_probe") or {}).get("sd_off"):
        pol = pol.without_sd()  # decided in set-up, before step 0 (module docstring)
    if pol.rollout.mode != "sync":
        raise TraceError(trace.path or trace.name, "policy.rollout.mode", f"'{pol.rollout.mode}'",
                         "a `tlt train` run is synchronous; predict it with a sync policy")
    replay, shards_match = trace_replay(trace, wl)
    start = run_start_table(trace, pol) if policy is None else None
    sim = simulate(wl, pol, profile, seed=seed, steps=wl.steps, replay=replay, start=start)
    measured, extra = measured_times(trace)
    if len(measured) != len(sim.steps):
        raise TraceError(
            trace.path or trace.name,
            "rl_steps.parquet",
            f"{len(measured)} RL steps for {len(sim.steps)} in requests",
            "the trace is incomplete; use the run's own trace/ directory",
        )
    rows = []
    for i, m in enumerate(sim.steps):
        pred = PhaseTimes(m.rollout_time_s, m.train_time_s, m.sync_time_s, 0.0, m.step_time_s)
        rows.append(RunStep(m.rl_step, pred, measured[i], m.mean_accept_len,
                            float(extra["mean_accept_len"][i]),
                            m.drafter_kind, extra["drafter_kind"][i], m.drafter_trained_tokens,
                            float(extra["drafter_steps"][i])))
    return RunPrediction(run_label(trace), profile.name, pol.name, is_in_sample(trace, profile),
                         rows, mean_times([r.predicted for r in rows]),
                         mean_times([r.measured for r in rows]), shards_match)


def predict_run_dir(
    run_dir: str | Path, profile: Profile, policy: Policy | None = None, seed: int = 0
) -> RunPrediction:
    """`predict_run` on a `tlt train --out` directory (its trace/ beside metrics.csv)."""
    if not is_run_dir(run_dir):
        raise TraceError(run_dir, "<directory>",
                         "not a run directory (needs metrics.csv and trace/)",
                         "give a directory `tlt train --out` wrote")
    return predict_run(load_trace(Path(run_dir) / TRACE_DIR), profile, policy, seed)
