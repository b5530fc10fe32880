"""Every simulated time and speedup with its 90% interval, from what the profile declares of how
sure it is and from the sampling of the simulated steps.

Each draw (DRAWS of them, seeded; the same draw for every policy, so a speedup's draws are paired)
takes three things together:

- the costs: the profile's own draws where it has them (`Profile.uncertainty`, a run log's
  posterior, workbench/contracts/uncertainty.py), else its fit error (`fit_error_pct`, the median
  |error| of its cost form: a log-normal scale on every kernel cost, MEDIAN_ABS_SD); none for a
  hand-set profile;
- the acceptance: accepted tokens per verify pass scaled by a log-normal of ACCEPT_ERROR_PCT;
- the lengths' sampling: the simulated (seed, RL step) units resampled with replacement (the same
  units for every policy: common random numbers).

Each policy's simulated run is priced again under the draw, its schedule held: which sequences
decode together, for how many passes, with which drafts, is the run's at the profile's own costs;
each decode interval's time is split into what the kernels cost (scaled by the draw's
`kernel_scale`), the fixed host cost of its passes (the draw's `step_overhead_s` each) and the host
work of speculating (unchanged); an interval that speculates takes as many fewer passes as the
draw's acceptance is higher (all three parts scale by 1 / that factor); the step's rollout is its
slowest engine's; the update scales by `train_scale` and the sync takes the draw's `rl_step_s`.
For a plain engine (no SD) that is exactly what a simulation under the draw's costs gives (its
schedule does not depend on the costs); under SD the bandit's choices and the drafter's spot
training would shift a little with the costs, and are held (a test bounds what that misses). A
run whose rollout is not its engines' decoding alone (tool calls, partial or deferred rounds,
asynchronous steps) is not priced again: its interval is the lengths' sampling alone, and says so.

Speedups take no run-level bias (it cancels in a ratio); times add the profile's run-level bias
(`run_scatter`). The named splits (the cost the data could not place all per engine step, or all
per RL step) are priced the same way, each one answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t

from sim.results import PolicyRun
from workbench.compare.cost_draws import Declared, declared
from workbench.contracts import seeds
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.seeds import Stream
from workbench.contracts.strategy import Strategy
from workbench.contracts.uncertainty import (ACCEPT_ERROR_PCT, CostPoint,
                                             describe, interval)

DRAWS = 200
MODEL_FREE = (DrafterKind.NGRAM, DrafterKind.SUFFIX)
NO_INTERVAL = ("the profile declares no error of its costs (no fit error, no calibrated costs) "
               "and one simulated step has no sampling spread")


@dataclass(frozen=True)
class RunWork:
    """A run's steps split by what their costs scale with: per step, round of generation (a
    barrier every engine waits at: DAPO's dynamic sampling draws several) and engine, the decode
    intervals' kernel seconds, passes and speculation host seconds (all of them, and the share of
    the intervals that speculate); per step, the rest. A round lasts as long as its slowest
    engine; a step's rollout, its rounds one after another."""

    kernel_s: np.ndarray  # steps x rounds x engines
    passes: np.ndarray  # steps x rounds x engines
    host_s: np.ndarray  # steps x rounds x engines
    rest_s: np.ndarray  # steps: the step less its rollout, update and weight sync
    train_s: np.ndarray  # steps
    sd_kernel_s: np.ndarray  # steps x rounds x engines: the speculating intervals' part
    sd_passes: np.ndarray
    sd_host_s: np.ndarray
    priced: bool = True

    def step_s(self, own: CostPoint, p: CostPoint, accept: float = 1.0) -> np.ndarray:
        """Each step's time under the components `p` (`own`: the profile's own values) and
        accepted tokens per pass `accept` times the run's."""
        k = p.kernel_scale / own.kernel_scale
        sd = k * self.sd_kernel_s + p.step_overhead_s * self.sd_passes + self.sd_host_s
        rollout = (k * self.kernel_s + p.step_overhead_s * self.passes + self.host_s
                   + (1.0 / accept - 1.0) * sd).max(axis=2).sum(axis=1)
        return rollout + self.rest_s + self.train_s * p.train_scale / own.train_scale + p.rl_step_s


@dataclass(frozen=True)
class HeldWork:
    """A run the intervals do not price again (module docstring): its step times as simulated, for
    the lengths' sampling alone."""

    step_time_s: np.ndarray
    priced: bool = False

    def step_s(self, own: CostPoint, p: CostPoint, accept: float = 1.0) -> np.ndarray:
        return self.step_time_s


@dataclass(frozen=True)
class Interval:
    center: float  # at the profile's own costs
    low: float
    high: float
    level: float

    def text(self, unit: str = "x", fmt: str = "{:.2f}") -> str:
        return describe(self.center, self.low, self.high, self.level, unit, fmt)


@dataclass(frozen=True)
class PolicyInterval:
    policy: str
    step_s: Interval
    speedup: Interval  # the reference's step over this one's
    splits: tuple[tuple[str, float], ...]  # (split name, speedup under it)
    covers: str = ""  # what the interval covers, in words (the same for every policy)
    priced: bool = True  # False: its costs and acceptance held (the lengths' sampling alone)


KERNEL_DECODE = ("per_seq_s", "weights_s", "compute_s_per_token", "kv_s_per_token",
                 "prefill_s_per_token")


def priced_profile(profile: Profile, p: CostPoint) -> Profile:
    """The profile with its costs at the components `p`: what a draw means (the kernels' costs
    scaled, the per-step and per-RL-step costs set, the update scaled). Simulating with it gives
    what `RunWork.step_s` prices (exactly for a plain engine)."""
    own = profile.cost_point
    k = p.kernel_scale / own.kernel_scale
    dec = replace(profile.decode, overhead_s=p.step_overhead_s,
                  **{f: getattr(profile.decode, f) * k for f in KERNEL_DECODE})
    dr = replace(profile.drafter, eagle_step_s=profile.drafter.eagle_step_s * k,
                 eagle_s_per_seq=profile.drafter.eagle_s_per_seq * k)
    t = p.train_scale / own.train_scale
    ph = replace(profile.phases, weight_sync_s=p.rl_step_s,
                 train_gpu_s_per_token=profile.phases.train_gpu_s_per_token * t)
    return replace(profile, decode=dec, drafter=dr, phases=ph)


def _host_per_pass(profile: Profile, kind: DrafterKind, batch: np.ndarray,
                   speculating: np.ndarray) -> np.ndarray:
    d = profile.drafter
    per = d.sd_host_s_per_seq * batch + d.sd_step_s
    if kind in MODEL_FREE:
        per = per + d.ngram_s_per_seq * batch
    return np.where(speculating, per, 0.0)


def run_work(run: PolicyRun, profile: Profile, engines: int) -> RunWork | HeldWork:
    """The split (module docstring); the run's step times alone (HeldWork) where its rollout is
    not its engines' decoding alone (the split would not give its steps back)."""
    metrics = pd.DataFrame([vars(m) for m in run.steps])
    step_time = metrics["step_time_s"].to_numpy(float)
    if any(m.round_kind != "sync" for m in run.steps) or run.turns is not None:
        return HeldWork(step_time)
    dec, rounds = _decode_rounds(run.timeline)
    steps = [m.rl_step for m in run.steps]
    index = {s: i for i, s in enumerate(steps)}
    # kernel, passes, host; their speculating share
    parts = np.zeros((6, len(steps), rounds, engines))
    kinds = {m.rl_step: m.drafter_kind for m in run.steps}
    o = profile.decode.overhead_s
    for (step, r), rows in dec.groupby(["rl_step", "round"]):
        i, r = index[int(step)], int(r)
        batch = rows["batch"].to_numpy(float)
        p = rows["passes"].to_numpy(float) / np.maximum(batch, 1.0)
        spec = np.array([bool(s) and Strategy.parse(s).steps > 0
                         for s in rows["strategy"].astype(str)])
        h = p * _host_per_pass(profile, kinds[int(step)], batch, spec)
        d = (rows["end_s"] - rows["start_s"]).to_numpy(float)
        w = rows["worker"].to_numpy(int)
        for j, x in enumerate((d - p * o - h, p, h)):
            np.add.at(parts[j, i, r], w, x)
            np.add.at(parts[3 + j, i, r], w, np.where(spec, x, 0.0))
    sync = profile.phases.weight_sync_s
    rest = (step_time - metrics["rollout_time_s"] - metrics["train_time_s"] - sync).to_numpy(float)
    work = RunWork(parts[0], parts[1], parts[2], rest, metrics["train_time_s"].to_numpy(float),
                   parts[3], parts[4], parts[5])
    own = profile.cost_point
    return work if np.allclose(work.step_s(own, own), step_time, rtol=1e-6) else \
        HeldWork(step_time)


def _decode_rounds(timeline: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The decode intervals, each with its round of generation in its step (column `round`: the
    barriers are the moments an idle engine resumes), and the most rounds of any step."""
    state = timeline["state"].astype(str)
    dec = timeline[state.isin(("decode", "decode_sd"))].copy()
    dec["round"] = 0
    for step, idle in timeline[state == "idle"].groupby("rl_step"):
        barriers = np.unique(idle["end_s"].to_numpy(float))
        here = dec["rl_step"] == step
        dec.loc[here, "round"] = np.searchsorted(barriers, dec.loc[here, "start_s"].to_numpy(float),
                                                 side="right")
    return dec, int(dec["round"].max()) + 1 if len(dec) else 1


def policy_intervals(works: list[tuple[str, list[RunWork | HeldWork]]], profile: Profile,
                     seed: int = 0) -> list[PolicyInterval] | None:
    """Each policy's mean step time and its speedup over the first policy, with intervals;
    `works` holds (policy, its runs' work: one per seed, the same seeds for every policy). None:
    nothing to draw from (NO_INTERVAL)."""
    if not works:
        return None
    d = declared(profile, DRAWS, seed)
    names = [name for name, _ in works]
    works = [per for _, per in works]
    units = sum(len(w.step_s(profile.cost_point, profile.cost_point)) for w in works[0])
    if not d.costs and units < 2:
        return None
    own = profile.cost_point
    pick = _resamples(units, seed)

    def steps(per: list, p: CostPoint, accept: float = 1.0) -> np.ndarray:
        return np.concatenate([w.step_s(own, p, accept) for w in per])

    drawn = [[steps(per, p, a) for p, a in zip(d.points, d.accept)] for per in works]
    full = np.array([[x.mean() for x in per] for per in drawn])  # policies x draws
    part = np.array([[x[pick[i]].mean() for i, x in enumerate(per)] for per in drawn])
    widen = _small_sample(units, d.level)
    times = full + (part - full) * widen
    centers = np.array([steps(per, own).mean() for per in works])
    splits = profile.uncertainty.splits if profile.uncertainty is not None else ()
    covers = coverage(d, units, works)
    out = []
    for k, per in enumerate(works):
        split_speeds = tuple((s.name, steps(works[0], s.point).mean()
                              / steps(per, s.point).mean()) for s in splits)
        out.append(PolicyInterval(
            names[k],
            Interval(centers[k], *interval(times[k] * d.bias, d.level), d.level),
            Interval(centers[0] / centers[k],
                     *interval(full[0] / full[k] + (part[0] / part[k] - full[0] / full[k])
                               * widen, d.level), d.level),
            split_speeds, covers, all(w.priced for w in per)))
    return out


def _small_sample(n: int, level: float) -> float:
    """How much wider than a resampling's spread a mean of `n` units strays: the bootstrap's
    spread is the sample's, sqrt((n - 1) / n) of the mean's error, and a mean of n is
    t-distributed with n - 1 degrees of freedom, not normal (1 for one unit: nothing to widen)."""
    if n < 2:
        return 1.0
    q = (1 + level) / 2
    return float(np.sqrt(n / (n - 1)) * student_t.ppf(q, n - 1) / norm.ppf(q))


def _resamples(units: int, seed: int) -> np.ndarray:
    """DRAWS resamplings (with replacement) of the simulated units, each a row of indices."""
    if units < 2:
        return np.zeros((DRAWS, max(units, 1)), dtype=int)
    return seeds.rng(seed, Stream.COST_DRAWS, 5).integers(units, size=(DRAWS, units))


def coverage(d: Declared, units: int, works: list[list]) -> str:
    """What the intervals cover, in words."""
    steps = f"{units} simulated step{'s' if units != 1 else ''}"
    priced = [w.priced for per in works for w in per]
    if not any(priced):
        return (f"{d.level:.0%} intervals over {DRAWS} resamplings of the {steps} alone: the "
                "rollouts are more than their engines' decoding (tool calls, partial, deferred "
                "or asynchronous rounds), so their costs and acceptance are not priced again")
    what = [d.costs] if d.costs else ["no cost error (the profile declares none)"]
    what.append(f"the accepted length ({ACCEPT_ERROR_PCT:g}% median |error|)")
    what.append(f"the lengths' sampling ({steps}"
                + (", resampled" if units > 1 else ": none to resample") + ")")
    held = "" if all(priced) else \
        "; a run whose rollout is more than its engines' decoding: the sampling alone"
    return (f"{d.level:.0%} intervals over {DRAWS} draws of " + ", ".join(what)
            + f"; the simulated schedule held{held}")


def interval_json(pi: PolicyInterval) -> dict:
    """A policy's intervals for a JSON file."""
    def one(iv: Interval) -> dict:
        return {"value": iv.center, "low": iv.low, "high": iv.high, "level": iv.level}

    return {"step_time_s": one(pi.step_s), "speedup": one(pi.speedup),
            "splits": {name: v for name, v in pi.splits}, "covers": pi.covers,
            "priced": pi.priced}


def interval_lines(intervals: list[PolicyInterval] | None, reference: str) -> list[str]:
    """What the tools print: what the intervals cover, each policy's speedup and step time with
    its interval, and the answer under each named split (or why there is no interval)."""
    if not intervals:
        return [f"no interval: {NO_INTERVAL}"]
    lines = [f"how sure ({intervals[0].covers}):"]
    for pi in intervals:
        splits = "; ".join(f"{name}: {v:.2f}x" for name, v in pi.splits)
        head = f"  {pi.policy}: step {pi.step_s.text(' s', '{:,.1f}')}"
        if pi.policy != reference:
            head += f"; {pi.policy} {pi.speedup.text()} vs {reference}"
            if splits:
                head += f" (if the unplaced cost were {splits})"
        if not pi.priced and any(p.priced for p in intervals):
            head += " (the lengths' sampling alone: its rollout is not its engines' decoding "
            head += "alone)"
        lines.append(head)
    return lines
