"""Speculative decoding's acceptance, where a run log measures it, into the calibrated profile.

slime and miles log `rollout/spec_accept_length` per rollout (the mean over its samples of tokens
per verify pass, the target's own token included: SGLang's completion tokens over its verify
count), read as `sd/accept_length`; the run's SD config comes from its launch settings
(`sglang_speculative_num_steps`: the draft depth, `..._eagle_topk`, `..._num_draft_tokens`: the
tokens verified). The profile's acceptance is r_i = a ** (i ** eagle_shape) per level, a tree's
level scale a = 1 - (1 - alpha) * w ** -tree_width_gain with w = (tokens - 1) / depth candidates
per level (sim/acceptance.py): the fit steps' median accepted length is inverted for the level
scale (`alpha_for_mean`) and then for alpha, which becomes the profile's `eagle_alpha_fresh` (the
run's drafter as it ran: aligned with its policy as the log saw it). Its standard error is the fit
steps' spread carried through the inversion; the held-out steps' accepted lengths are the check
(their median |error| against the calibrated model's, printed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.acceptance import accept_stats, alpha_for_mean, cumulative_acceptance
from workbench.contracts.profile import Profile
from workbench.runlog.reader import RunLog
from workbench.runlog.shape import RunShape

ACCEPT = "sd/accept_length"
KEYS = ("sd.num_steps", "sd.topk", "sd.num_draft_tokens", "sd.algorithm")


@dataclass(frozen=True)
class LogAcceptance:
    """The log's accepted length, the SD config it ran, and the alpha that gives it."""

    accept_len: float  # median over the fit steps, tokens per verify pass
    steps: int
    depth: int
    verify_tokens: int
    alpha: float
    alpha_se: float
    heldout_error_pct: float  # median |model - measured| / measured over the held-out steps (NaN)
    source: str


def _setting(shape: RunShape, field: str, default: int) -> int:
    v = shape.said(field)
    try:
        return int(float(v.value)) if v is not None else default
    except (TypeError, ValueError, OverflowError):
        return default


def _alpha(accept: float, shape: float, depth: int, width: float, gain: float) -> float:
    level = alpha_for_mean(shape, depth, accept)
    return float(np.clip(1.0 - (1.0 - level) * width ** gain, 0.0, 0.999))


def _model_len(alpha: float, shape: float, depth: int, width: float, gain: float) -> float:
    level = 1.0 - (1.0 - alpha) * width ** (-gain)
    return accept_stats(cumulative_acceptance(level, shape, depth)).mean


def log_acceptance(log: RunLog, shape: RunShape, profile: Profile, fit_steps: int
                   ) -> LogAcceptance | None:
    """The log's acceptance fitted on its first `fit_steps` steps, through the SD config its shape
    took (None: the log has none)."""
    acc = log.column(ACCEPT)
    fit = acc[:fit_steps][np.isfinite(acc[:fit_steps]) & (acc[:fit_steps] >= 1.0)]
    if not len(fit):
        return None
    depth = max(1, _setting(shape, "sd_depth", 3))
    tokens = max(depth + 1, _setting(shape, "sd_verify_tokens", depth + 1))
    width = max(1.0, (tokens - 1) / depth)
    m = profile.acceptance
    med = float(np.median(fit))
    se = float(1.2533 * np.std(fit, ddof=1) / np.sqrt(len(fit))) if len(fit) > 1 else 0.0
    alpha = _alpha(med, m.eagle_shape, depth, width, m.tree_width_gain)
    gain = m.tree_width_gain
    spread = [_alpha(x, m.eagle_shape, depth, width, gain) for x in (med - se, med + se)]
    held = acc[fit_steps:][np.isfinite(acc[fit_steps:]) & (acc[fit_steps:] >= 1.0)]
    model = _model_len(alpha, m.eagle_shape, depth, width, m.tree_width_gain)
    err = float(np.median(np.abs(model - held) / held) * 100) if len(held) else float("nan")
    names = ", ".join(log.config.get(k).name for k in KEYS if log.config.get(k) is not None)
    source = (f"{log.framework.name}'s rollout/spec_accept_length, median of the first "
              f"{len(fit)} steps; SD config from {names or 'defaults (3 steps, a chain)'}")
    return LogAcceptance(med, len(fit), depth, tokens, alpha, abs(spread[1] - spread[0]) / 2, err,
                         source)


def apply(profile: Profile, la: LogAcceptance) -> Profile:
    """The profile with the run's drafter acceptance (`eagle_alpha_fresh`; the cold drafter kept
    no better than it)."""
    m = profile.acceptance
    acc = replace(m, eagle_alpha_fresh=round(la.alpha, 6),
                  eagle_alpha_cold=round(min(m.eagle_alpha_cold, la.alpha), 6))
    return replace(profile, acceptance=acc)


def lines(la: LogAcceptance | None) -> list[str]:
    if la is None:
        return []
    held = ("" if np.isnan(la.heldout_error_pct) else
            f"; held-out steps' accepted length within {la.heldout_error_pct:.1f}% (median)")
    return [f"speculative decoding: {la.accept_len:.3f} tokens per verify pass ({la.source}); "
            f"depth {la.depth}, {la.verify_tokens} tokens verified -> the profile's "
            f"eagle_alpha_fresh {la.alpha:.4f} +- {la.alpha_se:.4f}{held}"]
