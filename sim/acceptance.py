"""Acceptance model: pure functions over a Profile's AcceptanceModel."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import AcceptanceModel, PositionMiss


@dataclass(frozen=True)
class AcceptStats:
    """Tokens emitted per verify pass (accepted drafts + the target's own token)."""

    mean: float
    var: float


NO_SD = AcceptStats(1.0, 0.0)


def cumulative_acceptance(alpha: float, shape: float, depth: int) -> list[float]:
    """r_i = P(the first i drafted tokens are all accepted), i = 1..depth."""
    return [alpha ** (i**shape) for i in range(1, depth + 1)]


def accept_stats(r: list[float]) -> AcceptStats:
    """Mean and variance of L = 1 + accepted, from cumulative acceptance (E[L] = 1 + sum r_i)."""
    tail = [1.0] + list(r) + [0.0]
    mean = 1.0 + sum(r)
    second = sum((1 + j) ** 2 * (tail[j] - tail[j + 1]) for j in range(len(r) + 1))
    return AcceptStats(mean, max(0.0, second - mean * mean))


MAX_ALPHA = 0.9999


def alpha_for_mean(shape: float, depth: int, mean: float) -> float:
    """The acceptance scale a at which a chain of `depth` drafts emits `mean` tokens a pass under
    r_i = a ** (i ** shape): the shape of one drafter, the level of another workload's (bisection;
    a mean outside 1..depth + 1 is clamped to it, and a to MAX_ALPHA: no drafter is never wrong)."""
    lo, hi = 0.0, MAX_ALPHA
    for _ in range(60):
        mid = (lo + hi) / 2
        if 1.0 + sum(cumulative_acceptance(mid, shape, depth)) < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def eagle_alpha(m: AcceptanceModel, quality: float) -> float:
    """The learned drafter's acceptance scale at a quality in [0, 1] (1 = aligned with the
    policy)."""
    return m.eagle_alpha_cold + (m.eagle_alpha_fresh - m.eagle_alpha_cold) * quality


def tree_alpha(alpha: float, width_gain: float, strategy: Strategy) -> float:
    """The per-level acceptance scale of a strategy: more candidates per level catch more of the
    target's tokens, with diminishing returns; a chain keeps `alpha`."""
    width = max(1.0, (strategy.verify_tokens - 1) / strategy.depth)
    return 1.0 - (1.0 - alpha) * width ** (-width_gain)


def suffix_match(m: AcceptanceModel, history: bool, siblings: float) -> float:
    """The chance a pass finds a continuation in earlier responses: the prompt's answers from an
    earlier epoch (`history`) and the finished share of its group's other answers (`siblings`)."""
    no_history = 1.0 - m.suffix_history_match * float(history)
    return 1.0 - no_history * (1.0 - m.suffix_group_match * siblings)


def suffix_stats(m: AcceptanceModel, strategy: Strategy | int, history: bool,
                 siblings: float) -> AcceptStats:
    """Tokens per verify pass of model-free drafts from earlier responses: a found continuation's
    first i tokens pass with suffix_alpha ** (i ** suffix_shape); no continuation, no draft
    accepted."""
    s = Strategy.parse(strategy)
    if s.steps == 0:
        return NO_SD
    match = suffix_match(m, history, siblings)
    rates = cumulative_acceptance(m.suffix_alpha, m.suffix_shape, s.depth)
    return accept_stats([match * r for r in rates])


def stats_for(m: AcceptanceModel, kind: DrafterKind, quality: float, strategy: Strategy | int,
              miss: float = 1.0) -> AcceptStats:
    """Tokens per verify pass for drafter `kind` at `quality` under a strategy (an int: a chain).
    For `suffix` drafts: with no earlier response to draft from (see `suffix_stats`). `miss`: the
    drafter misses that many times as often here (`AcceptanceModel.*_position`)."""
    s = Strategy.parse(strategy)
    if kind == DrafterKind.NONE or s.steps == 0:
        return NO_SD
    if kind == DrafterKind.SUFFIX:
        return suffix_stats(m, s, False, 0.0)
    if kind == DrafterKind.NGRAM:
        alpha, shape = m.ngram_alpha, m.ngram_shape
    else:
        alpha, shape = eagle_alpha(m, quality), m.eagle_shape
    if miss != 1.0:
        alpha = min(0.999, max(0.0, 1.0 - (1.0 - alpha) * miss))
    level = tree_alpha(alpha, m.tree_width_gain, s)
    return accept_stats(cumulative_acceptance(level, shape, s.depth))


def position_rows(m: AcceptanceModel, kind: DrafterKind) -> tuple[PositionMiss, ...]:
    """How drafter `kind`'s acceptance moves along a response (() for none, suffix: flat)."""
    if kind == DrafterKind.EAGLE:
        return m.eagle_position
    return m.ngram_position if kind == DrafterKind.NGRAM else ()
