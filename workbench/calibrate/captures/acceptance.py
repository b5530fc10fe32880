"""The acceptance fit: per-position acceptance per drafter kind (`fit_acceptance`), then
(alpha, shape) of r_i = alpha ** (i ** shape), the simulator's form (`sim/acceptance.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from workbench.calibrate.captures.costs import ParamFit
from workbench.calibrate.captures.position_acceptance import PositionFit, fit_position_gain
from workbench.calibrate.captures.trace_view import (
    parse_positions,
    step_draft_len,
    trace_drafter_kind,
)
from workbench.contracts.fileio import sig
from workbench.contracts.profile import AcceptanceModel, Profile
from workbench.contracts.trace import Trace
from workbench.contracts.policy import DrafterKind

MIN_DRAFTS_PER_POS = 20
# The AcceptanceModel fields, in the calibration report's order.
ACCEPTANCE_FIELDS = ("eagle_alpha_fresh", "eagle_alpha_cold", "eagle_shape", "ngram_alpha",
                     "ngram_shape", "staleness_per_update")


@dataclass
class AcceptanceFit:
    kind: DrafterKind
    alpha: float
    shape: float
    shape_fitted: bool
    r: list[float]  # per position: accepted / decoding requests offered that position
    offered: list[int]  # decoding requests offered each position (steps with draft_len >= i)
    r_per_draft: list[float]  # vLLM's definition: accepted / drafts (requests that got drafts)
    sd_steps: int
    rmse: float  # of the fitted curve against r (positions with enough drafts)
    tokens_per_pass: float  # 1 + sum(r) at the traced draft lengths' mix: measured E[L]
    position: PositionFit | None = None  # acceptance along a response (None: too few SD steps)

    def curve(self, n: int | None = None) -> list[float]:
        n = n or len(self.r)
        return [self.alpha ** (i ** self.shape) for i in range(1, n + 1)]


def per_position_acceptance(
    steps: pd.DataFrame, meta: dict | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Cumulative acceptance per position over the SD steps (draft_len > 0).

    With Dynamic SD steps have different draft lengths: position i counts only
    steps that drafted at least i tokens. The denominator is the decoding
    requests of those steps (a request the n-gram drafter found no match for
    counts as a draft with nothing accepted), because that is what the
    simulator's E[L] = 1 + sum r_i per sequence per pass means; vLLM's own
    per-draft rate (denominator num_drafts) is returned too. With `meta`,
    steps the schedule asked to draft but that got no draft count (see
    `step_draft_len`).
    Returns (accepted, offered, drafts, r, sd_steps), per position.
    """
    k = step_draft_len(steps, meta)
    sd = k > 0
    if not sd.any():
        z = np.zeros(0)
        return z, z, z, z, 0
    kmax = int(k[sd].max())
    acc, offered, drafts = np.zeros(kmax), np.zeros(kmax), np.zeros(kmax)
    b = steps["decode_requests"].to_numpy(float)
    nd = steps["num_drafts"].to_numpy(float)
    for kk, v, bb, dd in zip(k[sd], steps.loc[sd, "accepted_per_pos"], b[sd], nd[sd]):
        a = parse_positions(v)[:kk]
        acc[:len(a)] += a
        offered[:kk] += max(bb, dd)
        drafts[:kk] += dd
    r = np.divide(acc, offered, out=np.zeros(kmax), where=offered > 0)
    return acc, offered, drafts, r, int(sd.sum())


def fit_alpha_shape(
    r: np.ndarray, weight: np.ndarray, base_shape: float
) -> tuple[float, float, bool]:
    """Weighted least squares of r_i = alpha ** (i ** shape); shape stays at the base with one
    position."""
    pos = np.arange(1, len(r) + 1, dtype=float)
    ok = weight >= MIN_DRAFTS_PER_POS
    if not ok.any():
        ok = weight > 0
    pos, r, w = pos[ok], r[ok], np.sqrt(weight[ok] / weight[ok].max())
    r = np.clip(r, 0.0, 0.999)
    if len(pos) == 1 or r[0] <= 0:
        return float(np.clip(r[0], 0.0, 0.999)), base_shape, False
    res = least_squares(lambda x: w * (x[0] ** (pos ** x[1]) - r),
                        [float(np.clip(r[0], 0.01, 0.99)), 0.8],
                        bounds=([1e-4, 0.1], [0.999, 2.0]), method="trf")
    return float(res.x[0]), float(res.x[1]), True


def fit_acceptance(traces: Sequence[Trace], base: Profile) -> dict[DrafterKind, AcceptanceFit]:
    """Per drafter kind present in the traces (pooled over its traces)."""
    by_kind: dict[DrafterKind, list[tuple[np.ndarray, ...]]] = {}
    for t in traces:
        kind = trace_drafter_kind(t.meta)
        if kind != DrafterKind.NONE:
            by_kind.setdefault(kind, []).append(per_position_acceptance(t.steps, t.meta))
    out = {}
    for kind, parts in by_kind.items():
        n = sum(p[4] for p in parts)
        if n == 0:
            continue
        kmax = max(len(p[0]) for p in parts)
        pad = lambda v: np.pad(v, (0, kmax - len(v)))  # noqa: E731
        acc, offered, drafts = (sum(pad(p[i]) for p in parts) for i in range(3))
        r = np.divide(acc, offered, out=np.zeros(kmax), where=offered > 0)
        ngram = kind == DrafterKind.NGRAM
        base_shape = base.acceptance.ngram_shape if ngram else base.acceptance.eagle_shape
        alpha, shape, shape_fitted = fit_alpha_shape(r, offered, base_shape)
        ok = offered >= MIN_DRAFTS_PER_POS
        curve = np.array([alpha ** (i ** shape) for i in range(1, len(r) + 1)])
        rmse = float(np.sqrt(np.mean((curve[ok] - r[ok]) ** 2))) if ok.any() else float("nan")
        per_draft = np.divide(acc, drafts, out=np.zeros(len(acc)), where=drafts > 0)
        # Measured tokens per verify pass (per decoding request), over all SD steps.
        out[kind] = AcceptanceFit(kind, alpha, shape, shape_fitted, r.tolist(),
                                  offered.astype(int).tolist(), per_draft.tolist(), n, rmse,
                                  float(1 + acc.sum() / offered[0]) if offered[0] else 1.0,
                                  fit_position_gain(traces, kind, alpha, shape))
    return out


def acceptance_model(
    base: AcceptanceModel, fits: dict[str, AcceptanceFit]
) -> tuple[AcceptanceModel, list[ParamFit], list[str]]:
    """The profile's acceptance model from the fits (what no trace shows stays the base's),
    with each field's ParamFit and the notes to tell the user."""
    acc, notes = base, []
    fitted = dict.fromkeys(ACCEPTANCE_FIELDS, False)
    if DrafterKind.NGRAM in fits:
        a = fits[DrafterKind.NGRAM]
        acc = replace(acc, ngram_alpha=sig(a.alpha, 4), ngram_shape=sig(a.shape, 4),
                      ngram_position=_moving(a.position))
        fitted["ngram_alpha"], fitted["ngram_shape"] = True, a.shape_fitted
    if DrafterKind.EAGLE in fits:
        a = fits[DrafterKind.EAGLE]
        acc = replace(acc, eagle_alpha_fresh=sig(a.alpha, 4), eagle_shape=sig(a.shape, 4),
                      eagle_alpha_cold=min(acc.eagle_alpha_cold, sig(a.alpha, 4)),
                      eagle_position=_moving(a.position))
        fitted["eagle_alpha_fresh"], fitted["eagle_shape"] = True, a.shape_fitted
        notes.append("EAGLE traces are taken as a drafter aligned with the traced policy: their "
                     "acceptance sets eagle_alpha_fresh; eagle_alpha_cold, staleness and the "
                     "learning curve stay the base's")
    for a in fits.values():
        if a.position is not None:
            pairs = zip(a.position.rows, a.position.ratios)
            rows = ", ".join(f"{r.from_token}+: x{r.miss:.2f} ({q:.2f})" for r, q in pairs)
            notes.append(f"{a.kind} acceptance along a response, by tokens into the response: the "
                         f"miss rate's multiplier (accepted drafts over the pooled fit's): {rows} "
                         f"(workbench/calibrate/captures/position_acceptance.py)")
    return acc, [ParamFit("acceptance", n, getattr(acc, n), f) for n, f in fitted.items()], notes


def _moving(fit: PositionFit | None) -> tuple:
    """The fitted rows, or none where acceptance does not move along a response."""
    return fit.rows if fit is not None and any(r.miss != 1.0 for r in fit.rows) else ()
