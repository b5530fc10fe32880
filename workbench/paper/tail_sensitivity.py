"""How much of a policy's speedup rests on the length tail's shape: the same workload with its
length model moved, one input at a time, to the ends of the length model's declared range, each
policy against the first at each.

The declared range is the calibration split's (traces/published/calibration-split.yaml, each end
justified there from public RL logs): the body's spread (log-sd `sigma`) and how far wrong answers
reach toward the cap (`wrong_factor`: the weight of the tail at the cap). Every variant keeps the
workload's median correct answer, so the body stays where it is and only the tail's shape moves;
each reports the share of responses at the cap it implies. Every variant meets the same seeds
(common random numbers). Measured lengths (replay, empirical) and agentic turns assume no shape:
there is nothing to vary. It lives beside the split it reads; `tlt compare` and the What-if page
call it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from sim.lengths import clip_ratio_at, log_median
from sim.sweep import ProgressFn, Runner, sweep
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import LengthModel, Workload
from workbench.paper.calibration import load_split

SCHEMA = "tlt-tail-sensitivity/1"
FIELDS = ("sigma", "wrong_factor")  # the split's parameters that are the length model's
STEPS = 4  # RL steps per variant (the first seed only): a range, not a headline figure


@dataclass(frozen=True)
class TailPoint:
    label: str
    sigma: float
    wrong_factor: float
    clip_ratio: float  # the share at the cap this variant implies
    step_s: dict[str, float]  # policy -> mean step time
    speedup: dict[str, float]  # policy -> speedup against the first policy


@dataclass(frozen=True)
class TailSensitivity:
    workload: str
    profile: str
    policies: list[str]
    seeds: list[int]
    steps: int
    points: list[TailPoint]  # the workload's own first

    def span(self, policy: str) -> tuple[float, float]:
        """The lowest and highest speedup of `policy` over the variants (its own included)."""
        v = [p.speedup[policy] for p in self.points]
        return min(v), max(v)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "workload": self.workload, "profile": self.profile,
                "reference_policy": self.policies[0], "seeds": self.seeds, "steps": self.steps,
                "points": [p.__dict__ for p in self.points],
                "span": {n: self.span(n) for n in self.policies[1:]}}


def assumed(workload: Workload) -> str:
    """Why the workload's lengths have no assumed shape to vary ("" when they do)."""
    if workload.agentic.enabled:
        return "agentic: its turns' lengths come from the turn model, not this length model"
    if workload.lengths.kind != "lognormal":
        return f"lengths {workload.lengths.kind}: measured, not assumed"
    return ""


def anchored(m: LengthModel, cap: int) -> LengthModel:
    """The model with its median correct answer written out (a clip-anchored model would move its
    median as the tail moves)."""
    if m.median_tokens > 0:
        return m
    return replace(m, median_tokens=float(f"{math.exp(log_median(m, cap)):.6g}"))


def variants(workload: Workload) -> list[tuple[str, LengthModel]]:
    """The workload's length model, then each declared field at each end of its range."""
    cap = workload.max_response_tokens
    base = anchored(workload.lengths, cap)
    out = [("as given", base)]
    for p in load_split().parameters:
        if p.name in FIELDS:
            for end in (p.low, p.high):
                if not math.isclose(getattr(base, p.name), end):
                    out.append((f"{p.name} {end:g}", replace(base, **{p.name: end})))
    return out


def tail_sensitivity(workload: Workload, policies: Sequence[Policy], profile: Profile,
                     seeds: Sequence[int] = (0,), steps: int = STEPS,
                     on_progress: ProgressFn | None = None,
                     runner: Runner = sweep) -> TailSensitivity:
    """Every policy on every variant, over `seeds` and `steps`."""
    why = assumed(workload)
    if why:
        raise ValueError(f"workload {workload.name!r}: {why}")
    ref, cap = policies[0].name, workload.max_response_tokens
    points = []
    for label, m in variants(workload):
        wl = replace(workload, lengths=m)
        step: dict[str, list[float]] = {}
        for r in runner(wl, policies, profile, list(seeds), steps, on_progress):
            step.setdefault(r.policy.name, []).append(r.run.mean("step_time_s"))
        mean = {k: float(np.mean(v)) for k, v in step.items()}
        clip = clip_ratio_at(m, cap, log_median(m, cap))
        points.append(TailPoint(label, m.sigma, m.wrong_factor, float(f"{clip:.4g}"), mean,
                                {k: mean[ref] / v for k, v in mean.items()}))
    return TailSensitivity(workload.name, profile.name, [p.name for p in policies],
                           list(seeds), steps, points)
