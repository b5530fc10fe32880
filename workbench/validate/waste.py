"""Where a rollout's worker-time goes, per RL step, from any timeline: the simulator's or a real
run's trace.

Two kinds of waste (docs/formats.md, "The rollout's worker-time"), and spot training beside them:

- the bubble: worker-seconds idle, a worker that finished its shard waiting for the slowest;
- the tail: worker-seconds decoding at a running batch <= the step's full batch / 8, a worker
  finishing its last few sequences on hardware sized for many.

Each step's figures are `rollout_split`'s (workbench/contracts/timeline.py), the computation the
simulator's step metrics and a real run's records use, so a real run's figures and a simulated
run's are the same quantity: `tlt sim` and the What-if page show the simulator's, the Train page
shows these for the run it watches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import pandas as pd

from workbench.contracts.timeline import RolloutSplit, rollout_split


@dataclass(frozen=True)
class StepWaste:
    """One RL step's rollout worker-time, split."""

    rl_step: int
    split: RolloutSplit


def timeline_waste(timeline: pd.DataFrame) -> list[StepWaste]:
    """Per RL step, in step order, over the workers with rows in the step; none for an empty
    timeline."""
    return [StepWaste(int(rl_step), rollout_split(rows))
            for rl_step, rows in timeline.groupby("rl_step", sort=True)]


def waste_frame(steps: list[StepWaste]) -> pd.DataFrame:
    """One row per step: `rl_step`, then the RolloutSplit fields (empty with those columns for no
    steps)."""
    cols = ["rl_step", *(f.name for f in fields(RolloutSplit))]
    return pd.DataFrame([{"rl_step": s.rl_step, **asdict(s.split)} for s in steps], columns=cols)
