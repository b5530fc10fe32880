"""SD's speedup as a function of the batch on one engine: the curve that decides where SD pays.

At batch B a strategy S (a chain of K drafts or an EAGLE tree) emits E[L] tokens per sequence per
verify pass, so its throughput over plain decoding is

    speedup(B) = E[L] * T_plain(B) / (T_verify(B, S) + T_draft(B, S))

with the profile's pure cost functions (sim/costs.py) at one context, the engine release's
mechanisms included where the profile knows its release (`Profile.mechanisms`). "Plain" is an engine
without a drafter (kind none): what the public measurements compare against. A TLT bandit's "SD
off" arm is different: an EAGLE engine with K = 0 still runs one drafter forward per step, so the
curve also reports the speedup over that arm. One crossover answers where SD stops paying: the
first batch where every candidate strategy (chains of 1-8 drafts, FastRL's trees on SGLang) loses,
with the mechanism that ends the gain there; the policy it implies turns SD off from there and runs,
per bucket, a strategy that pays at every batch of the bucket (compare/sd_policy.py). The given
strategy's own crossover is reported beside it.

Acceptance: the profile's model at a drafter quality, unless the user gives tokens per pass for
the strategy (then every candidate's accepted drafts, E[L] - 1, are scaled by the same factor, the
form `PositionGain` uses) or per-position cumulative acceptance r_1, r_2, ... (E[L] = 1 + sum r_i
for chains up to that depth; other strategies are scaled as above).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.acceptance import stats_for
from sim.costs import draft_step_s, segment_s, verify_step_s
from workbench.compare.sd_policy import BucketPick, ImpliedPolicy, candidates, implied_policy
from workbench.contracts.engine_mechanisms import EngineMechanisms
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import Profile

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTEXT = 2048.0  # tokens per sequence; `--context` (long RL responses read more KV per step)
LIMIT = 512  # the crossover and the implied policy are searched at every batch up to this
NO_SD = Strategy.chain(0)


@dataclass(frozen=True)
class Acceptance:
    """What the user says of acceptance: nothing (the profile's model), tokens per pass at the
    reference strategy, or cumulative acceptance by draft position."""

    tokens_per_pass: float | None = None
    positions: tuple[float, ...] = ()
    quality: float = 1.0  # the learned drafter's quality for the profile's model (1: aligned)

    def check(self, reference: Strategy) -> None:
        if (
            self.tokens_per_pass is not None
            and not 1.0 <= self.tokens_per_pass <= reference.depth + 1
        ):
            raise ValueError(
                f"--accept {self.tokens_per_pass}: tokens per pass from 1 to {reference.depth + 1} "
                f"(the strategy {reference.name} verifies at most that many a pass)"
            )
        if any(not 0.0 <= r <= 1.0 for r in self.positions) or list(self.positions) != sorted(
            self.positions, reverse=True
        ):
            raise ValueError(
                f"--accept {','.join(map(str, self.positions))}: cumulative acceptance by "
                "position, "
                "each from 0 to 1 and never rising (e.g. 0.8,0.64,0.51)"
            )
        if not 0.0 <= self.quality <= 1.0:
            raise ValueError(f"quality {self.quality}: from 0 to 1")


def tokens_per_pass(
    prof: Profile, kind: DrafterKind, acc: Acceptance, strategy: Strategy, reference: Strategy
) -> float:
    """E[L] of `strategy`, anchored on what the user gave for `reference` (acceptance by position:
    on the deepest chain the positions describe)."""
    if strategy.steps == 0 or kind == DrafterKind.NONE:
        return 1.0
    model = stats_for(prof.acceptance, kind, acc.quality, strategy).mean
    if acc.positions and strategy.is_chain and strategy.depth <= len(acc.positions):
        return 1.0 + sum(acc.positions[: strategy.depth])
    given = acc.tokens_per_pass
    if acc.positions:
        reference = Strategy.chain(len(acc.positions))
        given = 1.0 + sum(acc.positions)
    if given is None:
        return model
    ref = stats_for(prof.acceptance, kind, acc.quality, reference).mean
    return 1.0 + (model - 1.0) * (given - 1.0) / (ref - 1.0) if ref > 1.0 else given


def speedup(
    prof: Profile,
    kind: DrafterKind,
    batch: int,
    context: float,
    strategy: Strategy,
    accepted: float,
    over: DrafterKind = DrafterKind.NONE,
) -> float:
    """Throughput with SD over the engine `over` decoding without it: "none" (no drafter) or the
    drafter's own engine at K = 0 ("eagle": its drafter still runs a forward per step)."""
    m = prof.mechanisms
    off = segment_s(prof.decode, prof.drafter, over, batch, context, NO_SD, m=m)
    return accepted * off / segment_s(prof.decode, prof.drafter, kind, batch, context, strategy,
                                      m=m)


def crossover_batch(
    prof: Profile, kind: DrafterKind, strategy: Strategy, accepted: float, context: float,
    limit: int = LIMIT
) -> int | None:
    """The first batch (1..limit) where SD is slower than plain decoding (None: never)."""
    return next(
        (
            b
            for b in range(1, limit + 1)
            if speedup(prof, kind, b, context, strategy, accepted) < 1.0
        ),
        None,
    )


@dataclass(frozen=True)
class CurvePoint:
    batch: int
    plain_ms: float  # one plain decode step
    verify_ms: float  # the strategy's verify pass
    draft_ms: float  # its drafting, the SD pass's host work included
    speedup: float  # over plain decoding
    speedup_over_off: float  # over the drafter's engine with SD off (K = 0)


@dataclass(frozen=True)
class SdCurve:
    """One strategy's curve on one engine, and the one answer for a policy: where SD stops paying
    (the implied policy's crossover, over every candidate strategy), why, and per bucket what to
    run. `strategy_crossover` is where the given strategy alone stops paying: a policy switches to
    a shorter draft there rather than turning SD off."""

    profile: str
    kind: DrafterKind
    strategy: str
    accepted: float
    context: float
    points: tuple[CurvePoint, ...]
    strategy_crossover: int | None
    policy: ImpliedPolicy
    engine: str = ""  # the engine release whose mechanisms the curve prices ("": none)
    best: tuple[float, ...] = ()  # at each point's batch, the best candidate's speedup

    @property
    def crossover_batch(self) -> int | None:
        return self.policy.crossover_batch

    @property
    def sd_threshold(self) -> int:
        return self.policy.sd_threshold

    @property
    def buckets(self) -> tuple[BucketPick, ...]:
        return self.policy.buckets

    def answer(self, m: EngineMechanisms | None) -> str:
        """The one answer in words: where SD stops paying, why, the threshold a policy should use,
        and where the strategy asked about stops on its own (`tlt sd-curve`, What-if's panel)."""
        p = self.policy
        if p.crossover_batch is None:
            head = (f"SD pays at every batch up to {p.limit} (the best strategy per batch); a "
                    f"policy can keep SD on throughout (sd_threshold {p.sd_threshold}).")
        else:
            head = (f"SD stops paying from batch {p.crossover_batch}, because of "
                    f"{p.why.sentence(m)}. A policy should turn SD off above batch "
                    f"{p.sd_threshold} (sd_threshold {p.sd_threshold}).")
            if p.pays_again:
                head += (f" It would pay again from batch {p.pays_again}; the policy keeps it off "
                         "there (one threshold).")
        own = (f"SD with {self.strategy} ({self.accepted:.2f} tokens per pass) stops paying from "
               f"batch {self.strategy_crossover} on its own" if self.strategy_crossover
               else f"SD with {self.strategy} ({self.accepted:.2f} tokens per pass) pays at every "
               f"batch to {p.limit} on its own")
        if self.strategy_crossover and (p.crossover_batch is None
                                        or self.strategy_crossover < p.crossover_batch):
            own += "; other draft lengths keep SD paying beyond it (the buckets)"
        return f"{head} {own}."

    def as_json(self) -> dict:
        why = self.policy.why
        return {
            "batch": [p.batch for p in self.points],
            "speedup": [round(p.speedup, 4) for p in self.points],
            "crossover_batch": self.crossover_batch,
            "sd_threshold": self.sd_threshold,
            "stops_because": why.mechanism if why else None,
            "pays_again_from": self.policy.pays_again,
            "strategy_crossover_batch": self.strategy_crossover,
            "best_speedup": [round(v, 4) for v in self.best],
            "speedup_over_sd_off_engine": [round(p.speedup_over_off, 4) for p in self.points],
            "strategy": self.strategy,
            "accepted": round(self.accepted, 4),
            "context": self.context,
            "engine": self.engine,
            "buckets": [[b.min_batch, b.max_batch, b.strategy] for b in self.buckets],
        }


def candidate_table(prof: Profile, kind: DrafterKind, acc: Acceptance, reference: Strategy,
                    context: float, limit: int = LIMIT
                    ) -> tuple[list[tuple[Strategy, float]], dict[str, list[float]]]:
    """Every candidate strategy with its tokens per pass, and its speedup at batch 1..limit."""
    cands = [(s, tokens_per_pass(prof, kind, acc, s, reference)) for s in candidates(prof, kind)]
    table = {s.name: [speedup(prof, kind, b, context, s, el) for b in range(1, limit + 1)]
             for s, el in cands}
    return cands, table


def sd_curve(
    prof: Profile,
    kind: DrafterKind,
    strategy: Strategy,
    acc: Acceptance,
    context: float = CONTEXT,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
) -> SdCurve:
    """The curve, the one crossover, why, and what it implies for a policy."""
    if kind not in (DrafterKind.EAGLE, DrafterKind.NGRAM):
        raise ValueError(f"--drafter {kind!r}: eagle or ngram")
    kind = DrafterKind(kind)  # a CLI or page string, checked above
    if strategy.steps == 0:
        raise ValueError(
            "--strategy 0 is no SD: give a chain (e.g. chain:3) or a tree (e.g. 8_4_16)"
        )
    if not batches or min(batches) < 1 or context < 0:
        raise ValueError(
            f"--batches {batches}, --context {context}: batch sizes >= 1 and a context >= 0 tokens"
        )
    acc.check(strategy)
    el = tokens_per_pass(prof, kind, acc, strategy, strategy)
    m = prof.mechanisms
    pts = tuple(
        CurvePoint(
            b,
            1e3 * verify_step_s(prof.decode, b, context, NO_SD, m),
            1e3 * verify_step_s(prof.decode, b, context, strategy, m),
            1e3 * draft_step_s(prof.drafter, kind, b, strategy, m),
            speedup(prof, kind, b, context, strategy, el),
            speedup(prof, kind, b, context, strategy, el, over=kind),
        )
        for b in sorted(set(batches))
    )
    limit = max(LIMIT, max(batches))
    cands, table = candidate_table(prof, kind, acc, strategy, context, limit)
    return SdCurve(
        prof.name,
        kind,
        strategy.name,
        el,
        float(context),
        pts,
        crossover_batch(prof, kind, strategy, el, context, limit),
        implied_policy(prof, kind, cands, table, context),
        m.label if m is not None else "",
        tuple(max(row[p.batch - 1] for row in table.values()) for p in pts),
    )


@dataclass(frozen=True)
class SdCurves:
    """Several strategies' curves on one engine, side by side, and the best of them per batch (the
    draft length that pays most there; "0" where none pays)."""

    profile: str
    kind: DrafterKind
    context: float
    batches: tuple[int, ...]
    plain_ms: tuple[float, ...]
    curves: tuple[SdCurve, ...]
    best: tuple[str, ...]

    def as_json(self) -> dict:
        return {
            "batch": list(self.batches),
            "context": self.context,
            "curves": {c.strategy: {"accepted": round(c.accepted, 4),
                                    "speedup": [round(p.speedup, 4) for p in c.points],
                                    "crossover_batch": c.crossover_batch} for c in self.curves},
            "best": list(self.best),
        }


def sd_curves(
    prof: Profile,
    kind: DrafterKind,
    strategies: tuple[Strategy, ...],
    acc: Acceptance,
    context: float = CONTEXT,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
) -> SdCurves:
    """Each strategy's curve (`acc` speaks of the first; the others' acceptance is carried from it
    as `tokens_per_pass` does) and the best per batch."""
    if not strategies or len(set(strategies)) != len(strategies):
        raise ValueError("--strategy: one or more distinct strategies, e.g. 1,2,3,4 or 3,8_4_16")
    ref = strategies[0]
    curves = []
    for s in strategies:
        one = acc
        if s != ref and (acc.tokens_per_pass is not None or acc.positions):
            el = min(tokens_per_pass(prof, kind, acc, s, ref), s.depth + 1.0)
            one = Acceptance(tokens_per_pass=el, quality=acc.quality)
        curves.append(sd_curve(prof, kind, s, one, context, batches))
    pts = curves[0].points
    best = tuple(
        max(((c.points[i].speedup, c.strategy) for c in curves), key=lambda x: x[0])[1]
        if max(c.points[i].speedup for c in curves) > 1.0 else "0"
        for i in range(len(pts)))
    return SdCurves(prof.name, DrafterKind(kind), float(context), tuple(p.batch for p in pts),
                    tuple(p.plain_ms for p in pts), tuple(curves), best)


@dataclass(frozen=True)
class PolicyCheck:
    """A shipped policy's SD threshold against the crossover its profile predicts for the strategy
    the policy runs in its highest SD bucket."""

    profile: str
    policy: str
    sd_threshold: int
    strategy: str
    accepted: float
    crossover_batch: int | None

    @property
    def verdict(self) -> str:
        if self.crossover_batch is not None and self.crossover_batch <= self.sd_threshold:
            return f"SD loses from batch {self.crossover_batch}, below the threshold"
        if self.crossover_batch is None or self.crossover_batch > 2 * self.sd_threshold:
            return "SD still pays well above the threshold"
        return "threshold within a power of two of the crossover"


def policy_check(prof: Profile, policy: Policy, context: float = CONTEXT) -> PolicyCheck:
    """The policy's top SD bucket's strategy at its threshold, on the profile (warm-started drafters
    at the profile's warm-start quality)."""
    rows = [r for r in policy.schedule if r.min_batch <= policy.sd_threshold and r.strategy.steps]
    if not rows or not policy.uses_sd:
        raise ValueError(f"policy '{policy.name}' runs no SD below its threshold")
    s, kind = max(rows, key=lambda r: r.min_batch).strategy, policy.drafter.kind
    quality = prof.acceptance.warm_start_quality if policy.drafter.warm_start else 1.0
    el = stats_for(prof.acceptance, kind, quality, s).mean
    return PolicyCheck(
        prof.name,
        policy.name,
        policy.sd_threshold,
        s.name,
        el,
        crossover_batch(prof, kind, s, el, context, LIMIT),
    )
