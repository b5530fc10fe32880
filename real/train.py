"""`tlt train`: GRPO on vLLM rollouts with TLT's spot drafter training and adaptive SD, on Ray.

One RL step, as the coordinator (this module, in the driver process) runs it:

1. rollout: the step's prompts are drawn (seeded by (seed, step)) and split by group over the
   W rollout workers (Ray actors, real/worker.py), which decode their shards at once. Each
   engine's BanditController picks draft lengths between engine steps.
2. spot training: as soon as `min_idle_workers` workers have finished, every idle worker
   trains the drafter on its fresh responses' hidden states plus the buffer of recent steps
   (from the trainer's forward pass, real/grpo.py), until the last worker finishes; then it is
   told to stop and returns within one drafter step. The rollout never waits for it: the
   coordinator stops trainers only after the last rollout returned, and a worker trains only
   once its own shard is done. Drafters trained by several workers are averaged by steps done.
3. policy update: rewards (real/task.py), one GRPO step; its forward pass yields the hidden
   states the drafter buffer keeps.
4. sync: new target (and drafter) weights are reloaded in place in every engine. With
   `ngram_fallback`, the engines switch between n-gram and EAGLE here when the learned
   drafter's estimated accepted length beats n-gram's measured one by `switch_margin`.
5. checkpoint (atomic, real/checkpoint.py), metrics and the trace (workbench/trace.py, with
   a per-worker timeline in the simulator's format) are written.

`TrainingRun.step()` runs one RL step, so `tlt bench real` can interleave two runs.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from workbench.contracts.schema import to_mapping
from workbench.contracts.fileio import write_atomic
from workbench.contracts.policy import Policy



class TrainError(ValueError):
    """A `tlt train` input that cannot run (names the option and the fix)."""


@dataclass
class RunConfig:
    model: Path
    policy: Policy
    out: Path
    steps: int = 20
    workers: int = 2
    seed: int = 0
    prompts: int = 16  # prompts per RL step
    samples: int = 4  # group size G
    max_tokens: int = 1024
    temperature: float = 1.0
    mix: str = "default"
    drafter: Path | None = None  # warm-start drafter (policies with drafter.warm_start)
    lr: float = 2e-5  # GRPO
    kl_coef: float = 0.0
    max_num_seqs: int = 64
    max_model_len: int = 2048
    address: str | None = None  # Ray cluster to join; None: a local Ray
    checkpoint_every: int = 1

    def check(self) -> None:
        if not (Path(self.model) / "config.json").is_file():
            raise TrainError(f"--model {self.model}: no config.json (give a Hugging Face model directory)")
        if self.policy.rollout.mode != "sync":
            raise TrainError(f"--policy {self.policy.name}: rollout.mode '{self.policy.rollout.mode}' is simulator-only; "
                             f"tlt train runs mode 'sync' (set rollout.mode: sync)")
        if self.policy.drafter.kind == "eagle" and self.policy.drafter.warm_start and self.drafter is None:
            raise TrainError(f"--policy {self.policy.name}: drafter.warm_start needs --drafter DIR "
                             f"(a checkpoint from `tlt drafter train`, e.g. traces/reference/drafter)")
        if self.drafter is not None and not (Path(self.drafter) / "config.json").is_file():
            raise TrainError(f"--drafter {self.drafter}: not an EAGLE checkpoint (no config.json)")
        for name, v, lo in (("steps", self.steps, 1), ("workers", self.workers, 1), ("prompts", self.prompts, 1),
                            ("samples", self.samples, 2)):
            if v < lo:
                raise TrainError(f"--{name} {v}: must be >= {lo}" + (" (GRPO needs a group)" if name == "samples" else ""))
        if self.prompts < self.workers:
            raise TrainError(f"--prompts {self.prompts} < --workers {self.workers}: every worker needs a prompt group")


REFERENCE_DRAFTER = Path(__file__).resolve().parent.parent / "traces" / "reference" / "drafter"


def default_drafter(model: Path | str, policy: Policy, drafter: Path | None = None) -> Path | None:
    """The warm-start drafter to use: the one given, else the reference model's shipped drafter for a
    warm-starting EAGLE policy on the reference model (so `tlt train` and the app need no --drafter there)."""
    if drafter is None and policy.drafter.kind == "eagle" and policy.drafter.warm_start:
        if Path(model).resolve() == (REFERENCE_DRAFTER.parent / "model").resolve():
            return REFERENCE_DRAFTER
    return drafter


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed from the run seed and a purpose: independent streams, same for any run order."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big") >> 1


@dataclass
class StepRecord:
    step: int
    step_s: float
    rollout_s: float
    train_s: float
    sync_s: float
    bubble_frac: float  # worker-time neither decoding nor training the drafter, during the rollout
    spot_frac: float  # worker-time training the drafter, during the rollout
    mean_accept_len: float  # tokens per verify pass over SD passes (1.0 with no SD)
    reward: float
    pass_at_g: float  # prompts with at least one correct sample
    drafter_loss: float
    drafter_steps: int
    drafter_kind: str
    tokens: int
    longest: int
    grpo_loss: float
    kl: float
    stop_latency_s: float  # longest time from stop_spot() to a trainer returning


METRIC_COLUMNS = tuple(f.name for f in fields(StepRecord))  # metrics.csv, in this order


class TrainingRun:
    """One `tlt train` run: open(), step() x N, close(). State lives under `cfg.out`."""

    def __init__(self, cfg: RunConfig, log: Callable[[str], None] | None = print):
        cfg.check()
        self.cfg = cfg
        self.log = log or (lambda m: None)
        self.out = Path(cfg.out)
        self.metrics: list[StepRecord] = []
        self.rows: dict[str, list[dict[str, Any]]] = {"steps": [], "requests": [], "rl_steps": [], "timeline": []}
        self.next_step = 0
        self.kind = cfg.policy.drafter.kind
        self.workers: list[Any] = []
        self.clock0 = time.time()
        self.settings: dict[str, Any] = {}

    # ------------------------------------------------------------ set-up

    def open(self, resume: bool = False) -> "TrainingRun":
        import ray
        import torch

        from real.checkpoint import load_latest
        from real.grpo import GRPOConfig, GRPOTrainer
        from real.spot import DrafterBuffer

        cfg = self.cfg
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
            self.metrics = [StepRecord(**m) for m in st["metrics"]]
            self.rows = torch.load(ckpt.path("rows.pt"), weights_only=False)
            self.clock0 = time.time() - st["elapsed_s"]
            self.log(f"resuming {self.out} after step {ckpt.step}")
        elif self.kind == "eagle" and cfg.policy.drafter.ngram_fallback:
            self.kind = "ngram"  # a cold drafter starts behind n-gram; the switch rule decides
        self.model_dir, self.drafter_dir = Path(model_dir), drafter_dir
        self.buffer = DrafterBuffer(cfg.policy.training.buffer)
        if ckpt is not None and ckpt.path("buffer.pt").exists():
            self.buffer = torch.load(ckpt.path("buffer.pt"), weights_only=False)
        self.trainer = GRPOTrainer(model_dir, GRPOConfig(lr=cfg.lr, kl_coef=cfg.kl_coef,
                                                         minibatch=min(16, cfg.prompts * cfg.samples)),
                                   seed=derive_seed(cfg.seed, "grpo"), reference_dir=cfg.model if cfg.kl_coef > 0 else None)
        if ckpt is not None:
            self.trainer.load_state_dict(torch.load(ckpt.path("trainer.pt"), weights_only=False))

        if not ray.is_initialized():
            if cfg.address:
                ray.init(address=cfg.address, log_to_driver=False)
            else:
                # Ray's CPUs are scheduling slots: each worker takes one, and `tlt bench real`
                # keeps two runs' workers alive at once, so a local Ray gets enough slots for
                # that; the threads each worker really uses are set by `_start_workers`.
                ray.init(num_cpus=max(os.cpu_count() or 1, 2 * cfg.workers), include_dashboard=False,
                         log_to_driver=False)
        self._start_workers()
        if ckpt is not None and ckpt.path("workers.pt").exists():
            states = torch.load(ckpt.path("workers.pt"), weights_only=False)
            ray.get([w.load_state.remote(s) for w, s in zip(self.workers, states)])
        return self

    def _initial_drafter(self, ckpt) -> Path | None:
        """The drafter the engines start with: the checkpoint's, the warm-start one, or a fresh one."""
        pol = self.cfg.policy
        if pol.drafter.kind != "eagle":
            return None
        if ckpt is not None and ckpt.path("drafter").exists():
            return ckpt.path("drafter")
        if pol.drafter.warm_start:
            return Path(self.cfg.drafter)
        from real.eagle import EagleDrafter, load_target, save_drafter

        import torch

        target = load_target(self.cfg.model)
        torch.manual_seed(derive_seed(self.cfg.seed, "drafter-init"))
        return save_drafter(EagleDrafter.from_target(target), self.out / "drafter-initial", target.config)

    def _start_workers(self) -> None:
        import ray

        from real.worker import RolloutWorker

        cfg = self.cfg
        threads = max(1, (os.cpu_count() or 1) // cfg.workers) if not cfg.address else 1
        actor = ray.remote(num_cpus=1, max_concurrency=2)(RolloutWorker)
        self.workers = [
            actor.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}}).remote(
                i, str(self.model_dir), cfg.policy, str(self.drafter_dir) if self.drafter_dir else None,
                derive_seed(cfg.seed, "worker", i), max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_model_len,
                spot_lr=cfg.policy.training.lr, drafter_kind=self.kind, threads=threads)
            for i in range(cfg.workers)]
        self.settings = ray.get(self.workers[0].settings.remote())
        self.log(f"{cfg.workers} rollout workers up (policy {cfg.policy.name}, drafter {self.kind})")

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
        import ray

        from real import task
        from real.engine import RolloutRequest, Sampling
        from real.grpo import Rollout

        cfg, pol, s = self.cfg, self.cfg.policy, self.next_step
        W = len(self.workers)
        problems = task.make_problems(cfg.prompts, derive_seed(cfg.seed, "prompts", s), cfg.mix)
        sampling = Sampling(temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=derive_seed(cfg.seed, "sample", s))
        shards = [[RolloutRequest(i, j, p.prompt, sampling) for i, p in enumerate(problems) if i % W == w
                   for j in range(cfg.samples)] for w in range(W)]

        # 1-2. rollout, with spot training on idle workers until the last shard is done.
        training = pol.training.enabled and pol.drafter.kind == "eagle"
        buffer_ref = ray.put(self.buffer.records()) if training else None
        t0 = time.time()
        pending = {w.rollout.remote(shard, s, self.clock0): i for i, (w, shard) in enumerate(zip(self.workers, shards))}
        rollouts: dict[int, Any] = {}
        idle: list[int] = []
        spot_refs: dict[Any, int] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                rollouts[i] = ray.get(ref)
                idle.append(i)
            if training and pending and len(idle) >= pol.training.min_idle_workers:
                for i in idle:
                    if i not in spot_refs.values():
                        seqs = [self._ids(rollouts[i], rid) for rid in rollouts[i].outputs]
                        spot_refs[self.workers[i].spot_train.remote(seqs, buffer_ref, pol.training.steps)] = i
        t_rollout = time.time()
        for i in spot_refs.values():
            self.workers[i].stop_spot.remote()
        spots = ray.get(list(spot_refs))

        # 3. rewards and the policy update.
        t_train0 = time.time()
        req_rows, batch = [], []
        for i in range(W):
            r = rollouts[i]
            for row in r.requests:
                toks, text, _ = r.outputs[row["request_id"]]
                row["reward"] = float(task.reward(problems[row["prompt_id"]], text))
                req_rows.append(row)
                batch.append(Rollout(list(r.prompt_ids[row["request_id"]]), list(toks), row["reward"], row["prompt_id"]))
        stats, hidden = self.trainer.step(batch, keep_hidden=training)
        if training:
            self.buffer.add(s, hidden)
        new_model = self.trainer.save(self.out / "weights" / f"step-{s:06d}")
        new_drafter = self._merge_drafters(spots, s) if spots else None
        t_train = time.time()

        # 4. sync (and the n-gram <-> EAGLE switch).
        ray.get([w.sync.remote(str(new_model), str(new_drafter) if new_drafter else None) for w in self.workers])
        self._prune(self.out / "weights", keep=new_model)
        if new_drafter is not None:
            self.drafter_dir = new_drafter
        self.model_dir = new_model
        ngram_len = self._accept_len(rollouts.values()) if self.kind == "ngram" else math.nan
        self._maybe_switch(ngram_len, hidden if training else [])
        t_sync = time.time()

        rec = self._record(s, problems, rollouts, spots, stats, t0, t_rollout, t_train0, t_train, t_sync, req_rows)
        self.metrics.append(rec)
        self.next_step = s + 1
        if (s + 1) % cfg.checkpoint_every == 0 or s + 1 == cfg.steps:
            self.checkpoint()
        return rec

    @staticmethod
    def _ids(r: Any, rid: str) -> list[int]:
        return list(r.prompt_ids[rid]) + list(r.outputs[rid][0])

    def _merge_drafters(self, spots: list[Any], s: int) -> Path | None:
        from real.eagle import EagleDrafter, save_drafter
        from real.spot import average_states

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

    @staticmethod
    def _accept_len(rollouts) -> float:
        drafts = sum(r.drafts for r in rollouts)
        return 1.0 + sum(r.accepted for r in rollouts) / drafts if drafts else math.nan

    def _maybe_switch(self, ngram_len: float, records: list[Any]) -> None:
        """n-gram -> EAGLE once the learned drafter's estimated accepted length wins by the margin.

        The estimate is greedy-chain agreement on this step's held-out hidden states, measured by
        worker 0's spot trainer (real/spot.py); n-gram's is what vLLM counted this rollout."""
        import ray

        pol = self.cfg.policy
        if not (pol.drafter.kind == "eagle" and pol.drafter.ngram_fallback and self.kind == "ngram"):
            return
        if not records or self.drafter_dir is None or math.isnan(ngram_len):
            return
        k = max(max(pol.bandit.arms, default=0), max((b.draft_len for b in pol.schedule), default=0))
        # A small held-out sample: the check runs inside the sync, between RL steps.
        est = ray.get(self.workers[0].estimate_accept_len.remote(records[:8], k))
        self.log(f"  drafter check: EAGLE estimated {est:.2f} vs n-gram measured {ngram_len:.2f} tokens per pass")
        if est > ngram_len * (1.0 + pol.drafter.switch_margin):
            ray.get([w.switch_drafter.remote("eagle", str(self.drafter_dir)) for w in self.workers])
            self.kind = "eagle"
            self.log("  switched the engines from n-gram to the learned EAGLE drafter")

    # ------------------------------------------------------------ records

    def _record(self, s, problems, rollouts, spots, stats, t0, t_roll, t_train0, t_train, t_sync, req_rows) -> StepRecord:
        from workbench.contracts.trace import TIMELINE_COLUMNS, Timeline

        W = len(self.workers)
        span = max(t_roll - t0, 1e-9)
        decode = sum(min(r.end, t_roll) - max(r.start, t0) for r in rollouts.values())
        spot = sum(max(0.0, min(sp.end, t_roll) - sp.start) for sp in spots)
        rel = lambda t: t - self.clock0  # noqa: E731
        tl = Timeline()
        for i, r in rollouts.items():
            for row in r.steps:
                tl.add(s, i, row["start_s"], row["start_s"] + row["wall_s"], "decode_sd" if row["draft_len"] else "decode",
                       row["batch_size"], row["draft_len"], row["new_tokens"], 1, row["context_mean"])
            sp = next((x for x in spots if x.worker == i), None)
            if sp is not None:
                tl.add(s, i, rel(r.end), rel(sp.start), "idle")
                tl.add(s, i, rel(sp.start), rel(sp.end), "drafter_train", tokens=sp.steps)
                tl.add(s, i, rel(sp.end), rel(t_roll), "idle")
            else:
                tl.add(s, i, rel(r.end), rel(t_roll), "idle")
            tl.add(s, i, rel(t_roll), rel(t_train), "train")
            tl.add(s, i, rel(t_train), rel(t_sync), "sync")
        self.rows["timeline"] += [dict(zip(TIMELINE_COLUMNS, row)) for row in tl.rows]
        for r in rollouts.values():
            self.rows["steps"] += [{k: v for k, v in row.items() if k not in ("exec_s", "finished", "chosen_k")}
                                   for row in r.steps]
        self.rows["requests"] += req_rows
        self.rows["rl_steps"].append({"rl_step": s, "rollout_s": t_roll - t0, "train_s": t_train - t_train0,
                                      "sync_s": t_sync - t_train, "drafter_train_s": spot})
        rewards = [row["reward"] for row in req_rows]
        by_prompt: dict[int, float] = {}
        for row in req_rows:
            by_prompt[row["prompt_id"]] = max(by_prompt.get(row["prompt_id"], 0.0), row["reward"])
        trained = [sp for sp in spots if sp.steps > 0]
        acc = self._accept_len(rollouts.values())
        return StepRecord(
            step=s, step_s=t_sync - t0, rollout_s=t_roll - t0, train_s=t_train - t_train0, sync_s=t_sync - t_train,
            bubble_frac=max(0.0, 1.0 - (decode + spot) / (W * span)), spot_frac=spot / (W * span),
            mean_accept_len=1.0 if math.isnan(acc) else acc,
            reward=sum(rewards) / len(rewards), pass_at_g=sum(by_prompt.values()) / len(by_prompt),
            drafter_loss=(sum(sp.loss * sp.steps for sp in trained) / sum(sp.steps for sp in trained)) if trained else math.nan,
            drafter_steps=sum(sp.steps for sp in spots), drafter_kind=self.kind,
            tokens=sum(row["response_tokens"] for row in req_rows), longest=max(row["response_tokens"] for row in req_rows),
            grpo_loss=stats.loss, kl=stats.kl,
            stop_latency_s=max((sp.stop_latency_s for sp in spots if sp.stopped), default=math.nan))

    def metrics_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(m) for m in self.metrics], columns=list(METRIC_COLUMNS))

    def trace(self):
        from real.capture import machine_info
        from workbench.contracts.trace import REQUEST_COLUMNS, RL_STEP_COLUMNS, STEP_COLUMNS, TIMELINE_COLUMNS, Trace

        def frame(rows, cols):
            return pd.DataFrame(rows, columns=list(cols))

        meta = {"model": str(Path(self.cfg.model).resolve()), "policy": to_mapping(self.cfg.policy),
                "prompts": self.cfg.prompts, "samples": self.cfg.samples, "max_tokens": self.cfg.max_tokens,
                "seed": self.cfg.seed, "mix": self.cfg.mix, "temperature": self.cfg.temperature,
                "workers": self.cfg.workers, "machine": machine_info(), "engine": self.settings,
                "task": "real.task", "source": "tlt train", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        tl = pd.DataFrame(self.rows["timeline"], columns=list(TIMELINE_COLUMNS))
        return Trace(meta, frame(self.rows["steps"], STEP_COLUMNS), frame(self.rows["requests"], REQUEST_COLUMNS),
                     frame(self.rows["rl_steps"], RL_STEP_COLUMNS), timeline=tl)

    def write_outputs(self) -> None:
        """metrics.csv and trace/ under the run directory (atomic; rewritten after every step)."""
        from workbench.contracts.trace import write_trace

        df = self.metrics_frame()
        write_atomic(self.out / "metrics.csv", df.to_csv(index=False))
        if self.rows["steps"]:
            write_trace(self.trace(), self.out / "trace")

    def checkpoint(self) -> None:
        import ray
        import torch

        from real.checkpoint import save_checkpoint

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
        state = {"kind": self.kind, "metrics": [asdict(m) for m in self.metrics], "elapsed_s": time.time() - self.clock0,
                 "policy": to_mapping(self.cfg.policy), "seed": self.cfg.seed}
        save_checkpoint(self.out, self.next_step - 1, state, files)
        self.write_outputs()

    def export_drafter(self) -> Path | None:
        """The final drafter as a checkpoint vLLM loads for serving (run_dir/drafter)."""
        if self.drafter_dir is None:
            return None
        from workbench.contracts.fileio import write_dir_atomic

        src = Path(self.drafter_dir)
        return write_dir_atomic(self.out / "drafter", lambda tmp: shutil.copytree(src, tmp, dirs_exist_ok=True))


def train(cfg: RunConfig, resume: bool = False, log: Callable[[str], None] | None = print,
          on_step: Callable[[StepRecord], None] | None = None) -> TrainingRun:
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
