"""`tlt bench real`: `baseline` and `tlt` trained from the same model and seed, interleaved.

Both runs are open at once (their own Ray workers and engines); their RL steps alternate,
baseline first, so slow drifts of the machine hit both alike. The step and rollout speedups
are ratios of mean times over all steps; rewards are the mean over all steps' samples.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from real.train import RunConfig, StepRecord, TrainingRun
from workbench.policy import load_policy


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def bench_real(base: RunConfig, policies: tuple[str, str] = ("baseline", "tlt"),
               log: Callable[[str], None] | None = print,
               on_step: Callable[[str, StepRecord], None] | None = None) -> dict[str, Any]:
    runs: dict[str, TrainingRun] = {}
    try:
        for name in policies:
            cfg = replace(base, policy=load_policy(name), out=Path(base.out) / name)
            runs[name] = TrainingRun(cfg, log).open()
        for _ in range(base.steps):
            for name, run in runs.items():
                rec = run.step()
                if on_step is not None:
                    on_step(name, rec)
        for run in runs.values():
            run.write_outputs()
    finally:
        for run in runs.values():
            run.close()
    b, t = (runs[p].metrics for p in policies)
    summary = {
        "speedup_step": _mean([m.step_s for m in b]) / _mean([m.step_s for m in t]),
        "speedup_rollout": _mean([m.rollout_s for m in b]) / _mean([m.rollout_s for m in t]),
        "mean_accept_len": _mean([m.mean_accept_len for m in t]),
        "reward_baseline": _mean([m.reward for m in b]),
        "reward_tlt": _mean([m.reward for m in t]),
    }
    return {"summary": summary, "steps": {p: runs[p].metrics for p in policies}}
