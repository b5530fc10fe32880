"""The RL-step simulator: SimPy orchestrates rollouts, spot training, the update and weight syncs.

One synchronous RL step: every engine decodes its shard of prompts x group size with
continuous batching; an engine that has finished waits (a bubble) or, once enough engines are
idle, trains the drafter until the last one finishes, when it is preempted (sim/rollout.py);
then the policy trains on all GPUs and weights are synced. Models of lengths, costs,
acceptance and drafter learning are pure functions (`sim.lengths`, `sim.costs`,
`sim.acceptance`, `sim.drafter`); this module only decides when things happen.

Rollout modes (Policy.rollout): `sync` runs every response to the end; `partial` (APRIL) and
`tail_batching` (RollPacker) launch extra prompts and interrupt the decoders once enough groups
are complete; `async` splits the engines into a rollout pool and a trainer: the rollout of step
j waits only for weights of version j - k (k = `max_staleness`; version v = after v updates),
so rollouts overlap training, on weights up to k updates old (each step reports its samples'
`policy_lag`). Its step time is the interval between two updates (the pipeline's pace).

Random numbers: each prompt's responses come from (seed, step, prompt index) alone, so every
policy sees the same responses (common random numbers); bandits and acceptance noise have
their own streams per engine.

DAPO's dynamic sampling (Workload.dynamic_sampling): a step decodes rounds of new groups and
trains on the mixed-reward ones; each round is a rollout on the pool, and the step pays for all.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import simpy

from sim.acceptance import position_rows, stats_for
from sim.costs import train_phase_s
from sim.drafter import DrafterState, active_kind, after_policy_update, after_training, initial_state
from sim.groups import group_lengths, new_group
from sim.results import FilterRecord, PolicyRun, StepInfo, StepMetrics, step_metrics
from sim.rollout import NO_SD_STRATEGY, Drafting, Group, RolloutPool, RolloutRound, open_seqs
from sim.streaming import StreamingPool
from workbench.contracts.policy import DrafterKind, Policy, Strategy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.length_data import read_observed
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
    work = steps * (workload.sequences_per_step + workload.workers)
    if work > limit:
        raise ConfigError(workload.name, "workers, prompts_per_step x group_size, steps", f"{work:,} units of work",
                          f"at most {limit:,} per run ((prompts_per_step x group_size + workers) x steps; "
                          f"docs/formats.md#limits): lower them, or set TLT_SIM_MAX_WORK to allow more")


def rollout_engines(workload: Workload, policy: Policy) -> int:
    """Engines that roll out: all of them, or in async mode those not given to the trainer."""
    if policy.rollout.mode != "async":
        return workload.workers
    trainers = max(1, round(workload.workers * policy.rollout.train_share))
    if workload.workers - trainers < 1:
        raise ConfigError(workload.name, "workers", workload.workers,
                          f">= 2 for policy '{policy.name}' (async mode trains on {trainers} engine(s) "
                          "and rolls out on the others)")
    return workload.workers - trainers


@dataclass(frozen=True)
class _Rolled:
    """A finished rollout: what training and the step's metrics need."""

    step: int
    info: StepInfo
    tokens: int  # prompt + response tokens to train on
    first_row: int  # where its timeline rows begin


@dataclass(frozen=True)
class _Streamed:
    """A streamed step, kept until its rows are all written."""

    step: int
    info: StepInfo
    trained: list[Group]
    first_row: int  # its rows begin after this one
    start_s: float  # the update before it
    end_s: float  # its update
    train_s: float  # the trainer's busy time


class Simulator:
    def __init__(self, workload: Workload, policy: Policy, profile: Profile, seed: int = 0,
                 replay: list[np.ndarray] | None = None, start: Sequence[int] | None = None):
        """`replay[step]`, if given, holds that step's response lengths (prompt-major, group_size
        per prompt) to use instead of sampling them: how a traced run is re-simulated. `start`:
        the draft length each schedule row starts at (`climb`; the schedule's by default)."""
        self.workload, self.policy, self.profile, self.seed = workload, policy, profile, seed
        self.replay = replay
        self.env = simpy.Environment()
        self.timeline = Timeline()
        self.engines = rollout_engines(workload, policy)
        pool = StreamingPool if policy.rollout.stream else RolloutPool
        self.pool = pool(self.env, self.timeline, workload, policy, profile, seed, self.engines, start)
        self.drafter: DrafterState = initial_state(policy, profile)
        self.strategies = {NO_SD_STRATEGY, *(Strategy.chain(a) for a in policy.bandit.arms),
                           *(row.strategy for row in policy.schedule)}
        self._carried: list[Group] = []  # partial: unfinished groups resumed next step
        self._deferred: list[Group] = []  # tail batching: prompts waiting for a long round
        self._version = 0  # weights version: policy updates done
        self._launched = 0  # streaming: groups let in so far
        self._stream_done: list[_Streamed] = []  # streaming: steps trained, reported once their rows are written
        self._batches = 0  # dynamic sampling: generation batches drawn so far
        self.filtering: list[FilterRecord] = []
        lengths = workload.lengths
        self._observed = read_observed(lengths.data) if lengths.kind != "lognormal" else None
        if workload.dynamic_sampling.enabled and policy.rollout.stream:
            raise ConfigError(workload.name, "dynamic_sampling.enabled", True,
                              f"false for policy '{policy.name}': DAPO's filtering is not simulated with streaming "
                              "rollouts")

    def run(self, steps: int | None = None, on_step: Callable[[StepMetrics], None] | None = None) -> PolicyRun:
        """Simulate `steps` RL steps (default: the workload's); `on_step` hears of each as it ends."""
        n = steps if steps is not None else self.workload.steps
        check_size(self.workload, n)
        metrics: list[StepMetrics] = []
        ro = self.policy.rollout
        body = self._stream_steps if ro.stream else self._async_steps if ro.mode == "async" else self._sync_steps
        self.env.process(body(n, metrics, on_step))
        self.env.run()
        if ro.stream:
            self._report_stream(metrics, on_step, None)
        return PolicyRun(self.policy.name, metrics, self.timeline.frame(), self.filtering)

    # ------------------------------------------------------------ what each step runs

    def _new_groups(self, step: int, count: int, first: int = 0, batch: int | None = None) -> list[Group]:
        groups, g = [], self.workload.group_size
        for j in range(first, first + count):
            if self.replay is not None:
                lengths = np.asarray(self.replay[step][j * g:(j + 1) * g])
                groups.append(Group((step, j), lengths, np.zeros(len(lengths))))
            else:
                draw = group_lengths(self.workload, self.seed, step, j, batch=batch,
                                     observed=self._observed)
                groups.append(new_group((step, j), draw))
        return groups

    def _plan(self, step: int) -> tuple[list[Group], int | None, str]:
        """This step's groups, when to stop, and what kind of round it is."""
        p, mode = self.workload.prompts_per_step, self.policy.rollout.mode
        ds = self.workload.dynamic_sampling
        launched = math.ceil(p * (1.0 + self.policy.rollout.oversample) * (ds.oversample if ds.enabled else 1.0))
        if mode in ("sync", "async"):
            return self._new_groups(step, p), None, mode
        if mode == "partial":
            carried, self._carried = self._carried, []
            return carried + self._new_groups(step, max(0, launched - len(carried))), p, "partial"
        if len(self._deferred) >= p:
            rerun, self._deferred = self._deferred[:p], self._deferred[p:]
            groups = []
            for g in rerun:  # fresh samples of the same prompts
                attempt = g.attempt + 1
                draw = group_lengths(self.workload, self.seed, g.key[0], g.key[1], attempt,
                                     observed=self._observed)
                groups.append(new_group(g.key, draw, attempt))
            return groups, None, "long"
        return self._new_groups(step, launched), p, "short"

    def _rollout(self, step: int):
        """One step's rollout on the pool (a SimPy sub-process); returns what training needs."""
        first_row = len(self.timeline.rows)
        ds = self.workload.dynamic_sampling
        if ds.enabled and self.policy.rollout.mode in ("sync", "async"):
            trained, generated, tally = yield from self._filtered_rounds(step)
            left, round_kind = 0, self.policy.rollout.mode
        else:
            groups, stop_at, round_kind = self._plan(step)
            trained, unfinished, tally = yield from self._round(step, groups, stop_at, round_kind)
            left, generated = len(unfinished), len(groups)
            if ds.enabled:  # partial, tail batching: one over-provisioned round, stopped at enough mixed groups
                trained = self._keep_mixed(step, groups, trained)
        kind, quality, spot_tokens = tally
        info = trained_info(step, trained, left, kind, quality, spot_tokens, round_kind)
        return _Rolled(step, replace(info, groups_generated=generated), self._tokens(trained), first_row)

    def _round(self, step: int, groups: list[Group], stop_at: int | None, round_kind: str):
        """Decode `groups` on the pool until all (or `stop_at`) are complete; returns the complete
        groups, the unfinished ones, and (drafter kind, its quality, tokens spot-trained)."""
        env = self.env
        version = min(self.pool.version)
        for g in groups:
            g.version = version if g.version is None else g.version
        seqs = open_seqs(groups)
        drafting = self._drafting(step)
        ro = RolloutRound(step, drafting, groups, seqs, stop_at, env.event(), env.event(), env.event(),
                          spot=self._spot_trains(step), mixed_only=self.workload.dynamic_sampling.enabled)
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

        complete = [g.complete for g in groups]
        trained = [g for g, c in zip(groups, complete) if c]
        unfinished = [g for g, c in zip(groups, complete) if not c]
        if round_kind == "partial":
            self._carried = unfinished
        elif round_kind == "short":
            self._deferred.extend(unfinished)
        # The drafter trains on the hidden states of every token generated this step.
        self.drafter = after_training(self.drafter, self.policy, self.profile, ro.trained_tokens, int(ro.generated))
        return trained, unfinished, (drafting.kind, quality, ro.trained_tokens)

    def _keep_mixed(self, step: int, groups: list[Group], trained: list[Group]) -> list[Group]:
        """The first prompts_per_step complete mixed-reward groups (the rest are dropped, paid for)."""
        p, complete = self.workload.prompts_per_step, {id(g) for g in trained}
        mixed = [i for i, g in enumerate(groups) if g.mixed and id(g) in complete]
        used = mixed[:p]
        self.filtering.append(FilterRecord(self._batches, step + 1, 1, len(groups), self.workload.group_size, p, 0,
                                           mixed, used))
        self._batches += 1
        return [groups[i] for i in used]

    def _filtered_rounds(self, step: int):
        """DAPO's dynamic sampling: rounds of ceil(prompts x oversample) new groups, each decoded in
        full, keeping the mixed-reward groups until the update's batch is full (or max_rounds ran)."""
        p, ds, mode = self.workload.prompts_per_step, self.workload.dynamic_sampling, self.policy.rollout.mode
        launch = math.ceil(p * ds.oversample - 1e-9)
        kept: list[Group] = []
        kind, quality, spot_tokens = "", 0.0, 0.0
        for r in range(ds.max_rounds):
            batch, self._batches = self._batches, self._batches + 1
            groups = self._new_groups(step, launch, 0, batch)
            _, _, (k, q, t) = yield from self._round(step, groups, None, mode)
            kind, quality, spot_tokens = (k, q, spot_tokens + t) if r == 0 else (kind, quality, spot_tokens + t)
            mixed = [i for i, g in enumerate(groups) if g.mixed and g.complete]
            used = mixed[:max(0, p - len(kept))]
            self.filtering.append(FilterRecord(batch, step + 1, r + 1, launch, self.workload.group_size, p, len(kept),
                                               mixed, used))
            kept += [groups[i] for i in used]
            if len(kept) >= p:
                break
        return kept, launch * (r + 1), (kind, quality, spot_tokens)

    def _drafting(self, step: int) -> Drafting:
        """How the engines draft now: the drafter in use (after the switch rule) and its acceptance."""
        kind = active_kind(self.policy, self.profile, self.drafter)
        acc, q = self.profile.acceptance, self.drafter.quality
        accept = {s: stats_for(acc, kind, q, s) for s in self.strategies}
        rows = position_rows(acc, kind)
        by_row = {s: tuple(stats_for(acc, kind, q, s, r.miss) for r in rows) for s in self.strategies} if rows else {}
        return Drafting(kind, accept, 0 < self.workload.epoch_steps <= step, rows, by_row)

    def _tokens(self, groups: list[Group]) -> int:
        """Prompt + response tokens the update trains on."""
        if not groups:
            return 0
        responses = int(np.concatenate([g.lengths for g in groups]).sum())
        prompt = self.workload.prompt_tokens
        return responses + sum(g.prompt(prompt) * len(g.lengths) for g in groups)

    def _spot_trains(self, step: int) -> bool:
        """Spot training runs in every `interval_steps`-th rollout (FastRL trains every 10 RL steps)."""
        t = self.policy.spot_training
        return t.enabled and step % t.interval_steps == 0

    # ------------------------------------------------------------ synchronous RL

    def _sync_steps(self, steps: int, metrics: list[StepMetrics], on_step: Callable[[StepMetrics], None] | None):
        wl = self.workload
        for step in range(steps):
            rolled = yield from self._rollout(step)
            ph = self.profile.phases
            spot = self._spot_trains(step)
            # The wait for the spot trainers to stop goes on the timeline as sync (no worker rolls out
            # or updates then); `spot_stop_s` is what the sync took longer for it.
            if spot and ph.spot_stop_s > 0:
                yield from self._phase(step, "sync", ph.spot_stop_s)
            yield from self._phase(step, "train", train_phase_s(ph, rolled.tokens, wl.gpus))
            yield from self._phase(step, "sync", ph.weight_sync_s + (ph.drafter_sync_s if spot else 0.0))
            self._version += 1
            self.pool.version = [self._version] * self.engines
            self.drafter = after_policy_update(self.drafter, self.profile)
            # A step's intervals are contiguous: its phases follow its rollout.
            frame = self.timeline.frame(rolled.first_row)
            metrics.append(step_metrics(step, frame, wl.workers, wl.max_response_tokens, rolled.info))
            if on_step is not None:
                on_step(metrics[-1])

    def _phase(self, step: int, state: str, seconds: float):
        start = self.env.now
        yield self.env.timeout(seconds)
        for w in range(self.workload.workers):
            self.timeline.add(step, w, start, self.env.now, state)

    # ------------------------------------------------------------ asynchronous RL

    def _async_steps(self, steps: int, metrics: list[StepMetrics], on_step: Callable[[StepMetrics], None] | None):
        """The rollout pool's side: rollout j starts once weights of version j - k exist, taking the
        newest weights first (a sync pause) unless they reach it mid-rollout (interrupt mode)."""
        env, k = self.env, int(self.policy.rollout.max_staleness)
        ready = [env.event() for _ in range(steps + 1)]
        ready[0].succeed()
        rolled = [env.event() for _ in range(steps)]
        env.process(self._trainer(steps, rolled, ready, metrics, on_step))
        for j in range(steps):
            waited_from = env.now
            yield ready[max(0, j - k)]
            for w in range(self.engines):  # waiting for weights recent enough: the pool is idle
                self.timeline.add(j, w, waited_from, env.now, "idle")
            if min(self.pool.version) < self._version and not self.pool.interruptible:
                yield from self.pool.sync_all(j, self._version)
            result = yield from self._rollout(j)
            rolled[j].succeed(result)

    def _trainer(self, steps: int, rolled: list[simpy.Event], ready: list[simpy.Event],
                 metrics: list[StepMetrics], on_step: Callable[[StepMetrics], None] | None):
        """The trainer's side: each rollout's samples, in order, on the engines given to training."""
        env, wl = self.env, self.workload
        gpus = (wl.workers - self.engines) * wl.gpus_per_worker
        last_update = 0.0
        for j in range(steps):
            result: _Rolled = yield rolled[j]
            start = env.now
            yield env.timeout(train_phase_s(self.profile.phases, result.tokens, gpus))
            self.timeline.add(j, self.engines, start, env.now, "train")  # the trainer's own lane
            self._version = j + 1
            self.pool.push(self._version)
            self.drafter = after_policy_update(self.drafter, self.profile)
            ready[j + 1].succeed()
            metrics.append(self._async_metrics(j, result, start, last_update))
            last_update = env.now
            if on_step is not None:
                on_step(metrics[-1])

    # ------------------------------------------------------------ fully asynchronous RL (streaming)

    def _stream_steps(self, steps: int, metrics: list[StepMetrics], on_step: Callable[[StepMetrics], None] | None):
        """The trainer drives a streaming pool (sim/streaming.py): it takes groups as they complete,
        trains them in `minibatches` updates, pushes the weights, and lets prompts in up to
        (version + 1 + max_staleness) x prompts_per_step launched.

        A step's rows end when the next weights cut them, after this process has moved on, so a
        step is reported once the step after it has ended too (the last two when the run ends)."""
        env, wl, pool = self.env, self.workload, self.pool
        gpus = (wl.workers - self.engines) * wl.gpus_per_worker
        pool.drafting = self._drafting(0)
        self._offer_stream()
        pool.start_engines()
        for j in range(steps):
            trained, train_s, first_row, begun = [], 0.0, len(self.timeline.rows), env.now
            for size in minibatch_sizes(wl.prompts_per_step, self.policy.rollout.minibatches):
                batch = []
                for _ in range(size):
                    batch.append((yield pool.done.get()))
                start = env.now
                yield env.timeout(train_phase_s(self.profile.phases, self._tokens(batch), gpus))
                self.timeline.add(j, self.engines, start, env.now, "train")  # the trainer's own lane
                trained, train_s = trained + batch, train_s + env.now - start
            info = trained_info(j, trained, self._launched - (j + 1) * wl.prompts_per_step, pool.drafting.kind,
                                self.drafter.quality, 0.0, "stream")
            self._stream_done.append(_Streamed(j, info, trained, first_row, begun, env.now, train_s))
            self._version = j + 1
            pool.push(self._version)
            self.drafter = after_policy_update(self.drafter, self.profile)
            pool.drafting = self._drafting(self._version)
            self._offer_stream()
            self._report_stream(metrics, on_step, j - 1)
        pool.close()

    def _offer_stream(self) -> None:
        """Let prompts in up to the staleness bound (the prompts of step b are drawn as in every
        other mode, so policies still see the same responses)."""
        p, k = self.workload.prompts_per_step, self.policy.rollout.max_staleness
        allowed = math.floor((self._version + 1 + k) * p + 1e-9)
        if self.replay is not None:
            allowed = min(allowed, len(self.replay) * p)
        groups = [self._new_groups(n // p, 1, n % p)[0] for n in range(self._launched, allowed)]
        self._launched = max(self._launched, allowed)
        self.pool.offer(groups)

    def _report_stream(self, metrics: list[StepMetrics], on_step: Callable[[StepMetrics], None] | None,
                       before: int | None) -> None:
        """Metrics of the streamed steps before step `before` (all of them if it is None)."""
        while len(metrics) < len(self._stream_done) and (before is None or len(metrics) < before):
            metrics.append(self._stream_metrics(self._stream_done[len(metrics)]))
            if on_step is not None:
                on_step(metrics[-1])

    def _stream_metrics(self, s: _Streamed) -> StepMetrics:
        """The pool's rows between two updates give the step's decode and idle time; its rollout
        time is from the first start to the last finish of the groups it trained."""
        step = s.step
        rows = self.timeline.frame(s.first_row, step)
        pool = rows[rows["worker"] < self.engines]
        sync = pool[pool["state"] == "sync"]
        m = step_metrics(step, pool[pool["state"] != "sync"], self.engines, self.workload.max_response_tokens, s.info)
        return replace(m, step_time_s=s.end_s - s.start_s, train_time_s=s.train_s,
                       rollout_time_s=float(max(g.finished_s for g in s.trained) - min(g.started_s for g in s.trained)),
                       sync_time_s=float((sync["end_s"] - sync["start_s"]).sum() / self.engines))

    def _async_metrics(self, step: int, result: _Rolled, train_start: float, last_update: float) -> StepMetrics:
        """The step's rollout-pool rows give its rollout metrics; its pace is the update interval."""
        rows = self.timeline.frame(result.first_row, step)
        pool = rows[rows["worker"] < self.engines]
        sync = pool[pool["state"] == "sync"]
        m = step_metrics(
            step, pool[pool["state"] != "sync"], self.engines, self.workload.max_response_tokens, result.info
        )
        return replace(m, step_time_s=float(self.env.now - last_update), train_time_s=float(self.env.now - train_start),
                       sync_time_s=float((sync["end_s"] - sync["start_s"]).sum() / self.engines))


def minibatch_sizes(groups: int, minibatches: int) -> list[int]:
    """A step's groups split into `minibatches` near-equal updates."""
    return [groups * (i + 1) // minibatches - groups * i // minibatches for i in range(minibatches)]


def trained_info(step: int, trained: list[Group], left: int, kind: DrafterKind, quality: float,
                 trained_tokens: float, round_kind: str) -> StepInfo:
    """What a step trained on: its response lengths and how stale they were (updates between the
    weights that started each group and this step's update)."""
    lengths = np.concatenate([g.lengths for g in trained]) if trained else np.zeros(0, dtype=np.int64)
    lags = np.repeat(np.array([step - g.version for g in trained], dtype=float),
                     [len(g.lengths) for g in trained]) if trained else np.zeros(0)
    return StepInfo(lengths, kind, quality, trained_tokens, round_kind, len(trained), left,
                    float(lags.mean()) if len(lags) else 0.0, int(lags.max()) if len(lags) else 0)


def simulate(workload: Workload, policy: Policy, profile: Profile, seed: int = 0, steps: int | None = None,
             on_step: Callable[[StepMetrics], None] | None = None,
             replay: list[np.ndarray] | None = None, start: Sequence[int] | None = None) -> PolicyRun:
    return Simulator(workload, policy, profile, seed, replay, start).run(steps, on_step)
