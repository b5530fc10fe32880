"""Synchronous RL, one step after the other: rollout, update, sync, record.

The rollout (sim/rounds.py) runs to the end (`sync`), or stops once enough groups are complete
(`partial`, APRIL; `tail_batching`, RollPacker); then the policy trains on every GPU and the
weights reach every engine, which all wait for it.
"""

from __future__ import annotations

from sim.costs import train_phase_s
from sim.results import StepLog, step_metrics
from sim.rounds import Rollouts


class SyncSteps:
    """The step loop of synchronous RL over `rollouts`."""

    def __init__(self, rollouts: Rollouts):
        self.rollouts = rollouts
        self.version = 0  # weights version: policy updates done

    def steps(self, steps: int, log: StepLog):
        """Run `steps` RL steps (a SimPy process)."""
        for step in range(steps):
            yield from self.step(step, log)

    def step(self, step: int, log: StepLog):
        r = self.rollouts
        wl, ph = r.workload, r.profile.phases
        rolled = yield from r.rollout(step)
        spot = r.spot_trains(step)
        # The wait for the spot trainers to stop goes on the timeline as sync (no worker rolls
        # out or updates then); `spot_stop_s` is what the sync took longer for it.
        if spot and ph.spot_stop_s > 0:
            yield from self.phase(step, "sync", ph.spot_stop_s)
        yield from self.phase(step, "train", train_phase_s(ph, rolled.tokens, wl.gpus))
        sync_s = ph.weight_sync_s + (ph.drafter_sync_s if spot else 0.0)
        yield from self.phase(step, "sync", sync_s)
        self.version += 1
        r.pool.take_weights(self.version)
        r.policy_updated()
        # A step's intervals are contiguous: its phases follow its rollout.
        frame = r.timeline.frame(rolled.first_row)
        log.add(step_metrics(step, frame, wl.workers, wl.max_response_tokens, rolled.info))

    def phase(self, step: int, state: str, seconds: float):
        """Every worker in `state` for `seconds`."""
        env = self.rollouts.env
        start = env.now
        yield env.timeout(seconds)
        for w in range(self.rollouts.workload.workers):
            self.rollouts.timeline.add(step, w, start, env.now, state)

    def finish(self, log: StepLog) -> None:
        """Every step was reported as it ended."""
