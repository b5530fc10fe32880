"""One rollout engine's continuous batching, advanced a segment at a time.

Every active sequence gains the same number of tokens per verify pass (the
mean accepted length), so the whole batch moves on one shared progress
counter: a sequence admitted at progress p0 with length L finishes when
progress reaches p0 + L. A heap of those thresholds gives the next
completion in O(log n); nothing is stepped token by token.
"""

from __future__ import annotations

import heapq
from collections import deque

_EPS = 1e-9


class EngineBatch:
    def __init__(self, lengths: list[int], prompt_tokens: int, max_batch: int):
        self.lengths = lengths
        self.prompt_tokens = prompt_tokens
        self.max_batch = max_batch
        self.pending = deque(range(len(lengths)))
        self.finish_at: list[tuple[float, int]] = []  # heap of (progress threshold, sequence index)
        self.progress = 0.0
        self._admit_sum = 0.0  # sum of admission progress over active sequences

    @property
    def batch(self) -> int:
        return len(self.finish_at)

    @property
    def done(self) -> bool:
        return not self.finish_at and not self.pending

    def admit(self) -> int:
        """Fill free slots from the queue; returns the prompt tokens to prefill."""
        admitted = 0
        while self.pending and len(self.finish_at) < self.max_batch:
            i = self.pending.popleft()
            heapq.heappush(self.finish_at, (self.progress + self.lengths[i], i))
            self._admit_sum += self.progress
            admitted += 1
        return admitted * self.prompt_tokens

    def mean_context(self) -> float:
        """Mean prompt + generated tokens over the active sequences."""
        return self.prompt_tokens + self.progress - self._admit_sum / len(self.finish_at)

    def tokens_to_next_finish(self) -> float:
        return max(0.0, self.finish_at[0][0] - self.progress)

    def advance(self, per_seq_tokens: float) -> list[int]:
        """Move every active sequence on; returns the sequences that finished."""
        self.progress += per_seq_tokens
        finished = []
        while self.finish_at and self.finish_at[0][0] <= self.progress + _EPS:
            threshold, i = heapq.heappop(self.finish_at)
            self._admit_sum -= threshold - self.lengths[i]
            finished.append(i)
        return finished
