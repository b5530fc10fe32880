"""Draft lengths chosen by a Bandit while a vLLM engine runs, between two engine steps.

`make_controller` picks the controller for a policy: FastRL's BEG-MAB (`bandit.algorithm: beg`
with `reward_stat: median`) learns from every engine step (real/rollout/step_bandit.py); every
other bandit runs here, per stint as the simulator runs it:

    engine = RolloutEngine(model, load_policy("tlt-cold"), drafter_dir=..., adaptive=True)
    controller = BanditController(engine, seed=0)
    run = engine.run_steps(requests, controller=controller)  # each row's `chosen_k` is set

The rule is the simulator's (sim/simulator.py), on real engine steps:

- A step's batch (the requests it schedules) lies in one bucket of the policy's schedule, or
  above `sd_threshold`, where the engine's table holds K=0 and nothing is chosen or learned.
- Each bucket runs stints. At the first step of a bucket, and once its stint has run
  `bandit.decision_interval` steps, the bandit chooses that bucket's draft length
  (`select(batch)`) and the engine's table changes for that bucket only (`set_draft_lengths`).
- A stint's reward is its tokens per second, the sum of its steps' `new_tokens` over the sum of
  their `wall_s`, given to the bandit (`update`) when the stint ends: one update per choice, as
  in the simulator (`decision_interval`: steps between two choices and two reward updates).
  A step counts for the bucket of the batch it actually scheduled.
- `row.chosen_k` is the draft length the table gave the step's batch: the drafts proposed at
  the end of that step. vLLM verifies them in the next step, so the next row's `draft_len`
  (what vLLM counted) is this row's `chosen_k`; a stint's first step is still paid by the
  previous choice, which a long interval makes negligible.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from real.rollout.requests import EngineStepRow
from real.rollout.spec_config import bucket_ranges, close_table
from real.rollout.step_bandit import StepBandit
from workbench.contracts.bandit import SD_OFF_BUCKET, Arm, Bandit, make_bandit
from workbench.contracts.policy import Policy


@dataclass
class _Stint:
    arm: Arm
    steps: int = 0
    tokens: int = 0
    wall_s: float = 0.0

    def reward(self) -> float | None:
        return self.tokens / self.wall_s if self.steps and self.wall_s > 0 else None


class BanditController:
    """Chooses each bucket's draft length with a Bandit; pass it to `RolloutEngine.run_steps`."""

    def __init__(self, engine: Any, policy: Policy | None = None, seed: int = 0, bandit: Bandit | None = None):
        self.engine = engine
        self.policy = policy if policy is not None else engine.policy
        self.bandit = bandit if bandit is not None else make_bandit(self.policy, seed)
        self.interval = self.policy.bandit.decision_interval
        cap = engine.max_draft_len
        # bucket -> its batch sizes on this engine (cut at the threshold and at max_num_seqs)
        self.ranges = bucket_ranges(self.policy, engine.max_num_seqs)
        self.k = {i: min(self.policy.schedule[i].draft_len, cap) for i in self.ranges}
        self.stints: dict[int, _Stint] = {}
        self.steps = 0
        self.decisions: list[tuple[int, int, int]] = []  # (step, bucket, draft length)
        self.overhead_s = 0.0  # time spent in before_step / after_step
        self._apply()

    # ------------------------------------------------------------ the table

    def rows(self) -> list[tuple[int, int, int]]:
        """The engine's table as this controller keeps it: the buckets' K, then K=0 above them."""
        rows = [(lo, hi, self.k[i]) for i, (lo, hi) in sorted(self.ranges.items())]
        if not rows:
            return [(1, self.engine.max_num_seqs, 0)]
        return close_table(rows, self.engine.max_num_seqs)

    def _apply(self) -> None:
        self.engine.set_draft_lengths(self.rows())

    def _bucket(self, batch_size: int) -> int | None:
        bucket = self.policy.bucket_of(batch_size)
        return bucket if bucket in self.ranges else None

    # ------------------------------------------------------------ the engine's hooks

    def before_step(self, batch_size: int) -> None:
        t = time.perf_counter()
        bucket = self._bucket(batch_size)
        stint = self.stints.get(bucket) if bucket is not None else None
        if bucket is not None and (stint is None or stint.steps >= self.interval):
            if stint is not None:
                self._learn(stint)
            arm = self.bandit.select(batch_size)
            if arm.bucket != SD_OFF_BUCKET:
                self.stints[bucket] = _Stint(arm)
                self.decisions.append((self.steps, bucket, arm.draft_len))
                if self.k[bucket] != arm.draft_len:
                    self.k[bucket] = arm.draft_len
                    self._apply()
        self.overhead_s += time.perf_counter() - t

    def after_step(self, row: EngineStepRow) -> None:
        t = time.perf_counter()
        bucket = self._bucket(int(row.batch_size))
        row.chosen_k = self.k[bucket] if bucket is not None else 0
        stint = self.stints.get(bucket) if bucket is not None else None
        if stint is not None:
            stint.steps += 1
            stint.tokens += int(row.new_tokens)
            stint.wall_s += float(row.wall_s)
        self.steps += 1
        self.overhead_s += time.perf_counter() - t

    def _learn(self, stint: _Stint) -> None:
        reward = stint.reward()
        if reward is not None:
            self.bandit.update(stint.arm, reward)

    # ------------------------------------------------------------ checkpoints

    def end_rollout(self) -> None:
        """Between rollouts: nothing to forget (a stint's tokens and time span rollouts, as in the
        simulator); StepBandit's counterpart forgets the last step's draft length."""

    def state_dict(self) -> dict[str, Any]:
        """The bandit's state, the buckets' draft lengths and the open stints (JSON-serialisable)."""
        return {"bandit": self.bandit.state_dict(), "steps": self.steps,
                "k": [[b, k] for b, k in sorted(self.k.items())],
                "stints": [[b, s.arm.bucket, s.arm.draft_len, s.steps, s.tokens, s.wall_s]
                           for b, s in sorted(self.stints.items())]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()`; the engine's table is set to the saved draft lengths."""
        self.bandit.load_state_dict(state["bandit"])
        self.steps = int(state["steps"])
        saved = {int(b): int(k) for b, k in state["k"]}
        if set(saved) != set(self.k):
            raise ValueError(f"saved buckets {sorted(saved)} are not this controller's {sorted(self.k)}")
        self.k = saved
        self.stints = {int(b): _Stint(Arm(int(ab), int(ak)), int(n), int(tok), float(w))
                       for b, ab, ak, n, tok, w in state["stints"]}
        self._apply()


def make_controller(engine: Any, policy: Policy | None = None, seed: int = 0, start: Sequence[int] | None = None) -> Any:
    """The policy's controller on `engine`: a StepBandit for FastRL's BEG-MAB (beg, median), which
    starts each bucket at `start` (one draft length per schedule row, e.g. what a profile predicts
    best: workbench/schedule.py); else a BanditController, which starts at the policy's schedule
    (`start` then becomes the schedule's draft lengths)."""
    policy = policy if policy is not None else engine.policy
    if policy.bandit.algorithm == "beg" and policy.bandit.reward_stat == "median":
        return StepBandit(engine, policy, seed=seed, start=start)
    if start is not None:
        if len(start) != len(policy.schedule):
            raise ValueError(f"start: {len(start)} draft lengths for the {len(policy.schedule)} rows of "
                             f"policy '{policy.name}'")
        policy = replace(policy, schedule=tuple(replace(row, draft_len=int(k)) for row, k in zip(policy.schedule, start)))
    return BanditController(engine, policy, seed=seed)
