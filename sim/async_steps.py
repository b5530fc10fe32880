"""Asynchronous RL (Policy.rollout.mode `async`): the engines are split into a rollout pool and
a trainer, and rollouts overlap training.

The rollout of step j waits only for weights of version j - k (k = `max_staleness`; version v =
after v updates), so it runs on weights up to k updates old (each step reports its samples'
`policy_lag`). Its step time is the interval between two updates (the pipeline's pace).
"""

from __future__ import annotations

from dataclasses import replace

import simpy

from sim.costs import train_phase_s
from sim.results import StepInfo, StepLog, StepMetrics, step_metrics
from sim.rounds import Rolled, Rollouts
from workbench.contracts.timeline import Timeline


class AsyncSteps:
    """The step loop of asynchronous RL over `rollouts` (the pool's side and the trainer's)."""

    def __init__(self, rollouts: Rollouts):
        self.rollouts = rollouts
        self.engines = rollouts.pool.workers  # the trainer's lane follows the pool's
        self.version = 0  # weights version: policy updates done

    def steps(self, steps: int, log: StepLog):
        """The rollout pool's side: rollout j starts once weights of version j - k exist, taking
        the newest weights first (a sync pause) unless they reach it mid-rollout (interrupt
        mode)."""
        r = self.rollouts
        env, pool, k = r.env, r.pool, int(r.policy.rollout.max_staleness)
        ready = [env.event() for _ in range(steps + 1)]
        ready[0].succeed()
        rolled = [env.event() for _ in range(steps)]
        env.process(self.trainer(steps, rolled, ready, log))
        for j in range(steps):
            waited_from = env.now
            yield ready[max(0, j - k)]
            for w in range(self.engines):  # waiting for weights recent enough: the pool is idle
                r.timeline.add(j, w, waited_from, env.now, "idle")
            if pool.oldest_version() < self.version and not pool.interruptible:
                yield from pool.sync_all(j, self.version)
            result = yield from r.rollout(j)
            rolled[j].succeed(result)

    def trainer(self, steps: int, rolled: list[simpy.Event], ready: list[simpy.Event],
                log: StepLog):
        """The trainer's side: each rollout's samples, in order, on the engines given to
        training."""
        r = self.rollouts
        env, wl = r.env, r.workload
        gpus = (wl.workers - self.engines) * wl.gpus_per_worker
        last_update = 0.0
        for j in range(steps):
            result: Rolled = yield rolled[j]
            start = env.now
            yield env.timeout(train_phase_s(r.profile.phases, result.tokens, gpus))
            r.timeline.add(j, self.engines, start, env.now, "train")  # the trainer's own lane
            self.version = j + 1
            r.pool.push(self.version)
            r.policy_updated()
            ready[j + 1].succeed()
            m = pool_metrics(r.timeline, result.first_row, j, self.engines,
                             wl.max_response_tokens, result.info)
            log.add(replace(m, step_time_s=float(env.now - last_update),
                            train_time_s=float(env.now - start)))
            last_update = env.now

    def finish(self, log: StepLog) -> None:
        """Every step was reported as its update ended."""


def pool_metrics(timeline: Timeline, first_row: int, step: int, engines: int, cap: int,
                 info: StepInfo) -> StepMetrics:
    """A step's metrics from the rollout pool's rows (the trainer's lane left out): its decode
    and idle time from the rows other than sync, and its sync time per engine."""
    rows = timeline.frame(first_row, step)
    pool = rows[rows["worker"] < engines]
    sync = pool[pool["state"] == "sync"]
    m = step_metrics(step, pool[pool["state"] != "sync"], engines, cap, info)
    return replace(m, sync_time_s=float((sync["end_s"] - sync["start_s"]).sum() / engines))
