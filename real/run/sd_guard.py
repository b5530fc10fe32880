"""Whether speculative decoding pays on these engines, judged from a rollout's own engine steps.

An adaptive engine's bandit (real/rollout/step_bandit.py) picks a draft length per batch bucket
and has K=0 among its arms, but in vLLM's EAGLE engine K=0 is not plain decoding: the drafter's
first pass still runs at every step, for its KV cache, so a model whose drafter accepts little
decoded slower than a plain engine in every bucket (the styles model: 0.70-0.95x) while the
bandit, never seeing a plain engine, settled on K=1-2. Only an engine without a drafter decodes
plainly, and vLLM fixes the drafter when an engine starts, so "SD off" for a whole engine is a
restart (real/run/worker.py `switch_drafter("none")`), decided between RL steps here:

- What a plain engine would have taken for the rollout is estimated from the rollout itself, no
  probe run: every step that verified no drafts ran the target exactly as a plain engine would,
  and the engine timed its drafting (`EngineStepRow.draft_s`), so wall - draft is a plain step's
  time at that batch size. `plain_cost` fits those times against the batch size (fixed cost +
  per-sequence cost: a CPU step is mostly fixed cost, so the fit carries from the large batches,
  where K=0 always runs, to the small ones of the tail). Measured side by side on the reference
  model, the estimate is 5-7% slower than a real plain engine (the scheduler's spec bookkeeping
  is not timed), so the guard leans towards keeping SD by that much.
- `sd_verdict` prices every decoding step of the rollout both ways: its measured wall time, and
  the plain steps its tokens need (new tokens / batch) at the fitted cost. Speedup = plain / SD.
- `sd_next` turns SD off when the speedup is below 1 / (1 + margin) (the policy's
  `drafter.switch_margin`, the hysteresis the n-gram <-> EAGLE switch uses), and back on when the
  drafter has improved enough that the speedup it had, scaled by its estimated tokens per verify
  pass now over then (`DrafterCheck`, judged by idle workers every step: spot training goes on
  while SD is off), reaches 1 + margin. A pass costs about the same whatever it accepts, so
  SD's rate scales with the tokens a pass emits.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from real.rollout.requests import EngineStepRow

# Fewest plain-equivalent steps (and distinct batch sizes) a cost fit needs.
MIN_STEPS = 8


@dataclass(frozen=True)
class PlainCost:
    """A plain engine's decode step against batch size, fitted on an SD engine's steps."""

    fixed_s: float
    per_seq_s: float
    steps: int  # steps the fit used

    def step_s(self, batch: int) -> float:
        return self.fixed_s + self.per_seq_s * batch


@dataclass(frozen=True)
class SDVerdict:
    """A rollout's decoding priced both ways (seconds summed over its engines)."""

    sd_s: float  # measured wall time of its decoding steps
    plain_s: float  # the same tokens on a plain engine, at the fitted cost
    steps: int

    @property
    def speedup(self) -> float:
        """SD's decode speed over a plain engine's (< 1: SD loses)."""
        return self.plain_s / self.sd_s if self.sd_s > 0 else math.nan


@dataclass(frozen=True)
class SDOff:
    """Why SD is off: the drafter that ran, its measured speedup and estimated tokens per pass then."""

    kind: str  # "eagle" or "ngram": what the engines return to
    speedup: float
    estimate: float  # NaN: never judged, so SD stays off


def _decoding(row: EngineStepRow) -> bool:
    return row.prefill_requests == 0 and row.decode_requests > 0 and row.wall_s > 0


def plain_cost(steps: Iterable[EngineStepRow]) -> PlainCost | None:
    """Fit fixed + per-sequence cost on the steps that verified no drafts and timed their drafting
    (their wall time minus drafting is a plain step's). Per batch size the median time (robust to
    the shared machine's slow steps), then least squares weighted by steps. None: too few steps or
    a single batch size."""
    by_batch: dict[int, list[float]] = {}
    for r in steps:
        if _decoding(r) and r.draft_len == 0 and not math.isnan(r.draft_s):
            by_batch.setdefault(int(r.decode_requests), []).append(r.wall_s - r.draft_s)
    n = sum(len(v) for v in by_batch.values())
    if n < MIN_STEPS or len(by_batch) < 2:
        return None
    xs = {b: float(b) for b in by_batch}
    ys = {b: statistics.median(v) for b, v in by_batch.items()}
    ws = {b: float(len(v)) for b, v in by_batch.items()}
    w = sum(ws.values())
    mx = sum(ws[b] * xs[b] for b in by_batch) / w
    my = sum(ws[b] * ys[b] for b in by_batch) / w
    var = sum(ws[b] * (xs[b] - mx) ** 2 for b in by_batch)
    slope = max(0.0, sum(ws[b] * (xs[b] - mx) * (ys[b] - my) for b in by_batch) / var)
    return PlainCost(fixed_s=my - slope * mx, per_seq_s=slope, steps=n)


def sd_verdict(steps: Iterable[EngineStepRow], cost: PlainCost) -> SDVerdict:
    """Every decoding step at its measured time and at the plain steps its tokens need."""
    sd = plain = 0.0
    n = 0
    for r in steps:
        if not _decoding(r):
            continue
        sd += r.wall_s
        plain += r.new_tokens / r.decode_requests * cost.step_s(int(r.decode_requests))
        n += 1
    return SDVerdict(sd_s=sd, plain_s=plain, steps=n)


def rollout_verdict(engines: Iterable[list[EngineStepRow]]) -> SDVerdict | None:
    """One verdict over several engines' rollouts, each priced at its own fitted plain cost (an
    engine without a fit is left out; None: no engine had one)."""
    parts = []
    for steps in engines:
        cost = plain_cost(steps)
        if cost is not None:
            parts.append(sd_verdict(steps, cost))
    if not parts:
        return None
    return SDVerdict(sum(p.sd_s for p in parts), sum(p.plain_s for p in parts), sum(p.steps for p in parts))


def sd_next(off: SDOff | None, verdict: SDVerdict | None, kind: str, estimate: float, margin: float) -> SDOff | None:
    """SD's state for the next RL step (None: on). `kind`: the drafter that ran (or that SD would
    return to, while off); `estimate`: its tokens per verify pass judged this step (NaN: not judged)."""
    if off is None:
        if verdict is not None and verdict.speedup * (1.0 + margin) < 1.0:
            return SDOff(kind, verdict.speedup, estimate)
        return None
    if math.isnan(off.estimate) or math.isnan(estimate) or off.estimate <= 0:
        return off
    predicted = off.speedup * estimate / off.estimate
    return None if predicted >= 1.0 + margin else off
