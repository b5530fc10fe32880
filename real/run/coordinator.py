"""`tlt train`: GRPO on vLLM rollouts with TLT's spot drafter training and adaptive SD, on Ray.

One RL step (`TrainingRun.step`), as the coordinator runs it in the driver process:

1. rollout: the step's prompts (seeded by (seed, step)) are split by group over the rollout
   workers (real/run/pool.py, real/run/worker.py), which decode their shards at once; each
   engine's bandit picks draft lengths between engine steps (real/rollout/adaptive.py).
2. idle workers: once `min_idle_workers` are done, each idle worker checks the drafters on its
   fresh responses and spot-trains the drafter until the last shard is done; the rollout never
   waits for them. Drafters trained by several workers are averaged (real/run/drafter_files.py).
3. policy update: rewards and one GRPO step on this machine's cores (real/run/policy_update.py);
   its no-grad pass yields the hidden states the drafter buffer keeps.
4. sync: the new weights are reloaded in every engine, then the run's `EngineState` decides what
   the engines run next (real/run/engine_state.py: n-gram or the learned drafter by the switch
   rule, and no drafter while SD decodes slower than a plain engine, real/run/sd_guard.py); a
   change restarts every worker's engine. A guarded run asks the same before step 0, from a
   short probe rollout (`probe_sd`).
5. checkpoint, metrics and the trace (real/run/outputs.py).

Every random choice draws from the run seed's streams (`workbench.contracts.seeds`).
`tlt bench real` interleaves the `step()`s of several runs.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Callable

from real.drafter.records import HiddenRecord
from real.rollout.requests import EngineStepRow, RolloutRequest, Sampling
from real.rollout.spec_config import adaptive_draft_cap
from real.run.checkpoints import Checkpoint, load_latest
from real.run.config import RunConfig, TrainError, default_drafter  # noqa: F401 (re-exported)
from real.run.drafter_files import initial_drafter, merge_drafters, prune
from real.run.engine_state import EngineState
from real.run.outputs import RunOutputs
from real.run.policy_update import policy_update
from real.run.pool import IdleWork, PoolRollout, WorkerPool
from real.run.records import DrafterCheck, StepRecord, StepTimes, add_step_rows, rollout_accept_len, step_record
from real.run.sd_guard import SDVerdict, probe_requests, rollout_verdict, sd_next
from workbench.contracts.seeds import Stream, derive_seed
from workbench.contracts.policy import DrafterKind


class TrainingRun(RunOutputs):
    """One `tlt train` run: open(), step() x N, close(). State lives under `cfg.out`."""

    def __init__(self, cfg: RunConfig, log: Callable[[str], None] | None = print):
        cfg.check()
        super().__init__(cfg)
        self.log = log or (lambda m: None)
        self.engines = EngineState.initial(cfg.policy, cfg.start_tables)
        self.pool: WorkerPool | None = None
        self.plain_rows: list[list[EngineStepRow]] = []  # per worker, the plain engine's steps SD is priced against

    # ------------------------------------------------------------ set-up

    def open(self, resume: bool = False) -> "TrainingRun":
        import torch

        from real.drafter.spot import DrafterBuffer
        from real.grpo import GRPOConfig, GRPOTrainer

        cfg = self.cfg
        t_open = time.perf_counter()
        ckpt = load_latest(self.out) if resume else None
        if not resume and (self.out / "checkpoints").exists():
            raise TrainError(f"--out {self.out}: holds a run already; add --resume to continue it or choose "
                             "another --out")
        if resume and ckpt is None:
            self.log(f"--resume: no finished step under {self.out}; starting from step 0")
        self.out.mkdir(parents=True, exist_ok=True)
        self.model_dir = ckpt.path("model") if ckpt else Path(cfg.model)
        self.drafter_dir = initial_drafter(cfg, ckpt, self.out)
        self.buffer = DrafterBuffer(cfg.policy.spot_training.buffer)
        if ckpt is not None:
            self.engines = self.restore(ckpt, self.engines)
            if ckpt.path("buffer.pt").exists():
                self.buffer = torch.load(ckpt.path("buffer.pt"), weights_only=False)
            self.log(f"resuming {self.out} after step {ckpt.step}")
        # The update runs in this process while every rollout worker waits for the sync: all of
        # this machine's cores are its own then (a Ray cluster's workers are on other machines).
        self.trainer = GRPOTrainer(self.model_dir, GRPOConfig(lr=cfg.lr, kl_coef=cfg.kl_coef,
                                                              minibatch=min(16, cfg.prompts * cfg.samples)),
                                   seed=derive_seed(cfg.seed, Stream.GRPO),
                                   reference_dir=cfg.model if cfg.kl_coef > 0 else None,
                                   threads=os.cpu_count() or 1, device=cfg.device)
        if ckpt is not None:
            self.trainer.load_state_dict(torch.load(ckpt.path("trainer.pt"), weights_only=False))
        self._start_workers(ckpt)
        if ckpt is None and self.engines.guarded:
            self.probe_sd()
        self.setup_s = time.perf_counter() - t_open
        return self

    def _start_workers(self, ckpt: Checkpoint | None) -> None:
        import torch

        self.pool = WorkerPool(self.cfg, str(self.model_dir), str(self.drafter_dir) if self.drafter_dir else None,
                               self.engines)
        self.settings, self.plain_rows = self.pool.settings, self.pool.plain_rows
        for i, c in enumerate(self.pool.plain_costs):
            if c is not None:
                self.log(f"  worker {i}'s plain engine: {c.fixed_s * 1e3:.2f} ms + {c.per_seq_s * 1e3:.3f} ms per "
                         f"sequence a decode step ({c.steps} steps measured)")
        self.log(f"{len(self.pool)} rollout workers up (policy {self.cfg.policy.name}, drafter {self.engines.kind})")
        if ckpt is not None and ckpt.path("workers.pt").exists():
            self.pool.load_states(torch.load(ckpt.path("workers.pt"), weights_only=False))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self.pool = None

    # ------------------------------------------------------------ one RL step

    def step(self) -> StepRecord:
        """One RL step: rollout with spot training, policy update, sync; then its records and,
        every `checkpoint_every` steps (and at the last), a checkpoint."""
        cfg, s = self.cfg, self.next_step
        problems = self.source.draw(cfg.prompts, derive_seed(cfg.seed, Stream.PROMPTS, s))
        # a drafter buffer
        keeps = cfg.policy.spot_training.enabled and cfg.policy.drafter.kind == DrafterKind.EAGLE
        training = keeps and s % cfg.policy.spot_training.interval_steps == 0
        ran = self.engines.kind  # the drafter this step decodes with; its sync may switch to the other
        ro = self.pool.rollout(self._shards(problems, s), s, self.clock0, self._idle_work(training))
        t_train0 = time.time()
        update = policy_update(self.trainer, problems, ro.rollouts, self.source, keeps or self.engines.switches)
        if keeps:
            self.buffer.add(s, update.hidden)
        new_model = self.trainer.save(self.out / "weights" / f"step-{s:06d}")
        new_drafter = merge_drafters(ro.spots, self.trainer.model, self.out / "drafters", s) if ro.spots else None
        t_train = time.time()
        check, verdict = self._sync(new_model, new_drafter, ro, update.hidden)
        times = StepTimes(start=ro.start, rollout_end=ro.end, train_start=t_train0, train_end=t_train,
                          sync_end=time.time())

        add_step_rows(self.rows, s, ro.rollouts, ro.spots, update.requests, times, self.clock0)
        rec = step_record(s, ro.rollouts, ro.spots, update.requests, times, update.stats, ran, check,
                          update.style_share, verdict.speedup if verdict else math.nan, clock0=self.clock0)
        self.metrics.append(rec)
        self.next_step = s + 1
        if (s + 1) % cfg.checkpoint_every == 0 or s + 1 == cfg.steps:
            self.checkpoint(self.pool.states(), self.engines, self.trainer, self.buffer)
        return rec

    def _shards(self, problems: list[Any], s: int) -> list[list[RolloutRequest]]:
        """The step's requests by worker: whole groups (prompt i on worker i mod W), sampled alike."""
        cfg, n = self.cfg, len(self.pool)
        sampling = Sampling(temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            seed=derive_seed(cfg.seed, Stream.SAMPLING, s))
        return [[RolloutRequest(i, j, p.prompt, sampling) for i, p in enumerate(problems) if i % n == w
                 for j in range(cfg.samples)] for w in range(n)]

    def _idle_work(self, training: bool) -> IdleWork:
        """What idle workers do this step: check the drafters (a switching run, or a warm start's
        staleness) and spot-train the drafter (`training`)."""
        pol, switches = self.cfg.policy, self.engines.switches
        busy = training or switches
        check_k = adaptive_draft_cap(pol) if busy and (switches or pol.drafter.warm_start) else 0
        return IdleWork(check_k=check_k, max_steps=pol.spot_training.steps if training else 0,
                        buffer=self.buffer.records() if training else (),
                        min_idle=pol.spot_training.min_idle_workers)

    def _sync(self, new_model: Path, new_drafter: Path | None, ro: PoolRollout,
              records: list[HiddenRecord]) -> tuple[DrafterCheck | None, SDVerdict | None]:
        """4. The new weights into every engine (in place), then what the engines run next.
        Returns the drafters' check (None: not checked) and SD's verdict on this rollout (None: not judged)."""
        self.pool.sync(str(new_model), str(new_drafter) if new_drafter else None)
        prune(self.out / "weights", keep=new_model)
        if new_drafter is not None:
            self.drafter_dir = new_drafter
        self.model_dir = new_model
        checks = self.engines.switches or self.cfg.policy.drafter.warm_start
        check = self.check_drafters(records, ro) if checks else None
        if check is not None:
            static = "" if math.isnan(check.static) else f", the initial drafter kept static {check.static:.2f}"
            self.log(f"  drafter check: EAGLE {check.eagle:.2f} vs n-gram {check.ngram:.2f} estimated tokens per "
                     f"pass{static} ({self.engines.kind} ran, vLLM measured "
                     f"{rollout_accept_len(ro.rollouts.values()):.2f})")
        judged = self.engines.kind != DrafterKind.NONE and self.engines.guarded
        verdict = self._verdict(ro) if judged else None
        self._run_engines(self.engines.next(check, verdict, has_drafter=self.drafter_dir is not None))
        return check, verdict

    def check_drafters(self, records: list[HiddenRecord], ro: PoolRollout) -> DrafterCheck | None:
        """The drafters' check of this step: the idle workers' (step 2), else, for a switching run
        with SD on, worker 0's on up to 8 of the update's `records` (None: nothing to check on).
        Not while SD is off: bringing SD back can wait for an idle worker's check."""
        check = DrafterCheck.mean(sp.check for sp in ro.spots)
        if (check is None and self.engines.switches and self.engines.kind != DrafterKind.NONE
                and records and self.drafter_dir is not None):
            sample = records[:: max(1, len(records) // 8)][:8]  # the check runs inside the sync
            check = self.pool.check_drafters(sample, adaptive_draft_cap(self.cfg.policy))
        return check

    def _verdict(self, ro: PoolRollout) -> SDVerdict | None:
        verdict = rollout_verdict((self.pool.plain_costs[i], r.steps) for i, r in ro.rollouts.items())
        if verdict is not None:
            self.log(f"  SD vs a plain engine: {verdict.speedup:.2f}x decode speed on this rollout "
                     f"({verdict.steps} engine steps)")
        return verdict

    def probe_sd(self) -> None:
        """Before a fresh guarded run's first step: whether SD pays on this model, on this machine.
        Every worker decodes a probe (`probe_requests`: a worker's share of a step, capped short,
        contexts as deep as a rollout's) on its SD engine, priced at its plain engine; where SD
        loses (`sd_next`) the engines restart without a drafter now, before any RL step."""
        cfg = self.cfg
        n = min(cfg.max_num_seqs, -(-cfg.prompts // cfg.workers) * cfg.samples)
        seeds = [derive_seed(cfg.seed, Stream.PROBE, i) for i in range(len(self.pool))]
        steps = self.pool.probe([probe_requests(n, seed, cfg.temperature, cfg.max_tokens, cfg.mix,
                                                problems=self.source.draw(n, seed)) for seed in seeds])
        self.probe = rollout_verdict(zip(self.pool.plain_costs, steps))
        if self.probe is None:
            return
        kind = self.engines.kind
        off = sd_next(None, self.probe, kind, math.nan, cfg.policy.drafter.switch_margin)
        self.log(f"  probe: {kind} decodes at {self.probe.speedup:.2f}x a plain engine's speed "
                 f"({self.probe.steps} engine steps)" + ("; SD off from the first step" if off else ""))
        if off is not None:
            self.probe_off = True
            self._run_engines(self.engines.without_sd(off))

    def _run_engines(self, engines: EngineState) -> None:
        """The engines as `engines` says; a drafter change restarts every worker's engine."""
        if engines.kind != self.engines.kind:
            self.pool.run_engines(engines, str(self.drafter_dir) if self.drafter_dir else None)
            self.log(f"  switched the engines from {self.engines.kind} to {engines.kind}")
        self.engines = engines


def run_training(cfg: RunConfig, resume: bool = False, log: Callable[[str], None] | None = print,
                 on_step: Callable[[StepRecord], None] | None = None) -> TrainingRun:
    """`tlt train`: open (or resume) the run, run its remaining steps, write its outputs and the final drafter."""
    run = TrainingRun(cfg, log).open(resume=resume)
    try:
        while run.next_step < cfg.steps:
            rec = run.step()
            if on_step is not None:
                on_step(rec)
        run.write_outputs()
        run.export_drafter()
    finally:
        run.close()
    return run
