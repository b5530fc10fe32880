"""Whether speculative decoding pays on these engines: a rollout's engine steps priced against a
plain engine's. What the engines run with that verdict is decided in real/run/engine_plan.py.

An adaptive engine's bandit has K=0 among its arms, but in vLLM's EAGLE engine K=0 is not plain
decoding (the drafter's first pass still runs every step, for its KV cache), so a drafter that
accepts little can decode slower than a plain engine in every bucket without the bandit ever
seeing it. Only an engine without a drafter decodes plainly, so SD is priced against one:

- `plain_cost`: a plain engine's step time against batch size (fixed + per-sequence cost),
  fitted on a plain engine each worker measures before its SD engine starts (`plain_requests`).
  A measured engine, not the SD engine's own K=0 steps: those carry the drafter's pass.
- `sd_verdict`: every decoding step of a rollout priced both ways, its measured wall time and the
  plain steps its tokens need at the fitted cost. Speedup = plain / SD.
- The first verdict comes before the run's first step, from a probe (`probe_requests`), so no RL
  step's rollout is the measurement; then every rollout with SD is judged.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from real.rollout.requests import EngineStepRow, RolloutRequest, Sampling
from real.tiny.task import make_problems

# Fewest plain-equivalent steps (and distinct batch sizes) a cost fit needs.
MIN_STEPS = 8
# The largest batch the plain engine is measured at (`plain_requests`): a worker's share of a
# step; and the task prompts strung into each of its prompts.
PLAIN_BATCH = 32
PLAIN_PROMPTS = 12
# The longest cap of the probe (`probe_requests`), in tokens, and the share of its reference
# solutions' lines its prompts carry.
PROBE_TOKENS = 264
PROBE_PREFIX = 0.5


def plain_requests(n: int, seed: int) -> list[RolloutRequest]:
    """The plain engine's measurement: n greedy requests, request i capped at 16 + 8 i tokens, so
    the batch falls by one every 8 steps. Each prompt strings PLAIN_PROMPTS task prompts together,
    so contexts run as deep as a rollout's (~250-500 tokens): the fit prices a step at the context
    it will be applied to (`python -m real.experiments.plain_estimate --check-guard` checks it)."""
    problems = make_problems(n * PLAIN_PROMPTS, seed=seed)
    prompts = [
        " ".join(p.prompt for p in problems[i * PLAIN_PROMPTS:(i + 1) * PLAIN_PROMPTS])
        for i in range(n)
    ]
    return [
        RolloutRequest(i, 0, prompt, Sampling(temperature=0.0, max_tokens=16 + 8 * i))
        for i, prompt in enumerate(prompts)
    ]


def probe_requests(n: int, seed: int, temperature: float, max_tokens: int, mix: str,
                   variant: str = "gcd",
                   problems: Sequence[Any] | None = None) -> list[RolloutRequest]:
    """The probe, a short sampled rollout SD is judged on before the run's first step
    (real/run/coordinator.py `probe_sd`): n task problems drawn for `seed` from `mix`, sampled
    as a rollout samples them.

    Depth: a rollout's tail decodes deep into long responses, where a drafter may accept far
    less, so each prompt carries the first PROBE_PREFIX of its reference solution's lines (text in
    the model's own styles, `variant`): contexts run as deep as a rollout's without decoding them
    all. Batch: problems sorted by solution length, request i capped at a length rising evenly
    from 16 to PROBE_TOKENS (at most the run's cap), so the batch falls from n to 1 with the
    deepest contexts last, as in a rollout's tail. `python -m real.experiments.check_probe`
    compares its verdict with the first step's. `problems`: a user task's problems instead (their
    `solution`, where the file gives one, makes the prefix)."""
    if problems is None:
        problems = make_problems(n, seed=seed, mix=mix, variant_name=variant)
    problems = sorted(problems, key=lambda p: len(p.solution))
    # No per-request seed: long prompts make vLLM chunk their prefill, and its rollback of a
    # seeded generator after a partial prefill fails on CPU ("CPU Generator does not use
    # offset"); the engine's own seed (Stream.ENGINE) draws the probe's samples.
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    rise = (PROBE_TOKENS - 16) / max(1, n - 1)
    reqs = []
    for i, p in enumerate(problems):
        lines = p.solution.splitlines(keepends=True)
        prefix = "".join(lines[:int(len(lines) * PROBE_PREFIX)])
        cap = min(max_tokens, 16 + round(rise * i))
        reqs.append(RolloutRequest(i, 0, p.prompt + prefix, replace(sampling, max_tokens=cap)))
    return reqs


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


def _decoding(row: EngineStepRow) -> bool:
    return row.prefill_requests == 0 and row.decode_requests > 0 and row.wall_s > 0


def plain_equivalent(steps: Iterable[EngineStepRow]) -> list[EngineStepRow]:
    """The decoding steps that verified no drafts and timed their drafting: their wall time minus
    drafting is a plain step's (a plain engine's steps, with `draft_s` 0, are all of them)."""
    return [r for r in steps if _decoding(r) and r.draft_len == 0 and not math.isnan(r.draft_s)]


def plain_cost(steps: Iterable[EngineStepRow]) -> PlainCost | None:
    """Fit fixed + per-sequence cost on the plain-equivalent steps among `steps`. Per batch size
    the median time (robust to the shared machine's slow steps), then least squares weighted by
    steps, both costs >= 0 (no step costs less than nothing: where the line's intercept would be
    negative, as a busy machine's slow large batches can make it, the fit goes through 0). None:
    too few steps or a single batch size."""
    by_batch: dict[int, list[float]] = {}
    for r in plain_equivalent(steps):
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
    if my - slope * mx < 0.0:
        slope = (sum(ws[b] * xs[b] * ys[b] for b in by_batch)
                 / sum(ws[b] * xs[b] ** 2 for b in by_batch))
        return PlainCost(fixed_s=0.0, per_seq_s=max(0.0, slope), steps=n)
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


def rollout_verdict(
    engines: Iterable[tuple[PlainCost | None, list[EngineStepRow]]],
) -> SDVerdict | None:
    """One verdict over several engines' rollouts, given per engine (its plain cost, the rollout's
    steps); an engine without a cost is left out (None: no engine had one, or none decoded a step:
    a rollout of prompts alone says nothing of SD's speed)."""
    parts = [sd_verdict(steps, cost) for cost, steps in engines if cost is not None]
    if not sum(p.steps for p in parts):
        return None
    return SDVerdict(
        sum(p.sd_s for p in parts), sum(p.plain_s for p in parts), sum(p.steps for p in parts)
    )
