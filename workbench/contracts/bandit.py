"""Bandit: picks the draft length for the current batch size from measured rewards.

One interface, `select(batch_size) -> Arm` and `update(arm, reward)`, with the
reward the accepted tokens per second of the engine steps that ran with that
arm. The same classes run in the simulator and in the real rollout engine.

Batches larger than the policy's `sd_threshold` always get draft length 0
(SD off) and their rewards are ignored: above the threshold verification
costs more than drafting saves, and the engine need not learn it again.
Below it, batch sizes fall into the buckets of the policy's schedule, and each
bucket learns on its own (SD pays differently at batch 2 and at batch 30).

`state_dict()` / `load_state_dict()` carry everything a bandit has learned and its random
generator (JSON-serialisable), so a resumed run makes the same choices as one never stopped.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.contracts.policy import Policy, Strategy

SD_OFF_BUCKET = -1


@dataclass(frozen=True)
class Arm:
    """A choice for one bucket: how to speculate (`strategy`; a chain draft length converts)."""

    bucket: int  # schedule row, or SD_OFF_BUCKET above the threshold
    strategy: Strategy

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, Strategy):
            object.__setattr__(self, "strategy", Strategy.parse(self.strategy))

    @property
    def draft_len(self) -> int:
        """Draft steps (a chain's length); what the learning bandits and vLLM's K count."""
        return self.strategy.steps


class Bandit:
    """Base: bucket lookup and the SD-off rule; subclasses choose within a bucket."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.arms = tuple(policy.bandit.arms)
        self.counts: dict[tuple[int, int], int] = {}  # (bucket, draft_len) -> rewards learned from

    def select(self, batch_size: int) -> Arm:
        bucket = self.policy.bucket_of(batch_size)
        if bucket is None:
            return Arm(SD_OFF_BUCKET, 0)
        return Arm(bucket, self._choose(bucket))

    def update(self, arm: Arm, reward: float) -> None:
        if arm.bucket != SD_OFF_BUCKET:
            self._learn(arm, float(reward))

    def _choose(self, bucket: int) -> int | Strategy:
        """A draft length (learning bandits choose among chain arms) or the row's strategy."""
        raise NotImplementedError

    def _learn(self, arm: Arm, reward: float) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"algorithm": type(self).__name__, "arms": list(self.arms)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()` of the same algorithm with the same arms."""
        got = (state.get("algorithm"), [int(a) for a in state.get("arms", [])])
        if got != (type(self).__name__, list(self.arms)):
            raise ValueError(f"bandit state of {got[0]} with arms {got[1]}: this bandit is "
                             f"{type(self).__name__} with arms {list(self.arms)}")


def _rows(d: dict) -> list[list]:
    """A dict keyed by tuples (or ints) as JSON-friendly [*key, value] rows."""
    return [[*(k if isinstance(k, tuple) else (k,)), v] for k, v in sorted(d.items())]


def _unrows(rows: list[list], value=float) -> dict:
    return {(tuple(int(x) for x in r[:-1]) if len(r) > 2 else int(r[0])): value(r[-1]) for r in rows}


class FixedTable(Bandit):
    """The schedule's strategy for each bucket, never changed (vLLM's Dynamic SD, FastRL's buckets)."""

    def _choose(self, bucket: int) -> Strategy:
        return self.policy.strategy_of(bucket)

    def _learn(self, arm: Arm, reward: float) -> None:
        pass


class _Sampled(Bandit):
    """Keeps per-(bucket, arm) reward statistics and a seeded generator."""

    def __init__(self, policy: Policy, seed: int | np.random.SeedSequence):
        super().__init__(policy)
        self.rng = np.random.default_rng(seed)
        self.sums: dict[tuple[int, int], float] = {}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rng": self.rng.bit_generator.state,
                "counts": _rows(self.counts), "sums": _rows(self.sums)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.rng.bit_generator.state = state["rng"]
        self.counts = _unrows(state["counts"], int)
        self.sums = _unrows(state["sums"])

    def _untried(self, bucket: int) -> list[int]:
        return [a for a in self.arms if self.counts.get((bucket, a), 0) == 0]

    def _mean(self, key: tuple[int, int]) -> float:
        return self.sums[key] / self.counts[key]

    def _record(self, key: tuple[int, int], reward: float) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1
        self.sums[key] = self.sums.get(key, 0.0) + reward

    def _argmax(self, values: list[float]) -> int:
        best = max(values)
        ties = [a for a, v in zip(self.arms, values) if v == best]
        return ties[int(self.rng.integers(len(ties)))]


class EpsilonGreedy(_Sampled):
    """Classic epsilon-greedy over draft lengths, one pool for every batch size."""

    def _choose(self, bucket: int) -> int:
        untried = self._untried(0)
        if untried:
            return untried[0]
        if self.rng.random() < self.policy.bandit.epsilon:
            return self.arms[int(self.rng.integers(len(self.arms)))]
        return self._argmax([self._mean((0, a)) for a in self.arms])

    def _learn(self, arm: Arm, reward: float) -> None:
        self._record((0, arm.draft_len), reward)


class BEGMAB(_Sampled):
    """TLT's bucketed epsilon-greedy: per bucket, the mean (or, as FastRL does, the median) of
    the last `window` rewards per arm."""

    def __init__(self, policy: Policy, seed: int | np.random.SeedSequence):
        super().__init__(policy, seed)
        self.recent: dict[tuple[int, int], deque[float]] = {}
        self.recent_sum: dict[tuple[int, int], float] = {}  # kept alongside: select is the hot path

    def _choose(self, bucket: int) -> int:
        untried = self._untried(bucket)
        if untried:
            return untried[0]
        if self.rng.random() < self.policy.bandit.epsilon:
            return self.arms[int(self.rng.integers(len(self.arms)))]
        if self.policy.bandit.reward_stat == "median":
            return self._argmax([float(np.median(self.recent[(bucket, a)])) for a in self.arms])
        return self._argmax([self.recent_sum[(bucket, a)] / len(self.recent[(bucket, a)]) for a in self.arms])

    def _learn(self, arm: Arm, reward: float) -> None:
        key = (arm.bucket, arm.draft_len)
        self._record(key, reward)
        window = self.recent.setdefault(key, deque(maxlen=self.policy.bandit.window))
        dropped = window[0] if len(window) == window.maxlen else 0.0
        window.append(reward)
        # Recompute now and then so float drift cannot build up over millions of updates.
        self.recent_sum[key] = sum(window) if self.counts[key] % 4096 == 0 else self.recent_sum.get(key, 0.0) + reward - dropped

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "recent": _rows({k: list(v) for k, v in self.recent.items()}),
                "recent_sum": _rows(self.recent_sum)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        window = self.policy.bandit.window
        recent = _unrows(state["recent"], list)
        self.recent = {k: deque((float(x) for x in v), maxlen=window) for k, v in recent.items()}
        self.recent_sum = _unrows(state["recent_sum"])
        for k, v in recent.items():
            if len(v) > window:  # saved with a longer window: keep the last `window` rewards
                self.recent_sum[k] = sum(self.recent[k])


class UCB1(_Sampled):
    """UCB1 per bucket; rewards are scaled by the bucket's largest seen so they lie in [0, 1]."""

    def __init__(self, policy: Policy, seed: int | np.random.SeedSequence):
        super().__init__(policy, seed)
        self.scale: dict[int, float] = {}

    def _choose(self, bucket: int) -> int:
        untried = self._untried(bucket)
        if untried:
            return untried[0]
        n = sum(self.counts[(bucket, a)] for a in self.arms)
        scale = self.scale[bucket] or 1.0
        values = [self._mean((bucket, a)) / scale + math.sqrt(2.0 * math.log(n) / self.counts[(bucket, a)])
                  for a in self.arms]
        return self._argmax(values)

    def _learn(self, arm: Arm, reward: float) -> None:
        self._record((arm.bucket, arm.draft_len), reward)
        self.scale[arm.bucket] = max(self.scale.get(arm.bucket, 0.0), reward)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "scale": _rows(self.scale)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.scale = _unrows(state["scale"])


def make_bandit(policy: Policy, seed: int | np.random.SeedSequence) -> Bandit:
    """The policy's bandit; `seed` an int or a stream of `workbench.contracts.seeds`."""
    algorithm = policy.bandit.algorithm
    if algorithm == "fixed":
        return FixedTable(policy)
    cls = {"beg": BEGMAB, "ucb1": UCB1, "egreedy": EpsilonGreedy}[algorithm]
    return cls(policy, seed)
