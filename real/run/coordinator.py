"""`tlt train`: GRPO on vLLM rollouts with TLT's spot drafter training and adaptive SD, on Ray.

One RL step (`TrainingRun.step`), as the coordinator runs it in the driver process:

1. rollout: the step's prompts (seeded by (seed, step)) are split by group over the rollout
   workers (real/run/pool.py, real/run/worker.py), which decode their shards at once; each
   engine's bandit picks draft lengths between engine steps (real/rollout/adaptive.py). Once
   `min_idle_workers` are done, each idle worker checks the drafters on its fresh responses and
   spot-trains the drafter until the last shard is done; the rollout never waits for them.
2. update: rewards and one GRPO step on this machine's cores (real/run/policy_update.py); its
   no-grad pass yields the hidden states the drafter buffer keeps. Drafters trained by several
   workers are averaged (real/run/drafter_files.py).
3. sync: the new weights are reloaded in every engine, then the run's `EnginePlan` decides what
   the engines run next (real/run/engine_plan.py: n-gram or the learned drafter by the switch
   rule, and no drafter while SD decodes slower than a plain engine, as priced by
   real/run/sd_pricing.py); a change restarts every worker's engine. A guarded run asks the same
   before step 0, from a short probe rollout (`probe_sd`).
4. record: metrics, the trace and, every `checkpoint_every` steps, a checkpoint
   (real/run/outputs.py).

Every random choice draws from the run seed's streams (`workbench.contracts.seeds`).
`tlt bench real` interleaves the `step()`s of several runs.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from real.rollout.requests import EngineStepRow, RolloutRequest, Sampling
from real.rollout.spec_config import adaptive_draft_cap
from real.run.checkpoints import Checkpoint, load_latest
from real.run.config import RunConfig, TrainError, default_drafter  # noqa: F401 (re-exported)
from real.run.drafter_files import initial_drafter, merge_drafters, prune
from real.run.engine_plan import EnginePlan
from real.run.outputs import RunOutputs
from real.run.policy_update import Update, policy_update
from real.run.pool import IdleWork, PoolRollout, WorkerPool
from real.run.records import (
    DrafterCheck,
    StepRecord,
    StepTimes,
    add_step_rows,
    rollout_accept_len,
    step_record,
)
from real.run.sd_pricing import SDVerdict, probe_requests, rollout_verdict
from real.run.task_source import task_source
from workbench.contracts.policy import DrafterKind
from workbench.contracts.seeds import Stream, derive_seed


@dataclass(frozen=True)
class StepUpdate:
    """An RL step's policy update and the files it wrote (epoch seconds)."""

    update: Update
    model: Path  # the new weights
    drafter: Path | None  # the drafter the idle workers trained (None: none trained)
    start: float
    end: float


@dataclass(frozen=True)
class StepSync:
    """What the sync judged: the drafters' check (None: not checked) and SD's verdict on the
    rollout (None: not judged); `end` epoch seconds."""

    check: DrafterCheck | None
    verdict: SDVerdict | None
    end: float


class TrainingRun:
    """One `tlt train` run: open(), step() x N, close(). State lives under `cfg.out`; its records
    and files are `outputs`."""

    def __init__(self, cfg: RunConfig, log: Callable[[str], None] | None = print):
        cfg.check()
        self.cfg = cfg
        self.log = log or (lambda m: None)
        self.source = task_source(cfg.model, cfg.task, cfg.mix)  # the prompts and the reward
        self.outputs = RunOutputs(cfg, self.source)
        self.engines = EnginePlan.initial(cfg.policy, cfg.start_tables)
        self.pool: WorkerPool | None = None
        self.model_dir: Path = Path(cfg.model)  # the weights the engines run
        self.drafter_dir: Path | None = None  # the learned drafter they load (None: none yet)
        # per worker, the plain engine's steps SD is priced against (kept after `close`)
        self.plain_rows: list[list[EngineStepRow]] = []

    @property
    def out(self) -> Path:
        return self.outputs.out

    @property
    def metrics(self) -> list[StepRecord]:
        return self.outputs.metrics

    # ------------------------------------------------------------ set-up

    def open(self, resume: bool = False) -> TrainingRun:
        cfg = self.cfg
        t_open = time.perf_counter()
        ckpt = load_latest(self.out) if resume else None
        if not resume and (self.out / "checkpoints").exists():
            raise TrainError(f"--out {self.out}: holds a run already; add --resume to continue "
                             "it or choose another --out")
        if resume and ckpt is None:
            self.log(f"--resume: no finished step under {self.out}; starting from step 0")
        self.out.mkdir(parents=True, exist_ok=True)
        self.model_dir = ckpt.path("model") if ckpt else Path(cfg.model)
        self.drafter_dir = initial_drafter(cfg, ckpt, self.out)
        self._open_trainer(ckpt)
        self._start_workers(ckpt)
        if ckpt is None and self.engines.guarded:
            self.probe_sd()
        self.outputs.setup_s = time.perf_counter() - t_open
        return self

    def _open_trainer(self, ckpt: Checkpoint | None) -> None:
        """The drafter buffer and the GRPO trainer, fresh or as `ckpt` saved them."""
        import torch

        from real.drafter.spot import DrafterBuffer
        from real.grpo import GRPOConfig, GRPOTrainer

        cfg = self.cfg
        self.buffer = DrafterBuffer(cfg.policy.spot_training.buffer)
        if ckpt is not None:
            self.engines = self.outputs.restore(ckpt, self.engines)
            if ckpt.path("buffer.pt").exists():
                self.buffer = torch.load(ckpt.path("buffer.pt"), weights_only=False)
            self.log(f"resuming {self.out} after step {ckpt.step}")
        # The update runs in this process while every rollout worker waits for the sync: all of
        # this machine's cores are its own then (a Ray cluster's workers are on other machines).
        grpo = GRPOConfig(lr=cfg.lr, kl_coef=cfg.kl_coef,
                          minibatch=min(16, cfg.prompts * cfg.samples),
                          drafter_layers=cfg.drafter_layers())
        self.trainer = GRPOTrainer(self.model_dir, grpo, seed=derive_seed(cfg.seed, Stream.GRPO),
                                   reference_dir=cfg.model if cfg.kl_coef > 0 else None,
                                   threads=os.cpu_count() or 1, device=cfg.device)
        if ckpt is not None:
            self.trainer.load_state_dict(torch.load(ckpt.path("trainer.pt"), weights_only=False))

    def _start_workers(self, ckpt: Checkpoint | None) -> None:
        import torch

        drafter = str(self.drafter_dir) if self.drafter_dir else None
        self.pool = WorkerPool(self.cfg, str(self.model_dir), drafter, self.engines)
        self.outputs.settings, self.plain_rows = self.pool.settings, self.pool.plain_rows
        for i, c in enumerate(self.pool.plain_costs):
            if c is not None:
                self.log(f"  worker {i}'s plain engine: {c.fixed_s * 1e3:.2f} ms + "
                         f"{c.per_seq_s * 1e3:.3f} ms per sequence a decode step "
                         f"({c.steps} steps measured)")
        self.log(f"{len(self.pool)} rollout workers up (policy {self.cfg.policy.name}, "
                 f"drafter {self.engines.kind})")
        if ckpt is not None and ckpt.path("workers.pt").exists():
            self.pool.load_states(torch.load(ckpt.path("workers.pt"), weights_only=False))

    def probe_sd(self) -> None:
        """Before a fresh guarded run's first step: whether SD pays on this model, on this machine.
        Every worker decodes a probe (`probe_requests`: a worker's share of a step, capped short,
        contexts as deep as a rollout's) on its SD engine, priced at its plain engine; where SD
        loses (`EnginePlan.after_probe`) the engines restart without a drafter now, before any
        RL step."""
        cfg = self.cfg
        n = min(cfg.max_num_seqs, -(-cfg.prompts // cfg.workers) * cfg.samples)
        seeds = [derive_seed(cfg.seed, Stream.PROBE, i) for i in range(len(self.pool))]
        steps = self.pool.probe([probe_requests(n, seed, cfg.temperature, cfg.max_tokens, cfg.mix,
                                                problems=self.source.draw(n, seed))
                                 for seed in seeds])
        probe = self.outputs.probe = rollout_verdict(zip(self.pool.plain_costs, steps))
        if probe is None:
            self.log("  probe: no decoding step to price SD by; SD runs as the policy sets it")
            return
        kind = self.engines.kind
        after = self.engines.after_probe(probe)
        off = after.sd_off is not None
        self.log(f"  probe: {kind} decodes at {probe.speedup:.2f}x a plain engine's speed "
                 f"({probe.steps} engine steps)" + ("; SD off from the first step" if off else ""))
        if off:
            self.outputs.probe_off = True
            self._run_engines(after)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self.pool = None

    # ------------------------------------------------------------ one RL step

    def step(self) -> StepRecord:
        """One RL step: rollout (spot training in the idle time), update, sync, record."""
        s = self.outputs.next_step
        problems = self.source.draw(self.cfg.prompts, derive_seed(self.cfg.seed, Stream.PROMPTS, s))
        ran = self.engines.kind  # the drafter this step decodes with; its sync may switch
        ro = self.rollout(problems, s)
        upd = self.update(problems, ro, s)
        synced = self.sync(upd, ro)
        return self.record(s, ran, ro, upd, synced)

    @property
    def keeps_hidden(self) -> bool:
        """Whether the run keeps a drafter buffer of the update's hidden states."""
        pol = self.cfg.policy
        return pol.spot_training.enabled and pol.drafter.kind == DrafterKind.EAGLE

    def rollout(self, problems: list[Any], s: int) -> PoolRollout:
        """1. Every worker decodes its shard; idle workers check and spot-train the drafter."""
        training = self.keeps_hidden and s % self.cfg.policy.spot_training.interval_steps == 0
        return self.pool.rollout(self._shards(problems, s), s, self.outputs.clock0,
                                 self._idle_work(training))

    def update(self, problems: list[Any], ro: PoolRollout, s: int) -> StepUpdate:
        """2. Rewards and one GRPO step; the new weights and the idle workers' drafter saved."""
        start = time.time()
        keeps = self.keeps_hidden
        update = policy_update(self.trainer, problems, ro.rollouts, self.source,
                               keeps or self.engines.switches)
        if keeps:
            self.buffer.add(s, update.hidden)
        model = self.trainer.save(self.out / "weights" / f"step-{s:06d}")
        drafter = None
        if ro.spots:
            drafter = merge_drafters(ro.spots, self.trainer.model, self.out / "drafters", s,
                                     self.drafter_dir)
        return StepUpdate(update, model, drafter, start, time.time())

    def sync(self, upd: StepUpdate, ro: PoolRollout) -> StepSync:
        """3. The new weights into every engine (in place), then what the engines run next."""
        self.pool.sync(str(upd.model), str(upd.drafter) if upd.drafter else None)
        prune(self.out / "weights", keep=upd.model)
        if upd.drafter is not None:
            self.drafter_dir = upd.drafter
        self.model_dir = upd.model
        checks = self.engines.switches or self.cfg.policy.drafter.warm_start
        check = self.check_drafters(upd.update.hidden, ro) if checks else None
        if check is not None:
            log_check(self.log, check, self.engines.kind, ro)
        judged = self.engines.kind != DrafterKind.NONE and self.engines.guarded
        verdict = self._verdict(ro) if judged else None
        has_drafter = self.drafter_dir is not None
        self._run_engines(self.engines.next(check, verdict, has_drafter=has_drafter))
        return StepSync(check, verdict, time.time())

    def record(self, s: int, ran: DrafterKind, ro: PoolRollout, upd: StepUpdate,
               synced: StepSync) -> StepRecord:
        """4. The step's rows and metrics; a checkpoint every `checkpoint_every` steps (and at
        the last)."""
        cfg, out = self.cfg, self.outputs
        times = StepTimes(start=ro.start, rollout_end=ro.end, train_start=upd.start,
                          train_end=upd.end, sync_end=synced.end)
        u = upd.update
        add_step_rows(out.rows, s, ro.rollouts, ro.spots, u.requests, times, out.clock0)
        speedup = synced.verdict.speedup if synced.verdict else math.nan
        rec = step_record(s, ro.rollouts, ro.spots, u.requests, times, u.stats, ran, synced.check,
                          u.style_share, speedup, clock0=out.clock0)
        out.add(rec)
        if (s + 1) % cfg.checkpoint_every == 0 or s + 1 == cfg.steps:
            out.checkpoint(self.model_dir, self.drafter_dir, self.pool.states(), self.engines,
                           self.trainer, self.buffer)
        return rec

    def _shards(self, problems: list[Any], s: int) -> list[list[RolloutRequest]]:
        """The step's requests by worker: whole groups (prompt i on worker i mod W), sampled
        alike."""
        cfg, n = self.cfg, len(self.pool)
        sampling = Sampling(temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            seed=derive_seed(cfg.seed, Stream.SAMPLING, s))
        return [[RolloutRequest(i, j, p.prompt, sampling)
                 for i, p in enumerate(problems) if i % n == w
                 for j in range(cfg.samples)]
                for w in range(n)]

    def _idle_work(self, training: bool) -> IdleWork:
        """What idle workers do this step: check the drafters (a switching run, or a warm start's
        staleness) and spot-train the drafter (`training`)."""
        pol, switches = self.cfg.policy, self.engines.switches
        busy = training or switches
        check_k = adaptive_draft_cap(pol) if busy and (switches or pol.drafter.warm_start) else 0
        return IdleWork(check_k=check_k, max_steps=pol.spot_training.steps if training else 0,
                        buffer=self.buffer.records() if training else (),
                        min_idle=pol.spot_training.min_idle_workers)

    def check_drafters(self, records: list[Any], ro: PoolRollout) -> DrafterCheck | None:
        """The drafters' check of this step: the idle workers', else, for a switching run with
        SD on, worker 0's on up to 8 of the update's `records` (None: nothing to check on).
        Not while SD is off: bringing SD back can wait for an idle worker's check."""
        check = DrafterCheck.mean(sp.check for sp in ro.spots)
        if (check is None and self.engines.switches and self.engines.kind != DrafterKind.NONE
                and records and self.drafter_dir is not None):
            sample = records[:: max(1, len(records) // 8)][:8]  # the check runs inside the sync
            check = self.pool.check_drafters(sample, adaptive_draft_cap(self.cfg.policy))
        return check

    def _verdict(self, ro: PoolRollout) -> SDVerdict | None:
        costs = self.pool.plain_costs
        verdict = rollout_verdict((costs[i], r.steps) for i, r in ro.rollouts.items())
        if verdict is not None:
            self.log(f"  SD vs a plain engine: {verdict.speedup:.2f}x decode speed on this "
                     f"rollout ({verdict.steps} engine steps)")
        return verdict

    def _run_engines(self, engines: EnginePlan) -> None:
        """The engines as `engines` says; a drafter change restarts every worker's engine."""
        if engines.kind != self.engines.kind:
            drafter = str(self.drafter_dir) if self.drafter_dir else None
            self.pool.run_engines(engines, drafter)
            self.log(f"  switched the engines from {self.engines.kind} to {engines.kind}")
        self.engines = engines


def log_check(log: Callable[[str], None], check: DrafterCheck, ran: DrafterKind,
              ro: PoolRollout) -> None:
    """The drafters' check as the run's log shows it."""
    static = ""
    if not math.isnan(check.static):
        static = f", the initial drafter kept static {check.static:.2f}"
    measured = rollout_accept_len(ro.rollouts.values())
    # no verify pass to measure while SD is off (the engines ran no drafter)
    ran_text = (f"{ran} ran: no SD, nothing measured" if math.isnan(measured)
                else f"{ran} ran, vLLM measured {measured:.2f}")
    log(f"  drafter check: EAGLE {check.eagle:.2f} vs n-gram {check.ngram:.2f} estimated tokens "
        f"per pass{static} ({ran_text})")


def run_training(cfg: RunConfig, resume: bool = False, log: Callable[[str], None] | None = print,
                 on_step: Callable[[StepRecord], None] | None = None) -> TrainingRun:
    """`tlt train`: open (or resume) the run, run its remaining steps, write its outputs and the
    final drafter."""
    run = TrainingRun(cfg, log).open(resume=resume)
    try:
        while run.outputs.next_step < cfg.steps:
            rec = run.step()
            if on_step is not None:
                on_step(rec)
        run.outputs.write()
        run.outputs.export_drafter(run.drafter_dir)
    finally:
        run.close()
    return run
