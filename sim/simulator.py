"""The RL-step simulator: SimPy runs the step loop of the policy's rollout mode.

A step is a rollout on a pool of engines (sim/rounds.py, sim/rollout.py: each engine decodes
its shard with continuous batching, then idles, a bubble, or spot-trains the drafter until the
last one finishes), the update, and the weights' sync. The rollout mode (Policy.rollout) picks
the step loop:
- `sync`, `partial` (APRIL), `tail_batching` (RollPacker): sim/sync_steps.py;
- `async`, a rollout pool beside a trainer, rollouts on weights up to `max_staleness` updates
  old: sim/async_steps.py;
- streaming (fully asynchronous RL; AReaL): sim/stream_steps.py over sim/streaming.py;
- DAPO's dynamic sampling (Workload.dynamic_sampling) changes what a step's rollout decodes
  and keeps: sim/dynamic_sampling.py.
Models of lengths, costs, acceptance and drafter learning are pure functions (`sim.lengths`,
`sim.costs`, `sim.acceptance`, `sim.drafter`); the entities they act on are in sim/entities.py.

Random numbers: each prompt's responses come from (seed, step, prompt index) alone, so every
policy sees the same responses (common random numbers); bandits and acceptance noise have
their own streams per engine.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import numpy as np
import simpy

from sim.agent_pool import AgentPool
from sim.agent_rollouts import AgentRollouts, check_agentic
from sim.agent_streaming import AgentStreamingPool
from sim.async_steps import AsyncSteps
from sim.drafter import DrafterState
from sim.dynamic_sampling import FilteredRollouts
from sim.results import PolicyRun, StepLog, StepMetrics
from sim.rollout import RolloutPool
from sim.rounds import Rollouts
from sim.stream_steps import StreamSteps
from sim.streaming import StreamingPool
from sim.sync_steps import SyncSteps
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.timeline import Timeline
from workbench.contracts.workload import Workload

# Responses x steps (plus workers x steps) a run may simulate: ~2 minutes on this project's
# 2-core machines (`tlt bench sim` measures the rate of yours).
MAX_WORK = 2_000_000


def check_size(workload: Workload, steps: int) -> None:
    """Refuse a run far beyond what a simulation should take (minutes here), before it starts.

    The work is ~ linear in responses x steps plus workers x steps (docs/formats.md, "Limits");
    `TLT_SIM_MAX_WORK` raises the limit for a user who means it."""
    limit = int(os.environ.get("TLT_SIM_MAX_WORK", MAX_WORK))
    turns = workload.agentic.max_turns if workload.agentic.enabled else 1
    work = steps * (workload.sequences_per_step * turns + workload.workers)
    if work > limit:
        raise ConfigError(workload.name, "workers, prompts_per_step x group_size, steps",
                          f"{work:,} units of work",
                          f"at most {limit:,} per run ((prompts_per_step x group_size + workers)"
                          " x steps; docs/formats.md#limits): lower them, or set "
                          "TLT_SIM_MAX_WORK to allow more")


def rollout_engines(workload: Workload, policy: Policy) -> int:
    """Engines that roll out: all of them, or in async mode those not given to the trainer."""
    if policy.rollout.mode != "async":
        return workload.workers
    trainers = max(1, round(workload.workers * policy.rollout.train_share))
    if workload.workers - trainers < 1:
        raise ConfigError(workload.name, "workers", workload.workers,
                          f">= 2 for policy '{policy.name}' (async mode trains on {trainers} "
                          "engine(s) and rolls out on the others)")
    return workload.workers - trainers


class Simulator:
    def __init__(self, workload: Workload, policy: Policy, profile: Profile, seed: int = 0,
                 replay: list[np.ndarray] | None = None, start: Sequence[int] | None = None):
        """`replay[step]`, if given, holds that step's response lengths (prompt-major,
        group_size per prompt) to use instead of sampling them: how a traced run is
        re-simulated. `start`: the draft length each schedule row starts at (`climb`; the
        schedule's by default)."""
        self.workload, self.policy, self.profile, self.seed = workload, policy, profile, seed
        self.env = simpy.Environment()
        self.timeline = Timeline()
        self.engines = rollout_engines(workload, policy)
        agentic = workload.agentic.enabled
        check_agentic(workload, replay)
        if policy.rollout.stream:
            pool = AgentStreamingPool if agentic else StreamingPool
        else:
            pool = AgentPool if agentic else RolloutPool
        self.pool = pool(self.env, self.timeline, workload, policy, profile, seed, self.engines,
                         start)
        rollouts = (FilteredRollouts if workload.dynamic_sampling.enabled else AgentRollouts
                    if agentic else Rollouts)
        self.rollouts = rollouts(workload, policy, profile, seed, replay, self.env,
                                 self.timeline, self.pool)
        if workload.dynamic_sampling.enabled and policy.rollout.stream:
            raise ConfigError(workload.name, "dynamic_sampling.enabled", True,
                              f"false for policy '{policy.name}': DAPO's filtering is not "
                              "simulated with streaming rollouts")
        self.loop = step_loop(self.rollouts, self.pool)

    @property
    def drafter(self) -> DrafterState:
        """The drafter's state: where a run starts from (settable before `run`) and ends."""
        return self.rollouts.drafter

    @drafter.setter
    def drafter(self, state: DrafterState) -> None:
        self.rollouts.drafter = state

    def run(self, steps: int | None = None,
            on_step: Callable[[StepMetrics], None] | None = None) -> PolicyRun:
        """Simulate `steps` RL steps (default: the workload's); `on_step` hears of each as it
        ends."""
        n = steps if steps is not None else self.workload.steps
        check_size(self.workload, n)
        log = StepLog(on_step)
        self.env.process(self.loop.steps(n, log))
        self.env.run()
        self.loop.finish(log)
        agentic = isinstance(self.pool, (AgentPool, AgentStreamingPool))
        turns = self.pool.turn_frame() if agentic else None
        return PolicyRun(self.policy.name, log.metrics, self.timeline.frame(),
                         self.rollouts.filtering, turns)


def step_loop(rollouts: Rollouts, pool: RolloutPool) -> SyncSteps | AsyncSteps | StreamSteps:
    """The step loop of the policy's rollout mode: a streaming pool (Policy.rollout.stream) is
    driven by its trainer; otherwise rollouts alternate with updates, or overlap them (`async`)."""
    if isinstance(pool, StreamingPool):
        return StreamSteps(rollouts, pool)
    return AsyncSteps(rollouts) if rollouts.policy.rollout.mode == "async" else SyncSteps(rollouts)


def simulate(workload: Workload, policy: Policy, profile: Profile, seed: int = 0,
             steps: int | None = None, on_step: Callable[[StepMetrics], None] | None = None,
             replay: list[np.ndarray] | None = None,
             start: Sequence[int] | None = None) -> PolicyRun:
    """Simulate `policy` on `workload` with `profile` (see `Simulator`)."""
    return Simulator(workload, policy, profile, seed, replay, start).run(steps, on_step)
