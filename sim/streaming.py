"""Streaming rollouts for fully asynchronous RL (AReaL; veRL's fully_async_policy).

There is no rollout to wait for: each engine pulls responses from one queue as its batch frees
slots, so a long response decodes beside new ones instead of alone, and the long tail's empty
slots fill. The trainer (sim/stream_steps.py) queues prompts as far ahead of training as the
staleness bound allows, and trains on groups in the order they complete (`StreamingPool.done`).

New weights reach a running engine at once with `interrupt` (the sequences in flight prefill
their context again: AReaL's interruptible generation, veRL's partial_rollout). Without it the
pool stops admitting, drains what is in flight and syncs every engine together, as veRL's
"stale samples" mode waits for its active tasks.

Timeline rows carry the RL step in progress when they began (the weights version: updates
done), so a step's rows are the pool's time between two updates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import simpy

from sim.costs import prefill_s, segment_s
from sim.engine import EngineBatch
from sim.entities import Drafting, Group
from sim.rollout import RolloutPool, SiblingShare, WarmUp
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.profile import Profile
from workbench.contracts.timeline import Timeline
from workbench.contracts.workload import Workload


class StreamingPool(RolloutPool):
    def __init__(self, env: simpy.Environment, timeline: Timeline, workload: Workload,
                 policy: Policy, profile: Profile, seed: int, workers: int,
                 start: Sequence[int] | None = None):
        super().__init__(env, timeline, workload, policy, profile, seed, workers, start)
        self.queue: deque[tuple[Group, int]] = deque()  # (group, member) in launch order
        self.done = simpy.Store(env)  # complete groups, in the order they completed
        self.drafting: Drafting | None = None  # how the engines draft (new with every update)
        self.closed = False
        self.wake = [env.event() for _ in range(workers)]
        self.running = [0] * workers  # each engine's running batch
        self._drained = 0  # engines emptied while a sync waits for the rest
        self._all_drained = env.event()

    # ------------------------------------------------------------ what the trainer calls

    def start_engines(self, drafting: Drafting) -> list[simpy.Process]:
        """Start every engine, drafting as `drafting` says."""
        self.drafting = drafting
        return [self.env.process(self._engine(w)) for w in range(self.workers)]

    def offer(self, groups: list[Group]) -> None:
        """Queue new prompts' responses; engines with free slots take them at once."""
        for g in groups:
            self.queue.extend((g, m) for m in range(len(g.lengths)))
        for w in range(self.workers):
            if self.running[w] < self.workload.max_batch:
                self._wake(w)

    def push(self, version: int) -> None:
        """New weights: every engine hears of it (to resync, or to stop admitting and drain)."""
        super().push(version)
        for w in range(self.workers):
            self._wake(w)

    def new_weights(self, version: int, drafting: Drafting) -> None:
        """An update's weights, and how the engines draft under them."""
        self.drafting = drafting
        self.push(version)

    def close(self) -> None:
        """Training is over: the engines stop where they are."""
        self.closed = True
        for w in range(self.workers):
            self._wake(w)

    # ------------------------------------------------------------ one engine

    def _wake(self, w: int) -> None:
        if not self.wake[w].triggered:
            self.wake[w].succeed()

    def _rearm(self, w: int) -> None:
        if self.wake[w].triggered:
            self.wake[w] = self.env.event()

    def _engine_state(self, w: int) -> tuple[EngineBatch, list]:
        """Engine w's continuous batch, and each entry's owner: (group, member, ...)."""
        return EngineBatch([], [], self.workload.max_batch), []

    def _engine(self, w: int):
        engine, owners = self._engine_state(w)
        warm = WarmUp(self.policy)
        shares = SiblingShare(lambda i: owners[i][0])
        while not self.closed:
            if self.version[w] < self.latest:
                if self.interruptible:
                    yield from self.resync(w, self.latest, engine)
                elif engine.batch == 0:
                    yield from self._drain_sync(w)
                    continue
            if self.version[w] == self.latest:
                self._pull(w, engine, owners, shares)
            if engine.batch == 0 and not engine.pending:
                yield from self._wait(w)
                continue
            yield from self._segment(w, engine, owners, warm, shares)

    def _pull(self, w: int, engine: EngineBatch, owners: list[tuple[Group, int]],
              shares: SiblingShare) -> None:
        """Fill engine w's free slots from the queue; a group's weights version is the one its first
        response started under (`shares`, the engine's suffix-draft share, is told of its
        groups)."""
        free = self.workload.max_batch - engine.batch - len(engine.pending)
        while free > 0 and self.queue:
            g, m = self.queue.popleft()
            if g.version is None:
                g.version, g.started_s = self.version[w], self.env.now
            engine.add(float(g.lengths[m] - g.generated[m]),
                       g.prompt(self.workload.prompt_tokens) + int(g.generated[m]),
                       float(g.generated[m]))
            owners.append((g, m))
            shares.watch(g)
            free -= 1

    def _wait(self, w: int):
        """Nothing to decode: idle until work, weights or the end arrive."""
        start, step, state = self.env.now, self.latest, self._waiting(w)
        yield self.wake[w]
        self._rearm(w)
        if self.env.now > start:
            self.timeline.add(step, w, start, self.env.now, state)

    def _waiting(self, w: int) -> str:
        """What an engine with nothing to decode is doing (the timeline's state)."""
        return "idle"

    def _drain_sync(self, w: int):
        """Engine w is empty and stale: wait until every engine is, then all sync together."""
        start, step = self.env.now, self.latest
        ready = self._all_drained
        self._drained += 1
        if self._drained == self.workers:
            self._drained, self._all_drained = 0, self.env.event()
            ready.succeed()
        yield ready
        if self.env.now > start:
            self.timeline.add(step, w, start, self.env.now, "idle")
        start = self.env.now
        yield self.env.timeout(self.profile.phases.weight_sync_s)
        self.timeline.add(step, w, start, self.env.now, "sync")
        self.version[w] = self.latest
        self._rearm(w)

    def _segment(self, w: int, engine: EngineBatch, owners: list[tuple[Group, int]], warm: WarmUp,
                 shares: SiblingShare):
        """Decode until the next response finishes, or until new work or weights cut it short (then
        the passes made so far count; a prefill is never cut)."""
        env, dec, d = self.env, self.profile.decode, self.drafting
        start, step = env.now, self.latest
        prefill = prefill_s(dec, self._admit(w, engine, owners))
        if prefill > 0:
            yield env.timeout(prefill)
        batch = engine.batch
        self.running[w] = batch
        siblings = shares.at(engine) if d.kind == DrafterKind.SUFFIX else 0.0
        seg = self.plan_segment(w, d, engine, warm.left(batch), siblings)
        context = engine.mean_context() + seg.passes * seg.accept_len / 2
        decode_s = segment_s(dec, self.profile.drafter, d.kind, batch, context, seg.strategy,
                             seg.passes, self.profile.mechanisms)
        begun = env.now
        # A wake that came during the prefill ends the segment at once (the loop takes the news).
        yield env.timeout(decode_s) | self.wake[w]
        self._rearm(w)
        share = min(1.0, (env.now - begun) / decode_s) if decode_s > 0 else 1.0
        passes = seg.passes * share
        if env.now > start:
            self.decoded(step, w, start, batch, seg.strategy, passes, seg.accept_len, context)
        warm.ran(batch, passes)
        if share >= 1.0 and seg.arm is not None and decode_s > 0:
            self.bandits[w].update(seg.arm, passes * seg.accept_len * batch / decode_s)
        for i in self.advance(engine, passes * seg.accept_len):
            self._finished(w, owners, i)
        self.running[w] = engine.batch

    def _admit(self, w: int, engine: EngineBatch, owners: list) -> int:
        """Fill engine w's free slots from its queue; the context tokens to prefill."""
        return engine.admit()

    def _finished(self, w: int, owners: list, i: int) -> None:
        """Engine entry i is done: its response is, and a complete group goes to the trainer."""
        g, m = owners[i][:2]
        g.finish(m)
        if g.complete:
            g.finished_s = self.env.now
            self.done.put(g)
