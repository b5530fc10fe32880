"""vLLM's n-gram (prompt-lookup) proposal, replayed offline, so that the switch between the
n-gram and the learned drafter (real/run/coordinator.py) can judge n-gram on the same records
and in the same way as the learned drafter, including while the engines run EAGLE.

`propose(context, k)` is the draft vLLM's `NgramProposer` makes for a request whose tokens so
far are `context` (vllm/v1/spec_decode/ngram_proposer.py,
`_find_longest_matched_ngram_and_propose_tokens`): the longest suffix of `context` of
`min_n`..`max_n` tokens that also occurs earlier in it, at its earliest occurrence, and up to
`k` tokens that followed it there (fewer where the context ends first; none without a match).
The engine runs it with the lookup sizes of real/rollout/spec_config.py. Pure Python: no vLLM.
"""

from __future__ import annotations

from typing import Sequence

from real.rollout.spec_config import NGRAM_LOOKUP_MAX, NGRAM_LOOKUP_MIN


def propose(
    context: Sequence[int], k: int, min_n: int = NGRAM_LOOKUP_MIN, max_n: int = NGRAM_LOOKUP_MAX
) -> list[int]:
    """The n-gram draft of at most `k` tokens after `context` (see the module doc)."""
    tokens = list(context)
    total = len(tokens)
    if k < 1 or total < min_n:
        return []
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = tokens[total - n:]
        # The earliest earlier occurrence: vLLM's scan keeps the leftmost match of the longest n.
        for start in range(total - n):
            if tokens[start: start + n] == suffix:
                follow = start + n
                return tokens[follow: follow + min(k, total - follow)]
    return []
