"""Sweeps and projections as Ray tasks: the same units as in one process, spread over workers.

A sweep is a list of independent units (`sim.sweep.sweep_units`, one per policy and seed;
`workbench.project.projection_units` for projections). Each unit fixes its own seeds, so a
unit gives the same result wherever it runs; `ray_map` hands the results back in the order of
the units, so a Ray sweep equals the serial one (common random numbers kept) and every
reducer downstream (compare, regret, project) sees the same input.

Ray starts locally by default (`ray.init(num_cpus=workers, include_dashboard=False)`, ~5 s);
`address` joins a running cluster (`ray start --head` on one node, `ray start --address=...`
on the others; the nodes need this project installed). At most `workers` units are in flight at
once. `tlt tune --workers N` runs trials in N processes against one Optuna storage instead
(workbench/tune/study.py: `run_parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from sim.sweep import ProgressFn, SweepRun, run_unit, sweep_units
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload
from workbench.contracts.ray_temp import ray_temp_dir

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class RayConfig:
    workers: int = 2  # units in flight at once (local Ray: its CPUs)
    # a cluster to join ("auto", "ray://host:10001", "host:6379"); None: start one here
    address: str | None = None


def ensure_ray(config: RayConfig) -> None:
    """Start (or join) Ray once per process; later calls reuse it."""
    import ray

    if config.workers < 1:
        raise ValueError(f"workers: {config.workers}; allowed: an integer >= 1")
    if ray.is_initialized():
        return
    # Local workers inherit this process's environment (PYTHONPATH included); a cluster's nodes
    # import the project from their own install.
    if config.address is None:
        # "local": a Ray of our own, even when another one runs on this machine (ray.init() would
        # join it).
        ray.init(address="local", num_cpus=config.workers, include_dashboard=False,
                 log_to_driver=False, configure_logging=False, _temp_dir=ray_temp_dir())
    else:
        ray.init(address=config.address, log_to_driver=False, configure_logging=False)


def ray_map(fn: Callable[[T], R], items: Sequence[T],
            on_done: Callable[[int, int, T], None] | None = None,
            config: RayConfig | None = None) -> list[R]:
    """`[fn(x) for x in items]` as Ray tasks, at most `config.workers` in flight; `on_done` hears of
    each as it finishes (in finishing order), the results come back in the items' order."""
    return list(_ray_iter(fn, items, on_done, config or RayConfig()))


def _ray_iter(fn: Callable[[T], R], items: Sequence[T],
              on_done: Callable[[int, int, T], None] | None, config: RayConfig) -> Iterator[R]:
    """Results in the items' order, each yielded as soon as it and all before it are done."""
    import ray

    ensure_ray(config)
    task = ray.remote(num_cpus=1, max_retries=0)(fn)
    pending: dict = {}  # object ref -> index
    results: dict[int, R] = {}
    nxt = emitted = done = 0
    while emitted < len(items):
        while nxt < len(items) and len(pending) < config.workers:
            pending[task.remote(items[nxt])] = nxt
            nxt += 1
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            i = pending.pop(ref)
            results[i] = ray.get(ref)
            done += 1
            if on_done is not None:
                on_done(done, len(items), items[i])
        while emitted in results:
            yield results.pop(emitted)
            emitted += 1


def ray_runner(config: RayConfig) -> Callable[..., Iterator[SweepRun]]:
    """A `sim.sweep.Runner` that runs each (policy, seed) as a Ray task: the serial sweep's runs, in
    its order."""

    def run(workload: Workload, policies: Sequence[Policy], profile: Profile,
            seeds: int | Iterable[int], steps: int | None = None,
            on_progress: ProgressFn | None = None) -> Iterator[SweepRun]:
        units = sweep_units(workload, policies, profile, seeds, steps)
        done = None if on_progress is None else (
            lambda k, n, u: on_progress(k, n, u.policy.name, u.seed))
        return _ray_iter(run_unit, units, done, config)

    return run


def ray_mapper(config: RayConfig) -> Callable:
    """A `workbench.project.Mapper` over Ray."""
    return lambda fn, items, on_done=None: ray_map(fn, items, on_done, config)


def shutdown() -> None:
    """Stop the Ray this process started (or leave the cluster it joined)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _noop(x: int) -> int:
    return x


@dataclass(frozen=True)
class SweepBench:
    """Serial vs Ray on the same sweep, interleaved: what a bigger sweep would take."""

    simulations: int
    workers: int
    ray_start_s: float  # ray.init (local) or joining the cluster
    # per task, from empty tasks run `workers` at a time (wall / tasks x workers)
    task_overhead_s: float
    serial_s: tuple[float, ...]  # per repeat
    ray_s: tuple[float, ...]
    identical: bool  # every Ray run's summary equals the serial one's

    @property
    def speedups(self) -> tuple[float, ...]:
        return tuple(s / r for s, r in zip(self.serial_s, self.ray_s))

    @property
    def per_simulation_s(self) -> float:
        """Mean seconds of one simulation in one process (the serial runs')."""
        return sum(self.serial_s) / len(self.serial_s) / self.simulations

    def sweep_estimate_s(self, simulations: int, cpus: int) -> float:
        """A sweep of `simulations` like these on `cpus` workers in all: the work spread evenly,
        plus Ray's start and its per-task overhead."""
        per_task_s = self.per_simulation_s + self.task_overhead_s
        return self.ray_start_s + simulations * per_task_s / cpus


def bench_sweep(units: Sequence, config: RayConfig, repeats: int = 2,
                summarize: Callable[[SweepRun], object] = lambda r: r.run.summary()) -> SweepBench:
    """Time `units` (sim.sweep.SweepUnit) serially and on Ray, alternating which goes first per
    repeat (a drifting machine then biases neither), and check the results agree."""
    import time

    t0 = time.perf_counter()
    ensure_ray(config)
    start_s = time.perf_counter() - t0
    ray_map(_noop, list(range(config.workers)), None, config)  # start the worker processes
    t0 = time.perf_counter()
    n_empty = 20 * config.workers
    ray_map(_noop, list(range(n_empty)), None, config)
    overhead = (time.perf_counter() - t0) / n_empty * config.workers
    # Each worker imports the simulator on its first unit; the driver has already: warm both alike.
    ray_map(run_unit, list(units[:config.workers]), None, config)
    run_unit(units[0])
    serial, on_ray, identical = [], [], True
    for rep in range(repeats):
        for mode in (("serial", "ray") if rep % 2 == 0 else ("ray", "serial")):
            t0 = time.perf_counter()
            runs = ([run_unit(u) for u in units] if mode == "serial"
                    else ray_map(run_unit, units, None, config))
            (serial if mode == "serial" else on_ray).append(time.perf_counter() - t0)
            if mode == "serial":
                want = [summarize(r) for r in runs]
            else:
                got = [summarize(r) for r in runs]
        identical = identical and got == want
    return SweepBench(len(units), config.workers, start_s, overhead, tuple(serial), tuple(on_ray),
                      identical)
