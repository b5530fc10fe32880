"""Whether speculative decoding pays on these engines: a rollout's engine steps against a plain engine's.

An adaptive engine's bandit (real/rollout/step_bandit.py) picks a draft length per batch bucket
and has K=0 among its arms, but in vLLM's EAGLE engine K=0 is not plain decoding: the drafter's
first pass still runs at every step, for its KV cache, so a model whose drafter accepts little
decoded slower than a plain engine in every bucket (the styles model: 0.70-0.95x) while the
bandit, never seeing a plain engine, settled on K=1-2. Only an engine without a drafter decodes
plainly, and vLLM fixes the drafter when an engine starts, so "SD off" for a whole engine is a
restart (real/run/worker.py `switch_drafter("none")`), decided between RL steps here:

- What a plain engine would have taken for the rollout is priced on a plain engine measured
  by each worker before its SD engine starts (real/run/worker.py `_measure_plain`: greedy
  requests capped so the batch falls one by one from 32 to 1, a few seconds): `plain_cost` fits
  its step times against the batch size (fixed cost + per-sequence cost). The first version
  estimated the plain engine from the SD engine's own K=0 steps, wall time minus the drafting
  the engine timed (`EngineStepRow.draft_s`): no extra engine, but those steps cost 1.07-1.18x a
  plain step with K held at 0 and 1.2-1.55x mixed into a rollout at K=1 (`python -m
  real.experiments.plain_estimate`; README, "Never slower than no SD"), so that guard missed
  losses smaller than ~1.5x. The measured engine has no such bias; its error is the machine's
  drift between start-up and the step judged, which `tlt bench real` shows beside the speedups
  it measures against the baseline (`sd_speedup_est`).
- `sd_verdict` prices every decoding step of the rollout both ways: its measured wall time, and
  the plain steps its tokens need (new tokens / batch) at the fitted cost. Speedup = plain / SD.
- The first verdict comes before the run's first step, from the probe (`probe_requests`: a short
  sampled rollout on every worker's SD engine at once, the batch falling from a worker's share
  of a step to 1): where SD loses, the engines start the run without a drafter, so no RL step's
  rollout is the measurement. Judged on every rollout with SD after that.
- `sd_next` turns SD off when the speedup is below 1 / (1 + margin) (the policy's
  `drafter.switch_margin`, the hysteresis the n-gram <-> EAGLE switch uses), and back on when the
  drafter has improved enough that the speedup it had, scaled by its estimated tokens per verify
  pass now over then (`DrafterCheck`, judged by idle workers every step: spot training goes on
  while SD is off), reaches 1 + margin. A pass costs about the same whatever it accepts, so
  SD's rate scales with the tokens a pass emits. "Now" is the mean of the last RECENT estimates,
  at least MIN_RECENT of them: one step's, on 8 fresh responses, swung 2.45 -> 3.22 -> 4.73 over
  three steps of the styles model while the drafter kept static moved alike (2.58 -> 3.30 ->
  4.53), and one such step brought SD back at 0.77x for two restarts (~11 s).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable

from real.rollout.requests import EngineStepRow, RolloutRequest, Sampling
from real.tiny.task import make_problems
from workbench.contracts.policy import Policy

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
    so contexts run ~250-500 tokens as in a rollout: with one task prompt (contexts up to ~280) the
    fit priced plain rollouts at 0.76-1.04x of their own time (median 0.91x), with these at
    0.93-1.11x (nine rounds; `python -m real.experiments.plain_estimate --check-guard`)."""
    problems = make_problems(n * PLAIN_PROMPTS, seed=seed)
    prompts = [" ".join(p.prompt for p in problems[i * PLAIN_PROMPTS:(i + 1) * PLAIN_PROMPTS]) for i in range(n)]
    return [RolloutRequest(i, 0, prompt, Sampling(temperature=0.0, max_tokens=16 + 8 * i)) for i, prompt in enumerate(prompts)]


def probe_requests(n: int, seed: int, temperature: float, max_tokens: int, mix: str,
                   variant: str = "gcd") -> list[RolloutRequest]:
    """The probe, a short sampled rollout SD is judged on before the run's first step
    (real/run/coordinator.py `_probe_sd`): n task problems drawn for `seed` from `mix`, sampled
    as a rollout samples them.

    Depth: a rollout's tail decodes deep into long responses, and there a drafter may accept
    far less (on the styles model tokens per sequence per step fell from ~2.1 at contexts up to
    300 tokens to ~1.15 beyond 500, in one bench's first step), so a probe that decoded only
    the first 264 tokens of fresh responses read 1.02x where that step measured 0.83x. Each
    prompt therefore carries the first PROBE_PREFIX of its reference solution's lines (the
    text the model was fine-tuned on: `variant`'s styles), so contexts run as deep as a
    rollout's responses, long-tailed like them, without decoding them all (with three
    quarters of the lines the reference's probes decoded ~39 steps). Checked against the first
    step by `python -m real.experiments.check_probe` (one worker, 3 rounds): styles model probe
    0.76 / 0.90 / 0.82x where the step measured 0.69 / 0.77 / 0.64x; reference 1.23 / 1.55 /
    1.45x where it measured 1.35 / 1.50 / 1.35x.
    Batch: problems sorted by solution length, request i capped at a length rising evenly from
    16 to PROBE_TOKENS (at most the run's cap), so the batch falls from n to 1 with the deepest
    contexts last, as in a rollout's tail; with a shard of 8 and caps up to 72 the probe was ~25
    engine steps, in which the bandit's first draws weighed most."""
    problems = sorted(make_problems(n, seed=seed, mix=mix, variant_name=variant), key=lambda p: len(p.solution))
    # No per-request seed: long prompts make vLLM chunk their prefill, and its rollback of a
    # seeded generator after a partial prefill fails on CPU ("CPU Generator does not use
    # offset"); the engine's own seed (Stream.ENGINE) draws the probe's samples.
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    rise = (PROBE_TOKENS - 16) / max(1, n - 1)
    reqs = []
    for i, p in enumerate(problems):
        lines = p.solution.splitlines(keepends=True)
        prefix = "".join(lines[:int(len(lines) * PROBE_PREFIX)])
        reqs.append(RolloutRequest(i, 0, p.prompt + prefix,
                                   replace(sampling, max_tokens=min(max_tokens, 16 + round(rise * i)))))
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


# Estimates judged while SD is off that the return rule averages (the newest), and the fewest it needs.
RECENT = 3
MIN_RECENT = 2


@dataclass(frozen=True)
class SDOff:
    """Why SD is off: the drafter that ran, its measured speedup and estimated tokens per pass then,
    and the estimates judged since (the newest RECENT)."""

    kind: str  # "eagle" or "ngram": what the engines return to
    speedup: float
    estimate: float  # NaN: not judged yet (the probe turned SD off before step 0); the first estimate judged is taken
    recent: tuple[float, ...] = ()


def guards_sd(policy: Policy) -> bool:
    """Whether a run of `policy` is guarded: adaptive SD (a bandit other than `fixed`), whose
    bandit is there to never lose to no SD."""
    return policy.drafter.kind != "none" and policy.bandit.algorithm != "fixed"


def _decoding(row: EngineStepRow) -> bool:
    return row.prefill_requests == 0 and row.decode_requests > 0 and row.wall_s > 0


def plain_equivalent(steps: Iterable[EngineStepRow]) -> list[EngineStepRow]:
    """The decoding steps that verified no drafts and timed their drafting: their wall time minus
    drafting is a plain step's (a plain engine's steps, with `draft_s` 0, are all of them)."""
    return [r for r in steps if _decoding(r) and r.draft_len == 0 and not math.isnan(r.draft_s)]


def plain_cost(steps: Iterable[EngineStepRow]) -> PlainCost | None:
    """Fit fixed + per-sequence cost on the plain-equivalent steps among `steps`. Per batch size
    the median time (robust to the shared machine's slow steps), then least squares weighted by
    steps. None: too few steps or a single batch size."""
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


def rollout_verdict(engines: Iterable[tuple[PlainCost | None, list[EngineStepRow]]]) -> SDVerdict | None:
    """One verdict over several engines' rollouts, given per engine (its plain cost, the rollout's
    steps); an engine without a cost is left out (None: no engine had one)."""
    parts = [sd_verdict(steps, cost) for cost, steps in engines if cost is not None]
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
    if math.isnan(off.estimate) or off.estimate <= 0:
        # Turned off before any estimate (by the probe, before step 0): the first one judged, on the
        # drafter that lost, is what later ones are compared with.
        return off if math.isnan(estimate) or estimate <= 0 else replace(off, estimate=estimate)
    recent = off.recent if math.isnan(estimate) else (off.recent + (estimate,))[-RECENT:]
    off = replace(off, recent=recent)
    if len(recent) < MIN_RECENT:
        return off
    predicted = off.speedup * (sum(recent) / len(recent)) / off.estimate
    return None if predicted >= 1.0 + margin else off
