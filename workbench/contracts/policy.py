"""Policy: how a rollout engine uses speculative decoding and trains its drafter.

One file drives the simulator and the real backend alike. Presets live in
`workbench/contracts/presets/policies/` (`baseline`, `static-sd`, `tlt`, ...; `tlt presets`
lists them); any YAML/JSON file with the same fields works too. The format is documented
field by field in `docs/formats.md`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import ClassVar, Literal

from workbench.contracts.schema import (
    FieldError,
    check_part,
    load,
    preset_names,
    require,
)
from workbench.contracts.strategy import MAX_DRAFT_STEPS, ScheduleBucket, Strategy

PRESET_DIR = Path(__file__).parent / "presets" / "policies"

BanditAlgorithm = Literal["fixed", "beg", "ucb1", "egreedy", "climb"]
RewardStat = Literal["mean", "median"]


class DrafterKind(str, Enum):
    """What drafts the tokens the target verifies (docs/design.md, "Glossary"): nothing (plain
    decoding), n-gram lookups in the prompt, the learned EAGLE drafter, or suffix lookups in
    earlier and sibling responses (simulator only). A member equals its string ("eagle"), and
    prints, formats and reprs as it, so files, tables and messages read as before."""

    NONE = "none"
    NGRAM = "ngram"
    EAGLE = "eagle"
    SUFFIX = "suffix"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:
        return repr(self.value)

RolloutMode = Literal["sync", "partial", "tail_batching", "async"]


@dataclass(frozen=True)
class BanditConfig:
    """How the draft length is chosen per batch-size bucket (the buckets are the schedule's
    rows)."""

    algorithm: BanditAlgorithm = "fixed"
    arms: tuple[int, ...] = (0, 2, 4)  # draft lengths the bandit may pick; 0 = SD off
    epsilon: float = 0.1  # exploration rate (beg, egreedy, climb)
    # rewards (climb: steps) remembered per arm (beg, climb): forgets as the policy drifts
    window: int = 32
    decision_interval: int = 64  # engine steps between two choices
    # beg: judge an arm by its window's mean or median reward; climb: by its mean or median step
    # time (median: FastRL's, robust to outlier steps)
    reward_stat: RewardStat = "mean"

    def check(self) -> None:
        require(len(self.arms) >= 1, "arms", list(self.arms), "a non-empty list of draft lengths")
        require(all(0 <= a <= MAX_DRAFT_STEPS for a in self.arms), "arms", list(self.arms),
                f"draft lengths from 0 to {MAX_DRAFT_STEPS}")
        require(len(set(self.arms)) == len(self.arms), "arms", list(self.arms),
                "distinct draft lengths")
        require(0.0 <= self.epsilon <= 1.0, "epsilon", self.epsilon, "a number from 0 to 1")
        require(self.window >= 1, "window", self.window, "an integer >= 1")
        require(self.decision_interval >= 1, "decision_interval", self.decision_interval,
                "an integer >= 1")


@dataclass(frozen=True)
class DrafterConfig:
    kind: DrafterKind = DrafterKind.NONE
    warm_start: bool = False  # eagle: start from a drafter trained offline on the initial policy
    ngram_fallback: bool = False  # eagle: use the n-gram drafter while the learned one is worse
    # Switch rule: the learned drafter takes over once its accepted length beats
    # n-gram's by this relative margin (checked between RL steps, both directions).
    switch_margin: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", DrafterKind(self.kind))  # "eagle" given in code, too

    def check(self) -> None:
        require(self.switch_margin >= 0.0, "switch_margin", self.switch_margin, "a number >= 0")
        if self.kind != DrafterKind.EAGLE:
            require(not self.ngram_fallback, "ngram_fallback", self.ngram_fallback,
                    "false unless kind is 'eagle' (only a learned drafter falls back to n-gram)")
            require(not self.warm_start, "warm_start", self.warm_start,
                    "false unless kind is 'eagle'")


@dataclass(frozen=True)
class SpotTraining:
    """Spot training: the learned drafter trained on workers that finished their shard of the
    rollout (docs/design.md, "Glossary"; not the policy update)."""

    enabled: bool = False
    min_idle_workers: int = 1  # start spot training once this many workers are idle
    lr: float = 1e-4
    steps: int = 2000  # most drafter optimiser steps per RL step
    buffer: int = 2  # RL steps of hidden states kept for training (this one and older)
    # spot-train in every N-th RL step only (FastRL's training_interval_steps)
    interval_steps: int = 1

    def check(self) -> None:
        require(self.min_idle_workers >= 1, "min_idle_workers", self.min_idle_workers,
                "an integer >= 1")
        require(0.0 < self.lr < 1.0, "lr", self.lr, "a number between 0 and 1")
        require(self.steps >= 1, "steps", self.steps, "an integer >= 1")
        require(self.buffer >= 1, "buffer", self.buffer, "an integer >= 1")
        require(self.interval_steps >= 1, "interval_steps", self.interval_steps, "an integer >= 1")


@dataclass(frozen=True)
class RolloutConfig:
    """How a step's rollout ends and how it meets training. Only `sync` is lossless and
    on-policy; see docs/formats.md.

    sync: every response of the step's prompts is generated to the end, then trained on.
    partial (APRIL): launch (1 + oversample) x prompts; stop once `prompts_per_step`
      groups are complete; unfinished responses are kept and resumed next step.
    tail_batching (RollPacker): short rounds launch (1 + oversample) x prompts and
      stop the same way, deferring unfinished prompts (their work is dropped); once
      `prompts_per_step` prompts are deferred, a long round runs them all to the end.
    async (veRL one-step-off-policy, AReaL): `train_share` of the GPUs train while the
      others roll out; the rollout of step t + k (k = `max_staleness`) may run while step t
      trains, on weights up to k updates old. Weights are pushed between rollouts, or, with
      `interrupt` (AReaL), as soon as they exist, interrupting the generations in flight.
      With `stream` (AReaL, veRL's fully_async_policy) there are no rollouts: engines pull
      prompts as their batches free slots, at most (version + 1 + k) x prompts_per_step
      launched, and each update trains the first prompts_per_step groups to complete, in
      `minibatches` updates as they arrive, before the new weights are pushed.
    """

    mode: RolloutMode = "sync"
    oversample: float = 0.0
    # async: how far rollouts may run ahead of training, in policy updates
    max_staleness: float = 1.0
    # async: share of the engines (their GPUs) that train instead of rolling out
    train_share: float = 0.25
    # async: push new weights into running rollouts (AReaL's interruptible generation)
    interrupt: bool = False
    # async: stream prompts through the engines and groups into training (fully async)
    stream: bool = False
    # stream: updates a step's groups are trained in, each as soon as its groups complete
    minibatches: int = 1

    def check(self) -> None:
        require(0.0 <= self.oversample <= 4.0, "oversample", self.oversample, "a share from 0 to 4")
        if self.stream:
            require(self.mode == "async", "stream", self.stream, "false unless mode is 'async'")
            require(0.0 <= self.max_staleness <= 16.0, "max_staleness", self.max_staleness,
                    "a number from 0 to 16 with stream (veRL's staleness_threshold, AReaL's eta)")
        else:
            require(float(self.max_staleness).is_integer() and 1 <= self.max_staleness <= 16,
                    "max_staleness",
                    self.max_staleness, "an integer from 1 to 16 (a fraction needs stream: true)")
        require(1 <= self.minibatches <= 64, "minibatches", self.minibatches,
                "an integer from 1 to 64")
        require(self.stream or self.minibatches == 1, "minibatches", self.minibatches,
                "1 unless stream is true")
        require(0.0 < self.train_share < 1.0, "train_share", self.train_share,
                "a share between 0 and 1")
        if self.mode in ("partial", "tail_batching"):
            require(self.oversample > 0.0, "oversample", self.oversample,
                    f"> 0 for mode '{self.mode}' (it needs extra prompts to stop early)")
        if self.mode in ("sync", "async"):
            require(
                self.oversample == 0.0,
                "oversample",
                self.oversample,
                f"0 for mode '{self.mode}' (it stops no rollout early)",
            )
        if self.mode != "async":
            require(not self.interrupt, "interrupt", self.interrupt, "false unless mode is 'async'")

    @property
    def lossless(self) -> bool:
        """Trains on exactly what the baseline would: on-policy samples, every prompt to the end."""
        return self.mode == "sync"

    @property
    def nature(self) -> str:
        """What the mode does to the RL algorithm, in a few words (shown beside speedups)."""
        if self.mode == "sync":
            return "lossless"
        if self.mode == "partial":
            return "off-policy (resumed responses)"
        if self.mode == "tail_batching":
            return "on-policy, prompts reordered"
        k = f"{self.max_staleness:g}"
        if self.stream:
            return f"off-policy (streamed, staleness {k})"
        return f"off-policy (up to {k} behind)"


@dataclass(frozen=True)
class Policy:
    name: str
    description: str = ""
    sd_threshold: int = 0  # SD is off when the batch is larger than this
    # FastRL's adaptive_spec_warmup_checks: once a batch has been above the threshold, SD turns
    # back on only after this many consecutive decode steps at or below it (0: at once).
    sd_warmup_steps: int = 0
    schedule: tuple[ScheduleBucket, ...] = ()
    bandit: BanditConfig = field(default_factory=BanditConfig)
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    spot_training: SpotTraining = field(default_factory=SpotTraining)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    # Files written before `training` was named for what it is still load, with a notice.
    RENAMED_FIELDS: ClassVar[dict[str, str]] = {"training": "spot_training"}

    def check(self) -> None:
        require(bool(self.name.strip()), "name", self.name, "a non-empty name")
        require(self.sd_threshold >= 0, "sd_threshold", self.sd_threshold, "an integer >= 0")
        require(self.sd_warmup_steps >= 0, "sd_warmup_steps", self.sd_warmup_steps,
                "an integer >= 0")
        for part in ("bandit", "drafter", "spot_training", "rollout"):
            check_part(part, getattr(self, part))
        for i, row in enumerate(self.schedule):
            check_part(f"schedule[{i}]", row)
        if self.rollout.stream and self.spot_training.enabled:
            raise FieldError("spot_training.enabled", True,
                             "false with rollout.stream (streaming keeps every engine busy: "
                             "spot training has no idle engine to run on)")
        if self.drafter.kind == DrafterKind.NONE:
            return
        require(
            len(self.schedule) >= 1, "schedule", [],
            "at least one [min_batch, max_batch, draft_len] row when SD is on"
        )
        require(
            self.schedule[0].min_batch == 1,
            "schedule[0].min_batch",
            self.schedule[0].min_batch,
            "1 (buckets start at batch 1)",
        )
        for i in range(1, len(self.schedule)):
            prev, cur = self.schedule[i - 1], self.schedule[i]
            require(cur.min_batch == prev.max_batch + 1, f"schedule[{i}].min_batch", cur.min_batch,
                    f"{prev.max_batch + 1} (rows must be contiguous and sorted)")
        require(self.schedule[-1].max_batch >= self.sd_threshold, "sd_threshold", self.sd_threshold,
                f"at most the schedule's last max_batch ({self.schedule[-1].max_batch})")
        if self.spot_training.enabled and self.drafter.kind != DrafterKind.EAGLE:
            raise FieldError("spot_training.enabled", True,
                             "false unless drafter.kind is 'eagle' (n-gram has nothing to train)")
        trees = [i for i, row in enumerate(self.schedule) if not row.strategy.is_chain]
        if trees and self.bandit.algorithm != "fixed":
            i = trees[0]
            raise FieldError(f"schedule[{i}]", self.schedule[i].strategy.name,
                             f"a chain draft length: a '{self.bandit.algorithm}' bandit chooses "
                             "among bandit.arms (chain draft lengths) and uses the rows only as "
                             "buckets; tree strategies run with bandit.algorithm 'fixed'")

    def strategy_of(self, bucket: int) -> Strategy:
        """The fixed table's strategy for a schedule row."""
        return self.schedule[bucket].strategy

    @property
    def uses_sd(self) -> bool:
        return self.drafter.kind != DrafterKind.NONE and self.sd_threshold > 0

    def bucket_of(self, batch_size: int) -> int | None:
        """Index of the schedule row holding `batch_size`, or None when SD is off for it."""
        if not self.uses_sd or batch_size > self.sd_threshold:
            return None
        for i, row in enumerate(self.schedule):
            if row.min_batch <= batch_size <= row.max_batch:
                return i
        return None

    def with_name(self, name: str) -> "Policy":
        return replace(self, name=name)

    def without_sd(self) -> "Policy":
        """The same policy decoding without a drafter: what an SD guard runs where SD loses
        (real/run/engine_plan.py), and the plain engine it prices SD against."""
        plain = DrafterConfig(kind=DrafterKind.NONE, switch_margin=self.drafter.switch_margin)
        return replace(self, drafter=plain,
                       spot_training=replace(self.spot_training, enabled=False))


def load_policy(name_or_path: str | Path) -> Policy:
    return load(Policy, name_or_path, PRESET_DIR)


def policy_presets() -> list[str]:
    return preset_names(PRESET_DIR)
