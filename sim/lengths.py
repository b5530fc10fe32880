"""Response-length model: pure functions over a Workload's LengthModel."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

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
    return m.mean_accuracy * m.accuracy_concentration, (1.0 - m.mean_accuracy) * m.accuracy_concentration


def clip_ratio_at(m: LengthModel, cap: int, log_median: float) -> float:
    """Share of responses at the cap when correct answers have median exp(log_median)."""
    z = math.log(cap) - log_median
    w = math.log(m.wrong_factor)
    return m.mean_accuracy * norm.sf(z / m.sigma) + (1 - m.mean_accuracy) * norm.sf((z - w) / m.sigma)


def log_median(m: LengthModel, cap: int, step: int = 0) -> float:
    """Median log-length of correct answers at `step`: solved from clip_ratio at step 0, then drifting."""
    return _log_median_step0(m, cap) + m.drift_per_step * step


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
    logs = log_median(m, cap, step) + effect[:, None] + noise + np.where(correct, 0.0, math.log(m.wrong_factor))
    return logs.ravel(), correct.ravel()


def sample_step(m: LengthModel, cap: int, prompts: int, group: int, step: int,
                rng: np.random.Generator) -> StepLengths:
    logs, correct = sample_latent_log_lengths(m, cap, prompts, group, step, rng)
    lengths = np.clip(np.ceil(np.exp(logs)), 1, cap).astype(np.int64)
    return StepLengths(lengths, correct, np.repeat(np.arange(prompts), group))
