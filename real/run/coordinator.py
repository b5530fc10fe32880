"""`tlt train`: GRPO on vLLM rollouts with TLT's spot drafter training and adaptive SD, on Ray.

One RL step, as the coordinator (this module, in the driver process) runs it:

1. rollout: the step's prompts are drawn (seeded by (seed, step)) and split by group over the
   W rollout workers (Ray actors, real/run/worker.py), which decode their shards at once. Each
   engine's controller (real/rollout/adaptive.py) picks draft lengths between engine steps,
   starting from `RunConfig.start_tables` (what a profile predicts best, workbench/schedule.py).
2. idle workers: as soon as `min_idle_workers` workers have finished, every idle worker first
   judges the drafters on its fresh responses (for the switch rule, step 4, and the staleness
   figures) and then trains the drafter on their hidden states plus the buffer of recent steps
   (from the trainer's forward pass, real/grpo.py), until the last worker finishes; then it is
   told to stop and returns within one drafter step. The rollout never waits for it: the
   coordinator stops trainers only after the last rollout returned, and a worker trains only
   once its own shard is done. Drafters trained by several workers are averaged by steps done.
   Training runs in every `training.interval_steps`-th RL step; the judging in every step.
3. policy update: rewards (real/tiny/task.py), one GRPO step (real/grpo.py: packed forwards,
   no padding) on all of this machine's cores, which the waiting workers leave free; its first,
   no-grad pass yields the hidden states the drafter buffer keeps.
4. sync: new target (and drafter) weights are reloaded in place in every engine. With
   `ngram_fallback`, the engines switch between n-gram and EAGLE here, both ways, by
   `choose_drafter`: the drafter they do not run takes over when its tokens per verify pass
   beat the running one's by `switch_margin` (relative). Both are judged on the same held-out
   responses of this step at the engines' largest draft length (`DrafterCheck`): the learned
   drafter the engines ran by its greedy-chain agreement with the target, n-gram by replaying
   vLLM's prompt lookup over the same responses (real/drafter/spot.py). The judging happens in
   an idle worker's time (step 2), on responses no drafter trained on; only when no worker was
   idle long enough does the sync judge, on the update's hidden states. A switch restarts every
   worker's engine in its process (real/run/worker.py). A cold learned drafter starts behind
   n-gram; a warm-started one (`drafter.warm_start`) starts on the engines. Adaptive policies
   (a bandit other than `fixed`) also restart the engines without a drafter while SD decodes
   slower than a plain engine would (each worker measures one at start-up), and bring SD back
   once the drafter's estimates predict it wins (real/run/sd_guard.py); the first verdict comes
   from a short probe rollout before step 0 (`_probe_sd`), so a model where SD loses starts
   without it. The rules: real/run/engine_choice.py.
5. checkpoint (atomic, real/run/checkpoints.py), metrics and the trace (workbench/contracts/
   trace.py; a per-worker timeline in the simulator's format; rows by real/run/records.py).

Every random choice draws from the run seed's streams (`workbench.contracts.seeds`): the
prompts and sampling seeds of step s, the GRPO update, a fresh drafter, each worker's engine,
spot trainer and bandit. `TrainingRun.step()` runs one RL step: `tlt bench real` interleaves runs.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from real.drafter.records import HiddenRecord
from real.rollout.requests import EngineStepRow, RolloutRequest, Sampling
from real.rollout.spec_config import adaptive_draft_cap
from real.run.capture import machine_info
from real.run.config import RunConfig, TrainError, default_drafter  # noqa: F401 (re-exported)
from real.run.checkpoints import Checkpoint, load_latest, save_checkpoint
from real.run.engine_choice import next_engines
from real.run.sd_guard import PlainCost, SDOff, SDVerdict, guards_sd, plain_cost, probe_requests, rollout_verdict, sd_next
from real.run.records import (
    DrafterCheck,
    RunRows,
    StepRecord,
    StepTimes,
    WorkerRollout,
    WorkerSpot,
    add_step_rows,
    idle_check,
    metrics_frame,
    rollout_accept_len,
    step_record,
)
from real.tiny import task
from real.tiny.model import variant_of
from workbench.contracts.fileio import write_atomic, write_dir_atomic
from workbench.contracts.schema import to_mapping
from workbench.contracts.seeds import Stream, derive_seed
from workbench.contracts.trace import RequestRow, Trace, write_trace

if TYPE_CHECKING:
    from real.grpo import StepStats  # torch: imported where a run starts


class TrainingRun:
    """One `tlt train` run: open(), step() x N, close(). State lives under `cfg.out`."""

    def __init__(self, cfg: RunConfig, log: Callable[[str], None] | None = print):
        cfg.check()
        self.cfg = cfg
        self.log = log or (lambda m: None)
        self.out = Path(cfg.out)
        self.metrics: list[StepRecord] = []
        self.rows = RunRows()
        self.next_step = 0
        self.kind = cfg.policy.drafter.kind
        self.workers: list[Any] = []
        self.clock0 = time.time()
        self.settings: dict[str, Any] = {}
        self.sd_off: SDOff | None = None  # why the engines run without a drafter (real/run/sd_guard.py)
        self.plain_rows: list[list[EngineStepRow]] = []  # per worker, its plain engine's measured steps
        self.plain_costs: list[PlainCost | None] = []  # and their fit, what SD is priced against
        self.probe: SDVerdict | None = None  # SD's verdict before step 0 (`_probe_sd`; None: not probed)
        self.probe_off = False  # whether the probe turned SD off before step 0
        self.setup_s = math.nan  # seconds `open` took: engines, the plain engine, the probe
        self.variant = variant_of(cfg.model)  # the reward the model was built for (real/tiny/task.py)

    # ------------------------------------------------------------ set-up

    def open(self, resume: bool = False) -> "TrainingRun":
        import torch

        from real.drafter.spot import DrafterBuffer
        from real.grpo import GRPOConfig, GRPOTrainer

        cfg = self.cfg
        t_open = time.perf_counter()
        ckpt = load_latest(self.out) if resume else None
        if not resume and (self.out / "checkpoints").exists():
            raise TrainError(f"--out {self.out}: holds a run already; add --resume to continue it or choose another --out")
        if resume and ckpt is None:
            self.log(f"--resume: no finished step under {self.out}; starting from step 0")
        self.out.mkdir(parents=True, exist_ok=True)
        model_dir = ckpt.path("model") if ckpt else Path(cfg.model)
        drafter_dir = self._initial_drafter(ckpt)
        if ckpt is not None:
            st = ckpt.state
            self.next_step = ckpt.step + 1
            self.kind = st["kind"]
            self.sd_off = SDOff(**st["sd_off"]) if st.get("sd_off") else None
            self.metrics = [StepRecord.from_dict(m) for m in st["metrics"]]
            self.rows = torch.load(ckpt.path("rows.pt"), weights_only=False)
            self.clock0 = time.time() - st["elapsed_s"]
            self.log(f"resuming {self.out} after step {ckpt.step}")
        elif self.kind == "eagle" and cfg.policy.drafter.ngram_fallback and not cfg.policy.drafter.warm_start:
            self.kind = "ngram"  # a cold drafter starts behind n-gram; the switch rule decides
        self.model_dir, self.drafter_dir = Path(model_dir), drafter_dir
        self.buffer = DrafterBuffer(cfg.policy.training.buffer)
        if ckpt is not None and ckpt.path("buffer.pt").exists():
            self.buffer = torch.load(ckpt.path("buffer.pt"), weights_only=False)
        # The update runs in this process while every rollout worker waits for the sync: all of
        # this machine's cores are its own then (a Ray cluster's workers are on other machines).
        self.trainer = GRPOTrainer(model_dir, GRPOConfig(lr=cfg.lr, kl_coef=cfg.kl_coef,
                                                         minibatch=min(16, cfg.prompts * cfg.samples)),
                                   seed=derive_seed(cfg.seed, Stream.GRPO),
                                   reference_dir=cfg.model if cfg.kl_coef > 0 else None,
                                   threads=os.cpu_count() or 1)
        if ckpt is not None:
            self.trainer.load_state_dict(torch.load(ckpt.path("trainer.pt"), weights_only=False))
        self._start_workers(ckpt)
        if ckpt is None and guards_sd(cfg.policy):
            self._probe_sd()
        self.setup_s = time.perf_counter() - t_open
        return self

    def _initial_drafter(self, ckpt: Checkpoint | None) -> Path | None:
        """The drafter the engines start with: the checkpoint's, the warm-start one, or a fresh one."""
        pol = self.cfg.policy
        if pol.drafter.kind != "eagle":
            return None
        if ckpt is not None and ckpt.path("drafter").exists():
            return ckpt.path("drafter")
        if pol.drafter.warm_start:
            return Path(self.cfg.drafter)
        import torch

        from real.drafter.checkpoint import save_drafter
        from real.drafter.eagle import EagleDrafter, load_target

        target = load_target(self.cfg.model)
        torch.manual_seed(derive_seed(self.cfg.seed, Stream.DRAFTER_INIT))
        return save_drafter(EagleDrafter.from_target(target), self.out / "drafter-initial", target.config)

    def _start_workers(self, ckpt: Checkpoint | None) -> None:
        """Ray (a local one unless `address`), one RolloutWorker actor per worker, their saved state."""
        import ray
        import torch

        from real.run.worker import RolloutWorker

        cfg = self.cfg
        if not ray.is_initialized():
            if cfg.address:
                ray.init(address=cfg.address, log_to_driver=False)
            else:
                # Ray's CPUs are scheduling slots: each worker takes one, and `tlt bench real`
                # keeps two runs' workers alive at once, so a local Ray gets enough slots for
                # that; the threads each worker really uses are set below.
                ray.init(num_cpus=max(os.cpu_count() or 1, 2 * cfg.workers), include_dashboard=False,
                         log_to_driver=False)
        threads = max(1, (os.cpu_count() or 1) // cfg.workers) if not cfg.address else 1
        actor = ray.remote(num_cpus=1, max_concurrency=2)(RolloutWorker)
        self.workers = [
            actor.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}}).remote(
                i, str(self.model_dir), cfg.policy, str(self.drafter_dir) if self.drafter_dir else None,
                cfg.seed, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_model_len,
                spot_lr=cfg.policy.training.lr, drafter_kind=self.kind, threads=threads,
                start_tables={k: list(v) for k, v in cfg.start_tables.items()})
            for i in range(cfg.workers)]
        ray.get([w.ready.remote() for w in self.workers])  # all constructed: `start` runs on all at once
        self.plain_rows = ray.get([w.start.remote() for w in self.workers])
        self.settings = ray.get(self.workers[0].settings.remote())
        self.plain_costs = [plain_cost(rows) for rows in self.plain_rows]
        for i, c in enumerate(self.plain_costs):
            if c is not None:
                self.log(f"  worker {i}'s plain engine: {c.fixed_s * 1e3:.2f} ms + {c.per_seq_s * 1e3:.3f} ms per "
                         f"sequence a decode step ({c.steps} steps measured)")
        self.log(f"{cfg.workers} rollout workers up (policy {cfg.policy.name}, drafter {self.kind})")
        if ckpt is not None and ckpt.path("workers.pt").exists():
            states = torch.load(ckpt.path("workers.pt"), weights_only=False)
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

    # ------------------------------------------------------------ one RL step

    def step(self) -> StepRecord:
        """One RL step: rollout with spot training, policy update, sync; then its records and,
        every `checkpoint_every` steps (and at the last), a checkpoint."""
        cfg, s = self.cfg, self.next_step
        problems = task.make_problems(cfg.prompts, derive_seed(cfg.seed, Stream.PROMPTS, s), cfg.mix)
        keeps = cfg.policy.training.enabled and cfg.policy.drafter.kind == "eagle"  # a drafter buffer
        training = keeps and s % cfg.policy.training.interval_steps == 0
        ran = self.kind  # the drafter this step decodes with; its sync may switch to the other
        t0, rollouts, spots, t_rollout = self._rollout(problems, s, training)
        t_train0 = time.time()
        requests, stats, hidden, style_share = self._update(problems, rollouts, s, keeps, keeps or self.judges_drafters)
        new_model = self.trainer.save(self.out / "weights" / f"step-{s:06d}")
        new_drafter = self._merge_drafters(spots, s) if spots else None
        t_train = time.time()
        check, verdict = self._sync(new_model, new_drafter, rollouts, hidden, spots)
        times = StepTimes(start=t0, rollout_end=t_rollout, train_start=t_train0, train_end=t_train, sync_end=time.time())

        add_step_rows(self.rows, s, rollouts, spots, requests, times, self.clock0)
        rec = step_record(s, rollouts, spots, requests, times, stats, ran, check, style_share,
                          verdict.speedup if verdict else math.nan, clock0=self.clock0)
        self.metrics.append(rec)
        self.next_step = s + 1
        if (s + 1) % cfg.checkpoint_every == 0 or s + 1 == cfg.steps:
            self.checkpoint()
        return rec

    def _rollout(self, problems: list[task.Problem], s: int, training: bool
                 ) -> tuple[float, dict[int, WorkerRollout], list[WorkerSpot], float]:
        """1-2. The workers decode their shards at once; once `min_idle_workers` are done, idle
        workers judge the drafters and spot-train the learned one (`training`) until the last
        shard is done. Returns the rollout's start, the workers' rollouts and idle sessions, and
        the rollout's end (epoch seconds)."""
        import ray

        cfg, pol = self.cfg, self.cfg.policy
        n_workers = len(self.workers)
        sampling = Sampling(temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            seed=derive_seed(cfg.seed, Stream.SAMPLING, s))
        shards = [[RolloutRequest(i, j, p.prompt, sampling) for i, p in enumerate(problems) if i % n_workers == w
                   for j in range(cfg.samples)] for w in range(n_workers)]
        buffer_ref = ray.put(self.buffer.records()) if training else None
        idle_work = training or self.judges_drafters
        check_k = adaptive_draft_cap(pol) if self.judges_drafters or pol.drafter.warm_start else 0
        max_steps = pol.training.steps if training else 0
        t0 = time.time()
        pending = {w.rollout.remote(shard, s, self.clock0): i for i, (w, shard) in enumerate(zip(self.workers, shards))}
        rollouts: dict[int, WorkerRollout] = {}
        idle: list[int] = []
        spot_refs: dict[Any, int] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                rollouts[i] = ray.get(ref)
                idle.append(i)
            if idle_work and pending and len(idle) >= pol.training.min_idle_workers:
                for i in idle:
                    if i not in spot_refs.values():
                        seqs = [rollouts[i].sequence(rid) for rid in rollouts[i].outputs]
                        ref = self.workers[i].spot_train.remote(seqs, buffer_ref or [], max_steps, check_k)
                        spot_refs[ref] = i
        t_rollout = time.time()
        for i in spot_refs.values():
            self.workers[i].stop_spot.remote()
        return t0, rollouts, ray.get(list(spot_refs)), t_rollout

    @property
    def judges_drafters(self) -> bool:
        """Whether this run switches between n-gram and the learned drafter (`_next_engines`)."""
        return self.cfg.policy.drafter.kind == "eagle" and self.cfg.policy.drafter.ngram_fallback

    def _update(self, problems: list[task.Problem], rollouts: dict[int, WorkerRollout], s: int, training: bool,
                keep_hidden: bool) -> tuple[list[RequestRow], StepStats, list[HiddenRecord], float]:
        """3. Rewards and one GRPO step; the drafter buffer keeps the step's hidden states. Also
        returns the share of responses in the style the reward asks for (NaN: any style scores)."""
        from real.grpo import ScoredResponse

        requests, batch = [], []
        rewarded, styled = task.variant(self.variant).rewarded, 0
        for i in range(len(self.workers)):
            r = rollouts[i]
            for row in r.requests:
                out = r.outputs[row.request_id]
                row.reward = float(task.reward(problems[row.prompt_id], out.text, self.variant))
                styled += task.style_of(out.text) in rewarded
                requests.append(row)
                batch.append(ScoredResponse(list(r.prompt_ids[row.request_id]), list(out.token_ids), row.reward,
                                            row.prompt_id))
        stats, hidden = self.trainer.step(batch, keep_hidden=keep_hidden)
        if training:
            self.buffer.add(s, hidden)
        return requests, stats, hidden, (styled / len(requests) if rewarded else math.nan)

    def _sync(self, new_model: Path, new_drafter: Path | None, rollouts: dict[int, WorkerRollout],
              records: list[HiddenRecord], spots: list[WorkerSpot]) -> tuple[DrafterCheck | None, SDVerdict | None]:
        """4. The new weights into every engine (in place), then the engines' next drafter
        (`_next_engines`). Returns the drafters' check (None: not judged) and SD's verdict on this
        rollout (None: not judged)."""
        import ray

        ray.get([w.sync.remote(str(new_model), str(new_drafter) if new_drafter else None) for w in self.workers])
        self._prune(self.out / "weights", keep=new_model)
        if new_drafter is not None:
            self.drafter_dir = new_drafter
        self.model_dir = new_model
        check = self.judge(records, spots) if self.judges_drafters or self.cfg.policy.drafter.warm_start else None
        verdict = self._next_engines(rollouts, check)
        return check, verdict

    def judge(self, records: list[HiddenRecord], spots: list[WorkerSpot]) -> DrafterCheck | None:
        """The drafters' check of this step: the idle workers' (step 2), else, for a run that
        switches, the sync's own on the update's `records` (None: nothing to judge on). Not the
        sync's while SD is off: bringing SD back can wait for an idle worker's check, and the
        sync's took up to 9 s of a step on this machine."""
        check = idle_check(spots)
        if check is None and self.judges_drafters and self.kind != "none" and records and self.drafter_dir is not None:
            check = self.check_drafters(records)
        return check

    def _merge_drafters(self, spots: list[WorkerSpot], s: int) -> Path | None:
        from real.drafter.checkpoint import save_drafter
        from real.drafter.eagle import EagleDrafter
        from real.drafter.spot import average_states

        trained = [sp for sp in spots if sp.steps > 0]
        if not trained:
            return None
        state = average_states([sp.state for sp in trained], [float(sp.steps) for sp in trained])
        drafter = EagleDrafter.from_target(self.trainer.model)
        drafter.load_drafter_state_dict(state)
        path = save_drafter(drafter, self.out / "drafters" / f"step-{s:06d}", self.trainer.model.config)
        self._prune(self.out / "drafters", keep=path)
        return path

    @staticmethod
    def _prune(folder: Path, keep: Path, n: int = 2) -> None:
        dirs = sorted(p for p in folder.glob("step-*") if p.is_dir())
        for p in dirs[:-n]:
            if p != keep:
                shutil.rmtree(p, ignore_errors=True)

    def _probe_sd(self) -> None:
        """Before a fresh guarded run's first step: whether SD pays on this model, on this machine.
        Every worker decodes the probe (`probe_requests`: a worker's share of a step, sampled as
        the run samples, capped short, its prompts carrying half their reference solutions so
        contexts run as deep as a rollout's) on its SD engine, all at once as in a rollout, priced at
        its plain engine; where SD loses (`sd_next`) the engines restart without a drafter now,
        in set-up, instead of after a first RL step that decoded slower than no SD would."""
        import ray

        cfg = self.cfg
        n = min(cfg.max_num_seqs, -(-cfg.prompts // cfg.workers) * cfg.samples)
        steps = ray.get([w.probe.remote(probe_requests(n, derive_seed(cfg.seed, Stream.PROBE, i), cfg.temperature,
                                                       cfg.max_tokens, cfg.mix, self.variant))
                         for i, w in enumerate(self.workers)])
        self.probe = rollout_verdict(zip(self.plain_costs, steps))
        if self.probe is None:
            return
        off = sd_next(None, self.probe, self.kind, math.nan, cfg.policy.drafter.switch_margin)
        self.log(f"  probe: {self.kind} decodes at {self.probe.speedup:.2f}x a plain engine's speed "
                 f"({self.probe.steps} engine steps)" + ("; SD off from the first step" if off else ""))
        if off is not None:
            self.sd_off, self.probe_off = off, True
            self._switch_engines("none")

    def _next_engines(self, rollouts: dict[int, WorkerRollout], check: DrafterCheck | None) -> SDVerdict | None:
        """The drafter every engine runs next step (the module doc, step 4; the rules:
        real/run/engine_choice.py); a change restarts the engines. Returns SD's verdict on this
        rollout (None: not judged)."""
        ran = self.kind
        if check is not None:
            static = "" if math.isnan(check.static) else f", the initial drafter kept static {check.static:.2f}"
            self.log(f"  drafter check: EAGLE {check.eagle:.2f} vs n-gram {check.ngram:.2f} estimated tokens per pass"
                     f"{static} ({ran} ran, vLLM measured {rollout_accept_len(rollouts.values()):.2f})")
        verdict = None
        if ran != "none" and guards_sd(self.cfg.policy):
            verdict = rollout_verdict((self.plain_costs[i], r.steps) for i, r in rollouts.items())
            if verdict is not None:
                self.log(f"  SD vs a plain engine: {verdict.speedup:.2f}x decode speed on this rollout "
                         f"({verdict.steps} engine steps)")
        choice = next_engines(ran, self.sd_off, check, verdict, switches=self.judges_drafters,
                              margin=self.cfg.policy.drafter.switch_margin, has_drafter=self.drafter_dir is not None)
        self.sd_off = choice.sd_off
        self._switch_engines(choice.kind)
        return verdict

    def _switch_engines(self, kind: str) -> None:
        """Every worker's engine restarted with drafter `kind` (in its process), unless it runs it."""
        import ray

        if kind == self.kind:
            return
        ray.get([w.switch_drafter.remote(kind, str(self.drafter_dir) if self.drafter_dir else None)
                 for w in self.workers])
        self.log(f"  switched the engines from {self.kind} to {kind}")
        self.kind = kind

    def check_drafters(self, records: list[HiddenRecord]) -> DrafterCheck:
        """Both drafters judged by worker 0 on up to 8 of the step's records, spread over its
        workers and prompts, at the longest draft the engines may run."""
        import ray

        k = adaptive_draft_cap(self.cfg.policy)
        # A small sample: the check runs inside the sync, between RL steps.
        sample = records[:: max(1, len(records) // 8)][:8]
        return ray.get(self.workers[0].check_drafters.remote(sample, k))

    # ------------------------------------------------------------ outputs

    def metrics_frame(self) -> pd.DataFrame:
        return metrics_frame(self.metrics)

    def trace(self) -> Trace:
        meta = {"model": str(Path(self.cfg.model).resolve()), "policy": to_mapping(self.cfg.policy),
                "start_tables": {k: list(v) for k, v in self.cfg.start_tables.items()},
                "start_source": self.cfg.start_source,
                "sd_probe": {**asdict(self.probe), "speedup": self.probe.speedup, "sd_off": self.probe_off}
                if self.probe else None,
                "setup_s": self.setup_s,
                "prompts": self.cfg.prompts, "samples": self.cfg.samples, "max_tokens": self.cfg.max_tokens,
                "seed": self.cfg.seed, "mix": self.cfg.mix, "temperature": self.cfg.temperature,
                "workers": self.cfg.workers, "machine": machine_info(), "engine": self.settings,
                "task": task.__name__, "task_variant": self.variant, "source": "tlt train", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        return self.rows.frames(meta)

    def write_outputs(self) -> None:
        """metrics.csv and trace/ under the run directory (atomic; rewritten after every step)."""
        write_atomic(self.out / "metrics.csv", self.metrics_frame().to_csv(index=False))
        if self.rows.steps:
            write_trace(self.trace(), self.out / "trace")

    def checkpoint(self) -> None:
        import ray
        import torch

        states = ray.get([w.state.remote() for w in self.workers])
        files = {
            "model": lambda p: shutil.copytree(self.model_dir, p),
            "trainer.pt": lambda p: torch.save(self.trainer.state_dict(), p),
            "workers.pt": lambda p: torch.save(states, p),
            "buffer.pt": lambda p: torch.save(self.buffer, p),
            "rows.pt": lambda p: torch.save(self.rows, p),
        }
        if self.drafter_dir is not None:
            files["drafter"] = lambda p: shutil.copytree(self.drafter_dir, p)
        state = {"kind": self.kind, "sd_off": asdict(self.sd_off) if self.sd_off else None, "metrics": [asdict(m) for m in self.metrics], "elapsed_s": time.time() - self.clock0,
                 "policy": to_mapping(self.cfg.policy), "seed": self.cfg.seed}
        save_checkpoint(self.out, self.next_step - 1, state, files)
        self.write_outputs()

    def export_drafter(self) -> Path | None:
        """The final drafter as a checkpoint vLLM loads for serving (run_dir/drafter)."""
        if self.drafter_dir is None:
            return None
        src = Path(self.drafter_dir)
        return write_dir_atomic(self.out / "drafter", lambda tmp: shutil.copytree(src, tmp, dirs_exist_ok=True))


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
