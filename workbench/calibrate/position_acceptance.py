"""How acceptance moves along a response: per position bin, the drafts the SD steps had accepted
over what the pooled per-position fit expects (`AcceptanceModel.eagle_position` /
`ngram_position`; the simulator applies them at a batch's mean position, sim/rollout.py).

Measured on the reference model, the ratio follows the response, the same in every capture,
mix and cap: a response's first 32 tokens are guessed ~0.6x as well as the pooled fit says, the
middle ~1.05x, and past ~770 tokens (responses that run on to the cap, derailed) ~0.7x for EAGLE,
while n-gram drafts gain there (derailed text loops). Why it matters: a rollout's tail is its
longest responses late in their text, where the pooled acceptance is wrong in the direction that
sets the rollout's end.

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
from workbench.calibrate.trace_view import sig, step_draft_len, trace_drafter_kind
from workbench.contracts.profile import PositionGain
from workbench.contracts.trace import Trace

MIN_STEPS = 20
Z = 3.0  # standard errors a gain must be from 1 to be kept
FIRST_EDGE = 32


@dataclass(frozen=True)
class PositionFit:
    """One drafter kind's acceptance by position in the response, as fitted."""

    kind: str
    rows: tuple[PositionGain, ...]
    steps: list[int]  # SD steps per row


def _edges(top: float) -> list[float]:
    edges = [0.0, float(FIRST_EDGE)]
    while edges[-1] < top:
        edges.append(edges[-1] * 2 ** 0.5)
    return edges


def sd_step_positions(traces: Sequence[Trace], kind: str, alpha: float,
                      shape: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per SD step of the traces that ran drafter `kind`: (mean position in the responses,
    accepted drafts, drafts the pooled fit expects)."""
    pos, acc, exp = [], [], []
    for t in traces:
        if trace_drafter_kind(t.meta) != kind:
            continue
        s = t.steps
        k = step_draft_len(s, t.meta)
        b = np.maximum(s["decode_requests"].to_numpy(float), s["num_drafts"].to_numpy(float))
        sd = (k > 0) & (s["decode_requests"].to_numpy() > 0)
        prompt = float(t.requests["prompt_tokens"].mean())
        per_k = {kk: float(np.sum(cumulative_acceptance(alpha, shape, kk))) for kk in set(k[sd].tolist())}
        pos.append(s["context_mean"].to_numpy(float)[sd] - prompt)
        acc.append(s["num_accepted_tokens"].to_numpy(float)[sd])
        exp.append(b[sd] * np.array([per_k[kk] for kk in k[sd]]))
    if not pos:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    return np.concatenate(pos), np.concatenate(acc), np.concatenate(exp)


def fit_position_gain(traces: Sequence[Trace], kind: str, alpha: float, shape: float) -> PositionFit | None:
    """The rows for drafter `kind` (None: fewer than 2 * MIN_STEPS SD steps)."""
    pos, acc, exp = sd_step_positions(traces, kind, alpha, shape)
    if len(pos) < 2 * MIN_STEPS:
        return None
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
    rows: list[PositionGain] = []
    steps: list[int] = []
    for i, (start, m) in enumerate(bins):
        gain = _supported_gain(acc[m], exp[m])
        if rows and rows[-1].gain == gain:
            steps[-1] += int(m.sum())
            continue
        rows.append(PositionGain(0 if i == 0 else int(round(start)), gain))
        steps.append(int(m.sum()))
    return PositionFit(kind, tuple(rows), steps)


def _supported_gain(acc: np.ndarray, exp: np.ndarray) -> float:
    """Accepted over expected in one bin, or 1.0 where that is within Z standard errors of 1."""
    total = exp.sum()
    if total <= 0:
        return 1.0
    ratio = acc.sum() / total
    se = float(np.sqrt(np.sum((acc - ratio * exp) ** 2))) / total
    return sig(ratio, 4) if abs(ratio - 1.0) > Z * se else 1.0
