"""Policy: how a rollout engine uses speculative decoding and trains its drafter.

One file drives the simulator and the real backend alike. Presets live in
`workbench/presets/policies/` (`baseline`, `static-sd`, `tlt`); any YAML/JSON
file with the same fields works too. The format is documented field by field
in `docs/formats.md`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from workbench.contracts.schema import (
    FieldError,
    check_part,
    load,
    preset_names,
    require,
)

PRESET_DIR = Path(__file__).parent / "presets" / "policies"

BanditAlgorithm = Literal["fixed", "beg", "ucb1", "egreedy"]
DrafterKind = Literal["none", "ngram", "eagle"]
RolloutMode = Literal["sync", "partial", "tail_batching"]


@dataclass(frozen=True)
class ScheduleBucket:
    """One row of vLLM's `num_speculative_tokens_per_batch_size`: (min_batch, max_batch, draft_len)."""

    min_batch: int
    max_batch: int
    draft_len: int

    ROW_HELP = "a [min_batch, max_batch, draft_len] row or a mapping with those fields"

    @classmethod
    def from_row(cls, row: list | tuple) -> dict:
        if len(row) != 3:
            raise ValueError(row)
        return dict(zip(("min_batch", "max_batch", "draft_len"), row))

    def check(self) -> None:
        require(self.min_batch >= 1, "min_batch", self.min_batch, "an integer >= 1")
        require(self.max_batch >= self.min_batch, "max_batch", self.max_batch, f"an integer >= min_batch ({self.min_batch})")
        require(0 <= self.draft_len <= 16, "draft_len", self.draft_len, "an integer from 0 to 16")


@dataclass(frozen=True)
class BanditConfig:
    """How the draft length is chosen per batch-size bucket (the buckets are the schedule's rows)."""

    algorithm: BanditAlgorithm = "fixed"
    arms: tuple[int, ...] = (0, 2, 4)  # draft lengths the bandit may pick; 0 = SD off
    epsilon: float = 0.1  # exploration rate (beg, egreedy)
    window: int = 32  # rewards remembered per arm (beg): forgets as the policy drifts
    decision_interval: int = 64  # engine steps between two choices (and two reward updates)

    def check(self) -> None:
        require(len(self.arms) >= 1, "arms", list(self.arms), "a non-empty list of draft lengths")
        require(all(0 <= a <= 16 for a in self.arms), "arms", list(self.arms), "draft lengths from 0 to 16")
        require(len(set(self.arms)) == len(self.arms), "arms", list(self.arms), "distinct draft lengths")
        require(0.0 <= self.epsilon <= 1.0, "epsilon", self.epsilon, "a number from 0 to 1")
        require(self.window >= 1, "window", self.window, "an integer >= 1")
        require(self.decision_interval >= 1, "decision_interval", self.decision_interval, "an integer >= 1")


@dataclass(frozen=True)
class DrafterConfig:
    kind: DrafterKind = "none"
    warm_start: bool = False  # eagle: start from a drafter trained offline on the initial policy
    ngram_fallback: bool = False  # eagle: use the n-gram drafter while the learned one is worse
    # Switch rule: the learned drafter takes over once its accepted length beats
    # n-gram's by this relative margin (checked between RL steps, both directions).
    switch_margin: float = 0.0

    def check(self) -> None:
        require(self.switch_margin >= 0.0, "switch_margin", self.switch_margin, "a number >= 0")
        if self.kind != "eagle":
            require(not self.ngram_fallback, "ngram_fallback", self.ngram_fallback,
                    "false unless kind is 'eagle' (only a learned drafter falls back to n-gram)")
            require(not self.warm_start, "warm_start", self.warm_start, "false unless kind is 'eagle'")


@dataclass(frozen=True)
class DrafterTraining:
    """Spot training of the learned drafter on workers that finished their shard."""

    enabled: bool = False
    min_idle_workers: int = 1  # start spot training once this many workers are idle
    lr: float = 1e-4
    steps: int = 2000  # most drafter optimiser steps per RL step
    buffer: int = 2  # RL steps of hidden states kept for training (this one and older)

    def check(self) -> None:
        require(self.min_idle_workers >= 1, "min_idle_workers", self.min_idle_workers, "an integer >= 1")
        require(0.0 < self.lr < 1.0, "lr", self.lr, "a number between 0 and 1")
        require(self.steps >= 1, "steps", self.steps, "an integer >= 1")
        require(self.buffer >= 1, "buffer", self.buffer, "an integer >= 1")


@dataclass(frozen=True)
class RolloutConfig:
    """How a step's rollout ends. Only `sync` is lossless; see docs/formats.md.

    sync: every response of the step's prompts is generated to the end.
    partial (APRIL): launch (1 + oversample) x prompts; stop once `prompts_per_step`
      groups are complete; unfinished responses are kept and resumed next step.
    tail_batching (RollPacker): short rounds launch (1 + oversample) x prompts and
      stop the same way, deferring unfinished prompts (their work is dropped); once
      `prompts_per_step` prompts are deferred, a long round runs them all to the end.
    """

    mode: RolloutMode = "sync"
    oversample: float = 0.0

    def check(self) -> None:
        require(0.0 <= self.oversample <= 4.0, "oversample", self.oversample, "a share from 0 to 4")
        if self.mode != "sync":
            require(self.oversample > 0.0, "oversample", self.oversample,
                    f"> 0 for mode '{self.mode}' (it needs extra prompts to stop early)")


@dataclass(frozen=True)
class Policy:
    name: str
    description: str = ""
    sd_threshold: int = 0  # SD is off when the batch is larger than this
    schedule: tuple[ScheduleBucket, ...] = ()
    bandit: BanditConfig = field(default_factory=BanditConfig)
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    training: DrafterTraining = field(default_factory=DrafterTraining)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    def check(self) -> None:
        require(bool(self.name.strip()), "name", self.name, "a non-empty name")
        require(self.sd_threshold >= 0, "sd_threshold", self.sd_threshold, "an integer >= 0")
        for part in ("bandit", "drafter", "training", "rollout"):
            check_part(part, getattr(self, part))
        for i, row in enumerate(self.schedule):
            check_part(f"schedule[{i}]", row)
        if self.drafter.kind == "none":
            return
        require(len(self.schedule) >= 1, "schedule", [], "at least one [min_batch, max_batch, draft_len] row when SD is on")
        require(self.schedule[0].min_batch == 1, "schedule[0].min_batch", self.schedule[0].min_batch, "1 (buckets start at batch 1)")
        for i in range(1, len(self.schedule)):
            prev, cur = self.schedule[i - 1], self.schedule[i]
            require(cur.min_batch == prev.max_batch + 1, f"schedule[{i}].min_batch", cur.min_batch,
                    f"{prev.max_batch + 1} (rows must be contiguous and sorted)")
        require(self.schedule[-1].max_batch >= self.sd_threshold, "sd_threshold", self.sd_threshold,
                f"at most the schedule's last max_batch ({self.schedule[-1].max_batch})")
        if self.training.enabled and self.drafter.kind != "eagle":
            raise FieldError("training.enabled", True, "false unless drafter.kind is 'eagle' (n-gram has nothing to train)")

    @property
    def uses_sd(self) -> bool:
        return self.drafter.kind != "none" and self.sd_threshold > 0

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


def load_policy(name_or_path: str | Path) -> Policy:
    return load(Policy, name_or_path, PRESET_DIR)


def policy_presets() -> list[str]:
    return preset_names(PRESET_DIR)
