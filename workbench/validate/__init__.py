"""Predicted against measured: the simulator's figures held up to what real runs recorded.

- `capture.py`: a capture (`tlt capture`) re-simulated with a profile (`tlt validate`).
- `trace_inputs.py`: the simulated run a capture describes (workload, policy, replayed lengths).
- `run_prediction.py`: a whole `tlt train` run re-simulated, RL step by RL step.
- `bench_prediction.py`: `tlt bench real`'s speedups over the baseline, predicted against measured.
- `self_calibration.py`: fit a profile on some captures, validate it on the held-out rest.
- `capture_plan.py`: the self-calibration's captures in run order, and what runs them (`Machine`).
- `step_buckets.py`: measured against predicted step latency per drafter kind and batch bucket.
- `waste.py`: where a rollout's worker-time goes (bubble, tail, spot training), from any timeline.
"""
