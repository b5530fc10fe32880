"""The rollout engine: `vllm.LLM` with speculative decoding taken from a Policy.

    engine = RolloutEngine("model/", load_policy("static-sd"), drafter_dir="drafter/")
    results = engine.generate(["2+2="], n=4, sampling=Sampling(temperature=1.0, max_tokens=64))
    run = engine.run_steps([RolloutRequest(0, 0, "2+2=", Sampling(max_tokens=64))], on_step=print)
    engine.reload(target_dir="model-v2/", drafter_dir="drafter-v2/")   # in place, no restart

The Policy -> `speculative_config` translation is real/rollout/spec_config.py (no vLLM needed);
requests, responses and step rows are real/rollout/requests.py; the drafting timer draft_clock.py.

The engine runs in vLLM's default multiprocess mode (an engine-core process and a worker
process); scripts that start it need an `if __name__ == "__main__":` guard. Facts about vLLM
on CPU this relies on are in docs/vllm-cpu-notes.md.

`adaptive=True` (with a policy that uses SD): draft lengths change while the engine runs.
`num_speculative_tokens` is then the largest arm the policy's bandit may pick, the Dynamic SD
table is always given, and the engine core (scheduler and CPU worker) runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0` while `LLM` starts): a multiprocess engine core steps on
its own, ahead of `step()`, and its scheduler is out of reach. `set_draft_lengths(rows)` then
replaces the scheduler's batch-size -> K lookup between two `step()`s, and
`run_steps(..., controller=...)` lets real/rollout/adaptive.py's BanditController do it every step.
In-process, vLLM seeds this process's RNGs, starts a one-rank torch.distributed group and freezes
its heap (`close()` unfreezes it); the engine shares the process's torch threads (no OpenMP
pinning). The step loop itself is real/rollout/stepping.py.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from real.drafter.layout import METHODS as EAGLE_METHODS
from real.rollout.requests import (
    EngineStepRow,
    PromptResult,
    RolloutRequest,
    RunResult,
    Sample,
    Sampling,
    SpecCounters,
    SpeedProbe,
    StepController,
)
from real.rollout.draft_clock import DraftClock
from real.rollout.draft_lengths import lookup_rows, rows_lookup, started_lookup
from real.rollout.outputs import Tracked
from real.rollout.probing import ProbedClock
from real.rollout.spec_config import EngineConfigError, speculative_config
from real.rollout.stepping import StatsTap, StepLoop
from real.rollout.vllm_env import engine_core_in_process, quiet_iteration_log, running_on_cpu
from real.rollout.vllm_fixes import apply_engine_start_fixes
from workbench.contracts.policy import Policy, load_policy

WORKER_EXTENSION = "real.rollout.worker_ext.TLTWorkerExtension"


class RolloutEngine:
    """A `vllm.LLM` whose speculative decoding comes from a Policy; weights reload in place."""

    def __init__(self, model_dir: str | Path, policy: Policy | None = None,
                 drafter_dir: str | Path | None = None, max_num_seqs: int = 64,
                 max_model_len: int = 2048, seed: int = 0, dtype: str = "float32",
                 kv_cache_gib: float = 1.0, memory_utilization: float = 0.3,
                 enforce_eager: bool | None = None,
                 adaptive: bool = False, in_process: bool | None = None,
                 speculative: dict[str, Any] | None = None, **llm_kwargs: Any):
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise EngineConfigError(f"--model {self.model_dir}: no config.json "
                                    "(give a Hugging Face model directory)")
        self.policy = policy if policy is not None else load_policy("baseline")
        self.drafter_dir = Path(drafter_dir) if drafter_dir is not None else None
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.seed = seed
        self.dtype = dtype
        # `speculative`: vLLM's speculative_config as given (any method the installed vLLM has,
        # real/sweep/methods.py), instead of the policy's
        self.spec = speculative or speculative_config(self.policy, self.drafter_dir, max_num_seqs,
                                                      adaptive=adaptive)
        # Draft lengths change between steps only with a scheduler in this process (see the module
        # doc).
        self.adaptive = bool(adaptive and self.spec is not None)
        # In-process: the engine core runs in this process (adaptive engines need it to reach the
        # scheduler). Rollout workers run every engine this way, SD or not, so baseline and TLT
        # engines pay the same per-step costs and use the same threads.
        self.in_process = self.adaptive if in_process is None else bool(in_process or self.adaptive)
        if speculative is not None:
            self.drafter_dir = Path(speculative["model"]) if speculative.get("model") else None
        elif self.spec is None or self.spec["method"] not in EAGLE_METHODS:  # vLLM's names
            self.drafter_dir = None  # the policy does not use it

        from vllm import LLM

        on_cpu = running_on_cpu()
        kw: dict[str, Any] = dict(
            model=str(self.model_dir), dtype=dtype, max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            seed=seed, enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
            disable_log_stats=False, enable_logging_iteration_details=True,
            worker_extension_cls=WORKER_EXTENSION, speculative_config=self.spec,
            gpu_memory_utilization=memory_utilization,
        )
        if self.spec is not None:
            # Per request, per verify pass: drafts proposed and accepted
            # (Tracked.take_spec_metrics).
            kw["per_request_spec_decode_metrics"] = "detailed"
        if on_cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            # An explicit KV cache size on CPU: small engines, and no warm-up pass at start.
            kw["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        kw.update(llm_kwargs)
        self.engine_kwargs = {k: v for k, v in kw.items() if k != "speculative_config"}
        t0 = time.perf_counter()
        if on_cpu:
            # A worker starting in this process (in-process, or forked from it) after numba was
            # loaded would fail in vLLM-CPU's kernel-override scan (real/rollout/vllm_fixes.py).
            apply_engine_start_fixes()
        with engine_core_in_process(self.in_process):
            self.llm = LLM(**kw)
        if on_cpu and self.spec is not None:
            # Without this, sampled (temperature > 0) requests are not lossless under SD on CPU.
            self.llm.collective_rpc("tlt_apply_cpu_fixes")
        self.start_s = time.perf_counter() - t0
        quiet_iteration_log()
        core = self.llm.llm_engine.engine_core
        self.tap = StatsTap.attach(core)  # each step's scheduler stats, while a rollout runs
        self._scheduler = None
        self.draft_clock = DraftClock.attach(core, self.in_process and self.spec is not None)
        if self.adaptive:
            self._scheduler = core.engine_core.scheduler
            # (another vLLM's scheduler may lack it)
            if getattr(self._scheduler, "dynamic_sd_lookup", None) is None:  # pragma: no cover
                raise RuntimeError("vLLM's scheduler has no Dynamic SD lookup (dynamic_sd_lookup): "
                                   "this vLLM cannot change draft lengths between steps")

    # ------------------------------------------------------------ facts

    @property
    def draft_method(self) -> str:
        """vLLM's speculative method ("ngram", "eagle", "eagle3"), "none" without SD."""
        return self.spec["method"] if self.spec else "none"

    @property
    def max_draft_len(self) -> int:
        """vLLM's `num_speculative_tokens`: the largest draft length this engine can run (0: no
        SD)."""
        return int(self.spec["num_speculative_tokens"]) if self.spec else 0

    def settings(self) -> dict[str, Any]:
        """Engine settings for a trace's meta."""
        import vllm

        return {"vllm_version": vllm.__version__, "max_num_seqs": self.max_num_seqs,
                "max_model_len": self.max_model_len, "dtype": self.dtype, "seed": self.seed,
                "drafter": str(self.drafter_dir) if self.drafter_dir else None,
                "speculative_config": self.spec, "adaptive": self.adaptive,
                "in_process": self.in_process,
                "start_s": round(self.start_s, 2),
                "enforce_eager": self.engine_kwargs.get("enforce_eager"),
                "kv_cache_memory_bytes": self.engine_kwargs.get("kv_cache_memory_bytes"),
                "draft_lengths": [list(row) for row in self.current_draft_lengths()]}

    def tokenizer(self):
        return self.llm.get_tokenizer()

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer().encode(text))

    def spec_counters(self) -> SpecCounters:
        """Cumulative spec-decode counters since the engine started."""
        c = SpecCounters()
        for m in self.llm.get_metrics():
            name = m.name.removeprefix("vllm:spec_decode_")
            if name == "num_drafts":
                c.num_drafts = int(m.value)
            elif name == "num_draft_tokens":
                c.num_draft_tokens = int(m.value)
            elif name == "num_accepted_tokens":
                c.num_accepted_tokens = int(m.value)
            elif name == "num_accepted_tokens_per_pos":
                c.accepted_per_pos = [int(v) for v in m.values]
        return c

    # ------------------------------------------------------------ draft lengths

    def current_draft_lengths(self) -> list[tuple[int, int, int]]:
        """The draft length per batch size the scheduler uses now, as `(min_batch, max_batch, K)`
        rows covering 1..max_num_seqs (equal neighbours merged)."""
        if self._scheduler is not None:
            lookup = list(self._scheduler.dynamic_sd_lookup)
        else:  # fixed for the engine's life: what it was started with
            lookup = started_lookup(self.spec, self.max_num_seqs, self.max_draft_len)
        return lookup_rows(lookup, self.max_num_seqs)

    def set_draft_lengths(self, rows: Sequence[tuple[int, int, int]]) -> None:
        """Replace the draft length per batch size, between two engine steps (`adaptive=True`
        engines).

        `rows` are `(min_batch, max_batch, K)` with inclusive, non-overlapping ranges; K=0 is SD
        off. Batch sizes no row covers get K=0 (unlike vLLM's start-up table, which carries the
        last row's K forward), and ranges are cut at max_num_seqs. The batch is the number of
        requests scheduled in a step; the K it maps to is the draft length proposed at the end of
        that step and verified in the next one (the K a step row reports is the previous step's).
        """
        if self._scheduler is None:
            raise EngineConfigError(
                "draft lengths change while the engine runs only with RolloutEngine(..., "
                "adaptive=True) and a policy that uses speculative decoding (this engine: "
                f"adaptive={self.adaptive}, draft method {self.draft_method})")
        lookup = rows_lookup(rows, self.max_num_seqs, self.max_draft_len)
        self._scheduler.dynamic_sd_lookup = lookup

    # ------------------------------------------------------------ generation

    def token_ids(self, prompt: str | Sequence[int]) -> list[int]:
        """A prompt's token ids (a text is encoded with the model's tokenizer)."""
        ids = self.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise ValueError("empty prompt")
        return ids

    def _prompt(self, p: str | Sequence[int]) -> dict[str, Any]:
        return {"prompt_token_ids": self.token_ids(p)}

    def generate(self, prompts: Sequence[str | Sequence[int]], n: int = 1,
                 sampling: Sampling | None = None) -> list[PromptResult]:
        """`n` samples per prompt; one PromptResult per prompt, in order."""
        sampling = sampling or Sampling()
        if sampling.seed is None:
            params: Any = sampling.to_vllm(n=n)
        else:  # prompt i's samples get seeds seed + i*n + j: reproducible, distinct across prompts
            params = [sampling.to_vllm(n=n, seed=sampling.seed + i * n)
                      for i in range(len(prompts))]
        outs = self.llm.generate([self._prompt(p) for p in prompts], params, use_tqdm=False)
        return [PromptResult(list(o.prompt_token_ids),
                             [Sample(list(c.token_ids), c.text, str(c.finish_reason)) for c in
                              sorted(o.outputs, key=lambda c: c.index)]) for o in outs]

    def run_steps(self, requests: Sequence[RolloutRequest],
                  on_step: Callable[[EngineStepRow], None] | None = None,
                  rl_step: int = 0, worker: int = 0, clock0: float | None = None,
                  controller: StepController | None = None, max_in_flight: int | None = None,
                  probe: SpeedProbe | None = None) -> RunResult:
        """Drive the engine one step at a time; record every step and every request.

        All requests are added at once (a rollout); the engine queues those above
        `max_num_seqs`. A request with a `sampling.seed` gets seed + its index, so samples of
        one prompt differ and a run is reproducible. Per step: `wall_s` is the time between
        two engine outputs seen by this process (the steps' walls add up to the run's wall
        time), `start_s` when the step began; counts come from vLLM's scheduler stats
        (`iteration_details`, `spec_decoding_stats`), context lengths from the tracked
        requests (prompt + tokens generated before the step, over requests that are decoding).
        `draft_len` is the step's K: the last draft position vLLM counted drafts at (equal to
        num_draft_tokens / num_drafts when every request got a full draft; n-gram may propose
        fewer for some). Rows (`EngineStepRow`) also carry `exec_s` (vLLM's model-execution time),
        `draft_s` (drafting time, real/rollout/draft_clock.py) and `finished` (requests finished so
        far), which the trace leaves out.

        `controller` (e.g. real.rollout.adaptive.BanditController) is called around every engine
        step: `before_step(batch_size)` with the requests the step will schedule (unfinished ones,
        at most max_num_seqs), where it may `set_draft_lengths`, and `after_step(row)` with the
        step's row before `on_step` sees it (it sets `chosen_k`).

        `max_in_flight`: at most this many requests in the engine; the rest wait here, in order (as
        in vLLM's FIFO queue above max_num_seqs: a smaller max_num_seqs without a restart).

        `probe`: a reference workload timed before the first step, after the last and, on an
        in-process engine, between steps every `PROBE_EVERY_S` (real/rollout/probing.py); its time
        is off the run's clock. A multiprocess engine steps on its own, so only before and after.
        """
        eng = self.llm.llm_engine
        if eng.has_unfinished_requests():
            raise RuntimeError("the engine still has unfinished requests")
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("two requests share a (prompt_id, sample)")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight {max_in_flight}: must be >= 1 (or None: no cap)")
        prompts = [self._prompt(r.prompt) for r in requests]
        clock = ProbedClock(time.perf_counter() if clock0 is None else clock0, probe)
        now = clock.now
        clock.between_steps(force=True)
        with self.tap.on():
            tracked: dict[str, Tracked] = {}
            alias: dict[str, str] = {}
            todo = list(enumerate(zip(requests, prompts)))[::-1]
            cap = max_in_flight or len(requests)

            def admit(live: set[str]) -> None:  # add requests, in order, until `cap` are unfinished
                while todo and len(live) < cap:
                    i, (r, p) = todo.pop()
                    seed = None if r.sampling.seed is None else r.sampling.seed + i
                    tracked[r.request_id] = Tracked(r, len(p["prompt_token_ids"]), now())
                    params = r.sampling.to_vllm(seed=seed, delta=True)
                    got = eng.add_request(r.request_id, p, params)
                    if isinstance(got, str):
                        alias[got] = r.request_id
                    live.add(r.request_id)

            admit(set())
            between = clock.between_steps if self.in_process else (lambda: None)
            loop = StepLoop(self.llm.llm_engine, self.tap.stats, self.draft_clock,
                            self.max_num_seqs)
            steps = loop.drive(tracked, alias, now, controller, on_step, rl_step=rl_step,
                               worker=worker, admit=admit, held=lambda: len(todo), between=between)
        wall_s = now()
        clock.between_steps(force=True)
        return RunResult(steps, [t.row(rl_step, worker) for t in tracked.values()],
                         {key: t.sample() for key, t in tracked.items()}, wall_s, clock.samples)

    # ------------------------------------------------------------ weights

    def reload(self, target_dir: str | Path | None = None,
               drafter_dir: str | Path | None = None) -> dict[str, float]:
        """Load new target and/or drafter weights into the running engine, then drop the prefix
        cache.

        The new weights must have the same architecture and shapes as the ones the engine was
        started with. Returns the seconds each reload took.
        """
        if self.llm.llm_engine.has_unfinished_requests():
            raise RuntimeError("reload between calls, not while requests are running")
        took: dict[str, float] = {}
        if target_dir is not None:
            tdir = Path(target_dir)
            if not (tdir / "config.json").is_file():
                raise EngineConfigError(f"{tdir}: no config.json (not a model directory)")
            t = time.perf_counter()
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(tdir)})
            took["target_s"] = time.perf_counter() - t
            self.model_dir = tdir
        if drafter_dir is not None:
            if self.draft_method not in EAGLE_METHODS:
                raise EngineConfigError("this engine has no EAGLE drafter (its policy's "
                                        "drafter.kind is not eagle)")
            ddir = Path(drafter_dir)
            if not (ddir / "config.json").is_file():
                raise EngineConfigError(f"{ddir}: not an EAGLE or EAGLE-3 checkpoint (no "
                                        "config.json)")
            t = time.perf_counter()
            self.llm.collective_rpc("tlt_reload_drafter", args=(str(ddir),))
            took["drafter_s"] = time.perf_counter() - t
            self.drafter_dir = ddir
        # Without this, KV blocks cached for an old prompt would be reused under new weights.
        self.llm.reset_prefix_cache()
        return took

    def close(self) -> None:
        """Shut the engine down (its processes exit); the object is unusable afterwards."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        self._scheduler = None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # pragma: no cover - best effort
            pass
        del llm
        if self.in_process:
            # vLLM's engine core froze this process's heap (its own objects among them)
            gc.unfreeze()
        gc.collect()

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
