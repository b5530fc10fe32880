"""An agentic workload's simulated turns set beside the trace it was imported from.

The turns table (`tlt workload import`) records, per turn, the engine's latency under the run's own
batching (SGLang's e2e latency: from the request reaching the engine to its last token, queueing
and the prefill of what the prefix cache missed included), and per tool call its latency. Replaying
the run's shape (seed 0: step s is observed step s, every trajectory on its engine), the simulator's
per-turn latency (`end_s - arrive_s` of its turns, sim/agent_pool.py) is matched to the measured one
turn by turn, and each step's makespan (the rollout: its slowest trajectory's turns and tool calls)
to the measured one (the longest sum of a trajectory's engine and tool latencies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sim.simulator import simulate
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import Profile
from workbench.contracts.turn_data import UNKNOWN, read_turns
from workbench.contracts.workload import Workload

KEYS = ["batch", "group", "member", "turn"]


@dataclass(frozen=True)
class StepCheck:
    """One step, simulated against measured."""

    step: int
    turns: int
    median_measured_s: float  # median per-turn engine latency
    median_simulated_s: float
    median_abs_error: float  # median over turns of |simulated / measured - 1|
    makespan_measured_s: float
    makespan_simulated_s: float
    prefill_measured: int  # tokens the turns prefilled (prompt less cached), where known
    prefill_simulated: int

    @property
    def median_error(self) -> float:
        return self.median_simulated_s / self.median_measured_s - 1.0

    @property
    def makespan_error(self) -> float:
        return self.makespan_simulated_s / self.makespan_measured_s - 1.0


def measured_steps(workload: Workload) -> pd.DataFrame:
    """The trace's turns (the workload's turns table) with their engine latencies."""
    t = read_turns(workload.agentic.data)
    df = t.frame()
    if df["engine_s"].isna().all():
        raise ValueError(f"{workload.agentic.data}: the turns table records no engine latency "
                         "(engine_s); only a trace with per-turn latencies can be checked")
    return df


def makespans(turns: pd.DataFrame, latency: str, tool: str = "tool_s") -> pd.Series:
    """Per batch: the slowest trajectory's sum of turn latencies and tool latencies."""
    per = turns.assign(total=turns[latency] + turns[tool].fillna(0.0))
    return per.groupby(["batch", "group", "member"])["total"].sum().groupby(level=0).max()


def simulated_turns(workload: Workload, profile: Profile, steps: int) -> pd.DataFrame:
    """The first `steps` steps replayed without SD (the trace's engine ran none), seed 0."""
    wl = replace(workload, steps=steps, agentic=replace(workload.agentic, kind="replay"))
    run = simulate(wl, load_policy("baseline"), profile, seed=0)
    t = run.turns
    return t.assign(latency=t["end_s"] - t["arrive_s"])


def matched(workload: Workload, profile: Profile, measured: pd.DataFrame,
            steps: list[int]) -> pd.DataFrame:
    """Simulated and measured turns of `steps`, one row per turn (the measured columns end in
    _m), with each simulated turn's tool latency (the trace's, scaled as the workload says)."""
    sim = simulated_turns(workload, profile, max(steps) + 1)
    sim = sim[sim["batch"].isin(steps)]
    meas = measured[measured["batch"].isin(steps)]
    m = sim.merge(meas, on=KEYS, suffixes=("", "_m"), validate="one_to_one")
    if len(m) != len(meas):
        raise ValueError(f"{len(meas) - len(m)} measured turns of steps {steps} have no "
                         "simulated turn: the workload does not replay its own turns table")
    return m.assign(tool_sim=m["tool_s"] * workload.agentic.tool_latency_scale)


def step_checks(m: pd.DataFrame) -> list[StepCheck]:
    sim_span = makespans(m, "latency", "tool_sim")
    meas_span = makespans(m, "engine_s")
    out = []
    for b, g in m.groupby("batch"):
        known = g["cached_tokens_m"] != UNKNOWN
        out.append(StepCheck(
            int(b), len(g), float(g["engine_s"].median()), float(g["latency"].median()),
            float((g["latency"] / g["engine_s"] - 1.0).abs().median()),
            float(meas_span[b]), float(sim_span[b]),
            int((g["prompt_tokens_m"] - g["cached_tokens_m"])[known].sum()),
            int((g["prompt_tokens"] - g["cached_tokens"])[known].sum())))
    return out


def by_turn(m: pd.DataFrame) -> pd.DataFrame:
    """Median latency by turn index, simulated against measured."""
    g = m.groupby("turn")
    return pd.DataFrame({"turns": g.size(), "measured_s": g["engine_s"].median(),
                         "simulated_s": g["latency"].median()})


def check(workload: Workload, profile: Profile, steps: list[int],
          progress: Callable[[str], None] | None = None) -> tuple[list[StepCheck], pd.DataFrame]:
    """Each of `steps` simulated against the trace, and the medians by turn index over them."""
    if progress:
        progress(f"replaying steps {steps} of {workload.name} on {profile.name}")
    m = matched(workload, profile, measured_steps(workload), steps)
    return step_checks(m), by_turn(m)


def summary(checks: list[StepCheck]) -> dict[str, float]:
    """Over the steps: the median of each step's error (relative, signed)."""
    def med(xs: list[float]) -> float:
        return float(np.median(xs)) if xs else float("nan")
    return {"median_turn_latency_error": med([c.median_error for c in checks]),
            "median_abs_turn_error": med([c.median_abs_error for c in checks]),
            "makespan_error": med([c.makespan_error for c in checks])}
