"""Bandit: picks the draft length for the current batch size from measured rewards.

One interface, `select(batch_size) -> Arm` and `update(arm, reward)`, with the reward what
the engine steps that ran with that arm earned: a `StepReward` (tokens per sequence, seconds,
batch, steps) or a plain float (tokens per second). The same classes run in the simulator
(sim/rollout.py) and in the real rollout engine (real/rollout/adaptive.py), chosen by name
(`bandit.algorithm`, `make_bandit`):

- `fixed` (FixedTable): the schedule's strategy per bucket, never changed;
- `beg` (BEGMAB): TLT's bucketed epsilon-greedy on the mean or median of each arm's last
  `window` rewards (tokens per second);
- `ucb1` (UCB1): UCB1 per bucket;
- `egreedy` (EpsilonGreedy): epsilon-greedy over one pool for every batch size;
- `climb` (Climb): per bucket, a climb from a start table to the best draft length, by tokens
  per sequence per second measured step by step, then epsilon-greedy.

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
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from workbench.contracts.policy import Policy
from workbench.contracts.strategy import Strategy

SD_OFF_BUCKET = -1


@dataclass(frozen=True)
class StepReward:
    """What `steps` engine steps of one arm earned: the tokens each decoding sequence emitted over
    them, their seconds, and the sequences decoding. `rate` is the tokens per second the scalar
    bandits learn from; `climb` learns the per-step tokens per sequence and seconds."""

    tokens: float  # tokens per decoding sequence, over the steps
    seconds: float  # wall time of the steps
    batch: float = 1.0  # sequences decoding
    steps: float = 1.0

    @property
    def rate(self) -> float:
        return self.tokens * self.batch / self.seconds


def as_reward(reward: float | StepReward) -> StepReward:
    """A plain float is a rate: that many tokens in one second."""
    return reward if isinstance(reward, StepReward) else StepReward(float(reward), 1.0)


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
        self._arm_cache: dict[tuple, Arm] = {}

    def select(self, batch_size: int) -> Arm:
        bucket = self.policy.bucket_of(batch_size)
        key = (SD_OFF_BUCKET, 0) if bucket is None else (bucket, self._choose(bucket))
        arm = self._arm_cache.get(key)
        if arm is None:  # arms are values: one per (bucket, choice), built once (the hot path)
            arm = self._arm_cache[key] = Arm(*key)
        return arm

    def update(self, arm: Arm, reward: float | StepReward) -> None:
        if arm.bucket != SD_OFF_BUCKET:
            self._learn(arm, reward.rate if isinstance(reward, StepReward) else float(reward))

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
    return {(tuple(int(x) for x in r[:-1]) if len(r) > 2 else int(r[0])): value(r[-1])
            for r in rows}


class FixedTable(Bandit):
    """The schedule's strategy for each bucket, never changed (vLLM's Dynamic SD, FastRL's
    buckets)."""

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
        return self._argmax([self.recent_sum[(bucket, a)] / len(self.recent[(bucket, a)])
                             for a in self.arms])

    def _learn(self, arm: Arm, reward: float) -> None:
        key = (arm.bucket, arm.draft_len)
        self._record(key, reward)
        window = self.recent.setdefault(key, deque(maxlen=self.policy.bandit.window))
        dropped = window[0] if len(window) == window.maxlen else 0.0
        window.append(reward)
        # Recompute now and then so float drift cannot build up over millions of updates.
        self.recent_sum[key] = (sum(window) if self.counts[key] % 4096 == 0
                                else self.recent_sum.get(key, 0.0) + reward - dropped)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(),
                "recent": _rows({k: list(v) for k, v in self.recent.items()}),
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
        values = [self._mean((bucket, a)) / scale
                  + math.sqrt(2.0 * math.log(n) / self.counts[(bucket, a)]) for a in self.arms]
        return self._argmax(values)

    def _learn(self, arm: Arm, reward: float) -> None:
        self._record((arm.bucket, arm.draft_len), reward)
        self.scale[arm.bucket] = max(self.scale.get(arm.bucket, 0.0), reward)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "scale": _rows(self.scale)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.scale = _unrows(state["scale"])


class Climb(Bandit):
    """Per bucket, a climb from `start` (one draft length per schedule row; the schedule's by
    default) to the best draft length, then epsilon-greedy around it.

    Each choice after a bucket's first (which is its start): while the best arm so far has a
    neighbour (the next shorter or longer chain among the arms) with no measurement, that
    neighbour, the longer first; then the best arm or, with probability `epsilon`, one of the
    others. A chain's value rises with K to one peak and falls past it, so arms beyond a worse
    neighbour are worse still and a sweep of every arm would cost more than it teaches; K=0 (SD
    off) is always an arm, so a bucket where SD loses climbs down to it.

    An arm's value is tokens per sequence per second: its window's (`window` steps) mean tokens per
    sequence per step over its median (`reward_stat: median`, robust to slow outlier steps) or
    mean step time. Not the median of per-step ratios: at batch 1 a step emits 1..K+1 tokens and
    that median sits at the mode, which favours long drafts. Per sequence, so steps of one bucket
    compare whatever their batch size. A `StepReward` of several steps joins the window as one
    step of its mean tokens and time (the simulator's segment of constant batch)."""

    def __init__(self, policy: Policy, seed: int | np.random.SeedSequence,
                 start: Sequence[int] | None = None):
        super().__init__(policy)
        if start is None:
            start = [row.draft_len for row in policy.schedule]
        else:
            start = [int(k) for k in start]
        if len(start) != len(policy.schedule):
            raise ValueError(f"start: {len(start)} draft lengths for the {len(policy.schedule)} "
                             f"rows of policy '{policy.name}'")
        self.start = tuple(start)
        self.arms = tuple(sorted(set(self.arms) | {0} | set(self.start)))
        self.rng = np.random.default_rng(seed)
        self.median = policy.bandit.reward_stat == "median"
        self.chosen: dict[int, int] = {}  # bucket -> its draft length now (absent: never chosen)
        self.windows: dict[tuple[int, int],
                           deque[tuple[float, float]]] = {}  # (tokens, seconds) per step

    def value(self, bucket: int, arm: int) -> float | None:
        """Measured tokens per sequence per second of `arm` in `bucket` (None: never measured)."""
        w = self.windows.get((bucket, arm))
        if not w:
            return None
        tokens = sum(t for t, _ in w) / len(w)
        wall = statistics.median(s for _, s in w) if self.median else sum(s for _, s in w) / len(w)
        return tokens / wall if wall > 0 else None

    def best(self, bucket: int) -> int:
        """The arm with the highest measured value (ties: the shorter; the start while none is)."""
        values = {a: v for a in self.arms if (v := self.value(bucket, a)) is not None}
        if not values:
            return self.start[bucket]
        return max(values, key=lambda a: (values[a], -a))

    def _choose(self, bucket: int) -> int:
        if bucket not in self.chosen:
            arm = self.start[bucket]
        else:
            best = self.best(bucket)
            i = self.arms.index(best)
            near = [a for a in self.arms[max(i - 1, 0):i + 2] if (bucket, a) not in self.windows]
            if near:
                arm = max(near)
            elif len(self.arms) > 1 and self.rng.random() < self.policy.bandit.epsilon:
                others = [a for a in self.arms if a != best]
                arm = others[int(self.rng.integers(len(others)))]
            else:
                arm = best
        self.chosen[bucket] = arm
        return arm

    def update(self, arm: Arm, reward: float | StepReward) -> None:
        if arm.bucket == SD_OFF_BUCKET:
            return
        r = as_reward(reward)
        if r.seconds <= 0 or r.steps <= 0:
            return
        key = (arm.bucket, arm.draft_len)
        self.counts[key] = self.counts.get(key, 0) + 1
        w = self.windows.setdefault(key, deque(maxlen=self.policy.bandit.window))
        w.append((r.tokens / r.steps, r.seconds / r.steps))

    def summary(self) -> dict[int, dict[int, float]]:
        """bucket -> arm -> measured value, for logs and reports."""
        buckets = sorted({b for b, _ in self.windows})
        return {b: {a: v for a in self.arms if (v := self.value(b, a)) is not None}
                for b in buckets}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rng": self.rng.bit_generator.state,
                "start": list(self.start),
                "chosen": _rows(self.chosen), "counts": _rows(self.counts),
                "windows": [[b, a,
                             [list(x) for x in w]] for (b, a), w in sorted(self.windows.items())]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.rng.bit_generator.state = state["rng"]
        self.chosen = _unrows(state["chosen"], int)
        self.counts = _unrows(state["counts"], int)
        window = self.policy.bandit.window
        self.windows = {(int(b), int(a)): deque(((float(t), float(s)) for t, s in w), maxlen=window)
                        for b, a, w in state["windows"]}


ALGORITHMS = {"fixed": FixedTable, "beg": BEGMAB, "ucb1": UCB1, "egreedy": EpsilonGreedy,
              "climb": Climb}


def make_bandit(policy: Policy, seed: int | np.random.SeedSequence,
                start: Sequence[int] | None = None) -> Bandit:
    """The policy's bandit; `seed` an int or a stream of `workbench.contracts.seeds`. `start`: one
    draft length per schedule row that `climb` starts each bucket at (the schedule's by default;
    e.g. what a profile predicts best, workbench/schedule.py); the other algorithms have no
    start."""
    algorithm = policy.bandit.algorithm
    if algorithm == "fixed":
        return FixedTable(policy)
    if algorithm == "climb":
        return Climb(policy, seed, start)
    return ALGORITHMS[algorithm](policy, seed)
