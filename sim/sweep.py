"""Policies x seeds on one workload, with common random numbers.

Seed s draws the same response lengths for every policy (a prompt's lengths depend only on
(seed, step, prompt index): `sim.groups.group_lengths`), so two policies run on the same
seeds differ only by what the policies do. `tlt compare`, `tlt regret` and the tuner all
sweep this way; each reduces the runs as they come (a run holds its whole timeline).
A sweep is a list of independent units (`sweep_units`, `run_unit`): workbench/deploy/distributed.py
runs the same units as Ray tasks and reports them in the same order, so results do not
depend on where a unit ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from scipy import stats

from sim.results import PolicyRun
from sim.simulator import simulate
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload

# on_progress(done, total, policy_name, seed): called after each simulation.
ProgressFn = Callable[[int, int, str, int], None]


@dataclass(frozen=True)
class SweepRun:
    policy: Policy
    seed: int
    run: PolicyRun


def seed_list(seeds: int | Iterable[int]) -> list[int]:
    """An int K means seeds 0..K-1; else the seeds given (distinct, at least one)."""
    if isinstance(seeds, (int, np.integer)):
        if seeds < 1:
            raise ValueError(f"seeds: {seeds}; allowed: an integer >= 1 (the seeds are 0..K-1)")
        return list(range(int(seeds)))
    out = [int(s) for s in seeds]
    if not out:
        raise ValueError("seeds: an empty list; allowed: at least one seed")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds: {out}; allowed: distinct seeds")
    return out


@dataclass(frozen=True)
class SweepUnit:
    """One simulation of a sweep: what a worker process (or a Ray task) needs to run it alone."""

    workload: Workload
    policy: Policy
    profile: Profile
    seed: int
    steps: int | None = None


def run_unit(unit: SweepUnit) -> SweepRun:
    """Simulate one unit; the same unit gives the same run in any process (its seed fixes every
    draw)."""
    run = simulate(unit.workload, unit.policy, unit.profile, seed=unit.seed, steps=unit.steps)
    return SweepRun(unit.policy, unit.seed, run)


def sweep_units(workload: Workload, policies: Sequence[Policy], profile: Profile,
                seeds: int | Iterable[int], steps: int | None = None) -> list[SweepUnit]:
    """Every (policy, seed) of a sweep, policy by policy: the order every runner reports them in."""
    if not policies:
        raise ValueError("policies: give at least one policy")
    names = [p.name for p in policies]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"policies: two policies are named {dupes[0]!r}; "
                         "give each a distinct name")
    return [SweepUnit(workload, policy, profile, seed, steps)
            for policy in policies for seed in seed_list(seeds)]


def sweep(workload: Workload, policies: Sequence[Policy], profile: Profile,
          seeds: int | Iterable[int], steps: int | None = None,
          on_progress: ProgressFn | None = None) -> Iterator[SweepRun]:
    """Simulate every policy on every seed, policy by policy, yielding each run as it finishes."""
    units = sweep_units(workload, policies, profile, seeds, steps)
    for done, unit in enumerate(units, start=1):
        yield run_unit(unit)
        if on_progress is not None:
            on_progress(done, len(units), unit.policy.name, unit.seed)


# A sweep runner: `sweep` here, or workbench/deploy/distributed.py's Ray runner (same runs,
# same order).
# Called as runner(workload, policies, profile, seeds, steps, on_progress).
Runner = Callable[..., Iterator[SweepRun]]


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """mean, std (ddof 1; 0 for one value), min, max and the 95% t-interval half-width (None for
    one value)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    ci = float(stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)) if n > 1 else None
    return {"mean": float(x.mean()), "std": std, "min": float(x.min()), "max": float(x.max()),
            "ci95": ci}
