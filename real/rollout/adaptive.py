"""The glue between a Bandit (workbench/contracts/bandit.py) and a running vLLM engine.

    engine = RolloutEngine(model, load_policy("tlt-vllm"), drafter_dir=..., adaptive=True)
    controller = BanditController(engine, seed=0, start=(6, 4, 4, 3, 2, 0))
    run = engine.run_steps(requests, controller=controller)  # each row's `chosen_k` is set

The bandit is the one the simulator runs for the same policy (`make_bandit`); this module only
turns engine steps into (arm, reward) observations and applies the chosen draft lengths:

- A step's batch (the requests it schedules) lies in one bucket of the policy's schedule, or
  above `sd_threshold`, where the engine's table holds K=0 and nothing is chosen or learned.
- At a bucket's first step, and every `bandit.decision_interval` of its steps after that, the
  bandit chooses that bucket's draft length (`select(batch)`) and the engine's table changes
  for that bucket only (`set_draft_lengths`).
- Rewards: `climb` learns from every clean step, a `StepReward` of its tokens per decoding
  sequence and its wall time. vLLM verifies in step s the drafts proposed at the end of step
  s - 1, so a step is clean when the previous step ran the same arm in the same bucket, and
  has no prefill (prompt tokens are no decoding). Every other bandit gets one reward per choice,
  as in the simulator: once a choice has run `decision_interval` steps, their tokens over
  their seconds.
- `row.chosen_k` is the draft length the table gave the step's batch: the drafts proposed at
  the end of that step, which vLLM verifies in the next step (the next row's `draft_len`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from real.rollout.requests import EngineStepRow
from real.rollout.spec_config import bucket_ranges, close_table
from workbench.contracts.bandit import Arm, Bandit, Climb, StepReward, make_bandit
from workbench.contracts.policy import Policy


@dataclass
class _Stint:
    """The steps one choice of a bucket has run so far (bandits that learn once per choice)."""

    tokens: int = 0
    wall_s: float = 0.0


def step_reward(row: EngineStepRow) -> StepReward:
    """One engine step as the per-step bandit learns it."""
    return StepReward(
        row.new_tokens / row.decode_requests, float(row.wall_s), float(row.decode_requests)
    )


class BanditController:
    """Chooses each bucket's draft length with the policy's Bandit; pass it to
    `RolloutEngine.run_steps`. `start`: the draft length each schedule row starts at (`climb`'s
    start, and every bandit's table before its first choice; the schedule's by default)."""

    def __init__(
        self,
        engine: Any,
        policy: Policy | None = None,
        seed: int = 0,
        start: Sequence[int] | None = None,
        bandit: Bandit | None = None,
    ):
        self.engine = engine
        self.policy = policy if policy is not None else engine.policy
        cap = engine.max_draft_len
        table = (
            [row.draft_len for row in self.policy.schedule]
            if start is None
            else [int(k) for k in start]
        )
        if len(table) != len(self.policy.schedule):
            raise ValueError(
                f"start: {len(table)} draft lengths for the {len(self.policy.schedule)} rows of "
                f"policy '{self.policy.name}'"
            )
        table = [min(k, cap) for k in table]
        self.bandit = bandit if bandit is not None else make_bandit(self.policy, seed, start=table)
        self.per_step = isinstance(self.bandit, Climb)
        self.interval = self.policy.bandit.decision_interval
        # bucket -> its batch sizes on this engine (cut at the threshold and at max_num_seqs)
        self.ranges = bucket_ranges(self.policy, engine.max_num_seqs)
        self.k = {i: table[i] for i in self.ranges}
        self.since: dict[int, int] = {}  # bucket -> its steps since its last choice
        self.stints: dict[int, _Stint] = {}
        self.prev: tuple[int | None, int] = (None, -1)  # the last step's (bucket, K)
        self.steps = 0
        self.learnt = 0  # rewards given to the bandit
        self.decisions: list[tuple[int, int, int]] = []  # (step, bucket, draft length)
        self.overhead_s = 0.0  # time spent in before_step / after_step
        self._apply()

    # ------------------------------------------------------------ the table

    def rows(self) -> list[tuple[int, int, int]]:
        """The engine's table as this controller keeps it: the buckets' K, then K=0 above them."""
        rows = [(lo, hi, self.k[i]) for i, (lo, hi) in sorted(self.ranges.items())]
        return (
            close_table(rows, self.engine.max_num_seqs)
            if rows
            else [(1, self.engine.max_num_seqs, 0)]
        )

    def _apply(self) -> None:
        self.engine.set_draft_lengths(self.rows())

    def draft_len_for(self, batch_size: int) -> int:
        """The draft length the table gives a step of `batch_size` now (0: SD off)."""
        bucket = self._bucket(batch_size)
        return self.k[bucket] if bucket is not None else 0

    def _bucket(self, batch_size: int) -> int | None:
        bucket = self.policy.bucket_of(batch_size)
        return bucket if bucket in self.ranges else None

    # ------------------------------------------------------------ the engine's hooks

    def before_step(self, batch_size: int) -> None:
        t = time.perf_counter()
        bucket = self._bucket(batch_size)
        if bucket is not None and self.since.get(bucket, self.interval) >= self.interval:
            arm = self.bandit.select(batch_size)
            self.since[bucket] = 0
            self.stints[bucket] = _Stint()
            self.decisions.append((self.steps, bucket, arm.draft_len))
            if arm.draft_len != self.k[bucket]:
                self.k[bucket] = arm.draft_len
                self._apply()
        self.overhead_s += time.perf_counter() - t

    def after_step(self, row: EngineStepRow) -> None:
        t = time.perf_counter()
        bucket = self._bucket(int(row.batch_size))
        k = self.k[bucket] if bucket is not None else 0
        row.chosen_k = k
        if bucket is not None and bucket in self.since:
            self.since[bucket] += 1
            if self.per_step:
                self._learn_step(bucket, k, row)
            else:
                self._learn_stint(bucket, k, row)
        self.prev = (bucket, k)
        self.steps += 1
        self.overhead_s += time.perf_counter() - t

    def _learn_step(self, bucket: int, k: int, row: EngineStepRow) -> None:
        clean = self.prev == (bucket, k) and row.prefill_requests == 0 and row.decode_requests > 0
        if clean and row.wall_s > 0:
            self.bandit.update(Arm(bucket, k), step_reward(row))
            self.learnt += 1

    def _learn_stint(self, bucket: int, k: int, row: EngineStepRow) -> None:
        stint = self.stints[bucket]
        stint.tokens += int(row.new_tokens)
        stint.wall_s += float(row.wall_s)
        if self.since[bucket] == self.interval and stint.wall_s > 0:
            self.bandit.update(Arm(bucket, k), stint.tokens / stint.wall_s)
            self.learnt += 1

    def end_rollout(self) -> None:
        """Between rollouts: the next one's first step verifies nothing of this one's last (a
        choice's steps and rewards still span rollouts, as in the simulator)."""
        self.prev = (None, -1)

    def table_summary(self) -> dict[int, dict[int, float]]:
        """bucket -> arm -> measured value (`climb`: tokens per sequence per second), for logs."""
        return self.bandit.summary() if isinstance(self.bandit, Climb) else {}

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The bandit's state, the buckets' draft lengths and their open choices
        (JSON-serialisable)."""
        return {"bandit": self.bandit.state_dict(), "steps": self.steps, "learnt": self.learnt,
                "k": [[b, k] for b, k in sorted(self.k.items())],
                "since": [[b, n] for b, n in sorted(self.since.items())],
                "stints": [[b, s.tokens, s.wall_s] for b, s in sorted(self.stints.items())]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()`; the engine's table is set to the saved draft lengths."""
        if "since" not in state:
            raise ValueError(
                "a controller state without 'since': saved by another version of this controller; "
                "start the run in a fresh --out"
            )
        saved = {int(b): int(k) for b, k in state["k"]}
        if set(saved) != set(self.k):
            raise ValueError(
                f"saved buckets {sorted(saved)} are not this controller's {sorted(self.k)}"
            )
        self.bandit.load_state_dict(state["bandit"])
        self.steps, self.learnt = int(state["steps"]), int(state["learnt"])
        self.k = {b: min(k, self.engine.max_draft_len) for b, k in saved.items()}
        self.since = {int(b): int(n) for b, n in state["since"]}
        self.stints = {int(b): _Stint(int(tok), float(w)) for b, tok, w in state["stints"]}
        self.prev = (None, -1)
        self._apply()
