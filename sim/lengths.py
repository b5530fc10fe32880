"""Response-length models: pure functions over a Workload's LengthModel.

`lognormal` samples the model; `replay` and `empirical` draw observed groups (whole groups, so
a group's lengths, its prompt length and its rank stay together) from the table `tlt workload
import` wrote (workbench/contracts/length_data.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from workbench.contracts import seeds
from workbench.contracts.length_data import UNKNOWN, ObservedLengths
from workbench.contracts.seeds import Stream
from workbench.contracts.workload import LengthModel


@dataclass(frozen=True)
class StepLengths:
    """One RL step's responses, in prompt-major order (a group is contiguous)."""

    lengths: np.ndarray  # int tokens, censored at the cap
    correct: np.ndarray  # bool
    prompt: np.ndarray  # int prompt index of each response

    def clip_ratio(self, cap: int) -> float:
        return float(np.mean(self.lengths >= cap))


def _sd_parts(m: LengthModel) -> tuple[float, float]:
    return m.sigma * math.sqrt(m.group_correlation), m.sigma * math.sqrt(1.0 - m.group_correlation)


def _beta(m: LengthModel) -> tuple[float, float]:
    c = m.accuracy_concentration
    return m.mean_accuracy * c, (1.0 - m.mean_accuracy) * c


def clip_ratio_at(m: LengthModel, cap: int, log_median: float) -> float:
    """Share of responses at the cap when correct answers have median exp(log_median)."""
    z = math.log(cap) - log_median
    w = math.log(m.wrong_factor)
    correct_cut = m.mean_accuracy * norm.sf(z / m.sigma)
    return correct_cut + (1 - m.mean_accuracy) * norm.sf((z - w) / m.sigma)


def log_median(m: LengthModel, cap: int, step: int = 0) -> float:
    """Median log-length of correct answers at `step`: given (median_tokens) or solved from
    clip_ratio at step 0, then drifting."""
    start = math.log(m.median_tokens) if m.median_tokens > 0 else _log_median_step0(m, cap)
    return start + m.drift_per_step * step


def for_cap(m: LengthModel, cap_from: int, cap_to: int) -> LengthModel:
    """The same shape of lengths for another cap: the body scaled by cap_to / cap_from (a model
    anchored by clip_ratio already scales with the cap; one anchored by median_tokens is
    rescaled)."""
    if m.median_tokens <= 0:
        return m
    return replace(m, median_tokens=float(f"{m.median_tokens * cap_to / cap_from:.6g}"))


@lru_cache(maxsize=64)
def _log_median_step0(m: LengthModel, cap: int) -> float:
    return brentq(lambda mu: clip_ratio_at(m, cap, mu) - m.clip_ratio, -20.0, math.log(cap) + 20.0)


def sample_latent_log_lengths(m: LengthModel, cap: int, prompts: int, group: int, step: int,
                              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Uncensored log-lengths and correctness, prompt-major."""
    sd_prompt, sd_sample = _sd_parts(m)
    a, b = _beta(m)
    effect = rng.normal(0.0, sd_prompt, prompts)
    accuracy = rng.beta(a, b, prompts)
    correct = rng.random((prompts, group)) < accuracy[:, None]
    noise = rng.normal(0.0, sd_sample, (prompts, group))
    wrong = np.where(correct, 0.0, math.log(m.wrong_factor))
    logs = log_median(m, cap, step) + effect[:, None] + noise + wrong
    return logs.ravel(), correct.ravel()


def sample_step(m: LengthModel, cap: int, prompts: int, group: int, step: int,
                rng: np.random.Generator) -> StepLengths:
    logs, correct = sample_latent_log_lengths(m, cap, prompts, group, step, rng)
    lengths = np.clip(np.ceil(np.exp(logs)), 1, cap).astype(np.int64)
    return StepLengths(lengths, correct, np.repeat(np.arange(prompts), group))


@dataclass(frozen=True)
class GroupDraw:
    """One prompt's group as the simulator meets it."""

    lengths: np.ndarray  # int tokens, censored at the cap
    # bool (observed groups without correctness: all False; `mixed` is what filtering reads)
    correct: np.ndarray
    prompt_tokens: int | None = None  # None: the workload's prompt_tokens
    rank: int | None = None  # the data-parallel rank that generated it (None: unknown)
    mixed: bool = True  # its rewards are not all equal (DAPO's dynamic sampling keeps it)


def model_group(m: LengthModel, cap: int, group: int, step: int,
                rng: np.random.Generator) -> GroupDraw:
    s = sample_step(m, cap, 1, group, step, rng)
    return GroupDraw(s.lengths, s.correct, mixed=bool(s.correct.any() and not s.correct.all()))


def observed_group(obs: ObservedLengths, kind: str, cap: int, seed: int, batch: int, index: int,
                   attempt: int = 0) -> GroupDraw:
    """The `index`-th group of generation batch `batch` under replay (seed 0, first attempt,
    within the observed batches and groups: that very group; otherwise a group of the same
    observed batch drawn at random, with the rank of the slot it fills) or empirical (a group of
    any batch, at random)."""
    per_batch = obs.batch_groups
    if kind == "empirical":
        pick = int(seeds.rng(seed, Stream.LENGTHS, batch, index, attempt).integers(obs.groups))
        return _draw(obs, pick, cap, None)
    ids = per_batch[batch % len(per_batch)]
    slot = int(ids[index % len(ids)])
    if seed == 0 and attempt == 0 and batch < len(per_batch) and index < len(ids):
        return _draw(obs, slot, cap, _rank(obs, slot))
    pick = int(ids[seeds.rng(seed, Stream.LENGTHS, batch, index, attempt).integers(len(ids))])
    return _draw(obs, pick, cap, _rank(obs, slot))


def _rank(obs: ObservedLengths, gid: int) -> int | None:
    if not len(obs.rank_values):
        return None
    # Dense 0..R-1, whatever the file numbers its ranks (PolyTrace: global ranks 0 and 4 for two
    # dp ranks).
    return int(np.searchsorted(obs.rank_values, obs.rank[obs.starts[gid]]))


def _draw(obs: ObservedLengths, gid: int, cap: int, rank: int | None) -> GroupDraw:
    g = obs.group_at(gid)
    correct = g.correct == 1
    if g.mixed != UNKNOWN:
        mixed = bool(g.mixed)
    elif (g.correct != UNKNOWN).all():
        mixed = bool(correct.any() and not correct.all())
    else:
        mixed = True  # nothing says its rewards were equal: filtering keeps it
    prompt = g.prompt_tokens if g.prompt_tokens != UNKNOWN else None
    return GroupDraw(np.minimum(g.lengths, cap), correct, prompt, rank, mixed)
