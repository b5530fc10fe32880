"""Predict `tlt bench real`: each policy's run re-simulated, speedups over the baseline against
measured.

`predict_bench(run_dirs, profile, baseline)` predicts every policy's run from its own responses
(`workbench.validate.run_prediction.predict_run`: the run's lengths per RL step, its meta's
workload and policy) and compares speedups = baseline mean / policy mean, step and rollout,
predicted and measured. The runs of a bench draw the same prompts per step but sample their own
responses, so each policy is predicted on the lengths it really produced, as its measured time was.

prediction_error_pct = 100 * (predicted speedup - measured speedup) / measured speedup.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.calibrate.captures.run_dir import load_run
from workbench.contracts.profile import Profile
from workbench.validate.run_prediction import RunPrediction, error_pct, predict_run


@dataclass(frozen=True)
class PolicyPrediction:
    name: str
    measured_step_s: float
    predicted_step_s: float
    measured_speedup_step: float
    predicted_speedup_step: float
    prediction_error_pct: float  # of the step speedup
    measured_rollout_s: float
    predicted_rollout_s: float
    measured_speedup_rollout: float
    predicted_speedup_rollout: float
    rollout_prediction_error_pct: float
    in_sample: bool  # the profile was fitted on this policy's run


@dataclass(frozen=True)
class BenchPrediction:
    profile: str
    baseline: str
    rows: list[PolicyPrediction]
    runs: list[RunPrediction]  # each policy's run in detail, in the rows' order

    def to_json(self) -> dict[str, Any]:
        """{"policies": {name: {...}}} with NaN as null; plus the profile and the baseline's
        name."""
        return {"profile": self.profile, "baseline": self.baseline,
                "policies": {r.name: {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                      for k, v in asdict(r).items() if k != "name"}
                             for r in self.rows}}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def predict_bench(run_dirs: dict[str, Path], profile: Profile, baseline: str,
                  seed: int = 0) -> BenchPrediction:
    """`run_dirs`: policy name -> its `tlt train` run directory (trace/ and metrics.csv); `baseline`
    names the one speedups are over."""
    if baseline not in run_dirs:
        raise ValueError(f"predict_bench: baseline '{baseline}' is not among the runs "
                         f"({', '.join(run_dirs)}); name one of them as the baseline")
    preds = {name: predict_run(load_run(d).trace, profile,
                               seed=seed) for name, d in run_dirs.items()}
    base = preds[baseline]
    rows = []
    for name, p in preds.items():
        ms = _ratio(base.measured.step_s, p.measured.step_s)
        ps = _ratio(base.predicted.step_s, p.predicted.step_s)
        mr = _ratio(base.measured.rollout_s, p.measured.rollout_s)
        pr = _ratio(base.predicted.rollout_s, p.predicted.rollout_s)
        rows.append(PolicyPrediction(name, p.measured.step_s, p.predicted.step_s, ms, ps,
                                     error_pct(ps, ms),
                                     p.measured.rollout_s, p.predicted.rollout_s, mr, pr,
                                     error_pct(pr, mr), p.in_sample))
    return BenchPrediction(profile.name, baseline, rows, list(preds.values()))
