"""Whole-run projection: a run of N RL steps in days, GPU-hours, money and energy, per policy.

Each (policy, seed) is projected alone (`project_run`), in full or sampled:

- **full**: the N steps are simulated one after another; the totals are the sums over them.
- **sampled** (N above the sample budget): blocks of B consecutive steps (B a multiple of every
  policy's spot-training interval, at least 10) are simulated at K evenly spaced points of the
  run, the first at step 0. A block that starts at step s simulates the workload as it is at
  step s: the response-length model is moved by the workload's drift to step s
  (`workload_at`), and the drafter starts in the state the run has reached there. Between
  blocks the drafter state is carried by the simulator's own update rules (`sim.drafter`:
  spot training on each skipped step with the trained and generated tokens of the block step
  at the same phase, then the policy update's staleness), so the drafter learns over the
  whole run. A skipped step's figures are interpolated linearly between the block steps of
  the same phase (so a periodic spot-training step stays periodic); after the last block they
  stay at its values. Modes that carry work between steps (async pipelines, partial rollouts,
  tail batching) and workloads whose prompts come back (`epoch_steps`) run B extra steps
  before each later block (a burn-in) and drop them.

Every policy uses the same block starts and block seeds (common random numbers). Run-level
figures per seed are summed over steps; the report gives each one's spread over seeds and
the saving against the first policy (the baseline), paired by seed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import numpy as np
from matplotlib.figure import Figure

from sim.drafter import DrafterState, after_policy_update, after_training, initial_state
from sim.lengths import clip_ratio_at, log_median
from sim.results import StepMetrics
from sim.simulator import Simulator, check_size, rollout_engines
from sim.sweep import seed_list, spread
from workbench.contracts.energy import (SECONDS_PER_DAY, GpuPower, GpuSeconds, cost, energy_kwh,
                                        gpu_hours)
from workbench.contracts.fileio import save_result
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.seeds import Stream, derive_seed
from workbench.contracts.workload import Workload

SCHEMA = "tlt-project/1"
MIN_BLOCK = 10  # steps per sampled block, at least (FastRL spot-trains every 10 RL steps)
# steps simulated per (policy, seed) before a run is sampled instead of simulated in full
DEFAULT_SAMPLE_STEPS = 60

T = TypeVar("T")
R = TypeVar("R")
# on_done(done, total, item): called as each unit of work finishes.
Mapper = Callable[[Callable[[T], R], Sequence[T], Callable[[int, int, T], None] | None], list[R]]


@dataclass(frozen=True)
class StepUsage:
    """One RL step: its wall-clock seconds and GPU-seconds per power state (every GPU of the job
    counts)."""

    wall_s: float
    gpu: GpuSeconds


def step_usage(m: StepMetrics, workload: Workload, policy: Policy) -> StepUsage:
    """Decode, train (update + spot training) and idle GPU-seconds of a step; idle is the rest of
    the step's allocated GPU-seconds (bubbles, syncs, waits), so the three add up to wall x GPUs."""
    gpw = workload.gpus_per_worker
    engines = rollout_engines(workload, policy)
    rollout_gpu_s = m.rollout_time_s * engines * gpw
    spot = m.drafter_train_fraction * rollout_gpu_s
    decode = max(0.0, 1.0 - m.bubble_fraction - m.drafter_train_fraction) * rollout_gpu_s
    # Synchronous RL updates on every GPU; asynchronous modes on the engines not rolling out.
    # An async run trains on the workers that do not roll out.
    async_trainers = (workload.workers - engines) * gpw
    trainer_gpus = workload.gpus if policy.rollout.mode != "async" else async_trainers
    train = m.train_time_s * trainer_gpus + spot
    total = m.step_time_s * workload.gpus
    return StepUsage(m.step_time_s, GpuSeconds(decode, max(0.0, total - decode - train), train))


@dataclass(frozen=True)
class ProjectUnit:
    """One (policy, seed) to project: everything a worker process needs."""

    workload: Workload
    policy: Policy
    profile: Profile
    seed: int
    steps: int
    block: int  # steps per sampled block
    starts: tuple[int, ...]  # first step of each sampled block; () for a full simulation


@dataclass(frozen=True)
class RunProjection:
    """A projected run: per step wall seconds and GPU-seconds by state (simulated or
    interpolated)."""

    policy: str
    seed: int
    method: str  # "full" or "sampled"
    simulated_steps: int  # steps the simulator ran (burn-in included)
    simulated: np.ndarray  # bool per step: simulated (True) or interpolated
    wall_s: np.ndarray  # per step
    decode_gpu_s: np.ndarray
    idle_gpu_s: np.ndarray
    train_gpu_s: np.ndarray
    accept_len: np.ndarray  # mean accepted length per step (1 without SD)

    @property
    def total_wall_s(self) -> float:
        return float(self.wall_s.sum())

    @property
    def gpu(self) -> GpuSeconds:
        return GpuSeconds(float(self.decode_gpu_s.sum()), float(self.idle_gpu_s.sum()),
                          float(self.train_gpu_s.sum()))


def block_length(policies: Sequence[Policy]) -> int:
    """A multiple of every spot-training interval (so a block holds whole training cycles), >=
    MIN_BLOCK."""
    period = 1
    for p in policies:
        if p.spot_training.enabled:
            period = math.lcm(period, p.spot_training.interval_steps)
    return period * math.ceil(MIN_BLOCK / period)


def block_starts(steps: int, block: int, sample_steps: int) -> tuple[int, ...]:
    """K = sample_steps // block evenly spaced block starts (multiples of `block`, the first 0);
    () when the run fits in the sample budget (then it is simulated in full)."""
    if steps <= sample_steps:
        return ()
    k = max(2, sample_steps // block)
    last = (steps - block) // block  # in blocks
    if last < 1:
        return ()
    starts = sorted({round(i * last / (k - 1)) * block for i in range(k)})
    return tuple(starts)


def workload_at(workload: Workload, step: int) -> Workload:
    """The workload as it is at `step`: its length model moved by `drift_per_step` x step, so its
    step 0 draws from the distribution the original draws from at `step`."""
    m, cap = workload.lengths, workload.max_response_tokens
    lengths = m if step == 0 or m.drift_per_step == 0 else replace(
        m, clip_ratio=clip_ratio_at(m, cap, log_median(m, cap, step)),
        drift_per_step=m.drift_per_step)
    # Prompts come back after epoch_steps: from the same global step on (or from the block's second
    # step, when that is past; the burn-in of `project_run` absorbs that first step).
    left = workload.epoch_steps - step
    epoch = workload.epoch_steps if workload.epoch_steps == 0 else max(1, left)
    return replace(workload, lengths=lengths, epoch_steps=epoch)


def _simulate_block(unit: ProjectUnit, start: int, count: int,
                    state: DrafterState) -> tuple[list[StepMetrics], DrafterState]:
    seed = unit.seed if start == 0 else derive_seed(unit.seed, Stream.PROJECTION, start)
    sim = Simulator(workload_at(unit.workload, start), unit.policy, unit.profile, seed)
    sim.drafter = state
    run = sim.run(count)
    return run.steps, sim.drafter


def _carry(state: DrafterState, unit: ProjectUnit, block: list[StepMetrics], start: int,
           end: int) -> DrafterState:
    """The drafter across skipped steps start..end-1: the simulator's per-step update rules, fed
    with the tokens of the block step at the same phase."""
    for j in range(start, end):
        m = block[j % unit.block]
        state = after_training(state, unit.policy, unit.profile, m.drafter_trained_tokens, m.tokens)
        state = after_policy_update(state, unit.profile)
    return state


def project_run(unit: ProjectUnit) -> RunProjection:
    """Project one (policy, seed): in full when `unit.starts` is empty, else sampled in blocks."""
    n, wl, pol = unit.steps, unit.workload, unit.policy
    if not unit.starts:
        check_size(wl, n)
        sim = Simulator(wl, pol, unit.profile, unit.seed)
        metrics = {m.rl_step: m for m in sim.run(n).steps}
        return _assemble(unit, metrics, "full", n)
    # What carries from step to step besides the drafter (a pipeline, carried or deferred groups,
    # prompts coming back after an epoch) is rebuilt by a burn-in block, run and dropped.
    burn = unit.block if pol.rollout.mode != "sync" or wl.epoch_steps > 0 else 0
    state, at, ran = initial_state(pol, unit.profile), 0, 0
    metrics: dict[int, StepMetrics] = {}
    last: list[StepMetrics] = []
    for s in unit.starts:
        first = max(s - burn, at) if s > 0 else 0  # a burn-in never re-runs steps already simulated
        if first > at:
            state = _carry(state, unit, last, at, first)
        block, state = _simulate_block(unit, first, s + unit.block - first, state)
        block = block[s - first:]
        metrics.update({s + i: replace(m, rl_step=s + i) for i, m in enumerate(block)})
        ran += s + unit.block - first
        at, last = s + unit.block, block
    return _assemble(unit, metrics, "sampled", ran)


def _assemble(unit: ProjectUnit, metrics: dict[int, StepMetrics], method: str,
              ran: int) -> RunProjection:
    """Per-step arrays over the whole run: simulated steps as they are, the others interpolated per
    phase."""
    n, b = unit.steps, unit.block
    usage = {j: step_usage(m, unit.workload, unit.policy) for j, m in metrics.items()}
    cols = {
        "wall_s": {j: u.wall_s for j, u in usage.items()},
        "decode_gpu_s": {j: u.gpu.decode for j, u in usage.items()},
        "idle_gpu_s": {j: u.gpu.idle for j, u in usage.items()},
        "train_gpu_s": {j: u.gpu.train for j, u in usage.items()},
        "accept_len": {j: m.mean_accept_len for j, m in metrics.items()},
    }
    steps = np.arange(n)
    simulated = np.isin(steps, list(metrics))
    out = {}
    for name, values in cols.items():
        series = np.empty(n)
        for phase in range(b):
            xs = sorted(j for j in values if j % b == phase)
            at = steps[steps % b == phase]
            series[at] = np.interp(at, xs, [values[j] for j in xs]) if xs else np.nan
        out[name] = series
    return RunProjection(unit.policy.name, unit.seed, method, ran, simulated, **out)


def serial_map(fn: Callable[[T], R], items: Sequence[T],
               on_done: Callable[[int, int, T], None] | None = None) -> list[R]:
    """Run `fn` on each item in this process, in order."""
    out = []
    for i, item in enumerate(items, start=1):
        out.append(fn(item))
        if on_done is not None:
            on_done(i, len(items), item)
    return out


def projection_units(workload: Workload, policies: Sequence[Policy], profile: Profile,
                     seeds: int | Sequence[int], steps: int,
                     sample_steps: int = DEFAULT_SAMPLE_STEPS,
                     full: bool = False) -> list[ProjectUnit]:
    """Every (policy, seed), policy by policy, with the same blocks for all (common random
    numbers)."""
    if steps < 1:
        raise ValueError(f"steps: {steps}; allowed: an integer >= 1")
    if sample_steps < 1:
        raise ValueError(f"sample_steps: {sample_steps}; allowed: an integer >= 1")
    block = block_length(policies)
    starts = () if full else block_starts(steps, block, sample_steps)
    return [ProjectUnit(workload, p, profile, s, steps, block, starts) for p in policies
            for s in seed_list(seeds)]


# Run-level figures of one projected run, in the report's order: (key, unit).
FIGURES = (("days", "days"), ("gpu_hours", "GPU-hours"), ("cost", "money"), ("energy_kwh", "kWh"))


@dataclass(frozen=True)
class RunTotals:
    """One projected run in the user's currency; cost and energy are None where price or power is
    unknown."""

    days: float
    gpu_hours: float
    cost: float | None
    energy_kwh: float | None
    mean_step_min: float


def run_totals(run: RunProjection, price_per_gpu_hour: float | None,
               power: GpuPower | None) -> RunTotals:
    hours = gpu_hours(run.gpu)
    return RunTotals(run.total_wall_s / SECONDS_PER_DAY, hours,
                     cost(hours, price_per_gpu_hour) if price_per_gpu_hour is not None else None,
                     energy_kwh(run.gpu, power) if power is not None else None,
                     float(run.wall_s.mean()) / 60.0)


@dataclass
class Projection:
    """Projected runs of several policies over seeds; the first policy is the baseline for
    savings."""

    workload: str
    profile: str
    steps: int
    gpus: int
    seeds: list[int]
    policies: list[str]
    block: int
    starts: tuple[int, ...]  # () : simulated in full
    runs: list[RunProjection]
    price_per_gpu_hour: float | None = None
    power: GpuPower | None = None
    # per policy its totals with their 90% intervals, as project.json holds them (RunInterval in
    # workbench/compare/run_interval.py); None: none
    intervals: dict[str, dict] | None = None

    @property
    def method(self) -> str:
        return "sampled" if self.starts else "full"

    def totals(self, policy: str) -> list[RunTotals]:
        """Per seed, in seed order."""
        by_seed = {r.seed: r for r in self.runs if r.policy == policy}
        return [run_totals(by_seed[s], self.price_per_gpu_hour, self.power) for s in self.seeds]

    def figure_values(self, policy: str, figure: str) -> np.ndarray | None:
        values = [getattr(t, figure) for t in self.totals(policy)]
        return None if any(v is None for v in values) else np.asarray(values, dtype=float)

    def policy_entry(self, policy: str) -> dict:
        entry: dict = {}
        for key, _ in FIGURES + (("mean_step_min", "minutes"),):
            v = self.figure_values(policy, key)
            entry[key] = spread(v) if v is not None else None
        ref = self.policies[0]
        entry["saving_vs_first"] = {}
        for key, _ in FIGURES:
            mine, base = self.figure_values(policy, key), self.figure_values(ref, key)
            # Paired by seed: the same response lengths for both policies (common random numbers).
            paired = mine is not None and base.all()
            entry["saving_vs_first"][key] = spread(1.0 - mine / base) if paired else None
        entry["speedup_vs_first"] = spread(self.figure_values(ref, "days")
                                           / self.figure_values(policy, "days"))
        runs = [r for r in self.runs if r.policy == policy]
        entry["mean_accept_len"] = float(np.mean([r.accept_len.mean() for r in runs]))
        entry["simulated_steps_per_seed"] = runs[0].simulated_steps
        return entry

    def to_dict(self) -> dict:
        how = (f"sampled: blocks of {self.block} steps starting at steps {list(self.starts)}, "
               "drafter state carried between blocks, skipped steps interpolated per phase "
               "(docs/formats.md, 'Whole-run projection')"
               if self.starts
               else f"full: all {self.steps} steps simulated; totals are sums over them")
        watts = None if self.power is None else {
            "decode": self.power.decode_w, "idle": self.power.idle_w,
            "train": self.power.train_w, "source": self.power.source}
        return {
            "schema": SCHEMA, "workload": self.workload, "profile": self.profile,
            "steps": self.steps, "gpus": self.gpus, "seeds": list(self.seeds),
            "common_random_numbers": True, "reference_policy": self.policies[0],
            "method": self.method, "how": how,
            "block_steps": self.block, "block_starts": list(self.starts),
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "gpu_watts": watts,
            "energy_scope": "GPU board power only (no host, network or cooling)",
            "policies": {p: self.policy_entry(p) for p in self.policies},
            "intervals": self.intervals,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def figure(self) -> Figure:
        """Step time over the run per policy (mean over seeds; dots: simulated steps of the first
        seed)."""
        fig = Figure(figsize=(9.0, 4.5), layout="constrained")
        ax = fig.subplots()
        for i, name in enumerate(self.policies):
            runs = [r for r in self.runs if r.policy == name]
            wall = np.mean([r.wall_s for r in runs], axis=0) / 60.0
            ax.plot(np.arange(self.steps), wall, color=f"C{i % 10}", lw=1.2, label=name)
            sim = runs[0].simulated
            ax.scatter(np.flatnonzero(sim), runs[0].wall_s[sim] / 60.0, s=6, color=f"C{i % 10}")
        ax.set_xlabel("RL step")
        ax.set_ylabel("step time (minutes)")
        ax.grid(alpha=0.3)
        ax.legend()
        ax.set_title(f"{self.workload} on {self.profile}: {self.steps} steps, {self.gpus} GPUs "
                     f"({self.method}; dots: simulated steps)", fontsize=10)
        return fig

    def save(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write DIR/project.json and DIR/project.png, each atomically."""
        return save_result(out_dir, "project", self.to_json(), self.figure())


def project(workload: Workload, policies: Sequence[Policy], profile: Profile,
            seeds: int | Sequence[int], steps: int,
            sample_steps: int = DEFAULT_SAMPLE_STEPS, full: bool = False,
            price_per_gpu_hour: float | None = None, power: GpuPower | None = None,
            mapper: Mapper = serial_map,
            on_done: Callable[[int, int, ProjectUnit], None] | None = None) -> Projection:
    """Project every policy over every seed; `mapper` runs the units (`serial_map`, or
    workbench/deploy/distributed.py's)."""
    units = projection_units(workload, policies, profile, seeds, steps, sample_steps, full)
    runs = mapper(project_run, units, on_done)
    return Projection(workload.name, profile.name, steps, workload.gpus, seed_list(seeds),
                      [p.name for p in policies], units[0].block, units[0].starts, runs,
                      price_per_gpu_hour, power)
