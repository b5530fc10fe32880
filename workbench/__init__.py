"""TLT Workbench: contracts, calibration, tuning and the `tlt` command line.

The layers (docs/design.md; pyproject.toml's import-linter contracts enforce them):

- `contracts`: L0, what every layer imports (Policy, Workload, Profile, Bandit, Trace, files).
- `calibrate`: L2, traces, runs and GPU databases to a Profile.
- `workloads`: L2, response lengths to a Workload's length model.
- `runlog`: L2, a training log to a profile and a workload.
- `validate`: L2, the simulator against measurements, and where worker-time went.
- `compare`: L2, alternatives in the simulator: policies, bandits, SD by batch size.
- `tune`: L2, the Optuna tuner over the simulator.
- `paper`: L2, the TLT paper reproduced.
- `project`: L2, a whole run in days, GPU-hours, cost and energy.
- `plan`: L2, the cluster shape for a budget or a deadline.
- `schedule`: L2, the draft schedule a profile predicts best.
- `deploy`: L2, a policy for other stacks, and sweeps on Ray.
- `report`: L2, plain-text tables and plots.
- `cli`: L3, the `tlt` command line; `ui`: L3, the Streamlit pages.
"""
