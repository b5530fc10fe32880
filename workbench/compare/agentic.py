"""Why a policy gains what it gains on an agentic workload: where the trajectories' and the
engines' time goes around the tool calls.

From one simulated run's turns (sim/agent_pool.py, TURN_COLUMNS) and timeline:
- `tool_share`: of the trajectories' time (first request to last token), the share spent in tool
  calls (queueing for a tool slot included);
- `tool_wait_share`: of the rollout's engine-time, the share in which an engine had nothing to
  decode because every trajectory it still held was out on a tool (spot training may use it);
- `tail_share`: of the rollout's engine-time, the share decoding at a small batch (the tail:
  batch <= the step's full batch / 8, workbench/contracts/timeline.py), where SD runs;
- `tail_in_tools`: of that small-batch decoding, the share that ran while some trajectory of the
  same engine was out on a tool (a batch kept small by tool calls rather than by finished
  trajectories);
- `turn_latency_s`: the median engine latency of a turn (request to last token, queueing included).
`AgenticWhy.sentence` says it in words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.results import PolicyRun
from workbench.contracts.timeline import DECODE_STATES, TAIL_DIVISOR, rollout_seconds


AGENTIC_FIELDS = ("tool_share", "tool_wait_share", "tail_share", "tail_in_tools", "turn_latency_s")


@dataclass(frozen=True)
class AgenticWhy:
    policy: str
    tool_share: float
    tool_wait_share: float
    tail_share: float
    tail_in_tools: float
    turn_latency_s: float

    @property
    def sentence(self) -> str:
        """The split in words."""
        return (f"{self.policy}: trajectories spend {self.tool_share:.1%} of their time in tool "
                f"calls; engines wait on tools with nothing to decode {self.tool_wait_share:.1%} "
                f"of the rollout; {self.tail_share:.1%} of engine-time decodes at a small batch, "
                f"{self.tail_in_tools:.0%} of it while trajectories are out on tools; a turn "
                f"takes {self.turn_latency_s:.1f} s (median, queueing included)")


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged into disjoint ones, sorted."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _covered(us: np.ndarray, ue: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per interval [a, b]: the length of it the disjoint sorted intervals (us, ue) cover."""
    if not len(us):
        return np.zeros(len(a))
    cum = np.concatenate([[0.0], np.cumsum(ue - us)])

    def upto(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(us, t, side="right")  # intervals starting at or before t
        inside = np.minimum(t, ue[np.maximum(i - 1, 0)]) - us[np.maximum(i - 1, 0)]
        return cum[np.maximum(i - 1, 0)] + np.where(i > 0, np.maximum(inside, 0.0), 0.0)
    return upto(b) - upto(a)


def _tool_intervals(turns: pd.DataFrame) -> pd.DataFrame:
    """Each tool call: (rl_step, worker, start = its turn's end, end = the next turn's arrival)."""
    t = turns.sort_values(["rl_step", "batch", "group", "member", "turn"], kind="stable")
    nxt = t.groupby(["rl_step", "batch", "group", "member"])["arrive_s"].shift(-1)
    calls = t.assign(tool_end=nxt).dropna(subset=["tool_end"])
    return calls[["rl_step", "worker", "end_s", "tool_end"]]


def agentic_why(run: PolicyRun) -> AgenticWhy:
    """The run's agentic decomposition, over all its steps."""
    turns, tl = run.turns, run.timeline
    calls = _tool_intervals(turns)
    traj = turns.groupby(["rl_step", "batch", "group", "member"])
    life = float((traj["end_s"].max() - traj["arrive_s"].min()).sum())
    tool = float((calls["tool_end"] - calls["end_s"]).sum())
    wait = tail = tail_tools = engine_time = 0.0
    for step, rows in tl.groupby("rl_step"):
        workers = int(rows["worker"].nunique())
        engine_time += rollout_seconds(rows) * workers
        dec = rows[rows["state"].astype(str).isin(DECODE_STATES)]
        full = int(dec["batch"].max()) if len(dec) else 0
        small = dec[dec["batch"] <= max(1, full // TAIL_DIVISOR)]
        tail += float((small["end_s"] - small["start_s"]).sum())
        for w, t in turns[turns["rl_step"] == step].groupby("worker"):
            bs, be = _union(t["arrive_s"].to_numpy(float), t["end_s"].to_numpy(float))
            wait += float((bs[1:] - be[:-1]).sum())
            c = calls[(calls["rl_step"] == step) & (calls["worker"] == w)]
            cs, ce = _union(c["end_s"].to_numpy(float), c["tool_end"].to_numpy(float))
            mine = small[small["worker"] == w]
            tail_tools += float(_covered(cs, ce, mine["start_s"].to_numpy(float),
                                         mine["end_s"].to_numpy(float)).sum())
    lat = (turns["end_s"] - turns["arrive_s"]).median()

    def share(x: float, of: float) -> float:
        return x / of if of > 0 else 0.0
    return AgenticWhy(run.policy_name, share(tool, life), share(wait, engine_time),
                      share(tail, engine_time), share(tail_tools, tail),
                      float(lat) if math.isfinite(lat) else 0.0)
