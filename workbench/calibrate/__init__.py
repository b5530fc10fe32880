"""Calibration: fit a Profile (and a LengthModel) to measurements, grouped by where they come from.

- `captures/`: what a real engine recorded here or on your machine: `tlt capture` traces, whole
  `tlt train` runs and `python -m real.profiler` operator timings. `calibrate(traces, base)`
  (`captures/report.py`) fits, in exactly the functional forms the simulator uses (`sim/costs.py`,
  `sim/acceptance.py`, `sim/lengths.py`): the step frame (`trace_view`), the decode and drafter
  costs (`costs`, solved by `robust`), per-position acceptance (`acceptance`,
  `position_acceptance`), update and sync (`phases`), the machine's drift (`drift`,
  `probe_drift`), whole runs (`runs`, `run_dir`) and operator timings (`operators`).
- `database/`: NVIDIA's measured operator database, aiconfigurator-core: the package as this
  workbench asks it (`aiconfigurator`), a Profile for any (model, GPU, TP, framework)
  (`profile.derive_profile`), the shipped ones and caches (`catalog`), how far its attention rows
  reach (`attention_coverage`), what it prices of a config.json and the stand-in for an
  architecture it lacks (`config_support`), mixture-of-experts engines (`experts`), and its
  profiles against NVIDIA's end-to-end MoE serving runs (`silicon_check`).
- `published/`: published figures as measurements: the TLT paper's microbenchmarks
  (`microbenchmarks`), carried to other shapes (`shapes`); SD's speedup by batch (`sd_series`,
  `sd_batch`); the database's profiles against published tables (`database_check`).
- `gpu_check/`: a `make gpu-check` file (`check_file`) beside the database and the paper
  (`comparison`, `throughput`).
- `sweeps/`: an engine sweep (`tlt engine-sweep`, real/sweep/) -> a profile of that engine: the
  declared split (`split`), the base it is fitted over (`base`), the drift taken out by the
  sweep's own pairing (`paired`), the fit and every cell predicted (`fit`), the report (`report`).

`tlt calibrate --model` (plan, capture, normalise, fit, validate on held-out captures) runs in
`workbench/validate/self_calibration.py`: it validates, and the validation imports this package.
The fit error stored in a profile (`fit_error_pct`) is the median absolute per-step latency error
on held-out steps (5-fold cross-validation; runs of consecutive steps are held out together).
"""

from workbench.calibrate.captures.acceptance import (
    AcceptanceFit,
    fit_acceptance,
    per_position_acceptance,
)
from workbench.calibrate.captures.costs import (
    CV_FOLDS,
    CostFit,
    ParamFit,
    TraceFit,
    features,
    fit_costs,
    predict_steps,
)
from workbench.calibrate.captures.phases import fit_phases
from workbench.calibrate.captures.report import Calibration, calibrate, trace_workload_spec
from workbench.calibrate.captures.trace_view import (
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
