"""Why SD's curve on a mixture-of-experts engine differs from a dense engine of the same active
size.

A dense engine reads all its weights once per pass whatever the tokens, so verifying K + 1 tokens
per sequence costs little more than decoding one, most at batch 1. A mixture of experts reads only
the experts its tokens route to (`sim.costs.experts_touched`): a decode step of B sequences touches
the experts of B tokens, a verify pass those of B (K + 1). At small batch that is several times
the expert weights, so the pass SD relies on being nearly free is not; at large batch every expert
is read either way and the two engines' curves meet. The dense counterpart here is the same
profile with the routed experts folded into the weights at the share one token reads (k of E): the
weights a decode step of one sequence reads, read whole by every pass.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.costs import experts_touched
from workbench.compare.sd_curve import speedup
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.strategy import Strategy


@dataclass(frozen=True)
class MoeRow:
    batch: int
    decode_experts: float  # distinct experts per layer a decode step of B tokens reads
    verify_experts: float  # ... a verify pass of B x verified tokens
    speedup: float  # SD over plain decoding on this engine
    dense_speedup: float  # on the dense engine of the same active size

    @property
    def expert_read_ratio(self) -> float:
        """The verify pass's expert weights over the decode step's."""
        return self.verify_experts / self.decode_experts if self.decode_experts else 1.0


@dataclass(frozen=True)
class MoeContrast:
    count: int
    per_token: int
    strategy: str
    verified: int  # tokens a verify pass holds per sequence
    rows: tuple[MoeRow, ...]

    def sentence(self) -> str:
        first, last = self.rows[0], self.rows[-1]
        best = max(self.rows, key=lambda r: r.speedup)
        late = ("the MoE engine still reads every expert, more weights than the dense engine's "
                "whole model, and stays memory-bound longer" if last.speedup > last.dense_speedup
                else "the two engines' passes read alike")
        return (
            "Why this curve differs from a dense engine of the same active size: a verify pass "
            f"of {self.verified} tokens per sequence reads the experts of batch x {self.verified} "
            f"tokens, {first.verify_experts:.0f} of {self.count} per layer at batch {first.batch} "
            f"against {first.decode_experts:.0f} for a decode step ({first.expert_read_ratio:.1f}x "
            f"the expert weights; uniform routing, top-{self.per_token}), so SD with "
            f"{self.strategy} gains {first.speedup:.2f}x there where the dense engine gains "
            f"{first.dense_speedup:.2f}x. At batch {last.batch} a decode step already reads "
            f"{last.decode_experts:.0f} of {self.count} experts and verifying reads "
            f"{last.expert_read_ratio:.2f}x that: SD gains {last.speedup:.2f}x against "
            f"{last.dense_speedup:.2f}x ({late}). On this engine SD pays most at batch "
            f"{best.batch} ({best.speedup:.2f}x)."
        )


def dense_equivalent(prof: Profile) -> Profile:
    """The profile with its routed experts read as dense weights of the active share (k of E)."""
    e = prof.decode.experts
    if e is None:
        return prof
    weights = prof.decode.weights_s + e.weights_s * e.per_token / e.count
    return replace(prof, decode=replace(prof.decode, weights_s=weights, experts=None))


def moe_contrast(prof: Profile, kind: DrafterKind, strategy: Strategy, accepted: float,
                 context: float, batches: tuple[int, ...]) -> MoeContrast | None:
    """Per batch, the experts each pass reads and SD's speedup here and on the dense counterpart
    (None: the profile is dense)."""
    e = prof.decode.experts
    if e is None:
        return None
    dense = dense_equivalent(prof)
    n = strategy.verify_tokens
    rows = tuple(
        MoeRow(b, experts_touched(b, e.per_token, e.count),
               experts_touched(b * n, e.per_token, e.count),
               speedup(prof, kind, b, context, strategy, accepted),
               speedup(dense, kind, b, context, strategy, accepted))
        for b in sorted(set(batches)))
    return MoeContrast(e.count, e.per_token, strategy.name, n, rows)
