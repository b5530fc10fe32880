"""`tlt bench real`: N policies (the first the reference, e.g. `baseline`) trained from the same
model and seed, interleaved.

All runs are open at once (each its own Ray workers and engines); their RL steps go round-robin,
reference first, so slow drifts of the machine hit all alike. The step and rollout speedups of a
policy are ratios of the reference's mean times over its own, over all steps, and the median of
the paired per-step ratios; rewards are the mean over all steps' samples. The paper's
configuration (`paper_policy`: the first non-reference policy named tlt-vllm, tlt or tlt-cold,
else the second policy) is the one `summary` (the JSON's original keys) describes.

Besides the speedups it says what limits them, from the runs' records and traces:
- `phases`: mean seconds per RL step in rollout, update and sync, and the rollout's share of the
  step (the paper's baseline spends ~85% of a step in rollout);
- `buckets`: per non-reference policy and batch bucket, the share of the reference's decoding time
  spent there and the policy's engines' speed there relative to the reference's (tokens per
  sequence per second over the steps that decoded at that batch, prefill steps left out), with
  the draft lengths they ran;
- `lengths`: each run's response-length shape (p50, p90, max, share cut at the cap).

Ray: a local Ray started here gets one scheduling slot per worker of all runs (the coordinator's
own `ray.init` would size it for two runs), since every run's workers stay alive at once.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from real.run.coordinator import RunConfig, TrainingRun
from real.run.pool import start_local_ray
from real.run.records import StepRecord
from workbench.contracts.trace import load_trace
from workbench.contracts.policy import DrafterKind

# Batch buckets of the per-bucket figures (upper edges, inclusive).
BUCKET_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# The paper's configuration among a bench's policies, by preference of name (`paper_policy`).
PAPER_NAMES = ("tlt-vllm", "tlt", "tlt-cold")


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
class PolicyResult:
    """One policy's run against the reference's (the reference itself: speedups 1)."""

    step_s: float  # mean seconds per RL step
    rollout_s: float
    speedup_step: float  # reference mean / this mean
    speedup_rollout: float
    speedup_step_median: float  # median of the paired per-step ratios reference / this
    speedup_rollout_median: float
    reward: float
    mean_accept_len: float
    rollout_share: float
    # SD's decode speed over a plain engine's, as the run's SD guard estimated it from its own
    # steps (real/run/sd_pricing.py; mean over the steps it judged, NaN: none), and the steps run
    # without a drafter (all of a baseline's): the estimate beside the speedups measured against
    # the reference checks it.
    sd_speedup_est: float = math.nan
    sd_off_steps: int = 0
    # The guard's verdict before step 0 (its probe; NaN: not probed), and the seconds the run's
    # set-up took (engines, the plain engine, the probe and any restart it caused): set-up is in
    # no step's time, so a policy that sets up longer says so here.
    sd_probe_speedup: float = math.nan
    setup_s: float = math.nan


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
    # the draft length that decoded fastest there (at least MIN_ARM_STEPS steps; -1: none)
    best_draft_len: int = -1
    best_speedup: float = math.nan  # its rate over the baseline's


@dataclass
class LengthShape:
    """Response lengths of a run, in tokens."""

    p50: float
    p90: float
    max: int
    clip_ratio: float  # share of responses cut at the cap


@dataclass
class TrainingBench:
    summary: TrainingBenchSummary  # the reference against the paper's configuration
    steps: dict[str, list[StepRecord]]  # policy -> its run's step records, in the bench's order
    reference: str = ""
    paper_policy: str = ""
    policies: dict[str, PolicyResult] = field(default_factory=dict)
    phases: dict[str, PhaseTimes] = field(default_factory=dict)
    buckets: dict[str, list[BucketRow]] = field(default_factory=dict)  # per non-reference policy
    lengths: dict[str, LengthShape] = field(default_factory=dict)
    runs: dict[str, Path] = field(default_factory=dict)  # policy -> its run directory


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


def paper_policy(names: list[str]) -> str:
    """The paper's configuration among a bench's policies (`names[0]` is the reference): the first
    other one named in PAPER_NAMES, else the second."""
    if len(names) < 2:
        raise ValueError(f"a bench needs a reference and at least one policy (got {names})")
    return next((n for n in names[1:] if n in PAPER_NAMES), names[1])


def policy_result(ref: list[StepRecord], run: list[StepRecord]) -> PolicyResult:
    """One run's figures against the reference run's (steps paired by index)."""
    pr, pp = phase_times(ref), phase_times(run)
    return PolicyResult(
        step_s=pp.step_s,
        rollout_s=pp.rollout_s,
        speedup_step=pr.step_s / pp.step_s,
        speedup_rollout=pr.rollout_s / pp.rollout_s,
        speedup_step_median=paired_median([m.step_s for m in ref], [m.step_s for m in run]),
        speedup_rollout_median=paired_median(
            [m.rollout_s for m in ref], [m.rollout_s for m in run]
        ),
        reward=_mean([m.reward for m in run]),
        mean_accept_len=_mean([m.mean_accept_len for m in run]),
        rollout_share=pp.rollout_share,
        sd_speedup_est=_mean([m.sd_speedup for m in run if not math.isnan(m.sd_speedup)]),
        sd_off_steps=sum(m.drafter_kind == DrafterKind.NONE for m in run),
    )


def summarize(
    steps: dict[str, list[StepRecord]],
) -> tuple[str, dict[str, PolicyResult], TrainingBenchSummary]:
    """The paper's configuration, every policy's result and the summary, from the runs' records
    (`steps` in the bench's order, the first the reference)."""
    names = list(steps)
    paper = paper_policy(names)
    results = {n: policy_result(steps[names[0]], steps[n]) for n in names}
    b, t = results[names[0]], results[paper]
    summary = TrainingBenchSummary(
        speedup_step=t.speedup_step,
        speedup_rollout=t.speedup_rollout,
        mean_accept_len=t.mean_accept_len,
        reward_baseline=b.reward,
        reward_tlt=t.reward,
        rollout_share_baseline=b.rollout_share,
        rollout_share_tlt=t.rollout_share,
        speedup_step_median=t.speedup_step_median,
        speedup_rollout_median=t.speedup_rollout_median,
    )
    return paper, results, summary


def _init_ray(configs: list[RunConfig]) -> None:
    """A local Ray with a slot per worker of every run (all stay alive at once), unless one is
    up."""
    import ray

    if not ray.is_initialized() and not any(c.address for c in configs):
        start_local_ray(max(os.cpu_count() or 1, sum(c.workers for c in configs)))


def bench_real(configs: list[RunConfig], log: Callable[[str], None] | None = print,
               on_step: Callable[[str, StepRecord], None] | None = None) -> TrainingBench:
    """Train every config (the first is the reference, e.g. `baseline`) for `configs[0].steps`
    steps, their steps interleaved round-robin; each run in its own `out`."""
    names = [c.policy.name for c in configs]
    if len(configs) < 2 or len(set(names)) != len(names):
        raise ValueError(
            f"bench_real compares two or more runs of differently named policies (got {names})"
        )
    if len({Path(c.out).resolve() for c in configs}) != len(configs):
        raise ValueError("bench_real: every run needs its own out directory")
    runs: dict[str, TrainingRun] = {}
    try:
        _init_ray(configs)
        for cfg in configs:
            runs[cfg.policy.name] = TrainingRun(cfg, log).open()
        for _ in range(configs[0].steps):
            for name, run in runs.items():
                rec = run.step()
                if on_step is not None:
                    on_step(name, rec)
        for run in runs.values():
            run.outputs.write()
    finally:
        for run in runs.values():
            run.close()
    steps = {p: runs[p].metrics for p in names}
    paper, results, summary = summarize(steps)
    for p, run in runs.items():
        probe = run.outputs.probe
        results[p] = replace(results[p], setup_s=run.outputs.setup_s,
                             sd_probe_speedup=probe.speedup if probe else math.nan)
    traces = {p: load_trace(runs[p].out / "trace") for p in names}
    ref = traces[names[0]].steps
    return TrainingBench(
        summary,
        steps,
        reference=names[0],
        paper_policy=paper,
        policies=results,
        phases={p: phase_times(steps[p]) for p in names},
        buckets={p: bucket_rows(ref, traces[p].steps) for p in names[1:]},
        lengths={p: length_shape(traces[p].requests, configs[0].max_tokens) for p in names},
        runs={p: runs[p].out for p in names},
    )


def batch_bucket(batch: pd.Series) -> pd.Series:
    """Each batch size's bucket label ("1", "2", "3-4", ... up to BUCKET_EDGES' last)."""
    labels = [
        str(e) if lo == e else f"{lo}-{e}"
        for lo, e in zip((1,) + tuple(x + 1 for x in BUCKET_EDGES), BUCKET_EDGES)
    ]
    return pd.cut(batch, (0,) + BUCKET_EDGES, labels=labels)


def _bucketed(steps: pd.DataFrame) -> pd.DataFrame:
    """Decode-only engine steps with their bucket label and tokens per sequence."""
    dec = steps[(steps["prefill_requests"] == 0) & (steps["decode_requests"] > 0)].copy()
    dec["bucket"] = batch_bucket(dec["batch_size"])
    dec["per_seq"] = dec["new_tokens"] / dec["decode_requests"]
    return dec


# Fewest steps a draft length needs in a bucket to be that bucket's best (a handful is noise).
MIN_ARM_STEPS = 20


def bucket_rows(baseline_steps: pd.DataFrame, tlt_steps: pd.DataFrame) -> list[BucketRow]:
    """Per batch bucket: the baseline's share of decode time there, both runs' speed there, and
    the draft length that decoded fastest there. That best is read off the run's own steps, whose
    contexts differ between draft lengths (the bandit moves with the tail), so it bounds roughly
    what choosing draft lengths better would give."""
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
        arms = {int(k): g["per_seq"].sum() / g["wall_s"].sum() for k,
                g in t.groupby("draft_len") if len(g) >= MIN_ARM_STEPS}
        best_k = max(arms, key=arms.get) if arms and rate_b > 0 else -1
        rows.append(
            BucketRow(
                str(label),
                float(b["wall_s"].sum() / total) if total else math.nan,
                float(rate_b),
                float(rate_t),
                float(rate_t / rate_b) if rate_b else math.nan,
                " ".join(f"K{k}:{v:.0%}" for k, v in ks.items() if v >= 0.005),
                best_k,
                float(arms[best_k] / rate_b) if best_k >= 0 else math.nan,
            )
        )
    return rows


def decode_speedup(rows: list[BucketRow], best: bool = False) -> float:
    """SD's speedup of the baseline's whole decode: each bucket's speedup weighted by the
    baseline's time there (the time its decoding would take at those speeds); `best`: at each
    bucket's best draft length where it has one. NaN: no bucket both runs reached."""
    parts = [
        (r.baseline_time_share, r.best_speedup if best and r.best_draft_len >= 0 else r.speedup)
        for r in rows
    ]
    parts = [(w, x) for w, x in parts if w > 0 and x > 0]
    return sum(w for w, _ in parts) / sum(w / x for w, x in parts) if parts else math.nan


def length_shape(requests: pd.DataFrame, max_tokens: int) -> LengthShape:
    r = requests["response_tokens"]
    clipped = (requests["finish_reason"] == "length") | (r >= max_tokens)
    return LengthShape(
        float(r.quantile(0.5)), float(r.quantile(0.9)), int(r.max()), float(clipped.mean())
    )


def spot_interference(trace_dir: str | Path) -> pd.DataFrame:
    """How much spot training slowed the rollout it shared the machine with. Per batch bucket, the
    engine steps that overlapped another worker's drafter training (`beside_training`), each over
    the median of the steps that did not at the same batch size, draft length and context (within
    a power of two); `matched` of them had such steps, `slowdown` is the median ratio (1: none).
    Compared like for like because the steps beside training are the tail's (deeper contexts,
    other draft lengths): plain medians by batch size would count those differences as slowdown."""
    tl = load_trace(trace_dir).timeline
    if tl is None:
        raise ValueError(f"{trace_dir}: no timeline.parquet (written by `tlt train`)")
    return matched_slowdown(tl)


def matched_slowdown(tl: pd.DataFrame) -> pd.DataFrame:
    """`spot_interference` on a timeline table (workbench/contracts/trace.py's timeline rows)."""
    dec = tl[tl["state"].isin(["decode", "decode_sd"])].copy()
    spot = tl[tl["state"] == "drafter_train"]
    dec["ms"] = (dec["end_s"] - dec["start_s"]) * 1e3

    def during(row) -> bool:
        o = spot[(spot["rl_step"] == row["rl_step"]) & (spot["worker"] != row["worker"])]
        return bool(((o["start_s"] < row["end_s"]) & (o["end_s"] > row["start_s"])).any())

    dec["beside"] = dec.apply(during, axis=1) if len(spot) else False
    dec["ctx"] = np.floor(np.log2(dec["context"].clip(lower=1.0))).astype(int)
    key = ["batch", "draft_len", "ctx"]
    alone = dec[~dec["beside"]].groupby(key)["ms"].median().rename("alone_ms")
    hit = dec[dec["beside"]].join(alone, on=key)
    hit["ratio"] = hit["ms"] / hit["alone_ms"]
    hit["bucket"] = batch_bucket(hit["batch"])
    g = hit.groupby("bucket", observed=True).agg(
        beside_training=("ms", "size"), matched=("ratio", "count"), slowdown=("ratio", "median")
    )
    return g
