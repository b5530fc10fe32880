"""One agentic engine's share of a rollout: its trajectories, the turn each batch entry is, and its
prefix cache (plain state; the SimPy processes that act on it are in sim/agent_pool.py).

Each turn is one entry of the engine's continuous batch (sim/engine.py): queued when its request
reaches the engine (the rollout's start for a first turn, the tool call's end for a later one),
admitted while the prefix cache has room for its context, prefilling only what the cache does not
hold, and done when it has generated its completion tokens. Between two turns the trajectory is out
of the batch, on its tool call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from sim.engine import EngineBatch
from sim.entities import RolloutRound, Seq
from sim.prefix_cache import PrefixCache
from sim.trajectories import Trajectory
from workbench.contracts.workload import Workload


@dataclass(slots=True)
class TurnEntry:
    """One turn in an engine's batch (or its queue)."""

    seq: int  # the trajectory: index into the engine's shard
    turn: int
    arrive_s: float  # its request reached the engine
    context: int  # its prompt (the whole context so far)
    admit_s: float = math.nan  # admitted into the running batch
    cached: float = 0.0  # of its prompt, tokens the prefix cache held


class AgentEngine:
    """Engine `worker`'s trajectories in rollout `ro` (`seqs`: its shard)."""

    def __init__(self, env: simpy.Environment, worker: int, ro: RolloutRound, seqs: list[Seq],
                 workload: Workload):
        a = workload.agentic
        self.worker, self.ro, self.seqs = worker, ro, seqs
        self.batch = EngineBatch([], [], workload.max_batch)
        self.cache = PrefixCache(a.cache_tokens, a.shared_prompt)
        self.entries: list[TurnEntry] = []
        groups = ro.groups
        self.trajs: list[Trajectory] = [groups[q.group].trajectories[q.member] for q in seqs]
        self.prompts = [groups[q.group].prompt(workload.prompt_tokens) for q in seqs]
        self.open = len(seqs)  # trajectories not complete
        self.out = 0  # trajectories out on a tool call
        self.closed = False  # the rollout stopped this engine: returning tools are dropped
        self.wake = env.event()
        self.env = env
        for j, q in enumerate(seqs):
            k, into = self.trajs[j].at(float(groups[q.group].generated[q.member]))
            self.queue(j, k, into)

    def queue(self, j: int, k: int, into: float = 0.0) -> None:
        """Trajectory j's turn k reaches the engine (`into`: tokens of it generated before, by an
        aborted rollout)."""
        t = self.trajs[j]
        context = t.context(self.prompts[j], k) + int(into)
        done = float(t.ends[k] - t.completion[k]) + into
        self.batch.add(float(t.completion[k]) - into, context, done)
        self.entries.append(TurnEntry(j, k, self.env.now, context))

    def returned(self, j: int, k: int) -> None:
        """Trajectory j is back from its tool call with turn k to run: queued, and the engine
        woken."""
        self.out -= 1
        self.queue(j, k)
        if not self.wake.triggered:
            self.wake.succeed()

    def rearm(self) -> None:
        if self.wake.triggered:
            self.wake = self.env.event()

    def _keys(self, e: TurnEntry) -> tuple[int, int]:
        return e.seq, self.seqs[e.seq].group

    def admit(self) -> float:
        """Admit queued turns while the batch has slots and the cache has room; returns the tokens
        to prefill (their contexts less what the cache held)."""
        b, now, tokens = self.batch, self.env.now, 0.0
        while b.pending and b.batch < b.max_batch:
            e = self.entries[b.pending[0]]
            traj, group = self._keys(e)
            if not self.cache.room(traj, group, self.prompts[e.seq], e.context):
                break
            b.admit_indices(1)
            e.cached = self.cache.admit(traj, group, self.prompts[e.seq], e.context)
            e.admit_s = now
            tokens += e.context - e.cached
        return tokens

    def turn_done(self, i: int) -> TurnEntry:
        """Entry i generated its turn: its tokens stay cached, evictable."""
        e = self.entries[i]
        t = self.trajs[e.seq]
        done = t.context(self.prompts[e.seq], e.turn) + int(t.completion[e.turn])
        self.cache.release(e.seq, done)
        return e

    def generated(self) -> list[tuple[Seq, float]]:
        """Each unfinished trajectory and the tokens it generated (a turn in flight counts what it
        made; one between turns stands at its last turn's end)."""
        made: dict[int, float] = {}
        for i in self.batch.unfinished():
            made[self.entries[i].seq] = self.batch.done_before[i] + self.batch.generated(i)
        out = []
        for j, q in enumerate(self.seqs):
            g = self.ro.groups[q.group]
            if g.generated[q.member] >= g.lengths[q.member]:
                continue
            out.append((q, made.get(j, float(g.generated[q.member]))))
        return out
