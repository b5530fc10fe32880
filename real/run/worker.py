"""A rollout worker: one vLLM engine, its bandit, and a spot drafter trainer, run as a Ray actor.

The coordinator (real/run/coordinator.py, through real/run/pool.py) owns the schedule of an RL
step and the engines' plan (real/run/engine_plan.py); a worker only does what it is told and
reports what happened (real/run/records.py), with wall-clock times (`time.time()`, comparable
across the processes of one machine) so the coordinator can draw the step's timeline:

    start()                       measure a plain engine (guarded policies), then start the SD
                                  engine
    rollout(requests, rl_step)    decode its shard; the controller (real/rollout/adaptive.py) picks
                                  draft lengths between engine steps
    spot_train(sequences, buffer, max_steps, check_k)
                                  check the drafters on a sample of its fresh responses (when
                                  check_k), then train the drafter on their hidden states plus the
                                  buffer until stop_spot()
    stop_spot()                   called from another thread: the actor runs two calls at once
                                  (Ray `max_concurrency=2`), so a stop reaches a running spot_train
    sync(target_dir, drafter)     reload weights in place before the next rollout
    check_drafters(records, k)    the learned drafter and n-gram checked alike (the switch rule's
                                  input)
    run_engine(engines, drafter)  restart the engine as an EnginePlan says (n-gram, EAGLE or none)
    probe(requests)               before the run's first step, a short rollout the SD guard judges

The stop flag is cleared by `sync` (between RL steps), never by `spot_train`: with a threaded
actor, a stop sent just after a spot_train may run first, and must still stop it.

`sync` reloads the engine at once but hands the new weights to the spot trainer only when it
next works (`_catch_up`), so the step does not wait for it and an idle worker pays instead.

The controller's state is kept per drafter kind: after an n-gram <-> EAGLE switch and back, the
engine resumes what it had learnt of that drafter (the two pay differently per batch size).

Every random choice draws from the run seed's streams (`workbench.contracts.seeds`): the
worker's engine (Stream.ENGINE), spot trainer (Stream.SPOT) and bandit (Stream.CONTROLLER), each
indexed by the worker.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, Sequence

import torch

from real.drafter.checkpoint import load_drafter
from real.drafter.records import HiddenRecord
from real.drafter.spot import SpotResult, SpotTrainer
from real.rollout.adaptive import BanditController
from real.rollout.engine import RolloutEngine
from real.rollout.requests import EngineStepRow, RolloutRequest, Sampling
from real.run.records import DrafterCheck, WorkerRollout, WorkerSpot
from real.run.engine_plan import EnginePlan
from real.run.sd_pricing import PLAIN_BATCH, plain_requests
from real.run.shipping import DirBundle, LocalDirs
from real.tiny.task import make_problems
from workbench.contracts.seeds import Stream, derive_seed
from workbench.contracts.policy import DrafterKind


# Fresh responses an idle worker featurizes, checks the drafters on and trains on (spot_train).
FRESH_SAMPLE = 8


def spread(items: Sequence[Any], n: int) -> list[Any]:
    """Up to `n` of `items`, evenly spaced over them (the first always among them)."""
    return list(items[:: max(1, len(items) // n)][:n])


class RolloutWorker:
    def __init__(self, worker: int, model_dir: str | DirBundle, engines: EnginePlan,
                 drafter_dir: str | DirBundle | None, seed: int, max_num_seqs: int = 64,
                 max_model_len: int = 2048, kv_cache_gib: float = 0.5, threads: int = 1):
        """`engines`: what the engine runs (real/run/engine_plan.py); `seed`: the run's seed, the
        worker's streams derive from it and `worker`. Directories come as paths, or as bundles
        from the object store (real/run/shipping.py) that the worker writes to its own disk."""
        self.local = LocalDirs()
        model_dir, drafter_dir = self.local.local(model_dir), self.local.local(drafter_dir)
        # The engine runs in this process (real/rollout/engine.py) and shares its torch threads
        # with the spot trainer: a worker gets its share of the machine's cores, no more.
        self.threads = max(1, threads)
        self._pin_threads()
        self.worker = worker
        self.engines = engines
        self.policy = engines.policy
        self.seed = seed
        self.model_dir = str(model_dir)
        self.drafter_dir = drafter_dir
        self.engine_kwargs = dict(max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                                  seed=derive_seed(seed, Stream.ENGINE, worker),
                                  kv_cache_gib=kv_cache_gib)
        # kind -> its controller's state when switched away
        self.controller_states: dict[str, dict[str, Any]] = {}
        self.plain_rows: list[EngineStepRow] = []  # what the SD guard prices SD against (`start`)
        self.engine: RolloutEngine | None = None  # started by `start`
        self.controller: BanditController | None = None
        # The switch between n-gram and EAGLE checks the drafter with the spot trainer's copy, so
        # a fallback policy has one even when it does not train.
        pol = self.policy
        spot_seed = derive_seed(seed, Stream.SPOT, worker)
        self.spot = (SpotTrainer(model_dir, drafter_dir, lr=pol.spot_training.lr, seed=spot_seed,
                                 max_len=max_model_len)
                     if pol.spot_training.enabled or engines.switches else None)
        # The drafter the run started from, never trained: what spot training is judged against.
        self.static_state = None
        if self.spot is not None and pol.drafter.warm_start:
            self.static_state = self.spot.drafter_state()
        # (target, drafter) not yet in the spot trainer
        self._pending: tuple[str | None, str | None] = (None, None)
        self._stop = threading.Event()
        self._stop_at = float("nan")

    # ------------------------------------------------------------ engine set-up

    def ready(self) -> bool:
        """Answers once the constructor has run (a barrier before `start`)."""
        return True

    def start(self) -> list[EngineStepRow]:
        """Measure a plain engine (guarded policies: real/run/sd_pricing.py), then start the SD
        engine; returns the plain engine's steps. The coordinator calls it on every worker at
        once, after all are constructed (`ready`), so the measurement runs beside the other
        workers' as a rollout runs beside their decoding (alone, it reads a different machine)."""
        self._pin_threads()
        if self.engines.guarded:
            self.plain_rows = self._measure_plain()
        self._start_engine()
        return self.plain_rows

    def _start_engine(self) -> None:
        drafter = self.drafter_dir if self.engines.kind == DrafterKind.EAGLE else None
        self.engine = RolloutEngine(self.model_dir, self.engines.engine_policy(),
                                    drafter_dir=drafter, adaptive=True, in_process=True,
                                    **self.engine_kwargs)
        self._warm_up()
        self.controller = None
        if self.engine.spec:
            seed = derive_seed(self.seed, Stream.CONTROLLER, self.worker)
            self.controller = BanditController(self.engine, self.engines.engine_policy(), seed=seed,
                                               start=self.engines.start_table())
            if self.engines.kind in self.controller_states:
                self.controller.load_state_dict(self.controller_states[self.engines.kind])

    def _pin_threads(self) -> None:
        """Ray runs a threaded actor's calls on a pool of OS threads, and OpenMP's thread count is
        per OS thread: vLLM-CPU's attention checks that a step runs with the thread count its
        metadata was built with (it failed with 2 vs 1), so every call sets it first."""
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)

    def _warm_up(self, engine: RolloutEngine | None = None) -> None:
        """One short greedy request, so lazy initialisation and the n-gram proposer's JIT compile
        (tens of seconds on CPU) are not charged to the first RL step's rollout."""
        engine = engine or self.engine
        prompt = make_problems(1, seed=0)[0].prompt
        engine.generate([prompt], 1, Sampling(temperature=0.0, max_tokens=32))
        engine.llm.reset_prefix_cache()

    def _measure_plain(self) -> list[EngineStepRow]:
        """A plain engine's decode steps at every batch size from PLAIN_BATCH down to 1
        (`plain_requests`), on this worker's threads: the SD guard's plain engine
        (real/run/sd_pricing.py). A few seconds, once."""
        engine = RolloutEngine(self.model_dir, self.policy.without_sd(), adaptive=True,
                               in_process=True, **self.engine_kwargs)
        try:
            self._warm_up(engine)
            seed = derive_seed(self.seed, Stream.ENGINE, self.worker)
            run = engine.run_steps(plain_requests(min(PLAIN_BATCH, engine.max_num_seqs), seed))
        finally:
            engine.close()
        return [replace(r, draft_s=0.0) for r in run.steps]

    def run_engine(self, engines: EnginePlan, drafter_dir: str | DirBundle | None) -> float:
        """Restart the engine as `engines` says: drafter "ngram", "eagle" or "none" (plain decoding,
        where SD loses: real/run/engine_plan.py); seconds taken.

        vLLM fixes a drafter when an engine starts, so the engine is rebuilt in this process
        (real/rollout/vllm_fixes.py makes that possible on CPU); weights, bandit and spot trainer
        carry over."""
        self._pin_threads()
        t = time.perf_counter()
        if self.controller is not None:
            self.controller_states[self.engines.kind] = self.controller.state_dict()
        self.engine.close()
        self.engines, self.drafter_dir = engines, self.local.local(drafter_dir) or self.drafter_dir
        self._start_engine()
        return time.perf_counter() - t

    # ------------------------------------------------------------ the RL step

    def rollout(self, requests: Sequence[RolloutRequest], rl_step: int,
                clock0: float) -> WorkerRollout:
        self._pin_threads()
        start = time.time()
        c0 = self.engine.spec_counters() if self.engine.spec else None
        run = self.engine.run_steps(requests, rl_step=rl_step, worker=self.worker, clock0=None,
                                    controller=self.controller)
        if self.controller is not None:
            # the next rollout's first step verifies nothing of this one's
            self.controller.end_rollout()
        end = time.time()
        # Rows carry seconds since this rollout began; the trace wants seconds since the run began.
        shift = start - clock0
        for row in run.steps:
            row.start_s += shift
        for row in run.requests:
            row.start_s += shift
            row.end_s += shift
        out = WorkerRollout(self.worker, start, end, run.steps, run.requests, run.outputs,
                            {r.request_id: self.engine.token_ids(r.prompt) for r in requests})
        if c0 is not None:
            c = self.engine.spec_counters() - c0
            out.drafts, out.accepted = c.num_drafts, c.num_accepted_tokens
        return out

    def spot_train(self, sequences: Sequence[Sequence[int]], buffer: Sequence[HiddenRecord],
                   max_steps: int | None, check_k: int = 0) -> WorkerSpot:
        """This worker's idle time: with `check_k`, check the drafters (`check_drafters`) on a
        sample of its fresh responses, which no drafter has trained on yet; then train the drafter
        on them plus the buffer until stopped (`max_steps` 0: check only).

        Only `FRESH_SAMPLE` responses, spread over the worker's shard, are featurized here: the
        target's forward over all of them outlasts most idle windows. All of them reach the buffer
        from the policy update's forward anyway, for the next session."""
        self._pin_threads()
        start = time.time()
        if self.spot is None:
            nan = float("nan")
            return WorkerSpot(self.worker, start, start, 0, nan, nan, False, nan)
        self._catch_up()
        # Hidden states of the fresh responses, a minibatch at a time so a stop lands within one
        # forward pass here too.
        fresh: list[HiddenRecord] = []
        seqs = [list(s) for s in spread(sequences, FRESH_SAMPLE)]
        chunk = self.spot.config.batch_size
        for i in range(0, len(seqs), chunk):
            if self._stop.is_set():
                break
            fresh += self.spot.hidden_records(seqs[i:i + chunk])
        check = self.check_drafters(fresh, check_k) if check_k and fresh else None
        if max_steps == 0:
            res = SpotResult(0, 0.0, float("nan"), float("nan"), self._stop.is_set())
        else:
            res = self.spot.train_until(self._stop, fresh + list(buffer), max_steps)
        end = time.time()
        latency = end - self._stop_at if res.stopped else float("nan")
        state = self.spot.drafter_state() if res.steps else {}
        return WorkerSpot(self.worker, start, end, res.steps, res.loss, res.top1, res.stopped,
                          latency, state, len(fresh), check)

    def check_drafters(self, records: Sequence[HiddenRecord], k: int) -> DrafterCheck | None:
        """The drafters on up to `FRESH_SAMPLE` of `records` (spread over them), 8 chain starts
        each, at draft length `k`: the learned drafter as the engines run it (this worker's
        spot-trainer copy, which `sync` keeps equal to the engines'), n-gram, and the initial
        drafter kept static (warm starts only). None: no spot trainer, no record long enough for
        a chain of `k`, or stopped before the end."""
        self._pin_threads()
        if self.spot is None:
            return None
        self._catch_up()
        sample = spread(records, FRESH_SAMPLE)
        try:
            eagle = self.spot.estimate_accept_len(sample, k, max_starts=8, stop=self._stop)
            ngram = self.spot.estimate_ngram_accept_len(sample, k, max_starts=8, stop=self._stop)
            static = float("nan")
            if self.static_state is not None:
                initial = self.spot.static_drafter(self.static_state)
                static = self.spot.estimate_accept_len(sample, k, max_starts=8, stop=self._stop,
                                                       drafter=initial)
        except ValueError:  # no record long enough for a chain of k
            return None
        if self._stop.is_set():
            return None
        return DrafterCheck(eagle=eagle, ngram=ngram, static=static)

    def stop_spot(self) -> float:
        self._stop_at = time.time()
        self._stop.set()
        return self._stop_at

    def sync(self, target_dir: str | DirBundle | None,
             drafter_dir: str | DirBundle | None) -> float:
        """Load the new target (and drafter) into the engine; the spot trainer gets them when it
        next works (the module doc). Seconds taken."""
        self._pin_threads()
        t = time.perf_counter()
        target_dir, drafter_dir = self.local.local(target_dir), self.local.local(drafter_dir)
        self._stop.clear()
        self._stop_at = float("nan")
        eagle = self.engines.kind == DrafterKind.EAGLE
        self.engine.reload(target_dir=target_dir, drafter_dir=drafter_dir if eagle else None)
        if target_dir is not None:
            self.model_dir = str(target_dir)
        if drafter_dir is not None:
            self.drafter_dir = str(drafter_dir)
        if self.spot is not None:
            target, drafter = self._pending
            self._pending = (target_dir or target, drafter_dir or drafter)
        self.local.prune([self.model_dir, self.drafter_dir, *self._pending])
        return time.perf_counter() - t

    def _catch_up(self) -> None:
        """The spot trainer onto the weights `sync` left pending: the new target's embedding and LM
        head, then the merged drafter's weights."""
        target, drafter = self._pending
        self._pending = (None, None)
        if target is not None:
            self.spot.set_target(target)
        if drafter is not None:
            state = load_drafter(drafter, self.spot.target).drafter_state_dict()
            self.spot.load_drafter_state(state)

    # ------------------------------------------------------------ checkpoints

    def state(self) -> dict[str, Any]:
        if self.spot is not None:
            self._catch_up()
        return {"bandit": self.controller.state_dict() if self.controller else None,
                "bandits": dict(self.controller_states), "static": self.static_state,
                "spot": self.spot.state_dict() if self.spot else None, "kind": self.engines.kind}

    def load_state(self, state: dict[str, Any]) -> None:
        self.controller_states = dict(state.get("bandits") or {})
        if state.get("bandit") is not None and self.controller is not None:
            self.controller.load_state_dict(state["bandit"])
        if state.get("spot") is not None and self.spot is not None:
            self.spot.load_state_dict(state["spot"])
        if state.get("static") is not None:
            self.static_state = state["static"]

    def probe(self, requests: Sequence[RolloutRequest]) -> list[EngineStepRow]:
        """Decode `requests` on the SD engine, its controller choosing draft lengths as in a rollout
        (and learning from it): the steps the SD guard judges before the run's first step
        (real/run/coordinator.py `probe_sd`)."""
        self._pin_threads()
        run = self.engine.run_steps(requests, controller=self.controller)
        if self.controller is not None:
            self.controller.end_rollout()
        self.engine.llm.reset_prefix_cache()
        return run.steps

    def settings(self) -> dict[str, Any]:
        shipped = self.local.count > 0
        return {**self.engine.settings(), "adaptive": True, "drafter_kind": self.engines.kind,
                "weights_from": ("Ray object store, to the worker's own disk" if shipped
                                 else "the coordinator's disk")}

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.local.close()
