"""Where a rollout's worker-time goes, from any timeline: the simulator's or a real run's trace.

Two kinds of waste, per RL step (docs/formats.md, "The tail"):

- the bubble: worker-seconds idle, a worker that finished its shard waiting for the slowest;
- the tail: worker-seconds decoding at a running batch <= the step's full batch / 8, a worker
  finishing its last few sequences on hardware sized for many.

The definitions are `sim.results`' own (`rollout_seconds`, `tail_metrics`), so a real run's
figures and a simulated run's are the same quantity: `tlt sim` and the What-if page show the
simulator's, the Train page shows these for the run it watches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from sim.results import rollout_seconds, tail_metrics


@dataclass(frozen=True)
class StepWaste:
    """One RL step's rollout worker-time, split."""

    step: int
    workers: int  # workers with intervals in the step
    rollout_s: float
    bubble_fraction: float  # idle worker-seconds / rollout worker-seconds
    tail_fraction: float  # tail decode worker-seconds / rollout worker-seconds
    tail_token_share: float  # tokens decoded in the tail / tokens decoded
    full_batch: int  # the largest running batch of any worker in the step
    tail_batch: int  # the tail's limit: decode at a batch <= this


def step_waste(step: int, rows: pd.DataFrame) -> StepWaste:
    """The waste of one step's timeline rows (every worker's intervals of that step)."""
    workers = int(rows["worker"].nunique())
    rollout = rollout_seconds(rows)
    worker_s = rollout * workers
    idle = rows["state"].astype(str) == "idle"
    idle_s = float((rows.loc[idle, "end_s"] - rows.loc[idle, "start_s"]).sum())
    tail = tail_metrics(rows, worker_s)
    return StepWaste(step, workers, rollout, idle_s / worker_s if worker_s else 0.0, tail.fraction,
                     tail.token_share, tail.full_batch, tail.tail_batch)


def timeline_waste(timeline: pd.DataFrame) -> list[StepWaste]:
    """Per RL step, in step order; none for an empty timeline."""
    return [step_waste(int(step), rows) for step, rows in timeline.groupby("step", sort=True)]


def waste_frame(steps: list[StepWaste]) -> pd.DataFrame:
    """One row per step, the StepWaste fields as columns (empty with those columns for no steps)."""
    cols = list(StepWaste.__dataclass_fields__)
    return pd.DataFrame([asdict(s) for s in steps], columns=cols)
