"""How often What-if's default 90% intervals (3 steps of one seed) hold the answer of ten times as
many simulated steps (the same workload, profile and policies over seeds 0-9, pooled): a check of
the intervals' sampling part, run by hand (docs/results.md, "Every figure with its interval"):

    PYTHONPATH=$PWD .venv/bin/python tests/workbench/interval_coverage.py
"""
import numpy as np
from sim.simulator import simulate
from workbench.compare.intervals import policy_intervals, run_work
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload

wl = load_workload("polytrace-dapo-qwen2.5-32b")
prof = load_profile(wl.profile)
pols = ["baseline", "tlt"]
runs = {(p, s): simulate(wl, load_policy(p), prof, seed=s, steps=3)
        for p in pols for s in range(10)}
steps = {p: np.concatenate([[m.step_time_s for m in runs[(p, s)].steps] for s in range(10)])
         for p in pols}
truth_speed = steps["baseline"].mean() / steps["tlt"].mean()
truth_step = steps["tlt"].mean()
inside_speed = inside_step = 0
for s in range(10):
    iv = policy_intervals([(p, [run_work(runs[(p, s)], prof, wl.workers)]) for p in pols], prof, s)
    t = iv[1]
    inside_speed += t.speedup.low <= truth_speed <= t.speedup.high
    inside_step += t.step_s.low <= truth_step <= t.step_s.high
    print(s, t.speedup.text(), t.step_s.text(" s", "{:,.1f}"))
print(f"pooled 30 steps: tlt {truth_speed:.3f}x, step {truth_step:.1f} s")
print(f"speedup intervals holding it: {inside_speed}/10; step-time intervals: {inside_step}/10")
