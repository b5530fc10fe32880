"""One engine's KV cache as a prefix cache over agentic trajectories (SGLang's radix cache, vLLM's
automatic prefix caching), counted in tokens.

A trajectory's context is its group's prompt (one node, shared by the group's trajectories when
`shared_prompt`) and its own suffix (its turns and tool output so far). While a turn decodes, its
nodes are pinned; when the turn ends, the suffix (now holding the generated tokens too) stays cached
but evictable. The next turn prefills only what is not cached. Space runs out at `capacity` tokens:
the least recently used evictable node goes first, a suffix before the prompt it hangs off (a
radix tree evicts leaves), and a pinned node never.

Admission: `room(context)` says whether a turn's context fits beside the pinned ones (the engine
waits otherwise, as a KV-bound scheduler does); an engine with nothing pinned admits anyway.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable


class PrefixCache:
    def __init__(self, capacity: float = 0.0, shared_prompt: bool = True):
        """`capacity` in tokens (0: no limit)."""
        self.capacity = capacity if capacity > 0 else math.inf
        self.shared_prompt = shared_prompt
        self.used = 0.0  # tokens held, pinned or not
        self.pinned = 0.0  # tokens of the running turns' nodes
        self.evicted = 0.0  # tokens evicted so far
        self._prompt: dict[Hashable, float] = {}  # group -> prompt node tokens
        self._children: dict[Hashable, int] = {}  # group -> suffix nodes hanging off its prompt
        self._running: dict[Hashable, int] = {}  # group -> its trajectories running now
        self._suffix: dict[Hashable, float] = {}  # trajectory -> suffix node tokens
        self._group_of: dict[Hashable, Hashable] = {}
        self._lru: OrderedDict[tuple[str, Hashable], None] = OrderedDict()  # evictable nodes

    def cached(self, traj: Hashable, group: Hashable, prompt: int) -> float:
        """Tokens of this trajectory's context the cache holds now."""
        if group not in self._prompt:
            return 0.0
        return self._prompt[group] + self._suffix.get(traj, 0.0)

    def knows(self, traj: Hashable) -> bool:
        """Whether the trajectory has a node here (a cache flushed since its turn began has
        none)."""
        return traj in self._group_of

    def room(self, traj: Hashable, group: Hashable, prompt: int, context: int) -> bool:
        """Whether the turn can be pinned beside the running ones (evicting what it must)."""
        if self.pinned == 0:
            return True
        shared = self._prompt.get(group, 0.0) if self._running.get(group) else 0.0
        return self.pinned + (context - shared) <= self.capacity

    def admit(self, traj: Hashable, group: Hashable, prompt: int, context: int) -> float:
        """Pin the turn's context; returns the tokens of it that were cached (not prefilled)."""
        prompt = prompt if self.shared_prompt else 0
        if not self.shared_prompt:
            group = ("own", traj)
        hit = self.cached(traj, group, prompt)
        if group not in self._prompt:
            self._prompt[group], self._children[group], self._running[group] = float(prompt), 0, 0
            self.used += prompt
        self._lru.pop(("p", group), None)
        if not self._running[group]:
            self.pinned += self._prompt[group]
        self._running[group] += 1
        old = self._suffix.get(traj)
        if old is None:
            self._children[group] += 1
            old = 0.0
        self._lru.pop(("s", traj), None)
        size = max(0.0, context - self._prompt[group])
        self._suffix[traj], self._group_of[traj] = size, group
        self.used += size - old
        self.pinned += size
        self._evict()
        return min(float(context), hit)

    def release(self, traj: Hashable, context: int) -> None:
        """The turn ended with `context` tokens (its prompt and what it generated): they stay
        cached, evictable."""
        group = self._group_of[traj]
        size = max(0.0, context - self._prompt[group])
        self.pinned -= self._suffix[traj]
        self.used += size - self._suffix[traj]
        self._suffix[traj] = size
        self._lru[("s", traj)] = None
        self._running[group] -= 1
        if not self._running[group]:
            self.pinned -= self._prompt[group]
        self._evict()

    def _evict(self) -> None:
        while self.used > self.capacity and self._lru:
            kind, key = next(iter(self._lru))
            del self._lru[(kind, key)]
            if kind == "s":
                group = self._group_of.pop(key)
                tokens = self._suffix.pop(key)
                self._children[group] -= 1
                if not self._children[group] and not self._running[group]:
                    self._lru[("p", group)] = None
            else:
                tokens = self._prompt.pop(key)
                del self._children[key], self._running[key]
            self.used -= tokens
            self.evicted += tokens
