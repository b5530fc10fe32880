"""The policy an engine's SD curves imply: one crossover, the threshold below it, a strategy per
batch bucket, and why SD stops paying there.

Every candidate strategy's speedup over plain decoding is priced at every batch from 1 to `limit`
(compare/sd_curve.py `speedup`). At each batch the best candidate is what a policy could run; the
crossover is the first batch where even the best loses, and the policy turns SD off from there
(`sd_threshold` = crossover - 1), even where some candidate would pay again at a larger batch (the
answer says from where). A bucket below the threshold runs the candidate with the highest mean
speedup among those that pay at every batch of the bucket (cut at the threshold): the implied
policy never turns SD on where its own curves say SD loses (`losing` is empty by construction).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.compare.sd_why import StopReason, why_stops
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.strategy import Strategy

BUCKETS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256),
           (257, 512))
# Strategies a policy may pick per bucket: FastRL's trees (SGLang) and chains of 1 to 8 drafts.
TREES = ("8_4_48", "8_4_32", "8_4_16", "8_4_8")
CHAINS = ("1", "2", "3", "4", "5", "6", "7", "8")


@dataclass(frozen=True)
class BucketPick:
    min_batch: int
    max_batch: int
    strategy: str  # "0": SD off
    speedup: float  # its mean over the bucket's batch sizes (cut at the threshold); 1: off


@dataclass(frozen=True)
class ImpliedPolicy:
    crossover_batch: int | None  # the first batch where every candidate loses (None: none to limit)
    sd_threshold: int  # the largest batch the policy runs SD at (0: none)
    pays_again: int | None  # the first batch above the crossover where some candidate pays again
    buckets: tuple[BucketPick, ...]
    why: StopReason | None  # at the crossover, for the candidate closest to paying there
    limit: int

    def losing(self, table: dict[str, list[float]]) -> list[tuple[int, str]]:
        """(batch, strategy) pairs where the policy runs SD that its curves say loses."""
        out = []
        for b in self.buckets:
            if b.strategy != "0":
                row = table[b.strategy]
                out += [(x, b.strategy) for x in range(b.min_batch, b.max_batch + 1)
                        if row[x - 1] < 1.0]
        return out


def candidates(prof: Profile, kind: DrafterKind) -> tuple[Strategy, ...]:
    """Strategies a policy may choose: trees and chains on SGLang, chains elsewhere."""
    sglang = prof.cluster is not None and prof.cluster.framework == "sglang"
    trees = TREES if kind == DrafterKind.EAGLE and sglang else ()
    return tuple(Strategy.parse(s) for s in trees + CHAINS)


def implied_policy(prof: Profile, kind: DrafterKind, cands: list[tuple[Strategy, float]],
                   table: dict[str, list[float]], context: float, buckets=BUCKETS
                   ) -> ImpliedPolicy:
    """The policy the candidates' curves imply (module docstring); `table` holds each candidate's
    speedup at batch 1, 2, ..., limit (by strategy name)."""
    limit = len(next(iter(table.values())))
    best = [max(row[b] for row in table.values()) for b in range(limit)]
    cross = next((b + 1 for b in range(limit) if best[b] < 1.0), None)
    threshold = limit if cross is None else cross - 1
    again = None if cross is None else next(
        (b + 1 for b in range(cross, limit) if best[b] >= 1.0), None)
    picks = []
    for lo, hi in (b for b in buckets if b[0] <= limit):
        top = min(hi, threshold)
        paying = [(sum(row[lo - 1:top]) / (top - lo + 1), name) for name, row in table.items()
                  if lo <= top and min(row[lo - 1:top]) >= 1.0]
        if not paying:
            picks.append(BucketPick(lo, hi, "0", 1.0))
            continue
        # ties: fewer tokens verified (less to lose where the curves are wrong)
        mean, name = max(paying, key=lambda p: (p[0], -Strategy.parse(p[1]).verify_tokens))
        picks.append(BucketPick(lo, top, name, mean))
        if top < hi:  # the bucket's part above the threshold: off
            picks.append(BucketPick(top + 1, hi, "0", 1.0))
    why = None
    if cross is not None:
        s, el = max(cands, key=lambda c: table[c[0].name][cross - 1])
        why = why_stops(prof, kind, cross, context, s, el)
    return ImpliedPolicy(cross, threshold, again, tuple(picks), why, limit)
