"""Agentic rollouts on a pool of engines: trajectories of generation turns and tool calls.

`AgentPool` is the rollout pool (sim/rollout.py) whose engines decode turns instead of whole
responses (sim/agent_engine.py). Per engine, one SimPy process decodes segments of constant batch
exactly as a single-turn engine does (the policy's bandit, SD strategy, warm-up and acceptance
apply unchanged to each segment), with two differences:
- a turn that ends with a tool call takes its trajectory out of the batch: a tool process holds it
  for the call's latency (queueing first for one of `tool_slots` when tools are limited), then
  queues its next turn on the same engine, which prefills only the part of the context its prefix
  cache does not hold; a turn that comes back cuts the running segment short (continuous batching
  admits it at the next engine step);
- an engine whose trajectories are all out on tools waits (`tool_wait` on the timeline), or trains
  the drafter there when the rollout spot-trains and enough engines are idle or waiting.
The engine is done when its last trajectory's last turn is; the rollout, when every engine is.
Every turn is recorded (`TURN_COLUMNS`): when its request reached the engine, was admitted and was
done, its prompt, the part of it cached, and its completion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import simpy

from sim.agent_engine import AgentEngine
from sim.costs import prefill_s, segment_s
from sim.entities import RolloutRound, Segment, Seq, segment_reward
from sim.rollout import RolloutPool, SiblingShare, WarmUp, shard_seqs
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.profile import Profile
from workbench.contracts.timeline import Timeline
from workbench.contracts.workload import Workload

# One row per turn decoded (`turns.parquet` beside a run's timeline; docs/formats.md).
TURN_COLUMNS = ("rl_step", "worker", "batch", "group", "member", "turn", "arrive_s", "admit_s",
                "end_s", "prompt_tokens", "cached_tokens", "completion_tokens")


class AgentPool(RolloutPool):
    def __init__(self, env: simpy.Environment, timeline: Timeline, workload: Workload,
                 policy: Policy, profile: Profile, seed: int, workers: int,
                 start: Sequence[int] | None = None):
        super().__init__(env, timeline, workload, policy, profile, seed, workers, start)
        a = workload.agentic
        self.tools = simpy.Resource(env, capacity=a.tool_slots) if a.tool_slots else None
        self.scale = a.tool_latency_scale
        self.turn_rows: list[tuple] = []

    def start(self, ro: RolloutRound) -> tuple[list[simpy.Process], list[simpy.Process]]:
        """Each engine's turns over its shard, and its waiter (idle or spot training)."""
        env = self.env
        shards = shard_seqs(ro.seqs, ro.groups, self.workers)
        decoders = [env.process(self._turns(w, ro, [ro.seqs[i] for i in s]))
                    for w, s in enumerate(shards)]
        waiters = [env.process(self._after_shard(w, ro, decoders[w]))
                   for w in range(self.workers)]
        return decoders, waiters

    def turn_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.turn_rows, columns=list(TURN_COLUMNS))

    def _turns(self, w: int, ro: RolloutRound, seqs: list[Seq]):
        """Engine w decodes its trajectories' turns until the last is done (or the rollout stops
        it: each unfinished trajectory keeps what it generated)."""
        a = AgentEngine(self.env, w, ro, seqs, self.workload)
        warm = WarmUp(self.policy)
        shares = SiblingShare(lambda i: ro.groups[a.seqs[a.entries[i].seq].group])
        if ro.drafting.kind == DrafterKind.SUFFIX:
            for gi in {q.group for q in seqs}:
                shares.watch(ro.groups[gi])
        try:
            while a.open:
                if self.interruptible and self.version[w] < self.latest:
                    yield from self.resync(w, ro.step, a.batch)
                prefill = prefill_s(self.profile.decode, int(a.admit()))
                if a.batch.batch == 0:
                    yield from self._tool_wait(w, ro, a)
                    continue
                yield from self._segment(w, ro, a, warm, shares, prefill)
        except simpy.Interrupt:
            for q, made in a.generated():
                ro.groups[q.group].generated[q.member] = made
        a.closed = True
        return self.env.now

    def _segment(self, w: int, ro: RolloutRound, a: AgentEngine, warm: WarmUp,
                 shares: SiblingShare, prefill: float):
        """Prefill what was admitted, then decode until the next turn ends, or until a trajectory
        back from its tool cuts the segment short (the passes made so far count)."""
        env, d = self.env, ro.drafting
        start, batch = env.now, a.batch.batch
        siblings = shares.at(a.batch) if d.kind == DrafterKind.SUFFIX else 0.0
        seg = self.plan_segment(w, d, a.batch, warm.left(batch), siblings)
        context = a.batch.mean_context() + seg.passes * seg.accept_len / 2
        decode_s = segment_s(self.profile.decode, self.profile.drafter, d.kind, batch, context,
                             seg.strategy, seg.passes, self.profile.mechanisms)
        try:
            if prefill > 0:
                yield env.timeout(prefill)
            begun = env.now
            full = env.timeout(decode_s)
            fired = yield full | a.wake
            share = 1.0 if full in fired else _share(env.now - begun, decode_s)
        except simpy.Interrupt:
            self._ran(w, ro, a, warm, seg, batch, start, context, decode_s,
                      _share(env.now - start - prefill, decode_s))
            raise
        a.rearm()
        self._ran(w, ro, a, warm, seg, batch, start, context, decode_s, share)

    def _ran(self, w: int, ro: RolloutRound, a: AgentEngine, warm: WarmUp, seg: Segment,
             batch: int, start: float, context: float, decode_s: float, share: float) -> None:
        """Book `share` of the segment: the timeline, the warm-up, the bandit (a whole segment
        only) and the turns it completed."""
        passes = seg.passes * share
        ro.generated += self.decoded(ro.step, w, start, batch, seg.strategy, passes,
                                     seg.accept_len, context)
        warm.ran(batch, passes)
        if share >= 1.0 and seg.arm is not None and decode_s > 0:
            self.bandits[w].update(seg.arm, segment_reward(seg, batch, decode_s))
        for i in self.advance(a.batch, passes * seg.accept_len):
            self._turn_end(w, ro, a, i)

    def _turn_end(self, w: int, ro: RolloutRound, a: AgentEngine, i: int) -> None:
        """Entry i's turn is done: the trajectory is complete, or goes to its tool call."""
        e = a.turn_done(i)
        j, k = e.seq, e.turn
        t, q = a.trajs[j], a.seqs[j]
        g = ro.groups[q.group]
        self.turn_rows.append((ro.step, w, g.key[0], g.key[1], q.member, k, e.arrive_s,
                               e.admit_s, self.env.now, e.context, e.cached,
                               float(t.completion[k])))
        if k + 1 >= t.turns:
            a.open -= 1
            ro.finished(q)
            return
        g.generated[q.member] = t.ends[k]
        a.out += 1
        self.env.process(self._tool(a, j, k))

    def _tool(self, a: AgentEngine, j: int, k: int):
        """Trajectory j's tool call after turn k (off the engine), then its next turn."""
        seconds = float(a.trajs[j].tool_s[k]) * self.scale
        if self.tools is None:
            yield self.env.timeout(seconds)
        else:
            with self.tools.request() as slot:
                yield slot
                yield self.env.timeout(seconds)
        if not a.closed:
            a.returned(j, k + 1)

    def _tool_wait(self, w: int, ro: RolloutRound, a: AgentEngine):
        """Every trajectory of engine w is out on a tool: wait for one to come back, training the
        drafter meanwhile where the rollout spot-trains and enough engines are idle or waiting
        (only whole drafter steps count: a returning trajectory preempts the trainer)."""
        env, training = self.env, self.policy.spot_training
        start = env.now
        ro.tool_waiting += 1
        spot = ro.spot and ro.idle_workers + ro.tool_waiting >= training.min_idle_workers
        if spot and not ro.spot_open.triggered:
            ro.spot_open.succeed()
        try:
            yield a.wake
        finally:
            ro.tool_waiting -= 1
            if spot:
                learn = self.profile.learning
                step_s = learn.tokens_per_step / (learn.train_tokens_per_s
                                                  * self.workload.gpus_per_worker)
                steps = math.floor((env.now - start) / step_s)
                ro.trained_tokens += steps * learn.tokens_per_step
            self.timeline.add(ro.step, w, start, env.now, "drafter_train" if spot else "tool_wait")
        a.rearm()


def _share(ran: float, decode_s: float) -> float:
    return min(1.0, max(0.0, ran) / decode_s) if decode_s > 0 else 0.0
