"""Trace capture: one rollout of the task's prompts on the real engine, recorded step by step.

`tlt capture --model DIR --policy NAME|FILE [--drafter DIR] --prompts N --samples G
--max-tokens L --seed S [--mix M] --out TRACE_DIR` draws N problems from `real.tiny.task`
(`make_problems(N, S, M)`), adds N x G requests at once to a `RolloutEngine` (speculative
decoding from the policy), drives it one engine step at a time and writes a trace
(`workbench.contracts.trace`, schema in traces/README.md): one row per engine step, one per
request (with the task reward), one RL-step row, and meta (model, policy mapping, drafter, the
run's parameters, machine, engine settings, and a summary).
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from real.rollout.engine import RolloutEngine
from real.rollout.probing import ReferenceForward, probe_summary
from real.rollout.requests import EngineStepRow, RunResult, Sampling, group_requests
from real.rollout.spec_config import dynamic_schedule, speculative_config
from real.rollout.vllm_env import running_on_cpu
from real.tiny import task
from real.run.task_source import task_source
from real.tiny.model import load_model_dir
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.task import Task
from workbench.contracts.schema import from_mapping, to_mapping
from workbench.contracts.trace import (
    RequestRow,
    RLStepRow,
    StepRow,
    Trace,
    accepted_length,
    rows_frame,
    write_trace,
)


class CaptureError(ValueError):
    """Bad capture inputs, found before any engine starts."""


def machine_info() -> dict[str, Any]:
    """The host: platform, CPU, cores, memory, accelerator, library versions."""
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpu_count": os.cpu_count(),
                            "processor": platform.processor() or platform.machine()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory_gib"] = round(pages * size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    try:
        info["affinity_cpus"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    for mod in ("torch", "vllm", "transformers"):
        m = sys.modules.get(mod)
        if m is None:
            try:
                m = __import__(mod)
            except Exception:
                continue
        info[f"{mod}_version"] = getattr(m, "__version__", None)
    try:
        import torch

        info["accelerator"] = (
            torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU)"
        )
    except Exception:
        info["accelerator"] = "unknown"
    return info


def check_inputs(model: str | Path, policy: Policy, drafter: str | Path | None, prompts: int,
                 samples: int, max_tokens: int, mix: str, max_model_len: int) -> None:
    """Everything that can be refused before an engine starts (the start costs ~30 s)."""
    try:
        load_model_dir(model)
    except (FileNotFoundError, ValueError) as exc:
        raise CaptureError(str(exc)) from None
    if prompts < 1 or samples < 1 or max_tokens < 1:
        raise CaptureError("--prompts, --samples and --max-tokens must be >= 1")
    if max_tokens >= max_model_len:
        raise CaptureError(f"--max-tokens {max_tokens}: must leave room for the prompt in "
                           f"max_model_len {max_model_len}")
    if mix not in task.MIXES:
        raise CaptureError(f"--mix {mix!r}: allowed: {', '.join(task.MIXES)}")
    speculative_config(policy, drafter)  # raises naming --drafter when an eagle policy lacks one


def capture(model: str | Path, policy: Policy, drafter: str | Path | None = None, prompts: int = 8,
            samples: int = 4, max_tokens: int = 512, seed: int = 0, mix: str = "default",
            temperature: float = 1.0, max_num_seqs: int = 64, max_model_len: int = 2048,
            out: str | Path | None = None, engine: Any = None,
            log: Callable[[str], None] | None = print, progress_every_s: float = 2.0,
            max_in_flight: int | None = None, task_file: Task | None = None,
            probe: ReferenceForward | None | bool = True, threads: int = 1) -> Trace:
    """Capture one rollout as a Trace (written to `out` when given).

    `engine`: an already running RolloutEngine to use (its drafter is then the engine's; an
    adaptive engine is given `policy`'s schedule as its draft lengths first, `set_draft_lengths`;
    else `policy` only goes to the meta); else one is started and closed.
    `max_in_flight`: the batch cap, held by the driver (`RolloutEngine.run_steps`) instead of
    vLLM's max_num_seqs, so one running engine captures several caps; the meta's
    `engine.max_num_seqs` is then the cap (what the run behaved as), `engine.started_max_num_seqs`
    the engine's. `task_file`: a user's task (workbench/contracts/task.py) instead of the GCD task
    under `mix`.

    An engine started here runs in this process on `threads` torch threads (one, as `tlt
    train`'s rollout workers run theirs: two on a 2-core machine wait on each other whenever
    another process takes a core), so the trace prices the engine the profile will predict. `probe`
    (on CPU): the machine's speed is timed before, during and after the rollout (`True`: a light
    `ReferenceForward` of the target; False or None: not measured) and kept in meta["speed"].
    """
    check_inputs(model, policy, drafter, prompts, samples, max_tokens, mix, max_model_len)
    source = task_source(model, task_file, mix)
    problems = source.draw(prompts, seed)
    own = engine is None
    threads_before = _pin_torch_threads(threads) if own else None
    if own:
        if log:
            log(f"starting vLLM: {model}, policy {policy.name} (drafter {policy.drafter.kind}), "
                f"max_num_seqs {max_num_seqs}")
        engine = RolloutEngine(model, policy, drafter_dir=drafter, max_num_seqs=max_num_seqs,
                               max_model_len=max_model_len, seed=seed, in_process=True)
        _pin_torch_threads(threads)  # an in-process engine start may have set its own
    if probe is True:
        probe = ReferenceForward.light(model, seed=seed) if running_on_cpu() else None
    try:
        # Warm up (lazy initialisation, n-gram JIT) outside the trace, then forget the prompt.
        engine.generate([problems[0].prompt], 1, Sampling(temperature=0.0, max_tokens=4))
        engine.llm.reset_prefix_cache()
        if not own and getattr(engine, "adaptive", False):
            engine.set_draft_lengths(dynamic_schedule(policy, engine.max_num_seqs))
        sampling = Sampling(temperature=temperature, max_tokens=max_tokens, seed=seed)
        requests = group_requests([p.prompt for p in problems], samples, sampling)
        if log:
            log(f"capturing {prompts} prompts x {samples} samples, up to {max_tokens} tokens, "
                f"temperature {temperature}, seed {seed}")
        cpu0 = time.process_time()
        run = engine.run_steps(requests, on_step=_progress(len(requests), log, progress_every_s),
                               max_in_flight=max_in_flight, probe=probe or None)
        cpu_s = time.process_time() - cpu0
        for row in run.requests:
            row.reward = source.reward(problems[row.prompt_id], run.outputs[row.request_id].text)
        settings = engine.settings()
        if max_in_flight is not None and max_in_flight < engine.max_num_seqs:
            settings.update(max_num_seqs=int(max_in_flight),
                            started_max_num_seqs=engine.max_num_seqs,
                            in_flight_cap="held by the driver (RolloutEngine.run_steps "
                                          "max_in_flight)")
    finally:
        if own:
            engine.close()
            _pin_torch_threads(threads_before)

    params = {"prompts": prompts, "samples": samples, "max_tokens": max_tokens, "seed": seed,
              "mix": mix, "temperature": temperature, "task": source.name,
              "reward": source.reward_name}
    trace = _trace(run, model, policy, settings, params, cpu_s)
    if out is not None:
        write_trace(trace, out)
    return trace


def _trace(run: RunResult, model: str | Path, policy: Policy, settings: dict[str, Any],
           params: dict[str, Any], cpu_s: float) -> Trace:
    """The capture's trace: its rows and meta (`params`: the rollout's parameters as given)."""
    steps = rows_frame(run.steps, StepRow)
    reqs = rows_frame(run.requests, RequestRow)
    rl = rows_frame([RLStepRow(rl_step=0, rollout_s=run.wall_s, train_s=0.0, sync_s=0.0,
                               drafter_train_s=0.0)], RLStepRow)
    cpu_s -= sum(p.cpu_s for p in run.probes)  # the probes ran off the run's clock
    meta = {
        "model": str(Path(model).resolve()),
        "policy": to_mapping(policy),
        "drafter": str(Path(settings["drafter"]).resolve()) if settings.get("drafter") else None,
        **params,
        "machine": machine_info(),
        "engine": settings,
        "summary": {**_summary(run, steps, reqs), "process_cpu_s": round(cpu_s, 4),
                    "cpu_share": round(cpu_s / run.wall_s, 4) if run.wall_s > 0 else None},
        **({"speed": probe_summary(run.probes, "ReferenceForward.light of the target model")}
           if run.probes else {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv) if sys.argv else None,
        "notes": "steps.wall_s is the time between two engine outputs seen by the driver (they add "
                 "up to rollout_s); summary.model_exec_s is vLLM's own model-execution time summed "
                 "over steps; summary.process_cpu_s the CPU time of this process (all its threads) "
                 "over the rollout, cpu_share that over rollout_s (below 1: the process waited for "
                 "a core).",
    }
    return Trace(meta, steps, reqs, rl)


def _pin_torch_threads(threads: int) -> int:
    """Set this process's torch threads; returns the number before."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    return before


def _progress(total: int, log: Callable[[str], None] | None,
              every_s: float) -> Callable[[EngineStepRow], None]:
    """An `on_step` that logs the rollout's progress at most every `every_s` seconds."""
    state = {"last": time.perf_counter(), "tokens": 0}
    t_run = time.perf_counter()

    def on_step(row: EngineStepRow) -> None:
        state["tokens"] += row.new_tokens
        now = time.perf_counter()
        if log and now - state["last"] >= every_s:
            state["last"] = now
            log(f"  step {row.engine_step + 1}: batch {row.batch_size}, waiting {row.num_waiting}, "
                f"{row.finished}/{total} requests finished, {state['tokens']} tokens, "
                f"{now - t_run:.1f}s")

    return on_step


def _summary(run: RunResult, steps: pd.DataFrame, reqs: pd.DataFrame) -> dict[str, Any]:
    drafted = int(steps["num_draft_tokens"].sum())
    n_drafts = int(steps["num_drafts"].sum())
    accepted = int(steps["num_accepted_tokens"].sum())
    tokens = int(reqs["response_tokens"].sum())
    exec_s = [r.exec_s for r in run.steps]
    return {
        "engine_steps": len(steps),
        "requests": len(reqs),
        "response_tokens": tokens,
        "rollout_s": round(run.wall_s, 4),
        "tokens_per_s": round(tokens / run.wall_s, 2) if run.wall_s else None,
        "model_exec_s": round(float(sum(x for x in exec_s if not math.isnan(x))), 4),
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "mean_accepted_length": round(accepted_length(accepted, n_drafts), 4) if n_drafts else None,
        "clip_ratio": round(float((reqs["finish_reason"] == "length").mean()), 4),
        "mean_reward": round(float(reqs["reward"].mean()), 4)
        if reqs["reward"].notna().any()
        else None,
    }


class EngineSession:
    """One in-process engine at a time, reused for many captures (`tlt calibrate --model`).

    `start(kind)` closes the running engine and starts one for drafter `kind` (none, ngram,
    eagle): an engine start costs 10-30 s on CPU, so captures of one kind share it. SD engines
    are adaptive (`RolloutEngine(..., adaptive=True)`, as `tlt train`'s workers run them), started
    for draft lengths up to `max_draft_len`; each capture sets its own schedule. Every engine runs
    in this process, so `reference_s()` (`ReferenceForward`) times the machine with the same
    threads the engine steps use: `threads` torch threads, 1 by default as `tlt train`'s rollout
    workers run (two OpenMP threads on a shared 2-core host wait on each other: steps 10-40x
    slower beside another busy process, docs/vllm-cpu-notes.md).
    """

    def __init__(self, model: str | Path, drafter: str | Path | None = None, max_num_seqs: int = 64,
                 max_model_len: int = 2048, max_draft_len: int = 4, seed: int = 0, threads: int = 1,
                 task_file: Task | None = None):
        """`task_file`: a user's task the captures draw their prompts from (None: the GCD task)."""
        import torch

        self.task_file = task_file

        self.torch, self.threads = torch, max(1, threads)
        self._pin_threads()
        self.model, self.drafter = Path(model), Path(drafter) if drafter else None
        self.max_num_seqs, self.max_model_len = max_num_seqs, max_model_len
        self.max_draft_len, self.seed = max_draft_len, seed
        self.engine: RolloutEngine | None = None
        self.kind: DrafterKind | None = None
        self.reference = ReferenceForward(self.model, seed=seed)
        self.reference.measure()  # first calls pay lazy initialisation

    def _pin_threads(self) -> None:
        if self.torch.get_num_threads() != self.threads:
            self.torch.set_num_threads(self.threads)

    def engine_policy(self, kind: DrafterKind) -> Policy:
        """The policy an engine for `kind` starts with: the longest draft everywhere (captures set
        theirs)."""
        if kind == DrafterKind.NONE:
            return from_mapping(Policy, {"name": "selfcal-none",
                                         "drafter": {"kind": DrafterKind.NONE}})
        return from_mapping(Policy, {"name": f"selfcal-{kind}", "sd_threshold": self.max_num_seqs,
                                     "schedule": [[1, self.max_num_seqs, self.max_draft_len]],
                                     "bandit": {"algorithm": "fixed"},
                                     "spot_training": {"enabled": False},
                                     "drafter": {"kind": kind,
                                                 "warm_start": kind == DrafterKind.EAGLE}})

    def start(self, kind: DrafterKind) -> float:
        """Close the running engine, start one for `kind`, warm it up; seconds taken."""
        if kind == DrafterKind.EAGLE and self.drafter is None:
            raise CaptureError("an EAGLE capture needs --drafter (an EAGLE checkpoint directory)")
        t = time.perf_counter()
        self.close()
        self._pin_threads()
        self.engine = RolloutEngine(self.model, self.engine_policy(kind),
                                    drafter_dir=self.drafter if kind == DrafterKind.EAGLE else None,
                                    max_num_seqs=self.max_num_seqs,
                                    max_model_len=self.max_model_len, seed=self.seed,
                                    adaptive=kind != DrafterKind.NONE, in_process=True)
        self.kind = kind
        # Lazy initialisation and the n-gram proposer's JIT compile stay out of every capture.
        self.engine.generate([task.make_problems(1, seed=0)[0].prompt], 1,
                             Sampling(temperature=0.0, max_tokens=32))
        self.engine.llm.reset_prefix_cache()
        return time.perf_counter() - t

    def capture(self, policy: Policy, *, prompts: int, samples: int, max_tokens: int, seed: int,
                mix: str, max_in_flight: int) -> Trace:
        """One capture on the running engine (`policy`'s schedule; its drafter kind must be the
        engine's)."""
        if self.engine is None or policy.drafter.kind != self.kind:
            raise CaptureError(f"capture of drafter {policy.drafter.kind!r} on an engine for "
                               f"{self.kind!r}: start() it first")
        self._pin_threads()
        drafter = self.drafter if self.kind == DrafterKind.EAGLE else None
        return capture(self.model, policy, drafter, prompts=prompts, samples=samples,
                       max_tokens=max_tokens, seed=seed, mix=mix, max_model_len=self.max_model_len,
                       engine=self.engine, log=None, max_in_flight=max_in_flight,
                       task_file=self.task_file)

    def reference_s(self) -> float:
        self._pin_threads()
        return self.reference.measure()

    def reference_cpu_s(self) -> float:
        """The CPU seconds of the last `reference_s()` measurement."""
        return self.reference.last_cpu_s

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine, self.kind = None, None
