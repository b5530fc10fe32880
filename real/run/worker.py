"""A rollout worker: one vLLM engine, its bandit, and a spot drafter trainer, run as a Ray actor.

The coordinator (real/run/coordinator.py) owns the schedule of an RL step; a worker only does
what it is told and reports what happened (real/run/records.py), with wall-clock times
(`time.time()`, comparable across the processes of one machine) so the coordinator can draw
the step's timeline:

    rollout(requests, rl_step)   decode its shard; the BanditController picks draft lengths
    spot_train(sequences, buffer) train the drafter on fresh hidden states until stop_spot()
    stop_spot()                  called from another thread: the actor runs two calls at once
                                 (Ray `max_concurrency=2`), so a stop reaches a running spot_train
    sync(target_dir, drafter)    reload weights in place before the next rollout
    check_drafters(records, k)   the learned drafter and n-gram judged alike (the switch rule's input)
    switch_drafter(kind, drafter) restart the engine with the other drafter (n-gram <-> EAGLE)

The stop flag is cleared by `sync` (between RL steps), never by `spot_train`: with a threaded
actor, a stop sent just after a spot_train may run first, and must still stop it.

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
from real.drafter.spot import SpotTrainer
from real.rollout.adaptive import BanditController
from real.rollout.engine import RolloutEngine
from real.rollout.requests import RolloutRequest, Sampling
from real.run.records import DrafterCheck, WorkerRollout, WorkerSpot
from real.tiny.task import make_problems
from workbench.contracts.policy import Policy
from workbench.contracts.seeds import Stream, derive_seed


class RolloutWorker:
    def __init__(self, worker: int, model_dir: str, policy: Policy, drafter_dir: str | None, seed: int,
                 max_num_seqs: int = 64, max_model_len: int = 2048, kv_cache_gib: float = 0.5,
                 spot_lr: float = 1e-4, drafter_kind: str | None = None, threads: int = 1):
        """`seed`: the run's seed; the worker's streams derive from it and `worker`."""
        # The engine runs in this process (real/rollout/engine.py) and shares its torch threads with the
        # spot trainer: a worker gets its share of the machine's cores, no more.
        self.threads = max(1, threads)
        self._pin_threads()
        self.worker = worker
        self.policy = policy
        self.seed = seed
        self.model_dir = str(model_dir)
        self.drafter_dir = drafter_dir
        self.engine_kwargs = dict(max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                                  seed=derive_seed(seed, Stream.ENGINE, worker), kv_cache_gib=kv_cache_gib)
        self.kind = drafter_kind or policy.drafter.kind
        self.engine = RolloutEngine(model_dir, self._engine_policy(), drafter_dir=self._engine_drafter(),
                                    adaptive=True, in_process=True, **self.engine_kwargs)
        self._warm_up()
        self.controller = self._controller()
        # The switch between n-gram and EAGLE judges the drafter with the spot trainer's copy, so
        # a fallback policy has one even when it does not train.
        judges = policy.drafter.kind == "eagle" and policy.drafter.ngram_fallback
        self.spot = SpotTrainer(model_dir, drafter_dir, lr=spot_lr, seed=derive_seed(seed, Stream.SPOT, worker),
                                max_len=max_model_len) if policy.training.enabled or judges else None
        self._stop = threading.Event()
        self._stop_at = float("nan")

    # ------------------------------------------------------------ engine set-up

    def _pin_threads(self) -> None:
        """Ray runs a threaded actor's calls on a pool of OS threads, and OpenMP's thread count is
        per OS thread: vLLM-CPU's attention checks that a step runs with the thread count its
        metadata was built with (it failed with 2 vs 1), so every call sets it first."""
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)

    def _warm_up(self) -> None:
        """One short greedy request, so lazy initialisation and the n-gram proposer's JIT compile
        (tens of seconds on CPU) are not charged to the first RL step's rollout."""
        self.engine.generate([make_problems(1, seed=0)[0].prompt], 1, Sampling(temperature=0.0, max_tokens=32))
        self.engine.llm.reset_prefix_cache()

    def _engine_policy(self) -> Policy:
        return self.policy if self.kind == self.policy.drafter.kind else \
            replace(self.policy, drafter=replace(self.policy.drafter, kind=self.kind))

    def _engine_drafter(self) -> str | None:
        return self.drafter_dir if self.kind == "eagle" else None

    def _controller(self) -> BanditController | None:
        if not self.engine.spec:
            return None
        return BanditController(self.engine, self._engine_policy(),
                                seed=derive_seed(self.seed, Stream.CONTROLLER, self.worker))

    def switch_drafter(self, kind: str, drafter_dir: str | None) -> float:
        """Restart the engine with another drafter kind (n-gram -> EAGLE or back); seconds taken.

        vLLM fixes a drafter when an engine starts, so the engine is rebuilt in this process
        (real/rollout/vllm_fixes.py makes that possible on CPU); weights, bandit and spot trainer
        carry over."""
        self._pin_threads()
        t = time.perf_counter()
        bandit = self.controller.state_dict() if self.controller else None
        self.engine.close()
        self.kind, self.drafter_dir = kind, drafter_dir
        self.engine = RolloutEngine(self.model_dir, self._engine_policy(), drafter_dir=self._engine_drafter(),
                                    adaptive=True, in_process=True, **self.engine_kwargs)
        self._warm_up()
        self.controller = self._controller()
        if self.controller is not None and bandit is not None:
            self.controller.load_state_dict(bandit)
        return time.perf_counter() - t

    # ------------------------------------------------------------ the RL step

    def rollout(self, requests: Sequence[RolloutRequest], rl_step: int, clock0: float) -> WorkerRollout:
        self._pin_threads()
        start = time.time()
        c0 = self.engine.spec_counters() if self.engine.spec else None
        run = self.engine.run_steps(requests, rl_step=rl_step, engine=self.worker, clock0=None,
                                    controller=self.controller)
        end = time.time()
        # Rows carry seconds since this rollout began; the trace wants seconds since the run began.
        shift = start - clock0
        for row in run.steps:
            row.start_s += shift
        for row in run.requests:
            row.start_s += shift
            row.end_s += shift
        out = WorkerRollout(self.worker, start, end, run.steps, run.requests, run.outputs,
                            {r.request_id: self.engine.token_ids(r.prompt) for r in requests},
                            draft_method=self.engine.draft_method)
        if c0 is not None:
            c = self.engine.spec_counters() - c0
            out.drafts, out.accepted = c.num_drafts, c.num_accepted_tokens
        return out

    def spot_train(self, sequences: Sequence[Sequence[int]], buffer: Sequence[HiddenRecord],
                   max_steps: int | None) -> WorkerSpot:
        """Train the drafter on this worker's fresh responses plus the buffer until stopped."""
        self._pin_threads()
        start = time.time()
        if self.spot is None:
            return WorkerSpot(self.worker, start, start, 0, float("nan"), float("nan"), False, float("nan"))
        # Hidden states of the fresh responses, a minibatch at a time so a stop lands within one
        # forward pass here too.
        fresh: list[HiddenRecord] = []
        seqs = [list(s) for s in sequences]
        chunk = self.spot.config.batch_size
        for i in range(0, len(seqs), chunk):
            if self._stop.is_set():
                break
            fresh += self.spot.hidden_records(seqs[i:i + chunk])
        res = self.spot.train_until(self._stop, fresh + list(buffer), max_steps)
        end = time.time()
        latency = end - self._stop_at if res.stopped else float("nan")
        return WorkerSpot(self.worker, start, end, res.steps, res.loss, res.top1, res.stopped, latency,
                          self.spot.drafter_state(), len(fresh))

    def stop_spot(self) -> float:
        self._stop_at = time.time()
        self._stop.set()
        return self._stop_at

    def sync(self, target_dir: str | None, drafter_dir: str | None) -> float:
        """Load the new target (and drafter) into the engine and the spot trainer; seconds taken."""
        self._pin_threads()
        t = time.perf_counter()
        self._stop.clear()
        self._stop_at = float("nan")
        eagle = self.engine.draft_method == "eagle"
        self.engine.reload(target_dir=target_dir, drafter_dir=drafter_dir if eagle else None)
        if target_dir is not None:
            self.model_dir = str(target_dir)
        if drafter_dir is not None:
            self.drafter_dir = str(drafter_dir)
        if self.spot is not None:
            if target_dir is not None:
                self.spot.set_target(target_dir)
            if drafter_dir is not None:
                self.spot.load_drafter_state(load_drafter(drafter_dir, self.spot.target).drafter_state_dict())
        return time.perf_counter() - t

    # ------------------------------------------------------------ checkpoints

    def state(self) -> dict[str, Any]:
        return {"bandit": self.controller.state_dict() if self.controller else None,
                "spot": self.spot.state_dict() if self.spot else None, "kind": self.kind}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("bandit") is not None and self.controller is not None:
            self.controller.load_state_dict(state["bandit"])
        if state.get("spot") is not None and self.spot is not None:
            self.spot.load_state_dict(state["spot"])

    def check_drafters(self, records: Sequence[HiddenRecord], k: int) -> DrafterCheck:
        """The learned drafter (this worker's spot-trainer copy, which sync keeps equal to the
        engines') and n-gram, judged on the same records at draft length `k`."""
        self._pin_threads()
        if self.spot is None:
            return DrafterCheck(float("nan"), float("nan"))
        records = list(records)
        return DrafterCheck(eagle=self.spot.estimate_accept_len(records, k, max_starts=8),
                            ngram=self.spot.estimate_ngram_accept_len(records, k, max_starts=8))

    def settings(self) -> dict[str, Any]:
        return {**self.engine.settings(), "adaptive": True, "drafter_kind": self.kind}

    def close(self) -> None:
        self.engine.close()
