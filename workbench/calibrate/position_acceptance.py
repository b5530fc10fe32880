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
tokens, and a bin with fewer than MIN_STEPS SD steps joins the one before it.
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
    rows: list[list[float]] = []  # [from_token, accepted, expected, steps]
    for i, start in enumerate(edges):
        m = which == i
        n = int(m.sum())
        if not n:
            continue
        if rows and (rows[-1][3] < MIN_STEPS or n < MIN_STEPS):
            rows[-1] = [rows[-1][0], rows[-1][1] + acc[m].sum(), rows[-1][2] + exp[m].sum(), rows[-1][3] + n]
        else:
            rows.append([start, acc[m].sum(), exp[m].sum(), n])
    rows[0][0] = 0.0
    gains = tuple(PositionGain(int(round(r[0])), sig(r[1] / r[2], 4) if r[2] > 0 else 1.0) for r in rows)
    return PositionFit(kind, gains, [int(r[3]) for r in rows])
