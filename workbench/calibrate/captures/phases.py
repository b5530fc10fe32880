"""The phases fit: policy-update and weight-sync costs from the RL steps the traces timed."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from workbench.calibrate.captures.costs import ParamFit
from workbench.contracts.fileio import sig
from workbench.contracts.profile import PhaseCost
from workbench.contracts.trace import Trace


def fit_phases(traces: Sequence[Trace], base: PhaseCost) -> tuple[PhaseCost, list[ParamFit]]:
    """Policy-update and weight-sync costs from RL steps that trained (train_s > 0); else the
    base's."""
    per_token, sync = [], []
    for t in traces:
        tp = int((t.meta.get("engine") or {}).get("tensor_parallel_size", 1) or 1)
        gpus = int(t.steps["worker"].nunique()) * tp
        by_step = t.requests.groupby("rl_step")
        tokens = by_step[["prompt_tokens", "response_tokens"]].sum().sum(axis=1)
        for _, row in t.rl_steps.iterrows():
            n = tokens.get(row["rl_step"], 0)
            if row["train_s"] > 0 and n > 0:
                per_token.append(row["train_s"] * gpus / n)
            if row["sync_s"] > 0:
                sync.append(row["sync_s"])
    train = sig(np.median(per_token)) if per_token else base.train_gpu_s_per_token
    out = replace(base, train_gpu_s_per_token=train,
                  weight_sync_s=sig(np.median(sync)) if sync else base.weight_sync_s)
    return out, [ParamFit("phases", "train_gpu_s_per_token", out.train_gpu_s_per_token,
                          bool(per_token)),
                 ParamFit("phases", "weight_sync_s", out.weight_sync_s, bool(sync))]
