"""Calibration: fit a Profile (and a LengthModel) to captured traces.

`calibrate(traces, base)` fits, in exactly the functional forms the simulator
uses (`sim/costs.py`, `sim/acceptance.py`, `sim/lengths.py`), one job per module:

- `trace_view`: the traces as the fit sees them: the drafter each engine ran,
  each step's draft length, and one frame of every engine step (`step_frame`);
- `costs`: the decode and drafter cost over every engine step of every trace
  (`fit_costs`: a robust non-negative fit with a 1-D search over the
  saturation knee; parameters the traces cannot identify keep the base
  profile's value, and each `ParamFit` says which were fitted); `robust`: its solver;
- `acceptance`: per-position acceptance per drafter kind (`fit_acceptance`),
  then (alpha, shape) of r_i = alpha ** (i ** shape);
- the length model: `workbench/workloads/tobit.py` (`fit_tobit`), which `calibrate()` calls;
- `phases`: policy-update and weight-sync costs (`fit_phases`);
- `operators`: a Profile from `python -m real.profiler` measurements (`fit_operators`);
- `measured_gpu`: a Profile for any (model, GPU, TP, framework) from NVIDIA's measured operator
  database, aiconfigurator-core (`derive_profile`); `gpu_database`: that database's GPUs, engine
  and grid of steps; `gpu_catalog`: the shipped ones, the model
  list, the caches; `gpu_validation`: those profiles against the TLT paper's Tables E and C
  (imported by their module names, not re-exported here);
- `report`: `calibrate()` itself, the `Calibration` it returns and its
  report (`Calibration.report()`, the `.calibration.json` file);
- `drift`: a trace's times rescaled to the machine's median speed (the factor `tlt calibrate
  --model` records in each capture's meta; `apply_recorded` applies it once);
- `tlt calibrate --model` (plan, capture, normalise, fit, validate on held-out captures) runs in
  `workbench/validate/self_calibration.py` and `workbench/validate/capture_plan.py`: it
  validates, and the validation imports this package;
- `runs`: whole `tlt train` runs -> update, sync, spot-trainer and drafter-learning parameters
  (`fit_runs`, `tlt calibrate --run`); `run_dir`: a run directory as they read it (`load_run`);
- `published`: published microbenchmarks -> GPU engine factors and tree acceptance
  (`fit_published`), carried to other models and TP degrees by `shapes`.

The fit error stored in the profile (`fit_error_pct`) is the median absolute
per-step latency error on held-out steps (5-fold cross-validation; runs of
consecutive steps are held out together).
"""

from workbench.calibrate.acceptance import (
    AcceptanceFit,
    fit_acceptance,
    per_position_acceptance,
)
from workbench.calibrate.costs import (
    CV_FOLDS,
    CostFit,
    ParamFit,
    TraceFit,
    features,
    fit_costs,
    predict_steps,
)
from workbench.calibrate.phases import fit_phases
from workbench.calibrate.report import Calibration, calibrate, trace_workload_spec
from workbench.calibrate.trace_view import (
    WARMUP_STEPS,
    step_draft_len,
    step_frame,
    trace_drafter_kind,
)

__all__ = [
    "CV_FOLDS", "WARMUP_STEPS", "AcceptanceFit", "Calibration", "CostFit", "ParamFit", "TraceFit",
    "calibrate", "features", "fit_acceptance", "fit_costs", "fit_phases", "per_position_acceptance",
    "predict_steps", "step_draft_len", "step_frame", "trace_drafter_kind", "trace_workload_spec",
]
