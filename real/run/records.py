"""What a `tlt train` run records: the workers' reports, one StepRecord per RL step (metrics.csv),
and the trace's rows, with the per-worker timeline in the simulator's format.

Times in the workers' reports are epoch seconds (`time.time()`, comparable across the processes
of one machine); the trace's rows are seconds since the run began.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Iterable

import pandas as pd

from real.rollout.requests import EngineStepRow, Sample
from workbench.contracts.timeline import Timeline, rollout_split
from workbench.contracts.trace import (
    RequestRow,
    RLStepRow,
    StepRow,
    TimelineRow,
    Trace,
    accepted_length,
    rows_frame,
)
from workbench.contracts.policy import DrafterKind


@dataclass
class WorkerRollout:
    """What one worker's rollout produced (rows in the trace schema, times in epoch seconds)."""

    worker: int
    start: float
    end: float
    steps: list[EngineStepRow]
    requests: list[RequestRow]
    outputs: dict[str, Sample]  # request_id -> the response
    prompt_ids: dict[str, list[int]] = field(default_factory=dict)  # request_id -> prompt token ids
    drafts: int = 0
    accepted: int = 0

    def sequence(self, request_id: str) -> list[int]:
        """Prompt + response token ids of one request."""
        return list(self.prompt_ids[request_id]) + list(self.outputs[request_id].token_ids)


@dataclass(frozen=True)
class DrafterCheck:
    """Both drafters judged on the same held-out records at the same draft length: estimated
    tokens per verify pass under greedy verification (real/drafter/spot.py)."""

    eagle: float  # the learned drafter as the engines run it
    ngram: float  # vLLM's n-gram prompt lookup, replayed on the records
    static: float = math.nan  # the run's initial (warm-start) drafter, never trained: staleness

    def estimate(self, kind: DrafterKind) -> float:
        """The estimated tokens per verify pass of drafter `kind` (NaN for "none")."""
        return {DrafterKind.EAGLE: self.eagle, DrafterKind.NGRAM: self.ngram}.get(kind, math.nan)

    @staticmethod
    def mean(checks: Iterable[DrafterCheck | None]) -> DrafterCheck | None:
        """Several workers' checks averaged (None: none finished one)."""
        done = [c for c in checks if c is not None]
        if not done:
            return None
        avg = lambda xs: sum(xs) / len(xs)  # noqa: E731
        return DrafterCheck(eagle=avg([c.eagle for c in done]), ngram=avg([c.ngram for c in done]),
                            static=avg([c.static for c in done]))


@dataclass
class WorkerSpot:
    """A spot-training session: the SpotResult's numbers, the drafter it left, its times."""

    worker: int
    start: float
    end: float
    steps: int
    loss: float
    top1: float
    stopped: bool
    stop_latency_s: float  # from stop_spot() to spot_train returning (NaN when not stopped)
    state: dict[str, Any] = field(default_factory=dict)  # drafter weights (torch tensors)
    fresh_records: int = 0
    # the drafters judged on the fresh records before training (None: stopped first)
    check: DrafterCheck | None = None


@dataclass
class StepRecord:
    rl_step: int
    step_s: float
    rollout_s: float
    train_s: float
    sync_s: float
    # The rollout's worker-time split (workbench/contracts/timeline.py, rollout_split), from
    # the step's start to its last worker's finish: idle (the bubble), training the drafter.
    bubble_fraction: float
    drafter_train_fraction: float
    mean_accept_len: float  # tokens per verify pass over SD passes (1.0 with no SD)
    reward: float
    # mean best reward per prompt: with 0/1 rewards, prompts with at least one correct sample
    pass_at_g: float
    drafter_loss: float
    drafter_steps: int
    drafter_kind: DrafterKind
    tokens: int
    longest: int
    grpo_loss: float
    kl: float
    stop_latency_s: float  # longest time from stop_spot() to a trainer returning
    # The drafters judged on this step's responses (DrafterCheck; NaN where not judged): the
    # learned drafter the engines ran, n-gram, and the initial drafter kept static (warm starts).
    eagle_est: float = math.nan
    ngram_est: float = math.nan
    static_est: float = math.nan
    # Share of the step's responses in the style the reward asks for (task variants with a
    # preferred style, real/tiny/task.py; NaN for the plain task).
    style_share: float = math.nan
    # SD's decode speed over a plain engine's on this rollout, priced at the plain engine each
    # worker measured at start-up (real/run/sd_pricing.py; NaN: not judged, e.g. while SD is off).
    sd_speedup: float = math.nan
    # Worker-time decoding at a small batch (the tail; rollout_split) over the rollout's
    # worker-time.
    tail_fraction: float = math.nan

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> StepRecord:
        """A record from its fields by name (a checkpoint's, or a metrics.csv row), old names
        too."""
        named = {OLD_METRIC_NAMES.get(k, k): v for k, v in values.items()}
        return cls(**{**named, "drafter_kind": DrafterKind(named["drafter_kind"])})


METRIC_COLUMNS = tuple(f.name for f in fields(StepRecord))  # metrics.csv, in this order
# Columns of metrics.csv (and fields of checkpointed records) under their former names.
OLD_METRIC_NAMES = {"step": "rl_step", "bubble_frac": "bubble_fraction",
                    "spot_frac": "drafter_train_fraction"}


@dataclass
class RunRows:
    """The trace's rows so far (checkpointed with the run, so a resumed run's trace is whole)."""

    steps: list[StepRow] = field(default_factory=list)
    requests: list[RequestRow] = field(default_factory=list)
    rl_steps: list[RLStepRow] = field(default_factory=list)
    timeline: list[TimelineRow] = field(default_factory=list)

    def frames(self, meta: dict[str, Any]) -> Trace:
        """The rows as a trace (meta given by the caller)."""
        return Trace(meta, rows_frame(self.steps, StepRow), rows_frame(self.requests, RequestRow),
                     rows_frame(self.rl_steps, RLStepRow),
                     timeline=rows_frame(self.timeline, TimelineRow))


@dataclass
class StepTimes:
    """When the phases of one RL step ended, in epoch seconds."""

    start: float
    rollout_end: float
    train_start: float
    train_end: float
    sync_end: float


def rollout_accept_len(rollouts: Iterable[WorkerRollout]) -> float:
    """Tokens per verify pass over the workers' SD passes (NaN without drafts)."""
    rollouts = list(rollouts)
    return accepted_length(sum(r.accepted for r in rollouts), sum(r.drafts for r in rollouts))


def step_timeline(step: int, rollouts: dict[int, WorkerRollout], spots: list[WorkerSpot],
                  times: StepTimes, clock0: float) -> list[TimelineRow]:
    """What each worker did during the RL step: idle until its rollout began, its engine steps,
    idle time, spot training, then the policy update and the sync (times since the run began)."""
    rel = lambda t: t - clock0  # noqa: E731
    tl = Timeline()
    for i, r in rollouts.items():
        tl.add(step, i, rel(times.start), rel(r.start), "idle")  # waiting for its share of the step
        for row in r.steps:
            state = "decode_sd" if row.draft_len else "decode"
            tl.add(step, i, row.start_s, row.start_s + row.wall_s, state,
                   row.batch_size, row.draft_len, row.new_tokens, 1, row.context_mean)
        sp = next((x for x in spots if x.worker == i), None)
        if sp is not None:
            tl.add(step, i, rel(r.end), rel(sp.start), "idle")
            tl.add(step, i, rel(sp.start), rel(sp.end), "drafter_train", tokens=sp.steps)
            tl.add(step, i, rel(sp.end), rel(times.rollout_end), "idle")
        else:
            tl.add(step, i, rel(r.end), rel(times.rollout_end), "idle")
        tl.add(step, i, rel(times.rollout_end), rel(times.train_end), "train")
        tl.add(step, i, rel(times.train_end), rel(times.sync_end), "sync")
    return [TimelineRow(*row) for row in tl.rows]


def step_record(step: int, rollouts: dict[int, WorkerRollout], spots: list[WorkerSpot],
                requests: list[RequestRow], times: StepTimes, grpo: Any,
                drafter_kind: DrafterKind, check: DrafterCheck | None = None,
                style_share: float = math.nan, sd_speedup: float = math.nan, *,
                clock0: float) -> StepRecord:
    """The RL step's metrics (`grpo`: the GRPO update's StepStats; `check`: the drafters judged;
    `clock0`: when the run began, the origin of the engine steps' `start_s`)."""
    timeline = rows_frame(step_timeline(step, rollouts, spots, times, clock0), TimelineRow)
    window = (times.start - clock0, times.rollout_end - clock0)
    split = rollout_split(timeline, len(rollouts), window=window)
    rewards = [row.reward for row in requests]
    by_prompt: dict[int, float] = {}
    for row in requests:
        by_prompt[row.prompt_id] = max(by_prompt.get(row.prompt_id, 0.0), row.reward)
    trained = [sp for sp in spots if sp.steps > 0]
    acc = rollout_accept_len(rollouts.values())
    return StepRecord(
        rl_step=step, step_s=times.sync_end - times.start,
        rollout_s=times.rollout_end - times.start,
        train_s=times.train_end - times.train_start, sync_s=times.sync_end - times.train_end,
        bubble_fraction=split.bubble_fraction, drafter_train_fraction=split.drafter_train_fraction,
        mean_accept_len=1.0 if math.isnan(acc) else acc,
        reward=sum(rewards) / len(rewards), pass_at_g=sum(by_prompt.values()) / len(by_prompt),
        drafter_loss=(sum(sp.loss * sp.steps for sp in trained) / sum(sp.steps for sp in trained)
                      if trained else math.nan),
        drafter_steps=sum(sp.steps for sp in spots), drafter_kind=drafter_kind,
        tokens=sum(row.response_tokens for row in requests),
        longest=max(row.response_tokens for row in requests),
        grpo_loss=grpo.loss, kl=grpo.kl,
        stop_latency_s=max((sp.stop_latency_s for sp in spots if sp.stopped), default=math.nan),
        eagle_est=check.eagle if check else math.nan, ngram_est=check.ngram if check else math.nan,
        static_est=check.static if check else math.nan, style_share=style_share,
        sd_speedup=sd_speedup, tail_fraction=split.tail_fraction)


def add_step_rows(rows: RunRows, step: int, rollouts: dict[int, WorkerRollout],
                  spots: list[WorkerSpot], requests: list[RequestRow], times: StepTimes,
                  clock0: float) -> None:
    """Append one RL step's rows to the run's trace rows."""
    rows.timeline += step_timeline(step, rollouts, spots, times, clock0)
    for r in rollouts.values():
        rows.steps += r.steps
    rows.requests += requests
    spot = sum(max(0.0, min(sp.end, times.rollout_end) - sp.start) for sp in spots)
    rows.rl_steps.append(RLStepRow(rl_step=step, rollout_s=times.rollout_end - times.start,
                                   train_s=times.train_end - times.train_start,
                                   sync_s=times.sync_end - times.train_end,
                                   drafter_train_s=spot))


def metrics_frame(metrics: list[StepRecord]) -> pd.DataFrame:
    return pd.DataFrame([[getattr(m, c) for c in METRIC_COLUMNS] for m in metrics],
                        columns=list(METRIC_COLUMNS))
