"""One rollout on a pool of engines: each decodes its shard, then idles or spot-trains the drafter.

`RolloutPool.start(ro)` starts, per engine, a decoder (its shard with continuous batching, one
segment of constant batch or one bandit decision at a time; sim/engine.py) and a waiter (idle,
or spot training once enough engines are idle, until the rollout ends). The pool also knows
which weights each engine runs: a push of new weights pauses the engines for the sync and, in
AReaL's interruptible mode, reaches them mid-rollout (at their next segment boundary), where
the sequences in flight prefill their context again under the new weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import simpy

from sim.acceptance import AcceptStats, suffix_stats
from sim.costs import prefill_s, segment_s
from sim.engine import EngineBatch
from sim.entities import Drafting, Group, RolloutRound, Segment, Seq, segment_reward
from workbench.contracts import seeds
from workbench.contracts.bandit import SD_OFF_BUCKET, Bandit, make_bandit
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import Profile, next_position_edge, position_row
from workbench.contracts.seeds import Stream
from workbench.contracts.timeline import Timeline
from workbench.contracts.workload import Workload

NO_SD_STRATEGY = Strategy.chain(0)


def shard(n: int, workers: int) -> list[range]:
    """Contiguous shards (groups stay on one worker where they fit), as veRL splits a batch."""
    bounds = np.linspace(0, n, workers + 1).round().astype(int)
    return [range(bounds[w], bounds[w + 1]) for w in range(workers)]


def shard_seqs(seqs: list[Seq], groups: list[Group], workers: int) -> list[list[int]]:
    """Each engine's sequences (indices into seqs): by the rank that generated each group when a
    replayed file recorded one for every group and has exactly `workers` ranks (the real run's
    split), else contiguous shards."""
    ranks = {g.rank for g in groups}
    if None not in ranks and ranks <= set(range(workers)) and len(ranks) == workers:
        by_rank: list[list[int]] = [[] for _ in range(workers)]
        for i, q in enumerate(seqs):
            by_rank[groups[q.group].rank].append(i)
        return by_rank
    return [list(s) for s in shard(len(seqs), workers)]


class WarmUp:
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


class SiblingShare:
    """Suffix drafts: `RolloutPool.sibling_share` over one engine's active sequences (`group_of`:
    an engine index's group), recomputed only when it can have changed: a group of this engine's
    had a response finish (`watch`: the group marks it stale), or the batch changed. Finishes on
    other engines' groups, and a bandit's decision interval, end most segments with neither."""

    def __init__(self, group_of: Callable[[int], Group]):
        self.group_of = group_of
        self.stale = True
        self._batch = -1  # the batch the value is for
        self._value = 0.0

    def watch(self, group: Group) -> None:
        """`group` has responses on this engine: a finish in it may move the share."""
        if self not in group.watchers:
            group.watchers.append(self)
            self.stale = True

    def at(self, engine: EngineBatch) -> float:
        if self.stale or engine.batch != self._batch:
            self.stale, self._batch = False, engine.batch
            self._value = RolloutPool.sibling_share([self.group_of(i) for i in engine.active()])
        return self._value


class RolloutPool:
    """`workers` engines with their bandits and acceptance noise (own random streams per engine)."""

    def __init__(self, env: simpy.Environment, timeline: Timeline, workload: Workload,
                 policy: Policy, profile: Profile, seed: int, workers: int,
                 start: Sequence[int] | None = None):
        """`start`: the draft length each schedule row starts at (`climb`; see `make_bandit`)."""
        self.env, self.timeline = env, timeline
        self.workload, self.policy, self.profile = workload, policy, profile
        self.workers = workers
        self.bandits: list[Bandit] = [
            make_bandit(policy, seeds.seed_sequence(seed, Stream.BANDIT, w), start)
            for w in range(workers)
        ]
        self.noise = [seeds.rng(seed, Stream.NOISE, w) for w in range(workers)]
        self.learning = policy.bandit.algorithm != "fixed"
        self.version = [0] * workers  # the weights each engine runs
        self.latest = 0  # the newest weights pushed to the pool
        self.interruptible = policy.rollout.interrupt
        self._suffix_cache: dict[tuple[Strategy, bool, float], AcceptStats] = {}

    def start(self, ro: RolloutRound) -> tuple[list[simpy.Process], list[simpy.Process]]:
        """Each engine's decoder over its shard, and its waiter (idle or spot training)."""
        env = self.env
        shards = shard_seqs(ro.seqs, ro.groups, self.workers)
        decoders = [env.process(self._decode(w, ro, [ro.seqs[i] for i in s]))
                    for w, s in enumerate(shards)]
        waiters = [env.process(self._after_shard(w, ro, decoders[w]))
                   for w in range(self.workers)]
        return decoders, waiters

    def sync_all(self, step: int, version: int):
        """Push weights `version` to every engine between rollouts: all pause for the sync."""
        start = self.env.now
        yield self.env.timeout(self.profile.phases.weight_sync_s)
        for w in range(self.workers):
            self.timeline.add(step, w, start, self.env.now, "sync")
            self.version[w] = version
        self.latest = max(self.latest, version)

    def push(self, version: int) -> None:
        """New weights exist; interruptible engines take them at their next segment boundary."""
        self.latest = max(self.latest, version)

    def take_weights(self, version: int) -> None:
        """Every engine runs weights `version` now: a synchronous update's sync, which the
        simulator records for all workers, reached them between rollouts."""
        self.version = [version] * self.workers
        self.latest = max(self.latest, version)

    def oldest_version(self) -> int:
        """The oldest weights an engine runs: what a rollout starting now generates under."""
        return min(self.version)

    def stale(self) -> bool:
        """Newer weights exist than some engine runs."""
        return min(self.version) < self.latest

    def resync(self, w: int, step: int, engine: EngineBatch):
        """AReaL's interruption: pause for the sync, then prefill the sequences in flight again."""
        start = self.env.now
        in_flight = engine.batch * engine.mean_context() if engine.batch else 0.0
        prefill = prefill_s(self.profile.decode, int(in_flight))
        yield self.env.timeout(self.profile.phases.weight_sync_s + prefill)
        self.timeline.add(step, w, start, self.env.now, "sync")
        self.version[w] = self.latest

    def _decode(self, w: int, ro: RolloutRound, seqs: list[Seq]):
        """Engine w decodes its shard, one segment of constant batch (or one bandit decision) at a
        time.

        Interrupted when enough groups are complete (partial rollouts, tail batching): the
        segment in flight counts up to that moment, and each unfinished response keeps what it
        generated."""
        env, dec, prof = self.env, self.profile.decode, self.profile
        groups = ro.groups
        remaining, context, done_before = ro.engine_inputs(seqs, self.workload.prompt_tokens)
        engine = EngineBatch(remaining, context, self.workload.max_batch, done_before)
        warm, kind = WarmUp(self.policy), ro.drafting.kind
        shares = SiblingShare([groups[q.group] for q in seqs].__getitem__)
        if kind == DrafterKind.SUFFIX:
            for gi in {q.group for q in seqs}:
                shares.watch(groups[gi])
        while not engine.done:
            if self.interruptible and self.version[w] < self.latest:
                yield from self.resync(w, ro.step, engine)
            prefill = prefill_s(dec, engine.admit())
            batch = engine.batch
            siblings = shares.at(engine) if kind == DrafterKind.SUFFIX else 0.0
            seg = self.plan_segment(w, ro.drafting, engine, warm.left(batch), siblings)
            context = engine.mean_context() + seg.passes * seg.accept_len / 2
            decode_s = segment_s(dec, prof.drafter, kind, batch, context, seg.strategy, seg.passes,
                                 prof.mechanisms)
            start = env.now
            try:
                yield env.timeout(prefill + decode_s)
            except simpy.Interrupt:
                ran = env.now - start
                passes = seg.passes * max(0.0, ran - prefill) / decode_s if decode_s > 0 else 0.0
                ro.generated += self.decoded(ro.step, w, start, batch, seg.strategy, passes,
                                             seg.accept_len, context)
                for i in self.advance(engine, passes * seg.accept_len):
                    ro.finished(seqs[i])
                for i in engine.unfinished():
                    q = seqs[i]
                    groups[q.group].generated[q.member] = done_before[i] + engine.generated(i)
                return env.now
            ro.generated += self.decoded(ro.step, w, start, batch, seg.strategy, seg.passes,
                                         seg.accept_len, context)
            warm.ran(batch, seg.passes)
            if seg.arm is not None and decode_s > 0:
                self.bandits[w].update(seg.arm, segment_reward(seg, batch, decode_s))
            for i in self.advance(engine, seg.passes * seg.accept_len):
                ro.finished(seqs[i])
        return env.now

    def advance(self, engine: EngineBatch, per_seq_tokens: float) -> list[int]:
        """`engine.advance` (the finished sequences' groups tell their engines' SiblingShares)."""
        return engine.advance(per_seq_tokens)

    @staticmethod
    def sibling_share(active: list[Group]) -> float:
        """Suffix drafts: over the sequences decoding now (each given by its group), the mean
        finished share of their group's other responses (the continuations a grouped drafter can
        draw on), rounded to tenths."""
        if not active:
            return 0.0
        return round(float(np.mean([g.finished_share for g in active])), 1)

    def plan_segment(self, w: int, drafting: Drafting, engine: EngineBatch, warm_left: float,
                      siblings: float = 0.0) -> Segment:
        """How the next segment runs: the bandit's strategy (none while SD warms up again), how many
        verify passes (to the next completion, at most one decision interval or the warm-up left,
        or until the batch's mean position in its responses reaches the next row of the drafter's
        acceptance by position), and the accepted length it sees (its mean over the segment's
        verify outcomes)."""
        batch, need = engine.batch, engine.tokens_to_next_finish()
        arm = self.bandits[w].select(batch) if drafting.kind != DrafterKind.NONE else None
        cap = math.inf
        if arm is not None and arm.bucket != SD_OFF_BUCKET and warm_left > 0:
            # FastRL: SD back on only after enough decode steps at or below the threshold.
            arm, cap = None, warm_left
        elif arm is not None and self.learning and arm.bucket != SD_OFF_BUCKET:
            cap = self.policy.bandit.decision_interval
        strategy = arm.strategy if arm is not None else NO_SD_STRATEGY
        stats = drafting.accept[strategy]
        if drafting.kind == DrafterKind.SUFFIX and strategy.steps:
            stats = self._suffix_stats(strategy, drafting.history, siblings)
        accept_len = stats.mean
        if drafting.position and strategy.steps:
            pos = engine.mean_position()
            stats = drafting.accept_by_row[strategy][position_row(drafting.position, pos)]
            accept_len = stats.mean
            cap = min(cap, (next_position_edge(drafting.position, pos) - pos) / accept_len)
        if stats.var > 0 and need > 0:
            # The mean of passes*batch verify outcomes: the reward the bandit sees is noisy.
            sd = math.sqrt(stats.var / (min(need / accept_len, cap) * batch))
            noisy = accept_len + sd * self.noise[w].standard_normal()
            accept_len = min(strategy.depth + 1.0, max(1.0, noisy))
        return Segment(arm, strategy, min(need / accept_len, cap), accept_len)

    def _suffix_stats(self, strategy: Strategy, history: bool, siblings: float) -> AcceptStats:
        key = (strategy, history, siblings)
        if key not in self._suffix_cache:
            self._suffix_cache[key] = suffix_stats(self.profile.acceptance, strategy, history,
                                                   siblings)
        return self._suffix_cache[key]

    def decoded(self, step: int, w: int, start: float, batch: int, strategy: Strategy,
                passes: float, accept_len: float, context: float) -> float:
        """Record engine w's decode interval from `start` to now; returns the tokens it
        generated."""
        tokens = passes * accept_len * batch
        k = strategy.steps
        self.timeline.add(step, w, start, self.env.now, "decode_sd" if k else "decode", batch, k,
                          tokens, passes * batch, context, strategy.name if k else "")
        return tokens

    def _after_shard(self, w: int, ro: RolloutRound, decoder: simpy.Process):
        """Engine w once its shard is done: idle, and spot-train the drafter when allowed, until
        the rollout ends."""
        env, training = self.env, self.policy.spot_training
        yield decoder
        finished = env.now
        ro.idle_workers += 1
        if ro.spot and ro.idle_workers >= training.min_idle_workers and not ro.spot_open.triggered:
            ro.spot_open.succeed()
        yield (ro.spot_open | ro.done) if ro.spot else ro.done
        self.timeline.add(ro.step, w, finished, env.now, "idle")
        if ro.done.triggered:
            return
        # Spot training until the rollout ends, which preempts it: only whole drafter steps
        # count, the one cut short is dropped, never waited for, so the rollout is never delayed.
        learn = self.profile.learning
        step_s = learn.tokens_per_step / (learn.train_tokens_per_s * self.workload.gpus_per_worker)
        start = env.now
        yield ro.done
        ro.trained_tokens += math.floor((env.now - start) / step_s) * learn.tokens_per_step
        self.timeline.add(ro.step, w, start, env.now, "drafter_train")
