"""The rollout workers of a `tlt train` run as one pool of Ray actors (real/run/worker.py): start
them, fan each call out to all of them, and run a rollout with spot training in the idle time.

The pool holds no engine state of its own: what the engines run is the coordinator's
`EnginePlan` (real/run/engine_plan.py), handed to the workers on start and on every change.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

from real.drafter.records import HiddenRecord
from real.rollout.requests import EngineStepRow, RolloutRequest
from real.run.config import RunConfig
from real.run.engine_plan import EnginePlan
from real.run.records import DrafterCheck, WorkerRollout, WorkerSpot
from real.run.sd_pricing import PlainCost, plain_cost
from real.run.shipping import bundle
from workbench.contracts.ray_temp import ray_temp_dir


def start_local_ray(num_cpus: int) -> None:
    """A Ray of our own on this machine: `address="local"`, because a bare ray.init() joins any Ray
    already started here (`ray start`, another run) and then refuses `num_cpus`."""
    import ray

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             _temp_dir=ray_temp_dir())


@dataclass(frozen=True)
class IdleWork:
    """What idle workers do while others still decode: check the drafters at draft length `check_k`
    (0: not) and spot-train on `buffer` for up to `max_steps` drafter steps (0: not)."""

    check_k: int
    max_steps: int
    buffer: Sequence[HiddenRecord] = ()
    min_idle: int = 1  # workers done before any starts

    @property
    def any(self) -> bool:
        return self.check_k > 0 or self.max_steps > 0


@dataclass
class PoolRollout:
    """One rollout of every worker (epoch seconds)."""

    start: float
    end: float  # the last worker's rollout returned
    rollouts: dict[int, WorkerRollout]
    spots: list[WorkerSpot]


class WorkerPool:
    """`cfg.workers` RolloutWorker actors on Ray (a local one unless `cfg.address`).

    On a cluster (`cfg.address`) the workers may run on other machines: every directory they load
    goes through Ray's object store (real/run/shipping.py), not a path on this machine's disk. Where
    the cluster has GPUs, each worker takes one (its vLLM engine's)."""

    def __init__(self, cfg: RunConfig, model_dir: str, drafter_dir: str | None,
                 engines: EnginePlan):
        import ray

        from real.run.worker import RolloutWorker

        if not ray.is_initialized():
            if cfg.address:
                ray.init(address=cfg.address, log_to_driver=False)
            else:
                # Ray's CPUs are scheduling slots: each worker takes one, and `tlt bench real`
                # keeps two runs' workers alive at once, so a local Ray gets enough slots for
                # that; the threads each worker really uses are set below.
                start_local_ray(max(os.cpu_count() or 1, 2 * cfg.workers))
        self.ship = bool(cfg.address)
        threads = max(1, (os.cpu_count() or 1) // cfg.workers) if not cfg.address else 1
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        actor = ray.remote(num_cpus=1, num_gpus=gpus, max_concurrency=2)(RolloutWorker)
        env = {"env_vars": {"OMP_NUM_THREADS": str(threads)}}
        model, drafter = self._arg(model_dir), self._arg(drafter_dir)
        self.workers = [actor.options(runtime_env=env).remote(
            i, model, engines, drafter, cfg.seed, max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len, threads=threads) for i in range(cfg.workers)]
        # all constructed: `start` runs on all at once
        ray.get([w.ready.remote() for w in self.workers])
        self.plain_rows: list[list[EngineStepRow]] = ray.get(
            [w.start.remote() for w in self.workers])
        self.plain_costs: list[PlainCost | None] = [plain_cost(rows) for rows in self.plain_rows]
        self.settings: dict[str, Any] = ray.get(self.workers[0].settings.remote())

    def _arg(self, path: str | None) -> Any:
        """A directory as the workers get it: its path, or on a cluster its bundle in the object
        store."""
        import ray

        if path is None or not self.ship:
            return path
        return ray.put(bundle(path))

    def __len__(self) -> int:
        return len(self.workers)

    def rollout(self, shards: Sequence[Sequence[RolloutRequest]], step: int, clock0: float,
                idle: IdleWork) -> PoolRollout:
        """Every worker decodes its shard at once; once `idle.min_idle` are done, each idle worker
        does the idle work until the last shard is done, then is stopped (within one drafter
        step)."""
        import ray

        t0 = time.time()
        pending = {w.rollout.remote(shard, step, clock0): i
                   for i, (w, shard) in enumerate(zip(self.workers, shards))}
        rollouts: dict[int, WorkerRollout] = {}
        done_workers: list[int] = []
        spot_refs: dict[Any, int] = {}
        buffer_ref = ray.put(list(idle.buffer)) if idle.max_steps else None
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                rollouts[i] = ray.get(ref)
                done_workers.append(i)
            if idle.any and pending and len(done_workers) >= idle.min_idle:
                for i in done_workers:
                    if i not in spot_refs.values():
                        seqs = [rollouts[i].sequence(rid) for rid in rollouts[i].outputs]
                        ref = self.workers[i].spot_train.remote(
                            seqs, buffer_ref or [], idle.max_steps, idle.check_k)
                        spot_refs[ref] = i
        end = time.time()
        for i in spot_refs.values():
            self.workers[i].stop_spot.remote()
        return PoolRollout(t0, end, rollouts, ray.get(list(spot_refs)))

    def sync(self, model_dir: str, drafter_dir: str | None) -> None:
        import ray

        model, drafter = self._arg(model_dir), self._arg(drafter_dir)
        ray.get([w.sync.remote(model, drafter) for w in self.workers])

    def check_drafters(self, records: Sequence[HiddenRecord], k: int) -> DrafterCheck | None:
        """Both drafters checked by worker 0 on `records` at draft length `k`."""
        import ray

        return ray.get(self.workers[0].check_drafters.remote(list(records), k))

    def run_engines(self, engines: EnginePlan, drafter_dir: str | None) -> None:
        """Every worker's engine restarted as `engines` says (in its process)."""
        import ray

        drafter = self._arg(drafter_dir)
        ray.get([w.run_engine.remote(engines, drafter) for w in self.workers])

    def probe(self, requests: Sequence[Sequence[RolloutRequest]]) -> list[list[EngineStepRow]]:
        """Worker i decodes `requests[i]`, all at once; their engine steps."""
        import ray

        return ray.get([w.probe.remote(r) for w, r in zip(self.workers, requests)])

    def states(self) -> list[dict[str, Any]]:
        import ray

        return ray.get([w.state.remote() for w in self.workers])

    def load_states(self, states: Sequence[dict[str, Any]]) -> None:
        import ray

        ray.get([w.load_state.remote(s) for w, s in zip(self.workers, states)])

    def close(self) -> None:
        import ray

        for w in self.workers:
            try:
                ray.get(w.close.remote())
                ray.kill(w)
            except Exception:  # pragma: no cover - best effort at shutdown
                pass
        self.workers = []
