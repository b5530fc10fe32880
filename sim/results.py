"""What a simulation produces: per-worker timelines and per-step metrics, and how they are saved."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from workbench.contracts.fileio import write_atomic, write_parquet
from workbench.contracts.timeline import rollout_split
from workbench.contracts.policy import DrafterKind


@dataclass(frozen=True)
class StepMetrics:
    rl_step: int
    step_time_s: float
    rollout_time_s: float
    train_time_s: float
    sync_time_s: float
    # The rollout's worker-time split (workbench/contracts/timeline.py, rollout_split): idle,
    # spot training.
    bubble_fraction: float  # idle worker-seconds / worker-seconds in the rollout
    drafter_train_fraction: float  # spot-training worker-seconds / worker-seconds in the rollout
    mean_accept_len: float  # tokens per verify pass over passes that drafted (1.0 when none did)
    sd_token_share: float  # share of tokens decoded with speculative decoding
    tokens: int  # response tokens generated
    tokens_per_s: float  # response tokens / rollout time
    longest_response: int
    clip_ratio: float
    drafter_kind: DrafterKind  # drafter used in this rollout
    drafter_quality: float  # learned drafter's quality during this rollout
    drafter_trained_tokens: float  # tokens the spot trainers put into the drafter
    round_kind: str = "sync"  # sync; partial (APRIL); short or long round (tail batching)
    groups_trained: int = 0  # prompt groups complete and trained on this step
    # Groups left unfinished: carried to the next step (partial) or deferred (tail batching).
    groups_left: int = 0
    # Mean policy updates between the weights that started a trained response and this step.
    policy_lag: float = 0.0
    max_policy_lag: int = 0  # the stalest trained response (0: on-policy)
    # Worker-seconds decoding in the tail / worker-seconds in the rollout (rollout_split).
    tail_fraction: float = 0.0
    tail_token_share: float = 0.0  # share of the step's decoded tokens that the tail produced
    # Groups decoded for this step (DAPO's dynamic sampling: more than it trained on).
    groups_generated: int = 0


@dataclass(frozen=True)
class StepInfo:
    """What the simulator knows of a step besides its intervals."""

    lengths: np.ndarray  # lengths of the responses trained on
    drafter_kind: DrafterKind
    drafter_quality: float
    trained_tokens: float
    round_kind: str
    groups_trained: int
    groups_left: int
    policy_lag: float = 0.0
    max_policy_lag: int = 0
    groups_generated: int = 0


def step_metrics(rl_step: int, iv: pd.DataFrame, workers: int, cap: int,
                 info: StepInfo) -> StepMetrics:
    """Metrics of one step from its intervals (`iv`: the step's timeline rows)."""
    lengths = info.lengths
    dur = iv["end_s"] - iv["start_s"]
    by_state = dur.groupby(iv["state"], observed=False).sum()
    start, end = iv["start_s"].min(), iv["end_s"].max()
    split = rollout_split(iv, workers)
    rollout = split.rollout_s
    sd = iv["state"] == "decode_sd"
    sd_passes = iv.loc[sd, "passes"].sum()
    sd_tokens = iv.loc[sd, "tokens"].sum()
    # The same grouping as sd_tokens: the share stays <= 1.
    tokens = sd_tokens + iv.loc[iv["state"] == "decode", "tokens"].sum()
    return StepMetrics(
        rl_step=rl_step,
        step_time_s=float(end - start),
        rollout_time_s=float(rollout),
        train_time_s=float(by_state["train"] / workers),
        sync_time_s=float(by_state["sync"] / workers),
        bubble_fraction=split.bubble_fraction,
        drafter_train_fraction=split.drafter_train_fraction,
        mean_accept_len=float(sd_tokens / sd_passes) if sd_passes else 1.0,
        sd_token_share=float(sd_tokens / tokens) if tokens else 0.0,
        tokens=int(round(tokens)),
        tokens_per_s=float(tokens / rollout) if rollout else 0.0,
        longest_response=int(lengths.max()) if len(lengths) else 0,
        clip_ratio=float(np.mean(lengths >= cap)) if len(lengths) else 0.0,
        drafter_kind=info.drafter_kind,
        drafter_quality=float(info.drafter_quality),
        drafter_trained_tokens=float(info.trained_tokens),
        round_kind=info.round_kind,
        groups_trained=info.groups_trained,
        groups_left=info.groups_left,
        policy_lag=info.policy_lag,
        max_policy_lag=info.max_policy_lag,
        tail_fraction=split.tail_fraction,
        tail_token_share=split.tail_token_share,
        groups_generated=info.groups_generated,
    )


@dataclass(frozen=True)
class FilterRecord:
    """One generation round of DAPO's dynamic sampling, in veRL's (PolyTrace's)
    dapo_filter_indices form."""

    workload_step: int  # generation batch, counted over the run
    trainer_step: int  # the update it feeds (1-based, as veRL counts)
    gen_batch_index: int  # its round within that update (1-based)
    prompt_count: int  # groups generated
    n_sampling: int
    train_batch_size: int
    num_prompt_in_batch_before: int  # groups kept by the earlier rounds of this update
    kept_prompt_indices: list[int]  # groups whose rewards were not all equal
    used_prompt_indices: list[int]  # of those, the ones the update trained on

    def row(self) -> dict:
        d = asdict(self)
        d["kept_prompt_count"] = len(self.kept_prompt_indices)
        d["used_prompt_count"] = len(self.used_prompt_indices)
        return d


SUMMARY_FIELDS = ("step_time_s", "rollout_time_s", "bubble_fraction", "mean_accept_len")


@dataclass
class PolicyRun:
    """One policy simulated on one workload and seed."""

    policy_name: str
    steps: list[StepMetrics]
    timeline: pd.DataFrame
    # DAPO's dynamic sampling: what each round kept.
    filtering: list[FilterRecord] = field(default_factory=list)
    # Agentic rollouts: one row per turn decoded (sim/agent_pool.py, TURN_COLUMNS); None otherwise.
    turns: pd.DataFrame | None = None

    def mean(self, name: str) -> float:
        return float(np.mean([getattr(s, name) for s in self.steps]))

    def summary(self) -> dict[str, float]:
        names = SUMMARY_FIELDS + ("drafter_train_fraction", "tokens_per_s", "tail_fraction")
        return {name: self.mean(name) for name in names}

    def save(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        metrics = {"policy": self.policy_name, "mean": self.summary(),
                   "steps": [asdict(s) for s in self.steps]}
        write_atomic(out_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        tmp = out_dir / ".timeline.parquet.tmp"
        self.timeline.to_parquet(tmp, index=False)
        tmp.replace(out_dir / "timeline.parquet")
        if self.filtering:
            write_atomic(out_dir / "dapo_filter_indices.jsonl",
                         "".join(json.dumps(r.row()) + "\n" for r in self.filtering))
        if self.turns is not None:
            write_parquet(out_dir / "turns.parquet", self.turns)


@dataclass
class StepLog:
    """The steps' metrics as they end, in order; `on_step` hears of each."""

    on_step: Callable[[StepMetrics], None] | None = None
    metrics: list[StepMetrics] = field(default_factory=list)

    def add(self, m: StepMetrics) -> None:
        self.metrics.append(m)
        if self.on_step is not None:
            self.on_step(m)
