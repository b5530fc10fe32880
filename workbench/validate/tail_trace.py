"""The Search-R1 trace's steps drained, measured and simulated.

The trace times every turn (the engine's latency, from reaching it to the last token) and every tool
call of every trajectory; veRL's rank starts all its trajectories at once and runs a trajectory's
turns and tool calls one after another. So a turn is on the engine from the sum of the trajectory's
earlier turns' and tool calls' latencies, for its own latency. Each trajectory's engine is its
contiguous shard of the step (veRL splits a batch across data-parallel ranks in order; the trace
records no rank). The simulator's replay of the same steps (`simulated_turns`: seed 0, no SD, an
engine: the workload's, or one drawn from its fit's uncertainty) gives its turns' `arrive_s` to
`end_s` on its engines. Both become a Drain (workbench/contracts/drain.py) through the same
function.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sim.rollout import shard
from workbench.contracts.drain import Drain, batch_time, curve_gap, drain_from_turns
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload
from workbench.validate.agentic_trace import measured_steps, simulated_turns

TRAJECTORY = ["group", "member"]
# Running batches per engine the comparison reports (of 512 trajectories per engine).
BUCKETS = ((0, 0), (1, 32), (33, 128), (129, 512))


def _trajectory_ids(turns: pd.DataFrame) -> np.ndarray:
    return turns.groupby(TRAJECTORY, sort=True).ngroup().to_numpy()


def measured_drain(turns: pd.DataFrame, workers: int) -> Drain:
    """One step's drain from the trace's turns (sorted by group, member, turn)."""
    t = turns.sort_values(TRAJECTORY + ["turn"])
    ids = _trajectory_ids(t)
    busy = (t["engine_s"] + t["tool_s"].fillna(0.0)).to_numpy(float)
    # a turn starts once the trajectory's earlier turns and tool calls are done
    before = pd.Series(busy).groupby(ids).cumsum().to_numpy() - busy
    engine = np.empty(ids.max() + 1, int)
    for w, r in enumerate(shard(len(engine), workers)):
        engine[r.start:r.stop] = w
    return drain_from_turns(engine[ids], ids, before, before + t["engine_s"].to_numpy(float),
                            workers)


def simulated_drain(turns: pd.DataFrame, workers: int) -> Drain:
    t = turns.sort_values(TRAJECTORY + ["turn"])
    return drain_from_turns(t["worker"].to_numpy(int), _trajectory_ids(t),
                            t["arrive_s"].to_numpy(float), t["end_s"].to_numpy(float), workers)


def bucket_shares(d: Drain) -> tuple[float, ...]:
    bt = batch_time(d)
    return tuple(float(bt.share[(bt.batch >= lo) & (bt.batch <= hi)].sum()) for lo, hi in BUCKETS)


@dataclass(frozen=True)
class StepDrain:
    step: int
    trajectories: int
    gap: float  # largest gap between the completion curves, in the share of trajectories done
    # the same with the simulated curve read on the measured rollout's clock (its seconds, not its
    # own rollout's share): the gap the curve's shape makes, without where the rollout ends
    clock_gap: float
    measured_s: float  # the rollout (the slowest trajectory)
    simulated_s: float
    measured_shares: tuple[float, ...]  # engine-time per BUCKETS
    simulated_shares: tuple[float, ...]
    measured: Drain
    simulated: Drain


def check(workload: Workload, profile: Profile, steps: list[int]) -> list[StepDrain]:
    """Each step of `steps`, its measured drain beside the simulator's replay of it."""
    meas = measured_steps(workload)
    sim = simulated_turns(workload, profile, max(steps) + 1)
    out = []
    for s in steps:
        m = measured_drain(meas[meas["batch"] == s], workload.workers)
        d = simulated_drain(sim[sim["batch"] == s], workload.workers)
        out.append(StepDrain(s, m.responses, curve_gap(m, d), curve_gap(m, on_clock(d, m)),
                             m.rollout_s, d.rollout_s, bucket_shares(m), bucket_shares(d), m, d))
    return out


def on_clock(d: Drain, clock: Drain) -> Drain:
    """`d` read on `clock`'s rollout length: a share of the time is as many of `clock`'s seconds
    (a response that finishes past it is not done by its end)."""
    return replace(d, end_s=d.start_s + clock.rollout_s)
