"""The agentic model fitted to a turns table (workbench/contracts/agentic.py), with the correlations
the data shows.

Each number is an estimate a person can recompute from the table:
- `turn_shares`: the share of trajectories with 1..max_turns turns;
- `turn_median_tokens[k]`, `turn_sigma`: the median completion of turn k, and the log-sd of every
  turn's completion around its turn's median;
- `trajectory_correlation`: the correlation of two successive turns' log residuals within a
  trajectory (the share of variance its turns share);
- `group_correlation`: the intra-group correlation of the turn counts' normal scores (a prompt
  that needs many searches needs them in each of its trajectories);
- `count_length_correlation`: the correlation of a trajectory's turn-count score with its turns'
  mean log residual, divided by the most that mean can show of a shared part (its own turns'
  noise dilutes it: sqrt(r / (r + (1 - r) E[1/n])), r the trajectory correlation);
- tool tokens and latency: medians and log-sds over the tool calls, and the correlation of their
  logs (`latency_tokens_correlation`).
Measured and reported but not modelled (`unmodelled`): the correlation of a tool call's latency with
the next turn's length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.stats import norm, rankdata

from sim.trajectories import model_group
from workbench.contracts.agentic import AgenticModel
from workbench.contracts.turn_data import COLUMNS, UNKNOWN, ObservedTurns, from_frame

MAX_CORRELATION = 0.95
SYNTHETIC_SEED = 45  # the fixed draws of the indirect-inference correction
SYNTHETIC_GROUPS = 1500
CORRECTION_ROUNDS = 3


@dataclass(frozen=True)
class AgenticFit:
    model: AgenticModel
    trajectories: int
    turns: int
    tool_calls: int
    unmodelled: dict[str, float]  # name -> measured correlation


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def _clip(r: float) -> float:
    return float(min(MAX_CORRELATION, max(0.0, r)))


def _group_icc(scores: np.ndarray, group_id: np.ndarray) -> float:
    """Intra-class correlation of `scores` over groups (pairwise within a group, pooled)."""
    z = scores - scores.mean()
    if z.var() == 0:
        return 0.0
    sums = np.bincount(group_id, weights=z)
    squares = np.bincount(group_id, weights=z * z)
    sizes = np.bincount(group_id)
    pairs = float((sizes * (sizes - 1)).sum())
    if pairs == 0:
        return 0.0
    return float((sums ** 2 - squares).sum() / pairs / z.var())


@dataclass(frozen=True)
class _Moments:
    """What the turns' lengths show, each a direct estimate (module docstring)."""

    log_medians: np.ndarray  # per turn index
    sigma: float
    trajectory_r: float
    group_r: float
    count_length_r: float  # before dividing by the most it can show

    def vector(self) -> np.ndarray:
        return np.concatenate([self.log_medians, [self.sigma, self.trajectory_r, self.group_r,
                                                  self.count_length_r]])


def _moments(turns: ObservedTurns, n_max: int) -> tuple[_Moments, np.ndarray]:
    """The moments, and each row's log residual around its turn's median."""
    c = turns.cols
    count = np.diff(turns.trajectory_starts)
    comp = np.maximum(c["completion_tokens"].astype(float), 1.0)
    k = c["turn"]
    medians = np.array([np.median(comp[k == i]) if (k == i).any() else 1.0
                        for i in range(n_max)])
    resid = np.log(comp) - np.log(medians[k])
    traj = np.repeat(np.arange(len(count)), count)  # each row's trajectory
    same = traj[:-1] == traj[1:]  # successive turns of one trajectory
    group = np.repeat(np.arange(turns.groups), np.diff(turns.group_starts))
    scores = norm.ppf((rankdata(count) - 0.5) / len(count))
    mean_log = np.bincount(traj, weights=resid) / count
    return _Moments(np.log(medians), float(resid.std()), _corr(resid[:-1][same], resid[1:][same]),
                    _group_icc(scores, group), _corr(scores, mean_log)), resid


def _length_model(m: AgenticModel, mo: _Moments, counts: np.ndarray) -> AgenticModel:
    """The length parameters the moments give directly (the shared part's correlation with the
    count divided by the most a trajectory's mean residual can show of it)."""
    r = _clip(mo.trajectory_r)
    most = np.sqrt(r / (r + (1 - r) * np.mean(1.0 / counts))) if r > 0 else 0.0
    cl = mo.count_length_r / most if most > 0 else 0.0
    return replace(m, turn_median_tokens=tuple(np.exp(mo.log_medians).tolist()),
                   turn_sigma=mo.sigma, trajectory_correlation=r,
                   group_correlation=_clip(mo.group_r),
                   count_length_correlation=float(max(-MAX_CORRELATION,
                                                      min(MAX_CORRELATION, cl))))


def _synthetic(m: AgenticModel, groups: int, size: int) -> ObservedTurns:
    """`groups` groups drawn from the model (a fixed seed: the fit is reproducible)."""
    rng = np.random.default_rng(SYNTHETIC_SEED)
    rows = []
    for g in range(groups):
        for member, t in enumerate(model_group(m, size, 1 << 30, rng).trajectories):
            for k in range(t.turns):
                rows.append((0, g, member, UNKNOWN, k, 0, UNKNOWN, int(t.completion[k]),
                             int(k < t.turns - 1), int(t.tool_tokens[k]), 0,
                             float(t.tool_s[k]), np.nan))
    return from_frame(pd.DataFrame(rows, columns=list(COLUMNS)))


def _corrected(m: AgenticModel, target: _Moments, groups: int, size: int) -> AgenticModel:
    """Indirect inference: move the length parameters until the model's own draws show the
    moments the data shows (the direct estimates are biased: a trajectory that reaches a late
    turn is one whose turn count, and so its shared length part, is not typical)."""
    counts = np.arange(1, m.max_turns + 1).repeat(np.round(np.array(m.turn_shares) * 1000)
                                                  .astype(int))
    theta = target
    for _ in range(CORRECTION_ROUNDS):
        drawn, _ = _moments(_synthetic(_length_model(m, theta, counts), groups, size),
                            m.max_turns)
        step = target.vector() - drawn.vector()
        v = theta.vector() + step
        n = m.max_turns
        theta = _Moments(v[:n], max(0.0, float(v[n])), *(float(x) for x in v[n + 1:]))
    return _length_model(m, theta, counts)


def fit_agentic(turns: ObservedTurns, base: AgenticModel) -> AgenticFit:
    """The model's numbers from the table; the cluster's declared fields (scale, slots, cache)
    stay the base's."""
    c = turns.cols
    count = np.diff(turns.trajectory_starts)
    n_max = int(count.max())
    shares = np.bincount(count, minlength=n_max + 1)[1:] / len(count)
    target, resid = _moments(turns, n_max)
    boundary = c["turn"] < np.repeat(count - 1, count)  # a tool call follows
    tok = c["tool_tokens"][boundary].astype(float)
    lat = c["tool_s"][boundary].astype(float)
    ok_tok = tok > 0
    ok_lat = np.isfinite(lat) & (lat > 0)
    both = ok_tok & ok_lat
    m = replace(
        base, max_turns=n_max, turn_shares=tuple(float(s) for s in shares / shares.sum()),
        tool_tokens_median=float(np.median(tok[ok_tok])) if ok_tok.any() else 0.0,
        tool_tokens_sigma=float(np.log(tok[ok_tok]).std()) if ok_tok.any() else 0.0,
        tool_latency_median_s=(float(np.median(lat[ok_lat])) if ok_lat.any()
                               else base.tool_latency_median_s),
        tool_latency_sigma=(float(np.log(lat[ok_lat]).std()) if ok_lat.any()
                            else base.tool_latency_sigma),
        latency_tokens_correlation=max(-MAX_CORRELATION, min(MAX_CORRELATION, _corr(
            np.log(tok[both]), np.log(lat[both])))))
    size = int(np.median(np.diff(turns.group_starts)))
    m = _rounded(_corrected(m, target, min(turns.groups, SYNTHETIC_GROUPS), size))
    next_turn = np.flatnonzero(boundary & np.isfinite(c["tool_s"]) & (c["tool_s"] > 0))
    unmodelled = {"tool latency ~ next turn length": round(_corr(
        np.log(c["tool_s"][next_turn].astype(float)), resid[next_turn + 1]), 4)}
    m.check()
    return AgenticFit(m, len(count), turns.rows, int(boundary.sum()), unmodelled)


def _rounded(m: AgenticModel) -> AgenticModel:
    """Fixed precision: a fitted file reads the same on any machine of our kind."""
    def r4(x: float) -> float:
        return float(f"{x:.4g}")
    return replace(
        m, turn_shares=tuple(round(s, 4) for s in m.turn_shares),
        turn_median_tokens=tuple(round(max(1.0, v), 1) for v in m.turn_median_tokens),
        turn_sigma=r4(m.turn_sigma), trajectory_correlation=r4(m.trajectory_correlation),
        group_correlation=r4(m.group_correlation),
        count_length_correlation=r4(m.count_length_correlation),
        tool_tokens_median=round(m.tool_tokens_median, 1),
        tool_tokens_sigma=r4(m.tool_tokens_sigma),
        tool_latency_median_s=r4(m.tool_latency_median_s),
        tool_latency_sigma=r4(m.tool_latency_sigma),
        latency_tokens_correlation=r4(m.latency_tokens_correlation))
