"""How acceptance moves along a response: per position bin, how many times as often the drafter
misses there as the pooled per-position fit says (`AcceptanceModel.eagle_position` /
`ngram_position`: alpha there is 1 - (1 - alpha) * miss; the simulator applies them at a batch's
mean position, sim/rollout.py). A miss-rate multiplier rather than a scale on the accepted
drafts: a chain can accept no more than all its drafts, whatever its length.

Measured on the reference model, the ratio follows the response, the same in every capture,
mix and cap: a response's first 32 tokens are guessed ~0.6x as well as the pooled fit says, the
middle ~1.05x, and past ~770 tokens (responses that run on to the cap, derailed) ~0.7x for EAGLE
(accepted drafts over the pooled fit's), while n-gram drafts gain there (derailed text loops).
Why it matters: a rollout's tail is its longest responses late in their text, where the pooled
acceptance is wrong in the direction that sets the rollout's end.

Each SD step is placed at its decoding requests' mean position in their responses (context_mean
minus the trace's mean prompt), as the simulator places a batch; bins are sqrt(2) apart from 32
tokens, and a bin with fewer than MIN_STEPS SD steps joins the one before it. A bin's gain stays
1 unless it differs from 1 by more than Z standard errors (from its steps' residuals): a flat
drafter's noise is not modelled, and neighbouring rows with the same gain merge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sim.acceptance import cumulative_acceptance
from workbench.calibrate.captures.trace_view import step_draft_len, trace_drafter_kind
from workbench.contracts.fileio import sig
from workbench.contracts.profile import PositionMiss
from workbench.contracts.trace import Trace
from workbench.contracts.policy import DrafterKind

MIN_STEPS = 20
Z = 3.0  # standard errors a gain must be from 1 to be kept
FIRST_EDGE = 32


@dataclass(frozen=True)
class PositionFit:
    """One drafter kind's acceptance by position in the response, as fitted."""

    kind: DrafterKind
    rows: tuple[PositionMiss, ...]
    steps: list[int]  # SD steps per row
    ratios: list[float]  # accepted over the pooled fit's expectation per row (1.0: within noise)


def _edges(top: float) -> list[float]:
    edges = [0.0, float(FIRST_EDGE)]
    while edges[-1] < top:
        edges.append(edges[-1] * 2 ** 0.5)
    return edges


@dataclass(frozen=True)
class SdSteps:
    """The SD steps of one drafter kind, as the position fit sees them."""

    position: np.ndarray  # the decoding requests' mean tokens into their responses
    accepted: np.ndarray  # drafts accepted
    offered: np.ndarray  # requests offered drafts (n-gram: those it found no match for count)
    draft_len: np.ndarray


def sd_steps(traces: Sequence[Trace], kind: DrafterKind) -> SdSteps:
    """The SD steps of the traces that ran drafter `kind`."""
    cols: list[list[np.ndarray]] = [[], [], [], []]
    for t in traces:
        if trace_drafter_kind(t.meta) != kind:
            continue
        s = t.steps
        k = step_draft_len(s, t.meta)
        sd = (k > 0) & (s["decode_requests"].to_numpy() > 0)
        offered = np.maximum(s["decode_requests"].to_numpy(float), s["num_drafts"].to_numpy(float))
        prompt = float(t.requests["prompt_tokens"].mean())
        for col, v in zip(cols, (s["context_mean"].to_numpy(float) - prompt,
                                 s["num_accepted_tokens"].to_numpy(float), offered,
                                 k.astype(float))):
            col.append(v[sd])
    return SdSteps(*(np.concatenate(c) if c else np.zeros(0) for c in cols))


def expected_accepted(steps: SdSteps, alpha: float, shape: float) -> np.ndarray:
    """Per step: the drafts a drafter of `alpha` would have had accepted."""
    per_k = {k: float(np.sum(cumulative_acceptance(alpha, shape, int(k))))
             for k in set(steps.draft_len.tolist())}
    return steps.offered * np.array([per_k[k] for k in steps.draft_len])


def miss_multiplier(steps: SdSteps, alpha: float, shape: float) -> float:
    """m such that a drafter missing (1 - alpha) * m of the time accepts these steps' drafts."""
    target, top = steps.accepted.sum(), 1.0 / (1.0 - alpha)
    lo, hi = 0.0, top
    for _ in range(50):
        mid = (lo + hi) / 2
        if expected_accepted(steps, max(0.0, 1.0 - (1.0 - alpha) * mid), shape).sum() > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit_position_gain(traces: Sequence[Trace], kind: DrafterKind, alpha: float,
                      shape: float) -> PositionFit | None:
    """The rows for drafter `kind` (None: fewer than 2 * MIN_STEPS SD steps)."""
    steps = sd_steps(traces, kind)
    pos = steps.position
    if len(pos) < 2 * MIN_STEPS:
        return None
    exp = expected_accepted(steps, alpha, shape)
    edges = _edges(float(pos.max()) + 1)
    which = np.clip(np.searchsorted(edges, pos, side="right") - 1, 0, len(edges) - 1)
    bins: list[tuple[float, np.ndarray]] = []  # (from_token, the steps in it)
    for i, start in enumerate(edges):
        m = which == i
        if not m.any():
            continue
        if bins and (bins[-1][1].sum() < MIN_STEPS or m.sum() < MIN_STEPS):
            bins[-1] = (bins[-1][0], bins[-1][1] | m)
        else:
            bins.append((start, m))
    rows: list[PositionMiss] = []
    counts: list[int] = []
    ratios: list[float] = []
    for i, (start, m) in enumerate(bins):
        ratio = _supported_ratio(steps.accepted[m], exp[m])
        miss = 1.0 if ratio == 1.0 else sig(miss_multiplier(_subset(steps, m), alpha, shape), 4)
        if rows and rows[-1].miss == miss:
            counts[-1] += int(m.sum())
            continue
        rows.append(PositionMiss(0 if i == 0 else int(round(start)), miss))
        counts.append(int(m.sum()))
        ratios.append(ratio)
    return PositionFit(kind, tuple(rows), counts, ratios)


def _subset(steps: SdSteps, m: np.ndarray) -> SdSteps:
    return SdSteps(steps.position[m], steps.accepted[m], steps.offered[m], steps.draft_len[m])


def _supported_ratio(acc: np.ndarray, exp: np.ndarray) -> float:
    """Accepted over expected in one bin, or 1.0 where that is within Z standard errors of 1."""
    total = exp.sum()
    if total <= 0:
        return 1.0
    ratio = acc.sum() / total
    se = float(np.sqrt(np.sum((acc - ratio * exp) ** 2))) / total
    return float(ratio) if abs(ratio - 1.0) > Z * se else 1.0
