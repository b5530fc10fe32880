"""FastRL's BEG-MAB on real engine steps: draft lengths per batch bucket, learnt from every step.

    controller = StepBandit(engine, policy, seed=0, start=(6, 4, 2, 0, 0))
    run = engine.run_steps(requests, controller=controller)

What it does, per bucket of the policy's schedule (buckets above `sd_threshold` get K=0, as in
real/rollout/adaptive.py):

- It starts at `start` (the draft lengths a profile predicts best, workbench/schedule.py; the
  policy's own schedule without one), and every `bandit.decision_interval` of the bucket's
  steps chooses again: while the best arm so far has a neighbour (the next shorter or longer
  chain among the arms) it has no measurement of, that neighbour; then epsilon-greedy, the best
  arm by its measured value or, with probability `bandit.epsilon`, one of the others. A climb,
  not a sweep of every arm: a chain's value rises with K to one peak and falls past it (more
  tokens a pass, more drafting and verifying), so arms beyond a worse neighbour are worse still,
  and a sweep's stints of far-off arms cost more than they teach: in a quiet 6-step
  `tlt bench real` trace they took ~3% of the TLT engines' decode time (K=0 still runs the
  EAGLE drafter's first pass, for its KV cache, so it decoded at 40-60% of a plain engine's
  speed; K=1-2 at small batches). The epsilon share still tries every arm now and then. K=0
  (SD off) is always an arm, so a bucket where SD loses climbs down to SD off.
- It learns from every engine step (not once per stint): a step's `new_tokens` per decoding
  request and its `wall_s` join the window (`bandit.window` steps) of the arm that step ran.
  vLLM verifies in step s the drafts proposed at the end of step s - 1, so step s's tokens are
  the previous step's K's and its time holds that K's verification and this step's K's
  drafting: a step counts only when both are the same arm in the same bucket, and never with a
  prefill in it (prompt tokens are no decoding).
- An arm's value is its tokens per sequence per second: the window's mean tokens per step over
  its median step time (`bandit.reward_stat: median`, FastRL's choice, robust to the shared
  machine's slow outlier steps), or over the mean step time (`mean`). Not the median of per-step
  ratios: a step emits 1..K+1 tokens at batch 1, and that median sits at the mode, which favours
  long drafts that pay less on average than no SD. Per sequence, so the steps of one bucket
  compare whatever its batch size was when each ran (a CPU step's time is mostly fixed cost).

Why it cannot lose to no SD by much: the choice is by measured value with K=0 among the arms;
what it can lose is the exploration (an epsilon share of a bucket's decisions, each a few steps,
plus one stint per arm the climb passes) and the steps spent before the measurements outweigh a
wrong start. `tlt bench real` measures it.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any, Sequence

import numpy as np

from real.rollout.requests import EngineStepRow
from real.rollout.spec_config import bucket_ranges, close_table
from workbench.contracts.policy import Policy


class StepBandit:
    """Chooses each bucket's draft length from per-step measurements; pass it to `RolloutEngine.run_steps`."""

    def __init__(self, engine: Any, policy: Policy | None = None, seed: int = 0, start: Sequence[int] | None = None):
        self.engine = engine
        self.policy = policy if policy is not None else engine.policy
        cfg = self.policy.bandit
        self.interval, self.epsilon, self.window = cfg.decision_interval, cfg.epsilon, cfg.window
        self.median = cfg.reward_stat == "median"
        cap = engine.max_draft_len
        self.ranges = bucket_ranges(self.policy, engine.max_num_seqs)
        start = [row.draft_len for row in self.policy.schedule] if start is None else list(start)
        if len(start) != len(self.policy.schedule):
            raise ValueError(f"start: {len(start)} draft lengths for the {len(self.policy.schedule)} rows of "
                             f"policy '{self.policy.name}'")
        self.start = {i: min(int(start[i]), cap) for i in self.ranges}
        self.arms = tuple(sorted({a for a in cfg.arms if a <= cap} | {0} | set(self.start.values())))
        self.k = dict(self.start)
        self.rng = np.random.default_rng(seed)
        self.windows: dict[tuple[int, int], deque[tuple[float, float]]] = {}
        self.since: dict[int, int] = {}  # bucket -> its steps since its last choice
        self.prev: tuple[int | None, int] = (None, -1)  # the last step's (bucket, K)
        self.steps = 0
        self.learnt = 0  # steps learnt from
        self.decisions: list[tuple[int, int, int]] = []  # (step, bucket, draft length)
        self.overhead_s = 0.0
        self._apply()

    # ------------------------------------------------------------ the table

    def rows(self) -> list[tuple[int, int, int]]:
        rows = [(lo, hi, self.k[i]) for i, (lo, hi) in sorted(self.ranges.items())]
        return close_table(rows, self.engine.max_num_seqs) if rows else [(1, self.engine.max_num_seqs, 0)]

    def _apply(self) -> None:
        self.engine.set_draft_lengths(self.rows())

    def draft_len_for(self, batch_size: int) -> int:
        """The draft length the table gives a step of `batch_size` now (0: SD off)."""
        bucket = self._bucket(batch_size)
        return self.k[bucket] if bucket is not None else 0

    def _bucket(self, batch_size: int) -> int | None:
        bucket = self.policy.bucket_of(batch_size)
        return bucket if bucket in self.ranges else None

    # ------------------------------------------------------------ values and choices

    def value(self, bucket: int, arm: int) -> float | None:
        """Measured tokens per sequence per second of `arm` in `bucket` (None: never measured)."""
        w = self.windows.get((bucket, arm))
        if not w:
            return None
        tokens = sum(t for t, _ in w) / len(w)
        wall = statistics.median(s for _, s in w) if self.median else sum(s for _, s in w) / len(w)
        return tokens / wall if wall > 0 else None

    def best(self, bucket: int) -> int:
        """The arm with the highest measured value (the start while none is measured)."""
        values = {a: v for a in self.arms if (v := self.value(bucket, a)) is not None}
        if not values:
            return self.start[bucket]
        return max(values, key=lambda a: (values[a], -a))

    def choose(self, bucket: int) -> int:
        best = self.best(bucket)
        i = self.arms.index(best)
        near = [a for a in self.arms[max(i - 1, 0):i + 2] if (bucket, a) not in self.windows]
        if near:  # climb: an untried neighbour of the best arm, the longer chain first
            return max(near)
        if len(self.arms) > 1 and self.rng.random() < self.epsilon:
            others = [a for a in self.arms if a != best]
            return others[int(self.rng.integers(len(others)))]
        return best

    # ------------------------------------------------------------ the engine's hooks

    def before_step(self, batch_size: int) -> None:
        t = time.perf_counter()
        bucket = self._bucket(batch_size)
        if bucket is not None:
            n = self.since.get(bucket)
            if n is None or n >= self.interval:
                arm = self.choose(bucket) if n is not None else self.start[bucket]
                self.since[bucket] = 0
                self.decisions.append((self.steps, bucket, arm))
                if arm != self.k[bucket]:
                    self.k[bucket] = arm
                    self._apply()
        self.overhead_s += time.perf_counter() - t

    def after_step(self, row: EngineStepRow) -> None:
        t = time.perf_counter()
        bucket = self._bucket(int(row.batch_size))
        k = self.k[bucket] if bucket is not None else 0
        row.chosen_k = k
        if bucket is not None:
            self.since[bucket] = self.since.get(bucket, 0) + 1
            clean = self.prev == (bucket, k) and row.prefill_requests == 0 and row.decode_requests > 0
            if clean and row.wall_s > 0:
                w = self.windows.setdefault((bucket, k), deque(maxlen=self.window))
                w.append((row.new_tokens / row.decode_requests, float(row.wall_s)))
                self.learnt += 1
        self.prev = (bucket, k)
        self.steps += 1
        self.overhead_s += time.perf_counter() - t

    def end_rollout(self) -> None:
        """Between rollouts: the next one's first step verifies nothing of this one's last."""
        self.prev = (None, -1)

    def table_summary(self) -> dict[int, dict[int, float]]:
        """bucket -> arm -> measured value (tokens per sequence per second), for logs and reports."""
        return {b: {a: v for a in self.arms if (v := self.value(b, a)) is not None} for b in sorted(self.ranges)}

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "step", "rng": self.rng.bit_generator.state, "steps": self.steps, "learnt": self.learnt,
                "k": [[b, k] for b, k in sorted(self.k.items())], "since": [[b, n] for b, n in sorted(self.since.items())],
                "windows": [[b, a, [list(x) for x in w]] for (b, a), w in sorted(self.windows.items())]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "step":
            raise ValueError("a bandit state saved by another controller (per-stint learning); this one learns per step")
        saved = {int(b): int(k) for b, k in state["k"]}
        if set(saved) != set(self.k):
            raise ValueError(f"saved buckets {sorted(saved)} are not this controller's {sorted(self.k)}")
        self.rng.bit_generator.state = state["rng"]
        self.steps, self.learnt = int(state["steps"]), int(state["learnt"])
        self.k = {b: min(k, self.engine.max_draft_len) for b, k in saved.items()}
        self.since = {int(b): int(n) for b, n in state["since"]}
        self.windows = {(int(b), int(a)): deque(((float(t), float(s)) for t, s in w), maxlen=self.window)
                        for b, a, w in state["windows"]}
        self.prev = (None, -1)
        self._apply()
