"""Each step's response lengths, modelled from that step's own statistics in the log.

veRL logs per step the mean, the longest and the shortest response and the share cut at the cap
(`response_length/clip_ratio`, printed to 3 decimals). A step of N responses is modelled as:

- `k` responses at the cap: round(clip_ratio x N), at least one when the longest is at the cap;
- the others, a lognormal body at its N - k evenly spaced quantiles (no sampling noise), no shorter
  than the step's shortest. Where the longest is below the cap, the body's top quantile is exactly
  the longest and its spread is solved so the step's mean comes out exactly. Where the longest is at
  the cap, the log says nothing of the body's top: its spread is the median spread of the run's
  steps whose longest is below the cap (a calibration's fit steps only), and its median is solved
  for the step's mean;
- rounded to tokens, the total made equal to round(mean x N) (the update's token count);
- placed in a random order (seeded per step): response i goes to prompt i // n, and the engines
  take the prompts in contiguous shards, as veRL splits a batch. Which engine gets the longest
  response, and how late in its queue, is not in the log: the order draws it.

A step's prompt tokens are its `prompt_length/mean` (the cost model is linear in context, so the
spread of prompt lengths moves no step time).

Another framework's log may lack what veRL logs (workbench/runlog/frameworks/): a step without its
longest response (OpenRLHF, AReaL, NeMo-RL's console) gets the pooled spread and a body below the
cap, with round(clip_ratio x N) responses at the cap; a log that never gives the prompt's length
(SkyRL) is modelled with one-token prompts (their prefill and context then go into the fitted
decode speed). Both are counted and printed. A veRL log must have all three in every timed step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from workbench.contracts import seeds
from workbench.contracts.schema import ConfigError
from workbench.contracts.seeds import Stream
from workbench.runlog.reader import RunLog

MEAN, MAX, MIN, CLIP = (f"response_length/{k}" for k in ("mean", "max", "min", "clip_ratio"))
PROMPT_MEAN = "prompt_length/mean"
SPREAD_BOUNDS = (0.02, 3.0)  # log-sd of the body
# No response or prompt is longer (2^24 tokens): a larger figure is a damaged log, and its step's
# token count would overflow the integers the lengths are rounded to.
MAX_TOKENS = 2**24


@dataclass(frozen=True)
class StepStats:
    """What the log says of each step's lengths (arrays over the timed steps)."""

    mean: np.ndarray
    max: np.ndarray
    min: np.ndarray
    clip_ratio: np.ndarray
    prompt_mean: np.ndarray
    prompt_known: bool = True  # False: the log never gives it (modelled as 1 token)

    @property
    def max_known(self) -> np.ndarray:
        """Per step: the log gives its longest response."""
        return np.isfinite(self.max)


@dataclass(frozen=True)
class ModelledLengths:
    lengths: list[np.ndarray]  # per step, N int tokens, prompt-major (n per prompt)
    prompt_tokens: np.ndarray  # per step
    spread: np.ndarray  # per step, the body's log-sd
    at_cap: np.ndarray  # per step, responses put at the cap
    pooled_spread: float  # the spread given to steps whose longest is at the cap


def step_stats(log: RunLog) -> StepStats:
    """The length statistics, refused where a timed step lacks one the model needs."""
    cols = {}
    lenient = log.framework.name != "veRL"  # frameworks that log less than veRL (docstring)
    prompt_known = not (lenient and np.isnan(log.column(PROMPT_MEAN)).all())
    for key in (MEAN, MAX, PROMPT_MEAN):
        v = log.column(key)
        if key == PROMPT_MEAN and not prompt_known:
            cols[key] = np.ones(log.steps)  # one token: a workload's least (Workload.check)
            continue
        ok = (v > 0) & (v <= MAX_TOKENS)
        if key == MAX and lenient:
            ok |= np.isnan(v)
        bad = np.flatnonzero(~ok)
        if len(bad):
            raise ConfigError(
                log.where(int(bad[0])),
                key,
                "<missing>" if np.isnan(v[bad[0]]) else v[bad[0]],
                f"a number of tokens > 0 and at most {MAX_TOKENS:,} in every timed step "
                f"({log.framework.name} logs it with the step's timings)",
            )
        cols[key] = v
    lo = np.nan_to_num(log.column(MIN), nan=1.0)
    clip = np.clip(np.nan_to_num(log.column(CLIP), nan=0.0), 0.0, 1.0)
    return StepStats(cols[MEAN], cols[MAX], np.maximum(1.0, lo), clip, cols[PROMPT_MEAN],
                     prompt_known)


def _body(z: np.ndarray, log_top: float, spread: float, low: float, high: float) -> np.ndarray:
    return np.clip(np.exp(log_top + spread * (z - z[-1])), low, high)


def _solve_spread(z: np.ndarray, top: float, target: float, low: float) -> float:
    """The log-sd whose body (top quantile at `top`) has mean `target`."""
    f = lambda s: _body(z, np.log(top), s, low, top).mean() - target
    a, b = SPREAD_BOUNDS
    if f(a) <= 0:
        return a
    if f(b) >= 0:
        return b
    return float(brentq(f, a, b, xtol=1e-5))


def _solve_median(z: np.ndarray, spread: float, target: float, low: float, high: float) -> float:
    """The log-top of a body of spread `spread` and mean `target`, capped at `high`."""
    f = lambda t: _body(z, t, spread, low, high).mean() - target
    lo_t, hi_t = np.log(low) - 1.0, np.log(high) + 3 * spread + 5.0
    if f(lo_t) >= 0 or f(hi_t) <= 0:
        return float(np.log(target) + spread * z[-1])
    return float(brentq(f, lo_t, hi_t, xtol=1e-6))


def _integer(body: np.ndarray, total: int, low: int, keep_top: bool, grid: int) -> np.ndarray:
    """Rounded to multiples of `grid` tokens (at least `low`), the sum made `total`: +-grid on the
    longest of the body (the top kept), the remainder on one response."""
    x = np.maximum(np.round(body / grid).astype(np.int64) * grid, low)
    if keep_top:
        x[-1] = int(round(body[-1]))
    diff = int(total - x.sum())
    idx = np.arange(len(x) - (2 if keep_top else 1), -1, -1)  # longest first
    step = grid if diff > 0 else -grid
    room = idx if step > 0 else idx[x[idx] - grid >= low]
    whole = min(len(room), abs(diff) // grid)
    x[room[:whole]] += step
    rest = diff - whole * step
    if rest and len(idx):
        x[idx[0]] = max(low, x[idx[0]] + rest)
    return x


def _quantiles(n: int) -> np.ndarray:
    return norm.ppf((np.arange(n) + 0.5) / n)


def model_step(
    stats: StepStats, i: int, responses: int, cap: int, pooled: float, grid: int = 1
) -> tuple[np.ndarray, float, int]:
    """Step i's lengths (sorted ascending), its body's spread and its responses at the cap."""
    known = bool(np.isfinite(stats.max[i]))
    mean, top = stats.mean[i], min(stats.max[i], cap) if known else float(cap)
    low = int(min(stats.min[i], stats.max[i]) if known else min(stats.min[i], mean))
    k = int(round(stats.clip_ratio[i] * responses))
    k = min(responses, max(k, 1 if known and top >= cap else 0))
    total = int(round(mean * responses))
    nb = responses - k
    if nb == 0:
        return np.full(responses, cap, dtype=np.int64), 0.0, k
    target = max(float(low), (total - k * cap) / nb)
    z = _quantiles(nb)
    exact_top = known and top < cap
    if exact_top:
        spread = _solve_spread(z, top, target, low)
        body = _body(z, np.log(top), spread, low, top)
    else:  # the longest at the cap, or not in the log: the pooled spread
        spread = pooled
        body = _body(z, _solve_median(z, spread, target, low, cap - 1), spread, low, cap - 1)
    x = _integer(body, total - k * cap, low, exact_top, grid)
    return np.concatenate([np.sort(x), np.full(k, cap, dtype=np.int64)]), spread, k


def pooled_spread(stats: StepStats, responses: int, cap: int, pool: int | None = None) -> float:
    """The median spread of the first `pool` steps (all: None) whose longest is below the cap (0.5
    if none is). A calibration pools its fit steps only, so no held-out step reaches the fit."""
    below = [i for i in range(len(stats.mean) if pool is None else pool) if stats.max[i] < cap]
    if not below:
        return 0.5
    z = _quantiles(responses)
    return float(
        np.median(
            [_solve_spread(z, stats.max[i], stats.mean[i], max(1.0, stats.min[i])) for i in below]
        )
    )


def model_lengths(
    stats: StepStats,
    responses: int,
    cap: int,
    seed: int = 0,
    grid: int = 1,
    pool: int | None = None,
) -> ModelledLengths:
    """Every step's modelled lengths, each in its own seeded order (module docstring); the spread of
    steps whose longest is at the cap pooled over the first `pool` steps (all: None)."""
    pooled = pooled_spread(stats, responses, cap, pool)
    out, spreads, ks = [], [], []
    for i in range(len(stats.mean)):
        x, spread, k = model_step(stats, i, responses, cap, pooled, grid)
        out.append(seeds.rng(seed, Stream.RUNLOG_ORDER, i).permutation(x))
        spreads.append(spread)
        ks.append(k)
    return ModelledLengths(
        out, np.round(stats.prompt_mean).astype(np.int64), np.array(spreads), np.array(ks), pooled
    )
