"""One rollout engine's continuous batching, advanced a segment at a time.

Every active sequence gains the same number of tokens per verify pass (the
batch's tokens per pass), so the whole batch moves on one shared progress
counter: a sequence admitted at progress p0 with length L finishes when
progress reaches p0 + L. A heap of those thresholds gives the next
completion in O(log n); nothing is stepped token by token.
"""

from __future__ import annotations

import heapq
from collections import deque

_EPS = 1e-9


class EngineBatch:
    """`remaining[i]` tokens still to generate for sequence i, whose context starts at `context[i]`
    (its prompt, plus what an earlier, aborted rollout already generated: `done[i]` tokens of its
    response)."""

    def __init__(self, remaining: list[float], context: list[int], max_batch: int,
                 done: list[float] | None = None):
        self.remaining = remaining
        self.context = context
        self.done_before = done if done is not None else [0.0] * len(remaining)
        self.max_batch = max_batch
        self.pending = deque(range(len(remaining)))
        self.finish_at: list[tuple[float, int]] = []  # heap of (progress threshold, sequence index)
        self.admitted_at: dict[int, float] = {}  # active sequence -> progress when admitted
        self.progress = 0.0
        self._base_sum = 0.0  # over active sequences: starting context - admission progress
        # Over active sequences: response tokens done before - admission progress.
        self._pos_sum = 0.0

    def add(self, remaining: float, context: int, done: float = 0.0) -> int:
        """Queue one more sequence (streaming rollouts); returns its index."""
        self.remaining.append(remaining)
        self.context.append(context)
        self.done_before.append(done)
        self.pending.append(len(self.remaining) - 1)
        return len(self.remaining) - 1

    @property
    def batch(self) -> int:
        return len(self.finish_at)

    @property
    def done(self) -> bool:
        return not self.finish_at and not self.pending

    def admit(self) -> int:
        """Fill free slots from the queue; returns the context tokens to prefill."""
        idx = self.admit_indices()
        return sum(self.context[i] for i in idx)

    def admit_indices(self, limit: int | None = None) -> list[int]:
        """Fill free slots from the queue (at most `limit` of them); returns the sequences
        admitted."""
        k = min(len(self.pending), self.max_batch - len(self.finish_at))
        if limit is not None:
            k = min(k, limit)
        if k <= 0:
            return []
        p = self.progress
        idx = [self.pending.popleft() for _ in range(k)]
        remaining, context, done = self.remaining, self.context, self.done_before
        if k > 8:  # a wave of admissions: one heapify instead of k pushes (pops come out the same)
            self.finish_at.extend((p + remaining[i], i) for i in idx)
            heapq.heapify(self.finish_at)
        else:
            for i in idx:
                heapq.heappush(self.finish_at, (p + remaining[i], i))
        base, pos = self._base_sum, self._pos_sum
        for i in idx:  # one by one, in order: the same sums to the last bit
            self.admitted_at[i] = p
            base += context[i] - p
            pos += done[i] - p
        self._base_sum, self._pos_sum = base, pos
        return idx

    def mean_context(self) -> float:
        """Mean context (prompt + generated tokens) over the active sequences."""
        return self.progress + self._base_sum / len(self.finish_at)

    def mean_position(self) -> float:
        """Mean tokens of their responses generated so far, over the active sequences."""
        return self.progress + self._pos_sum / len(self.finish_at)

    def generated(self, i: int) -> float:
        """Tokens sequence i has generated in this engine so far (0 if never admitted)."""
        return self.progress - self.admitted_at[i] if i in self.admitted_at else 0.0

    def active(self) -> list[int]:
        """The sequences decoding now."""
        return [i for _, i in self.finish_at]

    def unfinished(self) -> list[int]:
        return [i for _, i in self.finish_at] + list(self.pending)

    def tokens_to_next_finish(self) -> float:
        return max(0.0, self.finish_at[0][0] - self.progress)

    def advance(self, per_seq_tokens: float) -> list[int]:
        """Move every active sequence on; returns the sequences that finished."""
        self.progress += per_seq_tokens
        finished = []
        while self.finish_at and self.finish_at[0][0] <= self.progress + _EPS:
            _, i = heapq.heappop(self.finish_at)
            at = self.admitted_at.pop(i)
            self._base_sum -= self.context[i] - at
            self._pos_sum -= self.done_before[i] - at
            finished.append(i)
        return finished
