"""The drafter every engine runs next RL step: n-gram, EAGLE or none (pure rules, which
real/run/engine_state.py's `EngineState.next` applies).

Two rules decide it, both with the policy's `drafter.switch_margin` as hysteresis, since every
change restarts every worker's engine:
- `choose_drafter` (runs with `ngram_fallback`): n-gram or the learned drafter, whichever's
  estimated tokens per verify pass (`DrafterCheck`) beats the other's by the margin;
- the SD guard (`sd_next`, real/run/sd_guard.py; adaptive policies): no drafter while SD decodes
  slower than a plain engine, and the drafter back once its estimates predict SD wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from real.run.records import DrafterCheck
from real.run.sd_guard import SDOff, SDVerdict, sd_next
from workbench.contracts.policy import DrafterKind


def choose_drafter(current: DrafterKind, check: DrafterCheck, margin: float) -> DrafterKind:
    """The drafter the engines run next step: the other one of "ngram" and "eagle" once its
    estimated tokens per pass beat the running one's by the relative `margin`, else `current`.
    The margin works both ways, so estimates that differ by less never flip the engines back and
    forth (each switch restarts them); a NaN estimate never wins."""
    if current == DrafterKind.NGRAM and check.eagle > check.ngram * (1.0 + margin):
        return DrafterKind.EAGLE
    if current == DrafterKind.EAGLE and check.ngram > check.eagle * (1.0 + margin):
        return DrafterKind.NGRAM
    return current


@dataclass(frozen=True)
class EngineChoice:
    kind: DrafterKind  # "ngram", "eagle" or "none"
    sd_off: SDOff | None  # why SD is off (None: it is on, or the policy has none)


def next_engines(ran: DrafterKind, sd_off: SDOff | None, check: DrafterCheck | None,
                 verdict: SDVerdict | None, *, switches: bool, margin: float,
                 has_drafter: bool) -> EngineChoice:
    """What the engines run after a step that ran `ran` (SD off for `sd_off` when "none").
    `check`: the drafters judged this step (None: not judged); `verdict`: SD against a plain
    engine on this rollout (None: not judged or not guarded); `switches`: the policy switches
    between n-gram and EAGLE; `has_drafter`: a learned drafter exists to switch to."""
    pick = (lambda k: choose_drafter(k, check, margin)) if check is not None and switches else (lambda k: k)
    estimate = (lambda k: check.estimate(k)) if check is not None else (lambda k: math.nan)
    if ran == DrafterKind.NONE:
        if sd_off is None:  # a policy without SD
            return EngineChoice(DrafterKind.NONE, None)
        # Estimates are compared with the reference of the drafter SD returns to, never across drafters.
        off = sd_next(sd_off, None, sd_off.kind, estimate(sd_off.kind), margin)
        nxt, sd_off = (pick(sd_off.kind), sd_off) if off is None else (DrafterKind.NONE, off)
    else:
        nxt = pick(ran)
        off = sd_next(None, verdict, nxt, estimate(nxt), margin)
        if off is not None:
            nxt, sd_off = DrafterKind.NONE, off
    if nxt == DrafterKind.EAGLE and not has_drafter:
        nxt = ran
    return EngineChoice(nxt, sd_off if nxt == DrafterKind.NONE else None)
