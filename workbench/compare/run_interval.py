"""A whole run's totals with a 90% interval: the interval of each policy's mean step, from a few
steps simulated again and priced under the profile's declared uncertainty
(workbench/compare/intervals.py), carried to the run's figure as a share of that mean step.

A projected run (`tlt project`) or a planned shape (`tlt plan`, the Plan page) is simulated in
blocks or sampled, without the timelines the intervals price again; the few steps simulated here
have them. The figure a user reads (days, cost, speedup) stays the projection's own; only its
interval's width comes from the short run, so the two answers never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sim.simulator import simulate
from workbench.compare.intervals import Interval, PolicyInterval, policy_intervals, run_work
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload
from workbench.project import FIGURES, Projection

# Steps of each policy simulated again for its interval (seed 0): the mean of 3 (What-if's) strays
# so far from a long run's that its interval, carried to the run, would be several times too wide.
INTERVAL_STEPS = 10


@dataclass(frozen=True)
class Carried:
    """A run total and its 90% interval."""

    value: float
    low: float
    high: float
    level: float


def short_run_intervals(workload: Workload, policies: Sequence[Policy], profile: Profile,
                        run_steps: int | None = None,
                        seed: int = 0) -> list[PolicyInterval] | None:
    """Each policy's mean step and its speedup over the first policy, with intervals, from the
    first INTERVAL_STEPS steps of a run of `run_steps` (default: the workload's), the same seed
    for every policy. None: nothing to draw from."""
    n = min(INTERVAL_STEPS, run_steps or workload.steps)
    runs = [simulate(workload, p, profile, seed=seed, steps=n) for p in policies]
    return policy_intervals([(p.name, [run_work(r, profile, workload.workers)])
                             for p, r in zip(policies, runs)], profile, seed)


def carried(interval: Interval, value: float) -> Carried:
    """`value` (a run total proportional to the mean step: days, GPU-hours, cost; or a speedup
    over the first policy) at the ends of the short run's `interval` of the same figure."""
    c = interval.center
    return Carried(value, value * interval.low / c, value * interval.high / c, interval.level)


def covers_line(covers: str) -> str:
    """What a carried interval covers, in words (`covers`: its short run's PolicyInterval's)."""
    return f"the mean step simulated again, {covers}; carried to the whole run as a share of it"


def chosen_interval(run: tuple[Workload, Policy, Profile] | None) -> PolicyInterval | None:
    """A plan's chosen shape (`Plan.chosen_run()`): its mean step with its interval (None: no
    shape chosen, or nothing to draw from)."""
    got = short_run_intervals(run[0], [run[1]], run[2]) if run is not None else None
    return got[0] if got else None


@dataclass(frozen=True)
class RunInterval:
    """A projected policy's mean totals (days, GPU-hours, cost, energy: those known) and its
    speedup over the first policy, each with its carried interval."""

    policy: str
    totals: dict[str, Carried]
    speedup: Carried
    covers: str

    def to_json(self) -> dict:
        def one(c: Carried) -> dict:
            return {"value": c.value, "low": c.low, "high": c.high, "level": c.level}

        return {**{k: one(c) for k, c in self.totals.items()}, "speedup": one(self.speedup),
                "covers": self.covers}


def run_intervals(result: Projection,
                  intervals: list[PolicyInterval] | None) -> list[RunInterval] | None:
    """Each policy's mean totals and speedup in `result`, with their carried intervals (None: no
    intervals)."""
    if not intervals:
        return None
    out = []
    for pi in intervals:
        e = result.policy_entry(pi.policy)
        totals = {k: carried(pi.step_s, e[k]["mean"]) for k, _ in FIGURES if e[k] is not None}
        out.append(RunInterval(pi.policy, totals,
                               carried(pi.speedup, e["speedup_vs_first"]["mean"]), pi.covers))
    return out
