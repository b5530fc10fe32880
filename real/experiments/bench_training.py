"""`tlt bench real`: `baseline` and a TLT policy trained from the same model and seed, interleaved.

Both runs are open at once (their own Ray workers and engines); their RL steps alternate,
baseline first, so slow drifts of the machine hit both alike. The step and rollout speedups
are ratios of mean times over all steps; rewards are the mean over all steps' samples.

Besides the speedups it says what limits them, from the runs' records and traces:
- `phases`: mean seconds per RL step in rollout, update and sync, and the rollout's share of the
  step (the paper's baseline spends ~85% of a step in rollout);
- `buckets`: per batch bucket, the share of the baseline's decoding time spent there and the TLT
  engines' speed there relative to the baseline's (tokens per sequence per second over the
  steps that decoded at that batch, prefill steps left out), with the draft lengths they ran;
- `lengths`: the baseline's response-length shape (p50, p90, max, share cut at the cap).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from real.run.coordinator import RunConfig, TrainingRun
from real.run.records import StepRecord
from workbench.contracts.trace import load_trace

# Batch buckets of the per-bucket figures (upper edges, inclusive).
BUCKET_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class TrainingBenchSummary:
    """The comparison (`tlt bench real` prints it as its last line of JSON, in this order)."""

    speedup_step: float  # mean step time, baseline / tlt
    speedup_rollout: float  # mean rollout time, baseline / tlt
    mean_accept_len: float  # tlt's, over its steps
    reward_baseline: float
    reward_tlt: float
    rollout_share_baseline: float  # the baseline's mean rollout time / its mean step time
    rollout_share_tlt: float
    # Median over RL steps of the paired ratio baseline / tlt (step i of both runs draws the same
    # prompts and runs back to back): robust to the outlier steps of a shared machine, which the
    # ratio of means is not.
    speedup_step_median: float = math.nan
    speedup_rollout_median: float = math.nan


@dataclass
class PhaseTimes:
    """One run's mean seconds per RL step, by phase."""

    step_s: float
    rollout_s: float
    train_s: float
    sync_s: float

    @property
    def rollout_share(self) -> float:
        return self.rollout_s / self.step_s


@dataclass
class BucketRow:
    """One batch bucket: where the baseline's decoding time went and what SD did there."""

    bucket: str  # batch sizes, e.g. "3-4"
    baseline_time_share: float  # share of the baseline's decode step time at these batch sizes
    baseline_rate: float  # tokens per sequence per second
    tlt_rate: float
    speedup: float  # tlt_rate / baseline_rate
    tlt_draft_lens: str  # the draft lengths the TLT engines verified there, by share of steps


@dataclass
class LengthShape:
    """Response lengths of a run, in tokens."""

    p50: float
    p90: float
    max: int
    clip_ratio: float  # share of responses cut at the cap


@dataclass
class TrainingBench:
    summary: TrainingBenchSummary
    steps: dict[str, list[StepRecord]]  # policy -> its run's step records
    phases: dict[str, PhaseTimes] = field(default_factory=dict)
    buckets: list[BucketRow] = field(default_factory=list)
    lengths: dict[str, LengthShape] = field(default_factory=dict)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def phase_times(metrics: list[StepRecord]) -> PhaseTimes:
    return PhaseTimes(_mean([m.step_s for m in metrics]), _mean([m.rollout_s for m in metrics]),
                      _mean([m.train_s for m in metrics]), _mean([m.sync_s for m in metrics]))


def paired_median(baseline: list[float], tlt: list[float]) -> float:
    """The median of the per-step ratios baseline / tlt (steps paired by index)."""
    ratios = [b / t for b, t in zip(baseline, tlt) if t > 0]
    return statistics.median(ratios) if ratios else math.nan


def bench_real(configs: list[RunConfig], log: Callable[[str], None] | None = print,
               on_step: Callable[[str, StepRecord], None] | None = None) -> TrainingBench:
    """Train every config (the first is the reference, e.g. `baseline`; the second the TLT policy)
    for `configs[0].steps` steps, their steps interleaved; each run in its own `out`."""
    if len(configs) != 2 or len({c.policy.name for c in configs}) != 2:
        raise ValueError("bench_real compares two runs of two differently named policies")
    runs: dict[str, TrainingRun] = {}
    try:
        for cfg in configs:
            runs[cfg.policy.name] = TrainingRun(cfg, log).open()
        for _ in range(configs[0].steps):
            for name, run in runs.items():
                rec = run.step()
                if on_step is not None:
                    on_step(name, rec)
        for run in runs.values():
            run.write_outputs()
    finally:
        for run in runs.values():
            run.close()
    names = [c.policy.name for c in configs]
    b, t = (runs[p].metrics for p in names)
    pb, pt = phase_times(b), phase_times(t)
    summary = TrainingBenchSummary(
        speedup_step=pb.step_s / pt.step_s, speedup_rollout=pb.rollout_s / pt.rollout_s,
        mean_accept_len=_mean([m.mean_accept_len for m in t]),
        reward_baseline=_mean([m.reward for m in b]), reward_tlt=_mean([m.reward for m in t]),
        rollout_share_baseline=pb.rollout_share, rollout_share_tlt=pt.rollout_share,
        speedup_step_median=paired_median([m.step_s for m in b], [m.step_s for m in t]),
        speedup_rollout_median=paired_median([m.rollout_s for m in b], [m.rollout_s for m in t]))
    traces = {p: load_trace(runs[p].out / "trace") for p in names}
    return TrainingBench(summary, {p: runs[p].metrics for p in names}, phases={names[0]: pb, names[1]: pt},
                         buckets=bucket_rows(traces[names[0]].steps, traces[names[1]].steps),
                         lengths={p: length_shape(traces[p].requests, configs[0].max_tokens) for p in names})


def _bucketed(steps: pd.DataFrame) -> pd.DataFrame:
    """Decode-only engine steps with their bucket label and tokens per sequence."""
    dec = steps[(steps["prefill_requests"] == 0) & (steps["decode_requests"] > 0)].copy()
    labels = [str(e) if lo == e else f"{lo}-{e}" for lo, e in zip((1,) + tuple(x + 1 for x in BUCKET_EDGES), BUCKET_EDGES)]
    dec["bucket"] = pd.cut(dec["batch_size"], (0,) + BUCKET_EDGES, labels=labels)
    dec["per_seq"] = dec["new_tokens"] / dec["decode_requests"]
    return dec


def bucket_rows(baseline_steps: pd.DataFrame, tlt_steps: pd.DataFrame) -> list[BucketRow]:
    """Per batch bucket: the baseline's share of decode time there and both runs' speed there."""
    base, tlt = _bucketed(baseline_steps), _bucketed(tlt_steps)
    total = base["wall_s"].sum()
    rows = []
    for label in base["bucket"].cat.categories:
        b, t = base[base["bucket"] == label], tlt[tlt["bucket"] == label]
        if b.empty and t.empty:
            continue
        rate_b = b["per_seq"].sum() / b["wall_s"].sum() if len(b) else math.nan
        rate_t = t["per_seq"].sum() / t["wall_s"].sum() if len(t) else math.nan
        ks = t["draft_len"].value_counts(normalize=True).sort_index()
        rows.append(BucketRow(str(label), float(b["wall_s"].sum() / total) if total else math.nan, float(rate_b),
                              float(rate_t), float(rate_t / rate_b) if rate_b else math.nan,
                              " ".join(f"K{k}:{v:.0%}" for k, v in ks.items() if v >= 0.005)))
    return rows


def length_shape(requests: pd.DataFrame, max_tokens: int) -> LengthShape:
    r = requests["response_tokens"]
    clipped = (requests["finish_reason"] == "length") | (r >= max_tokens)
    return LengthShape(float(r.quantile(0.5)), float(r.quantile(0.9)), int(r.max()), float(clipped.mean()))


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
