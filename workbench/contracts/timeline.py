"""The timeline: what every worker did when, built as it happens (`Timeline`), and where one RL
step's rollout worker-time went, from its rows (`TimelineRow`'s columns).

The one computation of the bubble, the tail and spot training: the simulator's step metrics
(sim/results.py), a real run's per-step records (real/run/records.py) and the waste tool
(workbench/validate/waste.py) all call `rollout_split`, so a simulated figure and a measured one
are the same quantity under the same name (docs/formats.md, "The rollout's worker-time"):

- `bubble_fraction`: worker-seconds idle once a worker's share has begun (a worker that finished
  its share, waiting for the slowest) / rollout worker-seconds: with one worker, none;
- `wait_fraction`: worker-seconds idle before a worker's share begins (a real run's dispatch of
  its prompts, its engine taking the first request) / rollout worker-seconds: no worker has
  finished then, so it is no bubble;
- `tail_fraction`: worker-seconds decoding at a running batch <= the step's full batch /
  TAIL_DIVISOR (a worker finishing its last few sequences on hardware sized for many) / rollout
  worker-seconds; `tail_token_share`: the tail's share of the decoded tokens;
- `drafter_train_fraction`: worker-seconds training the drafter (spot training) / rollout
  worker-seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.contracts.trace import STATES, TIMELINE_COLUMNS

# tool_wait: an agentic engine with every trajectory it holds out on a tool call.
ROLLOUT_STATES = ("decode", "decode_sd", "idle", "drafter_train", "tool_wait")
DECODE_STATES = ("decode", "decode_sd")
# The tail is a decode interval whose running batch is at most the step's full batch (the largest
# any worker ran) / TAIL_DIVISOR. At a full batch of 256 that is batch <= 32, the batch up to which
# the TLT paper turns SD on.
TAIL_DIVISOR = 8


class Timeline:
    """Builds a timeline table: rows are appended as plain tuples (cheap in the simulator's hot
    loop) and turned into a DataFrame once."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def add(self, rl_step: int, worker: int, start: float, end: float, state: str, batch: int = 0,
            draft_len: int = 0, tokens: float = 0.0, passes: float = 0.0, context: float = 0.0,
            strategy: str | None = None) -> None:
        """`strategy` defaults to the chain of `draft_len` (empty when nothing is drafted)."""
        if end <= start:
            return  # zero-length: a worker that finished exactly as the rollout ended
        if strategy is None:
            strategy = str(draft_len) if draft_len else ""
        self.rows.append((rl_step, worker, start, end, state, batch, draft_len, tokens, passes,
                          context, strategy))

    def frame(self, first_row: int = 0, rl_step: int | None = None) -> pd.DataFrame:
        """The rows from `first_row` on (of one RL step, if given) as a table (state is
        categorical over STATES)."""
        rows = self.rows[first_row:]
        if rl_step is not None:
            rows = [r for r in rows if r[0] == rl_step]
        df = pd.DataFrame(rows, columns=list(TIMELINE_COLUMNS))
        df["state"] = pd.Categorical(df["state"], categories=list(STATES))
        return df


@dataclass(frozen=True)
class RolloutSplit:
    """One RL step's rollout worker-time, split by what the workers did."""

    workers: int  # workers the rollout worker-seconds count
    rollout_s: float  # the rollout's wall time
    bubble_fraction: float  # idle worker-seconds / rollout worker-seconds
    tail_fraction: float  # tail decode worker-seconds / rollout worker-seconds
    tail_token_share: float  # tokens decoded in the tail / tokens decoded
    drafter_train_fraction: float  # spot-training worker-seconds / rollout worker-seconds
    full_batch: int  # the largest running batch of any worker in the step (0: no decoding)
    # decode intervals at a batch <= this are the tail: max(1, full_batch // TAIL_DIVISOR)
    tail_batch: int
    # idle worker-seconds before each worker's share began / rollout worker-seconds
    wait_fraction: float = 0.0


def rollout_seconds(rows: pd.DataFrame) -> float:
    """From a step's first interval to the end of its last rollout interval (decode, idle, spot
    training)."""
    rollout_end = rows.loc[rows["state"].isin(ROLLOUT_STATES), "end_s"].max()
    return float(rollout_end - rows["start_s"].min())


def rollout_split(rows: pd.DataFrame, workers: int | None = None,
                  window: tuple[float, float] | None = None) -> RolloutSplit:
    """The split of one RL step's timeline rows (every worker's intervals of that step).

    `workers`: how many workers share the rollout (default: the workers with rows). `window`: the
    rollout's (start_s, end_s) when the caller's clock knows it (a real run's step start and the
    moment its last worker finished); intervals are cut to it. Without it the rollout runs from the
    step's first interval to the end of its last rollout interval (`rollout_seconds`).
    """
    if workers is None:
        workers = int(rows["worker"].nunique())
    start, end = rows["start_s"].to_numpy(float), rows["end_s"].to_numpy(float)
    if window is None:
        rollout = rollout_seconds(rows)
    else:
        rollout = float(window[1] - window[0])
        start, end = np.maximum(start, window[0]), np.minimum(end, window[1])
    dur = pd.Series(np.maximum(end - start, 0.0), index=rows.index)
    state = rows["state"].astype(str)
    worker_s = rollout * workers
    share = (lambda seconds: float(seconds) / worker_s if worker_s else 0.0)  # noqa: E731
    decode = state.isin(DECODE_STATES)
    full = int(rows.loc[decode, "batch"].max()) if decode.any() else 0
    limit = max(1, full // TAIL_DIVISOR) if full else 0
    tail = decode & (rows["batch"] <= limit)
    tokens = float(rows.loc[decode, "tokens"].sum())
    idle = state == "idle"
    waiting = idle & _before_share(rows, state)
    return RolloutSplit(
        workers=workers, rollout_s=rollout,
        bubble_fraction=share(dur[idle & ~waiting].sum()),
        tail_fraction=share(dur[tail].sum()),
        tail_token_share=float(rows.loc[tail, "tokens"].sum()) / tokens if tokens else 0.0,
        drafter_train_fraction=share(dur[state == "drafter_train"].sum()),
        full_batch=full, tail_batch=limit, wait_fraction=share(dur[waiting].sum()))


def _before_share(rows: pd.DataFrame, state: pd.Series) -> pd.Series:
    """Rows that end before their worker's first rollout interval that is not idle (a worker
    that never began a share has none: all its idle time is a finished, empty share's)."""
    working = state.isin(ROLLOUT_STATES) & (state != "idle")
    first = rows.loc[working].groupby("worker")["start_s"].min()
    began = rows["worker"].map(first)
    return (rows["end_s"] <= began).fillna(False).astype(bool)
