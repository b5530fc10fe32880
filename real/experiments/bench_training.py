"""`tlt bench real`: `baseline` and `tlt` trained from the same model and seed, interleaved.

Both runs are open at once (their own Ray workers and engines); their RL steps alternate,
baseline first, so slow drifts of the machine hit both alike. The step and rollout speedups
are ratios of mean times over all steps; rewards are the mean over all steps' samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from real.run.coordinator import RunConfig, TrainingRun
from real.run.records import StepRecord
from workbench.contracts.policy import load_policy
from workbench.contracts.trace import load_trace


@dataclass
class TrainingBenchSummary:
    """The comparison (`tlt bench real` prints it as its last line of JSON, in this order)."""

    speedup_step: float  # mean step time, baseline / tlt
    speedup_rollout: float  # mean rollout time, baseline / tlt
    mean_accept_len: float  # tlt's, over its steps
    reward_baseline: float
    reward_tlt: float


@dataclass
class TrainingBench:
    summary: TrainingBenchSummary
    steps: dict[str, list[StepRecord]]  # policy -> its runs' step records


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def bench_real(base: RunConfig, policies: tuple[str, str] = ("baseline", "tlt-cold"),
               log: Callable[[str], None] | None = print,
               on_step: Callable[[str, StepRecord], None] | None = None) -> TrainingBench:
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
    summary = TrainingBenchSummary(
        speedup_step=_mean([m.step_s for m in b]) / _mean([m.step_s for m in t]),
        speedup_rollout=_mean([m.rollout_s for m in b]) / _mean([m.rollout_s for m in t]),
        mean_accept_len=_mean([m.mean_accept_len for m in t]),
        reward_baseline=_mean([m.reward for m in b]),
        reward_tlt=_mean([m.reward for m in t]),
    )
    return TrainingBench(summary, {p: runs[p].metrics for p in policies})


def spot_interference(trace_dir: str | Path) -> pd.DataFrame:
    """Median engine-step time by batch size, split by whether another worker was spot-training
    the drafter at the time: how much spot training slows the rollout it shares a machine with."""
    tl = load_trace(trace_dir).timeline
    if tl is None:
        raise ValueError(f"{trace_dir}: no timeline.parquet (written by `tlt train`)")
    dec = tl[tl["state"].isin(["decode", "decode_sd"])].copy()
    spot = tl[tl["state"] == "drafter_train"]
    dec["ms"] = (dec["end_s"] - dec["start_s"]) * 1e3

    def during(row) -> bool:
        o = spot[(spot["step"] == row["step"]) & (spot["worker"] != row["worker"])]
        return bool(((o["start_s"] < row["end_s"]) & (o["end_s"] > row["start_s"])).any())

    dec["other_training"] = dec.apply(during, axis=1) if len(spot) else False
    dec["batch"] = pd.cut(dec["batch"], [0, 1, 2, 4, 8, 16, 32, 64, 1 << 20],
                          labels=["1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", ">64"])
    g = dec.groupby(["batch", "other_training"], observed=True)["ms"].agg(["count", "median"]).unstack("other_training")
    return g
