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
from real.rollout.requests import EngineStepRow, RolloutRequest, RunResult, Sampling
from real.rollout.spec_config import speculative_config
from real.tiny import task
from real.tiny.model import load_model_dir
from workbench.contracts.policy import Policy
from workbench.contracts.schema import to_mapping
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
                            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine()}
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

        info["accelerator"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU)"
    except Exception:
        info["accelerator"] = "unknown"
    return info


def check_inputs(model: str | Path, policy: Policy, drafter: str | Path | None, prompts: int, samples: int,
                 max_tokens: int, mix: str, max_model_len: int) -> None:
    """Everything that can be refused before an engine starts (the start costs ~30 s)."""
    try:
        load_model_dir(model)
    except (FileNotFoundError, ValueError) as exc:
        raise CaptureError(str(exc)) from None
    if prompts < 1 or samples < 1 or max_tokens < 1:
        raise CaptureError("--prompts, --samples and --max-tokens must be >= 1")
    if max_tokens >= max_model_len:
        raise CaptureError(f"--max-tokens {max_tokens}: must leave room for the prompt in max_model_len {max_model_len}")
    if mix not in task.MIXES:
        raise CaptureError(f"--mix {mix!r}: allowed: {', '.join(task.MIXES)}")
    speculative_config(policy, drafter)  # raises naming --drafter when an eagle policy lacks one


def capture(model: str | Path, policy: Policy, drafter: str | Path | None = None, prompts: int = 8,
            samples: int = 4, max_tokens: int = 512, seed: int = 0, mix: str = "default", temperature: float = 1.0,
            max_num_seqs: int = 64, max_model_len: int = 2048, out: str | Path | None = None,
            engine: Any = None, log: Callable[[str], None] | None = print, progress_every_s: float = 2.0) -> Trace:
    """Capture one rollout as a Trace (written to `out` when given).

    `engine`: an already running RolloutEngine to use (its policy and drafter are then the
    engine's; `policy` and `drafter` only go to the meta); else one is started and closed.
    """
    check_inputs(model, policy, drafter, prompts, samples, max_tokens, mix, max_model_len)
    problems = task.make_problems(prompts, seed, mix)
    own = engine is None
    if own:
        if log:
            log(f"starting vLLM: {model}, policy {policy.name} (drafter {policy.drafter.kind}), max_num_seqs {max_num_seqs}")
        engine = RolloutEngine(model, policy, drafter_dir=drafter, max_num_seqs=max_num_seqs,
                               max_model_len=max_model_len, seed=seed)
    try:
        # Warm up (lazy initialisation, n-gram JIT) outside the trace, then forget the prompt.
        engine.generate([problems[0].prompt], 1, Sampling(temperature=0.0, max_tokens=4))
        engine.llm.reset_prefix_cache()
        sampling = Sampling(temperature=temperature, max_tokens=max_tokens, seed=seed)
        requests = [RolloutRequest(i, s, p.prompt, sampling) for i, p in enumerate(problems) for s in range(samples)]
        if log:
            log(f"capturing {prompts} prompts x {samples} samples, up to {max_tokens} tokens, temperature {temperature}, seed {seed}")
        run = engine.run_steps(requests, on_step=_progress(len(requests), log, progress_every_s))
        for row in run.requests:
            row.reward = float(task.reward(problems[row.prompt_id], run.outputs[row.request_id].text))
        settings = engine.settings()
    finally:
        if own:
            engine.close()

    steps = rows_frame(run.steps, StepRow)
    reqs = rows_frame(run.requests, RequestRow)
    rl = rows_frame([RLStepRow(rl_step=0, rollout_s=run.wall_s, train_s=0.0, sync_s=0.0, drafter_train_s=0.0)], RLStepRow)
    meta = {
        "model": str(Path(model).resolve()),
        "policy": to_mapping(policy),
        "drafter": str(Path(settings["drafter"]).resolve()) if settings.get("drafter") else None,
        "prompts": prompts, "samples": samples, "max_tokens": max_tokens, "seed": seed,
        "mix": mix, "temperature": temperature, "task": task.__name__,
        "machine": machine_info(),
        "engine": settings,
        "summary": _summary(run, steps, reqs),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv) if sys.argv else None,
        "notes": "steps.wall_s is the time between two engine outputs seen by the driver (they add up to "
                 "rollout_s); summary.model_exec_s is vLLM's own model-execution time summed over steps.",
    }
    trace = Trace(meta, steps, reqs, rl)
    if out is not None:
        write_trace(trace, out)
    return trace


def _progress(total: int, log: Callable[[str], None] | None, every_s: float) -> Callable[[EngineStepRow], None]:
    """An `on_step` that logs the rollout's progress at most every `every_s` seconds."""
    state = {"last": time.perf_counter(), "tokens": 0}
    t_run = time.perf_counter()

    def on_step(row: EngineStepRow) -> None:
        state["tokens"] += row.new_tokens
        now = time.perf_counter()
        if log and now - state["last"] >= every_s:
            state["last"] = now
            log(f"  step {row.step + 1}: batch {row.batch_size}, waiting {row.num_waiting}, "
                f"{row.finished}/{total} requests finished, {state['tokens']} tokens, {now - t_run:.1f}s")

    return on_step


def _summary(run: RunResult, steps: pd.DataFrame, reqs: pd.DataFrame) -> dict[str, Any]:
    drafted = int(steps["num_draft_tokens"].sum())
    n_drafts = int(steps["num_drafts"].sum())
    accepted = int(steps["num_accepted_tokens"].sum())
    tokens = int(reqs["response_tokens"].sum())
    exec_s = [r.exec_s for r in run.steps]
    return {
        "engine_steps": len(steps), "requests": len(reqs), "response_tokens": tokens,
        "rollout_s": round(run.wall_s, 4), "tokens_per_s": round(tokens / run.wall_s, 2) if run.wall_s else None,
        "model_exec_s": round(float(sum(x for x in exec_s if not math.isnan(x))), 4),
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "mean_accepted_length": round(accepted_length(accepted, n_drafts), 4) if n_drafts else None,
        "clip_ratio": round(float((reqs["finish_reason"] == "length").mean()), 4),
        "mean_reward": round(float(reqs["reward"].mean()), 4) if reqs["reward"].notna().any() else None,
    }
