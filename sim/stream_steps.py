"""Fully asynchronous RL (Policy.rollout.stream): the trainer drives a streaming pool.

The trainer takes groups as they complete (sim/streaming.py), trains them in `minibatches`
updates, pushes the weights, and lets prompts in up to (version + 1 + max_staleness) x
prompts_per_step launched. A step's rows end when the next weights cut them, after the trainer
has moved on, so a step is reported once the step after it has ended too (the last two when the
run ends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.async_steps import pool_metrics
from sim.costs import train_phase_s
from sim.entities import Group
from sim.results import StepInfo, StepLog, StepMetrics
from sim.rounds import Rollouts, trained_info
from sim.streaming import StreamingPool


@dataclass(frozen=True)
class Streamed:
    """A streamed step, kept until its rows are all written."""

    step: int
    info: StepInfo
    trained: list[Group]
    first_row: int  # its rows begin after this one
    start_s: float  # the update before it
    end_s: float  # its update
    train_s: float  # the trainer's busy time


class StreamSteps:
    """The trainer's step loop over a streaming pool."""

    def __init__(self, rollouts: Rollouts, pool: StreamingPool):
        self.rollouts, self.pool = rollouts, pool
        self.version = 0  # weights version: policy updates done
        self.launched = 0  # groups let in so far
        self.trained: list[Streamed] = []  # steps trained, reported once their rows are written

    def steps(self, steps: int, log: StepLog):
        """Run `steps` updates (a SimPy process), then stop the engines."""
        r, pool = self.rollouts, self.pool
        drafting = r.drafting(0)
        self.offer()
        pool.start_engines(drafting)
        for j in range(steps):
            yield from self.step(j)
            self.report(log, j - 1)
        pool.close()

    def step(self, j: int):
        """One update: its groups in minibatches as they complete, then new weights and prompts."""
        r, pool = self.rollouts, self.pool
        env, wl = r.env, r.workload
        gpus = (wl.workers - pool.workers) * wl.gpus_per_worker
        trained, train_s, first_row, begun = [], 0.0, len(r.timeline.rows), env.now
        for size in minibatch_sizes(wl.prompts_per_step, r.policy.rollout.minibatches):
            batch = []
            for _ in range(size):
                batch.append((yield pool.done.get()))
            start = env.now
            yield env.timeout(train_phase_s(r.profile.phases, r.tokens(batch), gpus))
            r.timeline.add(j, pool.workers, start, env.now, "train")  # the trainer's own lane
            trained, train_s = trained + batch, train_s + env.now - start
        left = self.launched - (j + 1) * wl.prompts_per_step
        info = trained_info(j, trained, left, pool.drafting.kind, r.drafter.quality, 0.0,
                            "stream")
        self.trained.append(Streamed(j, info, trained, first_row, begun, env.now, train_s))
        self.version = j + 1
        r.policy_updated()
        pool.new_weights(self.version, r.drafting(self.version))
        self.offer()

    def offer(self) -> None:
        """Let prompts in up to the staleness bound (the prompts of step b are drawn as in every
        other mode, so policies still see the same responses)."""
        r = self.rollouts
        p, k = r.workload.prompts_per_step, r.policy.rollout.max_staleness
        allowed = math.floor((self.version + 1 + k) * p + 1e-9)
        if r.replay is not None:
            allowed = min(allowed, len(r.replay) * p)
        groups = [r.new_groups(n // p, 1, n % p)[0] for n in range(self.launched, allowed)]
        self.launched = max(self.launched, allowed)
        self.pool.offer(groups)

    def report(self, log: StepLog, before: int | None) -> None:
        """Metrics of the streamed steps before step `before` (all of them if it is None)."""
        while len(log.metrics) < len(self.trained) and (before is None
                                                         or len(log.metrics) < before):
            log.add(self.metrics(self.trained[len(log.metrics)]))

    def finish(self, log: StepLog) -> None:
        """The run ended: report the steps still waiting for their rows."""
        self.report(log, None)

    def metrics(self, s: Streamed) -> StepMetrics:
        """The pool's rows between two updates give the step's decode and idle time; its rollout
        time is from the first start to the last finish of the groups it trained."""
        r = self.rollouts
        m = pool_metrics(r.timeline, s.first_row, s.step, self.pool.workers,
                         r.workload.max_response_tokens, s.info)
        first = min(g.started_s for g in s.trained)
        rollout_s = float(max(g.finished_s for g in s.trained) - first)
        return replace(m, step_time_s=s.end_s - s.start_s, train_time_s=s.train_s,
                       rollout_time_s=rollout_s)


def minibatch_sizes(groups: int, minibatches: int) -> list[int]:
    """A step's groups split into `minibatches` near-equal updates."""
    return [groups * (i + 1) // minibatches - groups * i // minibatches
            for i in range(minibatches)]
