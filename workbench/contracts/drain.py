"""How a rollout drains: when each response finished, how many each engine was running meanwhile,
and the two metrics of the tail read from them, one computation for a simulated and a real rollout.

A `Drain` holds a rollout's window, one finish time per response (a trajectory, for multi-turn
rollouts) and each engine's running intervals (a constant count of sequences on the engine). It is
built from either record both sides write:

- `drain_from_timeline`: a Timeline table's decode rows (the simulator's, or a real run's
  `timeline.parquet`), for a closed rollout: every response starts with the rollout and stays on
  its engine until it finishes, so a drop of the running batch between an engine's consecutive
  decode intervals is that many responses finishing;
- `drain_from_turns`: per-turn engine intervals (an agentic trace's turns, each from reaching the
  engine to its last token; or the simulator's turns, `arrive_s` to `end_s`).

Then `completion_curve` (the share of responses done against the share of the rollout's time),
`curve_gap` (the largest vertical gap between two drains' curves) and `batch_time` (the share of
the rollout's engine-time at each running batch, idle engines at batch 0) read any drain the same
way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.contracts.timeline import DECODE_STATES


@dataclass(frozen=True)
class Drain:
    """One rollout's drain (seconds on one clock)."""

    start_s: float
    end_s: float
    finish_s: np.ndarray  # one per response (trajectory)
    workers: int  # engines the rollout ran on
    # Running intervals: engine, start, end and the sequences on it meanwhile.
    worker: np.ndarray
    run_start: np.ndarray
    run_end: np.ndarray
    running: np.ndarray

    def __post_init__(self) -> None:
        if not self.end_s > self.start_s:
            raise ValueError(f"a rollout from {self.start_s} s to {self.end_s} s has no length: "
                             "nothing drained")

    @property
    def rollout_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def responses(self) -> int:
        return len(self.finish_s)

    def time_fraction(self, seconds: np.ndarray) -> np.ndarray:
        return (np.asarray(seconds, float) - self.start_s) / self.rollout_s


def completion_curve(d: Drain, time_fractions: np.ndarray | list[float]) -> np.ndarray:
    """The share of the drain's responses finished at each share of its rollout time (finishes at
    exactly that moment count as done)."""
    done = np.sort(d.time_fraction(d.finish_s))
    t = np.asarray(time_fractions, float)
    return np.searchsorted(done, t + 1e-12, side="right") / max(1, len(done))


def curve_gap(a: Drain, b: Drain) -> float:
    """The largest gap, in the share of responses done, between two drains' completion curves over
    the rollout's time (exact: both curves are steps, compared at every step of either)."""
    at = np.union1d(a.time_fraction(a.finish_s), b.time_fraction(b.finish_s))
    at = np.clip(np.concatenate([at, at - 1e-9, [0.0, 1.0]]), 0.0, 1.0)
    return float(np.max(np.abs(completion_curve(a, at) - completion_curve(b, at))))


def gap_to_points(d: Drain, time_fractions: list[float], done: list[float]) -> float:
    """The largest gap between a drain's completion curve and measured points of one."""
    if not time_fractions:
        return float("nan")
    return float(np.max(np.abs(completion_curve(d, time_fractions) - np.asarray(done, float))))


@dataclass(frozen=True)
class BatchTime:
    """The share of a rollout's engine-time (rollout seconds x engines) spent at each running
    batch; batch 0 is an engine with nothing to run (idle, or all its trajectories on tools)."""

    batch: np.ndarray  # running batches, ascending
    share: np.ndarray  # engine-time share at each

    def at_most(self, limit: int) -> float:
        """The share at a running batch of 1..limit (decoding, at most `limit` sequences)."""
        return float(self.share[(self.batch >= 1) & (self.batch <= limit)].sum())

    def at_least(self, limit: int) -> float:
        return float(self.share[self.batch >= limit].sum())


def batch_time(d: Drain) -> BatchTime:
    """Engine-time at each running batch over the rollout's window."""
    total = d.rollout_s * d.workers
    dur = np.clip(np.minimum(d.run_end, d.end_s) - np.maximum(d.run_start, d.start_s), 0, None)
    busy = d.running > 0
    s = pd.Series(dur[busy]).groupby(d.running[busy]).sum()
    s.loc[0] = max(0.0, total - float(dur[busy].sum()))  # the rest: nothing to run
    s = s.sort_index()
    return BatchTime(s.index.to_numpy(int), (s.to_numpy(float) / total) if total > 0
                     else np.zeros(len(s)))


def drain_from_timeline(rows: pd.DataFrame, workers: int | None = None,
                        responses: int | None = None) -> Drain:
    """A closed rollout's drain from its Timeline rows (one RL step's). Raises ValueError where
    responses were admitted as others finished (an engine's running batch grows between decode
    intervals, or the finishes counted fall short of `responses`, the rollout's response count
    where the caller knows it): the drops no longer count finishes."""
    dec = rows[rows["state"].astype(str).isin(DECODE_STATES)].sort_values(["worker", "start_s"])
    if dec.empty:
        raise ValueError("the timeline has no decode intervals: nothing drained")
    finish: list[np.ndarray] = []
    for w, g in dec.groupby("worker"):
        batch, end = g["batch"].to_numpy(int), g["end_s"].to_numpy(float)
        if (np.diff(batch) > 0).any():
            raise ValueError(f"engine {w}'s running batch grows between decode intervals: the "
                             "rollout admitted responses as others finished (not a closed "
                             "rollout), so its finishes cannot be read from the batch")
        drops = np.append(batch[:-1] - batch[1:], batch[-1])
        finish.append(np.repeat(end, drops))
    counted = sum(len(f) for f in finish)
    if responses is not None and counted != responses:
        raise ValueError(f"{counted} responses finish by the running batch's drops, of "
                         f"{responses}: the rollout admitted responses as others finished (not a "
                         "closed rollout: max_batch below an engine's share)")
    start = float(rows["start_s"].min())
    return Drain(start, float(dec["end_s"].max()), np.concatenate(finish),
                 int(workers or rows["worker"].nunique()), dec["worker"].to_numpy(int),
                 dec["start_s"].to_numpy(float), dec["end_s"].to_numpy(float),
                 dec["batch"].to_numpy(int))


def running_intervals(worker: np.ndarray, start: np.ndarray,
                      end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per engine, the constant-count stretches of a set of occupancy intervals (a sweep over
    their starts and ends): (worker, start, end, running)."""
    out: list[tuple[np.ndarray, ...]] = []
    for w in np.unique(worker):
        m = worker == w
        t = np.concatenate([start[m], end[m]])
        step = np.concatenate([np.ones(m.sum(), int), -np.ones(m.sum(), int)])
        order = np.lexsort((step, t))  # at a tie, ends first: a count never overshoots
        t, count = t[order], np.cumsum(step[order])
        keep = np.diff(t) > 0
        out.append((np.full(keep.sum(), w), t[:-1][keep], t[1:][keep], count[:-1][keep]))
    return tuple(np.concatenate(col) for col in zip(*out))


def drain_from_turns(worker: np.ndarray, trajectory: np.ndarray, start: np.ndarray,
                     end: np.ndarray, workers: int) -> Drain:
    """A multi-turn rollout's drain from its turns' engine intervals: a trajectory is done when
    its last turn ends; an engine runs the turns that are on it."""
    worker, trajectory = np.asarray(worker), np.asarray(trajectory)
    start, end = np.asarray(start, float), np.asarray(end, float)
    finish = pd.Series(end).groupby(trajectory).max().to_numpy(float)
    w, a, b, n = running_intervals(worker, start, end)
    return Drain(float(start.min()), float(end.max()), finish, workers, w, a, b, n)
