"""One RL step's rollout on the pool: which groups it decodes, in how many rounds, and what
the update then trains on.

`Rollouts.rollout(step)` (a SimPy sub-process) plans the step's groups for the rollout mode
(`sync` and `async`: the step's prompts; `partial`: those plus the groups carried over;
`tail_batching`: a short round of extra prompts or a long round of deferred ones), decodes them
in one round on the pool (sim/rollout.py) and updates the drafter on the tokens generated.
DAPO's dynamic sampling decodes several rounds a step (sim/dynamic_sampling.py).

Random numbers: each prompt's responses come from (seed, step, prompt index) alone, so every
policy sees the same responses (common random numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import simpy

from sim.acceptance import position_rows, stats_for
from sim.drafter import (
    DrafterState,
    active_kind,
    after_policy_update,
    after_training,
    initial_state,
)
from sim.entities import Drafting, Group, RolloutRound, open_seqs
from sim.groups import group_lengths, new_group
from sim.results import FilterRecord, StepInfo
from sim.rollout import NO_SD_STRATEGY, RolloutPool
from workbench.contracts.length_data import read_observed
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import Profile
from workbench.contracts.timeline import Timeline
from workbench.contracts.workload import Workload


@dataclass(frozen=True)
class Rolled:
    """A finished rollout: what training and the step's metrics need."""

    step: int
    info: StepInfo
    tokens: int  # prompt + response tokens to train on
    first_row: int  # where its timeline rows begin


@dataclass(frozen=True)
class RoundResult:
    """One round's outcome: the groups it completed and those left unfinished, the drafter it
    drafted with and that drafter's quality, and the tokens spot training put into it."""

    trained: list[Group]
    unfinished: list[Group]
    kind: DrafterKind
    quality: float
    spot_tokens: float


@dataclass(frozen=True)
class Decoded:
    """A step's rounds together: the groups the update trains on, how many groups were left
    unfinished and how many were generated, the first round's drafter and its quality, the
    tokens spot-trained over all rounds, and the kind of round."""

    groups: list[Group]  # the (last) round's groups
    trained: list[Group]
    left: int
    generated: int
    kind: DrafterKind
    quality: float
    spot_tokens: float
    round_kind: str


class Rollouts:
    """What every step's rollout shares: the pool, the drafter's state, the groups carried over
    (partial rollouts) or deferred (tail batching), and the filtering record."""

    def __init__(self, workload: Workload, policy: Policy, profile: Profile, seed: int,
                 replay: list[np.ndarray] | None, env: simpy.Environment, timeline: Timeline,
                 pool: RolloutPool):
        """`replay[step]`, if given, holds that step's response lengths (prompt-major)."""
        self.workload, self.policy, self.profile, self.seed = workload, policy, profile, seed
        self.replay, self.env, self.timeline, self.pool = replay, env, timeline, pool
        self.drafter: DrafterState = initial_state(policy, profile)
        self.strategies = {NO_SD_STRATEGY, *(Strategy.chain(a) for a in policy.bandit.arms),
                           *(row.strategy for row in policy.schedule)}
        self.carried: list[Group] = []  # partial: unfinished groups resumed next step
        self.deferred: list[Group] = []  # tail batching: prompts waiting for a long round
        self.batches = 0  # dynamic sampling: generation batches drawn so far
        self.filtering: list[FilterRecord] = []
        lengths = workload.lengths
        self.observed = read_observed(lengths.data) if lengths.kind != "lognormal" else None

    def new_groups(self, step: int, count: int, first: int = 0,
                   batch: int | None = None) -> list[Group]:
        """`count` new prompts' groups from index `first` (replayed, or drawn)."""
        groups, g = [], self.workload.group_size
        for j in range(first, first + count):
            if self.replay is not None:
                lengths = np.asarray(self.replay[step][j * g:(j + 1) * g])
                groups.append(Group((step, j), lengths, np.zeros(len(lengths))))
            else:
                groups.append(self.draw((step, j), batch=batch))
        return groups

    def draw(self, key: tuple[int, int], attempt: int = 0, batch: int | None = None) -> Group:
        """Prompt `key` = (step, index)'s group, drawn (its `attempt`-th sample; `batch`: the
        generation batch, default the step)."""
        draw = group_lengths(self.workload, self.seed, key[0], key[1], attempt, batch=batch,
                             observed=self.observed)
        return new_group(key, draw, attempt)

    def plan(self, step: int) -> tuple[list[Group], int | None, str]:
        """This step's groups, when to stop, and what kind of round it is."""
        p, mode = self.workload.prompts_per_step, self.policy.rollout.mode
        ds = self.workload.dynamic_sampling
        over = (1.0 + self.policy.rollout.oversample) * (ds.oversample if ds.enabled else 1.0)
        launched = math.ceil(p * over)
        if mode in ("sync", "async"):
            return self.new_groups(step, p), None, mode
        if mode == "partial":
            carried, self.carried = self.carried, []
            fresh = self.new_groups(step, max(0, launched - len(carried)))
            return carried + fresh, p, "partial"
        if len(self.deferred) >= p:
            rerun, self.deferred = self.deferred[:p], self.deferred[p:]
            groups = []
            for g in rerun:  # fresh samples of the same prompts
                groups.append(self.draw(g.key, g.attempt + 1))
            return groups, None, "long"
        return self.new_groups(step, launched), p, "short"

    def rollout(self, step: int):
        """One step's rollout on the pool (a SimPy sub-process); returns what training needs."""
        first_row = len(self.timeline.rows)
        d = yield from self.decode_step(step)
        info = trained_info(step, d.trained, d.left, d.kind, d.quality, d.spot_tokens,
                            d.round_kind)
        info = replace(info, groups_generated=d.generated)
        return Rolled(step, info, self.tokens(d.trained), first_row)

    def decode_step(self, step: int):
        """The step's rounds (here one; dynamic sampling overrides it) as `Decoded`."""
        groups, stop_at, round_kind = self.plan(step)
        r = yield from self.round(step, groups, stop_at, round_kind)
        return Decoded(groups, r.trained, len(r.unfinished), len(groups), r.kind, r.quality,
                       r.spot_tokens, round_kind)

    def round(self, step: int, groups: list[Group], stop_at: int | None, round_kind: str):
        """Decode `groups` on the pool until all (or `stop_at`) are complete (a SimPy
        sub-process returning a `RoundResult`)."""
        env = self.env
        version = self.pool.oldest_version()
        for g in groups:
            g.version = version if g.version is None else g.version
        drafting = self.drafting(step)
        ro = RolloutRound(step, drafting, groups, open_seqs(groups), stop_at, env.event(),
                          env.event(), env.event(), spot=self.spot_trains(step),
                          mixed_only=self.workload.dynamic_sampling.enabled)
        quality = self.drafter.quality
        decoders, waiters = self.pool.start(ro)
        if stop_at is not None:
            yield simpy.AllOf(env, decoders) | ro.stop
            for d in decoders:
                if d.is_alive:
                    d.interrupt("enough groups are complete")
        # A fresh AllOf: SimPy detaches a condition nested in one that has fired.
        yield simpy.AllOf(env, decoders)
        ro.done.succeed()
        yield simpy.AllOf(env, waiters)

        trained = [g for g in groups if g.complete]
        unfinished = [g for g in groups if not g.complete]
        if round_kind == "partial":
            self.carried = unfinished
        elif round_kind == "short":
            self.deferred.extend(unfinished)
        # The drafter trains on the hidden states of every token generated this step.
        self.drafter = after_training(self.drafter, self.policy, self.profile,
                                      ro.trained_tokens, int(ro.generated))
        return RoundResult(trained, unfinished, drafting.kind, quality, ro.trained_tokens)

    def drafting(self, step: int) -> Drafting:
        """How the engines draft now: the drafter in use (after the switch rule) and its
        acceptance."""
        kind = active_kind(self.policy, self.profile, self.drafter)
        acc, q = self.profile.acceptance, self.drafter.quality
        accept = {s: stats_for(acc, kind, q, s) for s in self.strategies}
        rows = position_rows(acc, kind)
        by_row = {}
        if rows:
            by_row = {s: tuple(stats_for(acc, kind, q, s, r.miss) for r in rows)
                      for s in self.strategies}
        history = 0 < self.workload.epoch_steps <= step
        return Drafting(kind, accept, history, rows, by_row)

    def tokens(self, groups: list[Group]) -> int:
        """Prompt + response tokens the update trains on."""
        if not groups:
            return 0
        responses = int(np.concatenate([g.lengths for g in groups]).sum())
        prompt = self.workload.prompt_tokens
        return responses + sum(g.prompt(prompt) * len(g.lengths) for g in groups)

    def spot_trains(self, step: int) -> bool:
        """Spot training runs in every `interval_steps`-th rollout (FastRL trains every 10 RL
        steps)."""
        t = self.policy.spot_training
        return t.enabled and step % t.interval_steps == 0

    def policy_updated(self) -> None:
        """The policy moved on: the drafter's alignment with it decays."""
        self.drafter = after_policy_update(self.drafter, self.profile)


def trained_info(step: int, trained: list[Group], left: int, kind: DrafterKind, quality: float,
                 trained_tokens: float, round_kind: str) -> StepInfo:
    """What a step trained on: its response lengths and how stale they were (updates between the
    weights that started each group and this step's update)."""
    if not trained:
        return StepInfo(np.zeros(0, dtype=np.int64), kind, quality, trained_tokens, round_kind,
                        0, left, 0.0, 0)
    lengths = np.concatenate([g.lengths for g in trained])
    lags = np.repeat(np.array([step - g.version for g in trained], dtype=float),
                     [len(g.lengths) for g in trained])
    return StepInfo(lengths, kind, quality, trained_tokens, round_kind, len(trained), left,
                    float(lags.mean()) if len(lags) else 0.0,
                    int(lags.max()) if len(lags) else 0)
