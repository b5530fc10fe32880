"""Every simulated time and speedup with its interval, from the profile's cost uncertainty
(`Profile.uncertainty`, workbench/contracts/uncertainty.py).

Each policy's simulated run is priced again under DRAWS draws of the profile's cost components
(workbench/compare/cost_draws.py), its schedule held: which sequences decode together, for how many
passes, with which drafts, is the run's at the profile's own costs; each decode interval's time is
split into what the kernels cost (scaled by the draw's `kernel_scale`), the fixed host cost of its
passes (the draw's `step_overhead_s` each) and the host work of speculating (unchanged), the step's
rollout being its slowest engine's; the update scales by `train_scale` and the sync takes the
draw's `rl_step_s`. For a plain engine (no SD) that is exactly what a simulation under the draw's
costs gives (its schedule does not depend on the costs); under SD the bandit's choices and the
drafter's spot training would shift a little with the costs, and are held (a test bounds what
that misses). Only synchronous rollouts are priced this way; other modes get no interval.

Speedups pair the draws (the same draw prices every policy) and take no run-level bias (it cancels
in a ratio); times add the profile's run-level bias (`run_scatter`). The named splits (the cost
the data could not place all per engine step, or all per RL step) are priced the same way, each one
answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sim.results import PolicyRun
from workbench.compare.cost_draws import draw_costs
from workbench.contracts import seeds
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.seeds import Stream
from workbench.contracts.strategy import Strategy
from workbench.contracts.uncertainty import CostPoint, describe, interval

DRAWS = 200
MODEL_FREE = (DrafterKind.NGRAM, DrafterKind.SUFFIX)


@dataclass(frozen=True)
class RunWork:
    """A run's steps split by what their costs scale with: per step and engine, the decode
    intervals' kernel seconds, passes and speculation host seconds; per step, the rest."""

    kernel_s: np.ndarray  # steps x engines
    passes: np.ndarray  # steps x engines
    host_s: np.ndarray  # steps x engines
    rest_s: np.ndarray  # steps: the step less its rollout, update and weight sync
    train_s: np.ndarray  # steps

    def step_s(self, own: CostPoint, p: CostPoint) -> np.ndarray:
        """Each step's time under the components `p` (`own`: the profile's own values)."""
        k = p.kernel_scale / own.kernel_scale
        rollout = (k * self.kernel_s + p.step_overhead_s * self.passes + self.host_s).max(axis=1)
        return rollout + self.rest_s + self.train_s * p.train_scale / own.train_scale + p.rl_step_s


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


def run_work(run: PolicyRun, profile: Profile, engines: int) -> RunWork | None:
    """The split (module docstring); None where a step is not a synchronous rollout or the profile
    records no uncertainty (nothing to price)."""
    if profile.uncertainty is None or any(m.round_kind != "sync" for m in run.steps):
        return None
    tl = run.timeline
    dec = tl[tl["state"].astype(str).isin(("decode", "decode_sd"))]
    steps = [m.rl_step for m in run.steps]
    index = {s: i for i, s in enumerate(steps)}
    kernel, passes, host = (np.zeros((len(steps), engines)) for _ in range(3))
    kinds = {m.rl_step: m.drafter_kind for m in run.steps}
    o = profile.decode.overhead_s
    for step, rows in dec.groupby("rl_step"):
        i = index[int(step)]
        batch = rows["batch"].to_numpy(float)
        p = rows["passes"].to_numpy(float) / np.maximum(batch, 1.0)
        spec = np.array([bool(s) and Strategy.parse(s).steps > 0
                         for s in rows["strategy"].astype(str)])
        h = p * _host_per_pass(profile, kinds[int(step)], batch, spec)
        d = (rows["end_s"] - rows["start_s"]).to_numpy(float)
        w = rows["worker"].to_numpy(int)
        np.add.at(kernel[i], w, d - p * o - h)
        np.add.at(passes[i], w, p)
        np.add.at(host[i], w, h)
    metrics = pd.DataFrame([vars(m) for m in run.steps])
    sync = profile.phases.weight_sync_s
    rest = (metrics["step_time_s"] - metrics["rollout_time_s"] - metrics["train_time_s"]
            - sync).to_numpy(float)
    return RunWork(kernel, passes, host, rest, metrics["train_time_s"].to_numpy(float))


def policy_intervals(works: list[tuple[str, list[RunWork | None]]], profile: Profile,
                     seed: int = 0) -> list[PolicyInterval] | None:
    """Each policy's mean step time and its speedup over the first policy, with intervals;
    `works` holds (policy, its runs' work: one per seed, the same seeds for every policy). None:
    the profile records no uncertainty, or a run is not a synchronous rollout."""
    u = profile.uncertainty
    if u is None or not works or any(w is None for _, per in works for w in per):
        return None
    names = [name for name, _ in works]
    works = [per for _, per in works]
    own = profile.cost_point
    draws = draw_costs(u, DRAWS, seed)
    bias = np.exp(seeds.rng(seed, Stream.COST_DRAWS, 2).normal(0.0, u.run_scatter, DRAWS))

    def mean_step(per: list[RunWork], p: CostPoint) -> float:
        return float(np.mean(np.concatenate([w.step_s(own, p) for w in per])))

    times = np.array([[mean_step(per, p) for p in draws] for per in works])  # policies x draws
    centers = np.array([mean_step(per, own) for per in works])
    out = []
    for k, per in enumerate(works):
        speed = times[0] / times[k]
        split_speeds = tuple((s.name, mean_step(works[0], s.point) / mean_step(per, s.point))
                             for s in u.splits)
        out.append(PolicyInterval(
            names[k],
            Interval(centers[k], *interval(times[k] * bias, u.level), u.level),
            Interval(centers[0] / centers[k], *interval(speed, u.level), u.level),
            split_speeds))
    return out


def interval_json(pi: PolicyInterval) -> dict:
    """A policy's intervals for a JSON file."""
    def one(iv: Interval) -> dict:
        return {"value": iv.center, "low": iv.low, "high": iv.high, "level": iv.level}

    return {"step_time_s": one(pi.step_s), "speedup": one(pi.speedup),
            "splits": {name: v for name, v in pi.splits}}


def interval_lines(intervals: list[PolicyInterval] | None, reference: str) -> list[str]:
    """What the tools print: each policy's speedup and step time with its interval, and the answer
    under each named split."""
    if not intervals:
        return []
    level = intervals[0].speedup.level
    lines = [f"with the profile's cost uncertainty ({level:.0%} intervals over {DRAWS} draws of "
             "its calibrated costs; the simulated schedule held):"]
    for pi in intervals:
        splits = "; ".join(f"{name}: {v:.2f}x" for name, v in pi.splits)
        head = f"  {pi.policy}: step {pi.step_s.text(' s', '{:,.1f}')}"
        if pi.policy != reference:
            head += f"; {pi.policy} {pi.speedup.text()} vs {reference}"
            if splits:
                head += f" (if the unplaced cost were {splits})"
        lines.append(head)
    return lines
