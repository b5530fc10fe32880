"""Streaming rollouts (sim/streaming.py: fully asynchronous RL) of agentic trajectories.

The streaming pool's engines pull trajectories from its queue; each pulled trajectory's turns are
entries of its engine's batch, one after the other: a turn that ends with a tool call leaves the
batch, its tool process holds it for the call's latency (queueing for a tool slot when tools are
limited) and queues its next turn on the same engine, waking it; the group goes to the trainer
once its last trajectory's last turn is done. Each engine's prefix cache is flushed when new
weights reach it (the cached keys and values were computed under the old ones). An engine whose
trajectories are all out on tools waits as `tool_wait`. Turns are recorded as sim/agent_pool.py
records them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import simpy

from sim.engine import EngineBatch
from sim.entities import Group
from sim.prefix_cache import PrefixCache
from sim.rollout import SiblingShare
from sim.agent_pool import TURN_COLUMNS
from sim.streaming import StreamingPool
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.timeline import Timeline
from workbench.contracts.workload import Workload


class AgentStreamingPool(StreamingPool):
    def __init__(self, env: simpy.Environment, timeline: Timeline, workload: Workload,
                 policy: Policy, profile: Profile, seed: int, workers: int,
                 start: Sequence[int] | None = None):
        super().__init__(env, timeline, workload, policy, profile, seed, workers, start)
        a = workload.agentic
        self.tools = simpy.Resource(env, capacity=a.tool_slots) if a.tool_slots else None
        self.scale = a.tool_latency_scale
        self.caches = [PrefixCache(a.cache_tokens, a.shared_prompt) for _ in range(workers)]
        self.cached_under = [0] * workers  # the weights each engine's cache holds keys of
        self.out = [0] * workers  # trajectories of each engine out on a tool call
        self.state: dict[int, tuple[EngineBatch, list]] = {}
        self.admitted: list[dict[int, tuple[float, float]]] = [{} for _ in range(workers)]
        self.turn_rows: list[tuple] = []

    def turn_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.turn_rows, columns=list(TURN_COLUMNS))

    def _engine_state(self, w: int) -> tuple[EngineBatch, list]:
        """Each entry's owner: (group, member, turn, when its request arrived, its context)."""
        self.state[w] = super()._engine_state(w)
        return self.state[w]

    def _pull(self, w: int, engine: EngineBatch, owners: list, shares: SiblingShare) -> None:
        """Fill free slots with trajectories from the queue, each at the turn it stands at."""
        free = self.workload.max_batch - engine.batch - len(engine.pending)
        while free > 0 and self.queue:
            g, m = self.queue.popleft()
            if g.version is None:
                g.version, g.started_s = self.version[w], self.env.now
            k, into = g.trajectories[m].at(float(g.generated[m]))
            self._queue_turn(w, g, m, k, into)
            shares.watch(g)
            free -= 1

    def _queue_turn(self, w: int, g: Group, m: int, k: int, into: float = 0.0) -> None:
        engine, owners = self.state[w]
        t = g.trajectories[m]
        context = t.context(g.prompt(self.workload.prompt_tokens), k) + int(into)
        engine.add(float(t.completion[k]) - into, context,
                   float(t.ends[k] - t.completion[k]) + into)
        owners.append((g, m, k, self.env.now, context))

    def _admit(self, w: int, engine: EngineBatch, owners: list) -> int:
        """Admit while the batch has slots and the cache room; the tokens it does not hold."""
        if self.cached_under[w] != self.version[w]:
            a = self.workload.agentic
            self.caches[w] = PrefixCache(a.cache_tokens, a.shared_prompt)
            self.cached_under[w] = self.version[w]
        cache, tokens = self.caches[w], 0
        while engine.pending and engine.batch < engine.max_batch:
            i = engine.pending[0]
            g, m, _, _, context = owners[i]
            traj, group, prompt = (g.key, g.attempt, m), (g.key, g.attempt), g.prompt(
                self.workload.prompt_tokens)
            if not cache.room(traj, group, prompt, context):
                break
            engine.admit_indices(1)
            cached = cache.admit(traj, group, prompt, context)
            self.admitted[w][i] = (self.env.now, cached)
            tokens += context - int(cached)
        return tokens

    def _finished(self, w: int, owners: list, i: int) -> None:
        g, m, k, arrive, context = owners[i]
        t = g.trajectories[m]
        admit_s, cached = self.admitted[w].pop(i)
        if self.caches[w].knows((g.key, g.attempt, m)):
            self.caches[w].release((g.key, g.attempt, m), context + int(t.completion[k]))
        self.turn_rows.append((self.latest, w, g.key[0], g.key[1], m, k, arrive, admit_s,
                               self.env.now, context, cached, float(t.completion[k])))
        if k + 1 >= t.turns:
            super()._finished(w, owners, i)
            return
        g.generated[m] = t.ends[k]
        self.out[w] += 1
        self.env.process(self._tool(w, g, m, k))

    def _tool(self, w: int, g: Group, m: int, k: int):
        seconds = float(g.trajectories[m].tool_s[k]) * self.scale
        if self.tools is None:
            yield self.env.timeout(seconds)
        else:
            with self.tools.request() as slot:
                yield slot
                yield self.env.timeout(seconds)
        self.out[w] -= 1
        if self.closed:
            return
        self._queue_turn(w, g, m, k + 1)
        self._wake(w)

    def _waiting(self, w: int) -> str:
        return "tool_wait" if self.out[w] else "idle"
