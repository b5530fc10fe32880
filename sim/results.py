"""What a simulation produces: per-worker timelines and per-step metrics, and how they are saved."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.contracts.fileio import write_atomic


@dataclass(frozen=True)
class StepMetrics:
    step: int
    step_time_s: float
    rollout_time_s: float
    train_time_s: float
    sync_time_s: float
    bubble_fraction: float  # idle worker-seconds / worker-seconds in the rollout
    drafter_train_fraction: float  # spot-training worker-seconds / worker-seconds in the rollout
    mean_accept_len: float  # tokens per verify pass over passes that drafted (1.0 when none did)
    sd_token_share: float  # share of tokens decoded with speculative decoding
    tokens: int  # response tokens generated
    tokens_per_s: float  # response tokens / rollout time
    longest_response: int
    clip_ratio: float
    drafter_kind: str  # drafter used in this rollout
    drafter_quality: float  # learned drafter's quality during this rollout
    drafter_trained_tokens: float  # tokens the spot trainers put into the drafter
    round_kind: str = "sync"  # sync; partial (APRIL); short or long round (tail batching)
    groups_trained: int = 0  # prompt groups complete and trained on this step
    groups_left: int = 0  # groups left unfinished: carried to the next step (partial) or deferred (tail batching)
    policy_lag: float = 0.0  # mean policy updates between the weights that started a trained response and this step
    max_policy_lag: int = 0  # the stalest trained response (0: on-policy)
    tail_fraction: float = 0.0  # worker-seconds decoding in the tail (tail_metrics) / worker-seconds in the rollout
    tail_token_share: float = 0.0  # share of the step's decoded tokens that the tail produced
    groups_generated: int = 0  # groups decoded for this step (DAPO's dynamic sampling: more than it trained on)


@dataclass(frozen=True)
class StepInfo:
    """What the simulator knows of a step besides its intervals."""

    lengths: np.ndarray  # lengths of the responses trained on
    drafter_kind: str
    drafter_quality: float
    trained_tokens: float
    round_kind: str
    groups_trained: int
    groups_left: int
    policy_lag: float = 0.0
    max_policy_lag: int = 0
    groups_generated: int = 0


ROLLOUT_STATES = ("decode", "decode_sd", "idle", "drafter_train")
DECODE_STATES = ("decode", "decode_sd")
# The tail is a worker decoding a few sequences on hardware sized for many: a decode interval whose
# running batch is at most the step's full batch (the largest any worker ran) / TAIL_DIVISOR. At a
# full batch of 256 that is batch <= 32, the batch up to which the TLT paper turns SD on.
TAIL_DIVISOR = 8


@dataclass(frozen=True)
class Tail:
    """How much of a step's rollout went to decoding at a small batch (docs/formats.md, "The tail")."""

    full_batch: int  # the largest running batch of any worker in the step
    tail_batch: int  # decode intervals at a batch <= this are the tail: max(1, full_batch // TAIL_DIVISOR)
    fraction: float  # tail decode worker-seconds / rollout worker-seconds
    token_share: float  # tokens decoded in the tail / tokens decoded


def rollout_seconds(iv: pd.DataFrame) -> float:
    """From a step's first interval to the end of its last rollout interval (decode, idle, spot training)."""
    rollout_end = iv.loc[iv["state"].isin(ROLLOUT_STATES), "end_s"].max()
    return float(rollout_end - iv["start_s"].min())


def tail_metrics(iv: pd.DataFrame, rollout_worker_s: float) -> Tail:
    """The tail of one step's intervals (simulated or traced: the same timeline columns)."""
    decode = iv[iv["state"].isin(DECODE_STATES)]
    if decode.empty:
        return Tail(0, 0, 0.0, 0.0)
    full = int(decode["batch"].max())
    limit = max(1, full // TAIL_DIVISOR)
    tail = decode["batch"] <= limit
    seconds = float((decode["end_s"] - decode["start_s"])[tail].sum())
    tokens = float(decode["tokens"].sum())
    return Tail(full, limit, seconds / rollout_worker_s if rollout_worker_s else 0.0,
                float(decode.loc[tail, "tokens"].sum()) / tokens if tokens else 0.0)


def step_metrics(step: int, iv: pd.DataFrame, workers: int, cap: int, info: StepInfo) -> StepMetrics:
    """Metrics of one step from its intervals (`iv`: the step's timeline rows)."""
    lengths = info.lengths
    dur = iv["end_s"] - iv["start_s"]
    by_state = dur.groupby(iv["state"], observed=False).sum()
    start, end = iv["start_s"].min(), iv["end_s"].max()
    rollout = rollout_seconds(iv)
    worker_s = rollout * workers
    tail = tail_metrics(iv, worker_s)
    sd = iv["state"] == "decode_sd"
    sd_passes = iv.loc[sd, "passes"].sum()
    sd_tokens = iv.loc[sd, "tokens"].sum()
    tokens = sd_tokens + iv.loc[iv["state"] == "decode", "tokens"].sum()  # same grouping as sd_tokens: share <= 1
    return StepMetrics(
        step=step,
        step_time_s=float(end - start),
        rollout_time_s=float(rollout),
        train_time_s=float(by_state["train"] / workers),
        sync_time_s=float(by_state["sync"] / workers),
        bubble_fraction=float(by_state["idle"] / worker_s) if worker_s else 0.0,
        drafter_train_fraction=float(by_state["drafter_train"] / worker_s) if worker_s else 0.0,
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
        tail_fraction=tail.fraction,
        tail_token_share=tail.token_share,
        groups_generated=info.groups_generated,
    )


@dataclass(frozen=True)
class FilterRecord:
    """One generation round of DAPO's dynamic sampling, in veRL's (PolyTrace's) dapo_filter_indices form."""

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
        d["kept_prompt_count"], d["used_prompt_count"] = len(self.kept_prompt_indices), len(self.used_prompt_indices)
        return d


SUMMARY_FIELDS = ("step_time_s", "rollout_time_s", "bubble_fraction", "mean_accept_len")


@dataclass
class PolicyRun:
    """One policy simulated on one workload and seed."""

    policy_name: str
    steps: list[StepMetrics]
    timeline: pd.DataFrame
    filtering: list[FilterRecord] = field(default_factory=list)  # DAPO's dynamic sampling: what each round kept

    def mean(self, name: str) -> float:
        return float(np.mean([getattr(s, name) for s in self.steps]))

    def summary(self) -> dict[str, float]:
        return {name: self.mean(name) for name in SUMMARY_FIELDS + ("drafter_train_fraction", "tokens_per_s",
                                                                    "tail_fraction")}

    def save(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        metrics = {"policy": self.policy_name, "mean": self.summary(), "steps": [asdict(s) for s in self.steps]}
        write_atomic(out_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        tmp = out_dir / ".timeline.parquet.tmp"
        self.timeline.to_parquet(tmp, index=False)
        tmp.replace(out_dir / "timeline.parquet")
        if self.filtering:
            write_atomic(out_dir / "dapo_filter_indices.jsonl", "".join(json.dumps(r.row()) + "\n" for r in self.filtering))
