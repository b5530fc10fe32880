"""The RL-step simulator: SimPy orchestrates workers, spot trainers and phases.

One RL step: every worker decodes its shard of prompts x group size with
continuous batching; a worker that has finished waits (a bubble) or, once
enough workers are idle, trains the drafter until the last worker finishes,
when it is preempted; then the policy trains and weights are synced. Models
of lengths, costs, acceptance and drafter learning are pure functions
(`sim.lengths`, `sim.costs`, `sim.acceptance`, `sim.drafter`); this module
only decides when things happen.

Rollout modes (Policy.rollout): `sync` runs every response to the end;
`partial` (APRIL) and `tail_batching` (RollPacker) launch extra prompts and
interrupt the decoders once enough groups are complete.

Random numbers: each prompt's responses come from (seed, step, prompt index)
alone, so every policy sees the same responses (common random numbers);
bandits and acceptance noise have their own streams per worker.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy

from sim.acceptance import AcceptStats, stats_for
from sim.costs import prefill_s, segment_s, train_phase_s
from sim.drafter import (
    DrafterState,
    active_kind,
    after_policy_update,
    after_training,
    initial_state,
)
from sim.engine import EngineBatch
from sim.lengths import StepLengths, sample_step
from sim.results import PolicyRun, StepInfo, StepMetrics, step_metrics
from workbench.contracts import seeds
from workbench.contracts.bandit import SD_OFF_BUCKET, Arm, Bandit, make_bandit
from workbench.contracts.policy import Policy, Strategy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.seeds import Stream
from workbench.contracts.trace import Timeline
from workbench.contracts.workload import Workload

# Responses x steps (plus workers x steps) a run may simulate: ~2 minutes on this project's
# 2-core machines (`tlt bench sim` measures the rate of yours).
MAX_WORK = 2_000_000
NO_SD_STRATEGY = Strategy.chain(0)


def group_lengths(workload: Workload, seed: int, step: int, index: int, attempt: int = 0) -> StepLengths:
    """The responses of the `index`-th new prompt of `step` (a re-run of a deferred prompt is a new attempt).

    Each prompt has its own random stream, so a prompt's responses are the same
    whichever policy or rollout mode meets it (common random numbers).
    """
    rng = seeds.rng(seed, Stream.LENGTHS, step, index, attempt)
    return sample_step(workload.lengths, workload.max_response_tokens, 1, workload.group_size, step, rng)


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


def shard(n: int, workers: int) -> list[range]:
    """Contiguous shards (groups stay on one worker where they fit), as veRL splits a batch."""
    bounds = np.linspace(0, n, workers + 1).round().astype(int)
    return [range(bounds[w], bounds[w + 1]) for w in range(workers)]


@dataclass
class _Group:
    """One prompt's group of responses, possibly spread over several rollouts."""

    key: tuple[int, int]  # (step it was drawn at, index): its identity when deferred
    lengths: np.ndarray
    generated: np.ndarray  # tokens generated so far per response (carried over by partial rollouts)
    attempt: int = 0

    @property
    def complete(self) -> bool:
        return bool(np.all(self.generated >= self.lengths))


@dataclass
class _Seq:
    group: int  # index into the rollout's groups
    member: int  # index within the group


@dataclass
class _RolloutRound:
    """What the workers of one rollout share."""

    step: int
    kind: str  # drafter in use
    accept: dict[Strategy, AcceptStats]  # tokens per verify pass under each strategy
    groups: list[_Group]
    seqs: list[_Seq]
    stop_at: int | None  # stop once this many groups are complete (None: run to the end)
    done: simpy.Event  # decoding is over
    stop: simpy.Event  # enough groups are complete
    spot_open: simpy.Event  # enough workers are idle to start spot training
    left: list[int] = field(default_factory=list)  # responses still to finish per group
    complete_groups: int = 0
    idle_workers: int = 0
    trained_tokens: float = 0.0
    generated: float = 0.0  # response tokens generated in this rollout
    spot: bool = False  # idle workers train the drafter in this rollout

    def __post_init__(self):
        self.left = [int(np.sum(g.generated < g.lengths)) for g in self.groups]
        self.complete_groups = sum(1 for n in self.left if n == 0)

    def finished(self, seq: _Seq) -> None:
        g = self.groups[seq.group]
        g.generated[seq.member] = g.lengths[seq.member]
        self.left[seq.group] -= 1
        if self.left[seq.group] == 0:
            self.complete_groups += 1
            if self.stop_at is not None and self.complete_groups >= self.stop_at and not self.stop.triggered:
                self.stop.succeed()


@dataclass(frozen=True)
class _Segment:
    arm: Arm | None  # what the bandit chose (None: no SD, nothing to learn)
    strategy: Strategy
    passes: float
    accept_len: float


class _WarmUp:
    """FastRL's rule: once a batch was above the threshold, SD waits for `sd_warmup_steps`
    consecutive decode steps at or below it."""

    def __init__(self, policy: Policy):
        self.threshold, self.steps = policy.sd_threshold, policy.sd_warmup_steps
        self.remaining = 0.0

    def left(self, batch: int) -> float:
        if batch > self.threshold:
            self.remaining = float(self.steps)
        return self.remaining

    def ran(self, batch: int, passes: float) -> None:
        if batch <= self.threshold:
            self.remaining = max(0.0, self.remaining - passes)


class Simulator:
    def __init__(self, workload: Workload, policy: Policy, profile: Profile, seed: int = 0,
                 replay: list[np.ndarray] | None = None):
        """`replay[step]`, if given, holds that step's response lengths (prompt-major, group_size
        per prompt) to use instead of sampling them: how a traced run is re-simulated."""
        self.workload, self.policy, self.profile, self.seed = workload, policy, profile, seed
        self.replay = replay
        self.env = simpy.Environment()
        self.timeline = Timeline()
        self.bandits: list[Bandit] = [make_bandit(policy, seeds.seed_sequence(seed, Stream.BANDIT, w)) for w in range(workload.workers)]
        self.noise = [seeds.rng(seed, Stream.NOISE, w) for w in range(workload.workers)]
        self.drafter: DrafterState = initial_state(policy, profile)
        self.strategies = {NO_SD_STRATEGY, *(Strategy.chain(a) for a in policy.bandit.arms),
                           *(row.strategy for row in policy.schedule)}
        self._learning = policy.bandit.algorithm != "fixed"
        self._carried: list[_Group] = []  # partial: unfinished groups resumed next step
        self._deferred: list[_Group] = []  # tail batching: prompts waiting for a long round

    def run(self, steps: int | None = None, on_step: Callable[[StepMetrics], None] | None = None) -> PolicyRun:
        """Simulate `steps` RL steps (default: the workload's); `on_step` hears of each as it ends."""
        n = steps if steps is not None else self.workload.steps
        check_size(self.workload, n)
        metrics: list[StepMetrics] = []
        self.env.process(self._rl_steps(n, metrics, on_step))
        self.env.run()
        return PolicyRun(self.policy.name, metrics, self.timeline.frame())

    def _new_groups(self, step: int, count: int, first: int = 0) -> list[_Group]:
        groups, g = [], self.workload.group_size
        for j in range(first, first + count):
            if self.replay is not None:
                lengths = np.asarray(self.replay[step][j * g:(j + 1) * g])
            else:
                lengths = group_lengths(self.workload, self.seed, step, j).lengths
            groups.append(_Group((step, j), lengths, np.zeros(len(lengths))))
        return groups

    def _plan(self, step: int) -> tuple[list[_Group], int | None, str]:
        """This step's groups, when to stop, and what kind of round it is."""
        p, mode = self.workload.prompts_per_step, self.policy.rollout.mode
        launched = math.ceil(p * (1.0 + self.policy.rollout.oversample))
        if mode == "sync":
            return self._new_groups(step, p), None, "sync"
        if mode == "partial":
            carried, self._carried = self._carried, []
            return carried + self._new_groups(step, max(0, launched - len(carried))), p, "partial"
        if len(self._deferred) >= p:
            rerun, self._deferred = self._deferred[:p], self._deferred[p:]
            groups = []
            for g in rerun:  # fresh samples of the same prompts
                attempt = g.attempt + 1
                lengths = group_lengths(self.workload, self.seed, g.key[0], g.key[1], attempt).lengths
                groups.append(_Group(g.key, lengths, np.zeros(len(lengths)), attempt))
            return groups, None, "long"
        return self._new_groups(step, launched), p, "short"

    def _rl_steps(self, steps: int, metrics: list[StepMetrics], on_step: Callable[[StepMetrics], None] | None):
        wl, env = self.workload, self.env
        for step in range(steps):
            first_row = len(self.timeline.rows)  # a step's intervals are contiguous: phases follow the rollout
            groups, stop_at, round_kind = self._plan(step)
            seqs = [_Seq(gi, m) for gi, g in enumerate(groups) for m in range(len(g.lengths)) if g.generated[m] < g.lengths[m]]
            kind = active_kind(self.policy, self.profile, self.drafter)
            accept = {s: stats_for(self.profile.acceptance, kind, self.drafter.quality, s) for s in self.strategies}
            ro = _RolloutRound(step, kind, accept, groups, seqs, stop_at, env.event(), env.event(), env.event(),
                               spot=self._spot_trains(step))
            quality = self.drafter.quality
            decoders = [env.process(self._decode(w, ro, [seqs[i] for i in s])) for w, s in enumerate(shard(len(seqs), wl.workers))]
            waiters = [env.process(self._after_shard(w, ro, decoders[w])) for w in range(wl.workers)]
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
                self._carried = unfinished
            elif round_kind == "short":
                self._deferred.extend(unfinished)
            lengths = np.concatenate([g.lengths for g in trained]) if trained else np.zeros(0, dtype=np.int64)
            # The drafter trains on the hidden states of every token generated this step.
            self.drafter = after_training(self.drafter, self.policy, self.profile, ro.trained_tokens, int(ro.generated))
            info = StepInfo(lengths, kind, quality, ro.trained_tokens, round_kind, len(trained), len(unfinished))

            tokens = int(lengths.sum()) + wl.prompt_tokens * len(lengths)
            yield from self._phase(step, "train", train_phase_s(self.profile.phases, tokens, wl.gpus))
            yield from self._phase(step, "sync", self.profile.phases.weight_sync_s)
            self.drafter = after_policy_update(self.drafter, self.profile)
            metrics.append(step_metrics(step, self.timeline.frame(first_row), wl.workers, wl.max_response_tokens, info))
            if on_step is not None:
                on_step(metrics[-1])

    def _spot_trains(self, step: int) -> bool:
        """Spot training runs in every `interval_steps`-th rollout (FastRL trains every 10 RL steps)."""
        t = self.policy.training
        return t.enabled and step % t.interval_steps == 0

    def _phase(self, step: int, state: str, seconds: float):
        start = self.env.now
        yield self.env.timeout(seconds)
        for w in range(self.workload.workers):
            self.timeline.add(step, w, start, self.env.now, state)

    def _decode(self, w: int, ro: _RolloutRound, seqs: list[_Seq]):
        """Worker w decodes its shard, one segment of constant batch (or one bandit decision) at a time.

        Interrupted when enough groups are complete (partial rollouts, tail
        batching): the segment in flight counts up to that moment, and each
        unfinished response keeps what it generated.
        """
        env, dec, prof = self.env, self.profile.decode, self.profile
        groups, prompt = ro.groups, self.workload.prompt_tokens
        done_before = [float(groups[q.group].generated[q.member]) for q in seqs]
        engine = EngineBatch([groups[q.group].lengths[q.member] - g for q, g in zip(seqs, done_before)],
                             [prompt + int(g) for g in done_before], self.workload.max_batch)
        warm = _WarmUp(self.policy)
        while not engine.done:
            prefill = prefill_s(dec, engine.admit())
            batch = engine.batch
            seg = self._plan_segment(w, ro, batch, engine.tokens_to_next_finish(), warm.left(batch))
            context = engine.mean_context() + seg.passes * seg.accept_len / 2
            decode_s = segment_s(dec, prof.drafter, ro.kind, batch, context, seg.strategy, seg.passes)
            start = env.now
            try:
                yield env.timeout(prefill + decode_s)
            except simpy.Interrupt:
                ran = env.now - start
                passes = seg.passes * max(0.0, ran - prefill) / decode_s if decode_s > 0 else 0.0
                self._decoded(ro, w, start, batch, seg.strategy, passes, seg.accept_len, context)
                for i in engine.advance(passes * seg.accept_len):
                    ro.finished(seqs[i])
                for i in engine.unfinished():
                    q = seqs[i]
                    groups[q.group].generated[q.member] = done_before[i] + engine.generated(i)
                return env.now
            self._decoded(ro, w, start, batch, seg.strategy, seg.passes, seg.accept_len, context)
            warm.ran(batch, seg.passes)
            if seg.arm is not None and decode_s > 0:
                self.bandits[w].update(seg.arm, seg.passes * seg.accept_len * batch / decode_s)
            for i in engine.advance(seg.passes * seg.accept_len):
                ro.finished(seqs[i])
        return env.now

    def _plan_segment(self, w: int, ro: _RolloutRound, batch: int, need: float, warm_left: float) -> _Segment:
        """How the next segment runs: the bandit's strategy (none while SD warms up again), how many
        verify passes (to the next completion, at most one decision interval or the warm-up left),
        and the accepted length it sees (its mean over the segment's verify outcomes)."""
        arm = self.bandits[w].select(batch) if ro.kind != "none" else None
        cap = math.inf
        if arm is not None and arm.bucket != SD_OFF_BUCKET and warm_left > 0:
            arm, cap = None, warm_left  # FastRL: SD back on only after enough decode steps at or below the threshold
        elif arm is not None and self._learning and arm.bucket != SD_OFF_BUCKET:
            cap = self.policy.bandit.decision_interval
        strategy = arm.strategy if arm is not None else NO_SD_STRATEGY
        stats = ro.accept[strategy]
        accept_len = stats.mean
        if stats.var > 0 and need > 0:
            # The mean of passes*batch verify outcomes: the reward the bandit sees is noisy.
            sd = math.sqrt(stats.var / (min(need / accept_len, cap) * batch))
            accept_len = min(strategy.depth + 1.0, max(1.0, accept_len + sd * self.noise[w].standard_normal()))
        return _Segment(arm, strategy, min(need / accept_len, cap), accept_len)

    def _decoded(self, ro: _RolloutRound, w: int, start: float, batch: int, strategy: Strategy, passes: float,
                 accept_len: float, context: float) -> None:
        tokens = passes * accept_len * batch
        ro.generated += tokens
        k = strategy.steps
        self.timeline.add(ro.step, w, start, self.env.now, "decode_sd" if k else "decode", batch, k, tokens,
                          passes * batch, context, strategy.name if k else "")

    def _after_shard(self, w: int, ro: _RolloutRound, decoder: simpy.Process):
        """Worker w once its shard is done: idle, and spot-train the drafter when allowed, until the rollout ends."""
        env, training = self.env, self.policy.training
        yield decoder
        finished = env.now
        ro.idle_workers += 1
        if ro.spot and ro.idle_workers >= training.min_idle_workers and not ro.spot_open.triggered:
            ro.spot_open.succeed()
        yield (ro.spot_open | ro.done) if ro.spot else ro.done
        self.timeline.add(ro.step, w, finished, env.now, "idle")
        if ro.done.triggered:
            return
        # Spot training until the rollout ends, which preempts it: only whole
        # drafter steps count, the one cut short is dropped, never waited for,
        # so the rollout is never delayed.
        learn = self.profile.learning
        step_s = learn.tokens_per_step / (learn.train_tokens_per_s * self.workload.gpus_per_worker)
        start = env.now
        yield ro.done
        ro.trained_tokens += math.floor((env.now - start) / step_s) * learn.tokens_per_step
        self.timeline.add(ro.step, w, start, env.now, "drafter_train")


def simulate(workload: Workload, policy: Policy, profile: Profile, seed: int = 0, steps: int | None = None,
             on_step: Callable[[StepMetrics], None] | None = None,
             replay: list[np.ndarray] | None = None) -> PolicyRun:
    return Simulator(workload, policy, profile, seed, replay).run(steps, on_step)
