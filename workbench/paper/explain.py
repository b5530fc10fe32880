"""What a Table A case's simulation says about where its time goes: the baseline's rollout share,
the share of its slowest engine's decode time per batch bucket (FastRL's strategy buckets; SD off
above 32), TLT's rollout speedup, its share of decode time with SD on and its tokens per pass by
bucket. `tlt paper` prints one row per case and set of inputs; workbench/paper/ceiling.py prices
each row's buckets at the paper's own SD speedups."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sim.results import PolicyRun
from workbench.contracts.workload import Workload

BATCH_BUCKETS = (0, 1, 4, 20, 32, 64, 1 << 30)  # FastRL's strategy buckets, then SD off above 32


@dataclass(frozen=True)
class Explanation:
    """What a Table A case's simulation says about where the time goes."""

    case: str
    baseline_step_s: float
    baseline_rollout_share: float  # rollout / step (the paper: ~85%)
    rollout_speedup: float  # for the `tlt` system
    # batch bucket -> share, baseline's slowest engine
    critical_decode_share: dict[str, float] = field(default_factory=dict)
    mean_accept_len: float = 1.0  # `tlt`, tokens per sequence-verify pass
    # batch bucket -> `tlt`'s decode share with SD on
    tlt_sd_on_share: dict[str, float] = field(default_factory=dict)
    # batch bucket -> tokens per pass with SD on
    tlt_accept_by_bucket: dict[str, float] = field(default_factory=dict)
    variant: str = "pre-registered"


def bucket_labels() -> tuple[list[int], list[str]]:
    edges = list(BATCH_BUCKETS)
    labels = [(str(hi) if hi == lo + 1 else f"{lo + 1}-{hi}") if hi < (1 << 30) else f">{lo}"
              for lo, hi in itertools.pairwise(edges)]
    return edges, labels


def decode_rows(run: PolicyRun) -> pd.DataFrame:
    tl = run.timeline
    dec = tl[tl["state"].isin(["decode", "decode_sd"])].copy()
    dec["dur"] = dec["end_s"] - dec["start_s"]
    edges, labels = bucket_labels()
    dec["bucket"] = pd.cut(dec["batch"], edges, labels=labels)
    return dec


def critical_shares(run: PolicyRun) -> dict[str, float]:
    """Per batch bucket, the share of decode time of the engine that finished last, over all
    steps."""
    dec = decode_rows(run)
    parts = []
    for _, s in dec.groupby("rl_step"):
        last = s.groupby("worker")["end_s"].max().idxmax()
        parts.append(s[s["worker"] == last])
    crit = pd.concat(parts)
    share = crit.groupby("bucket", observed=False)["dur"].sum() / crit["dur"].sum()
    return {str(k): round(float(v), 4) for k, v in share.items()}


def sd_by_bucket(run: PolicyRun) -> tuple[dict[str, float], dict[str, float]]:
    """Per batch bucket, all engines: the share of decode time with SD on, and tokens per pass with
    SD on."""
    dec = decode_rows(run)
    on = dec[dec["state"] == "decode_sd"]
    total = dec.groupby("bucket", observed=False)["dur"].sum()
    sd = on.groupby("bucket", observed=False)["dur"].sum()
    by = on.groupby("bucket", observed=False)
    tokens, passes = by["tokens"].sum(), by["passes"].sum()
    share = {str(k): round(float(sd[k] / total[k]), 4) if total[k] > 0 else 0.0
             for k in total.index}
    accept = {str(k): round(float(tokens[k] / passes[k]), 3) if passes[k] > 0 else 0.0
              for k in total.index}
    return share, accept


def explain(model: str, wl: Workload | None, base: list[PolicyRun], tlt: list[PolicyRun],
             variant: str = "pre-registered") -> Explanation:
    b = base[0]
    share = float(np.mean([s.rollout_time_s / s.step_time_s for r in base for s in r.steps]))
    roll = float(np.mean([x.mean("rollout_time_s") / y.mean("rollout_time_s")
                          for x, y in zip(base, tlt)]))
    sd_share, accept = sd_by_bucket(tlt[0])
    return Explanation(model, b.mean("step_time_s"), share, roll, critical_shares(b),
                       float(np.mean([r.mean("mean_accept_len") for r in tlt])), sd_share, accept,
                       variant)
