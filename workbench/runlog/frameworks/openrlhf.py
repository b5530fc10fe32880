"""OpenRLHF's console log, read as veRL's steps.

Read from OpenRLHF v0.11.0 (github OpenRLHF/OpenRLHF, tag v0.11.0), openrlhf/trainer/ppo_trainer.py:
after each PPO step the trainer logs `✨ Global step N: {...}` (its status dict, printed by Python):
`timing/generation` (the rollout on vLLM), `timing/make_experience` (rewards, the reference's,
the critic's and the old policy's forward passes), `timing/ppo_train` (the actor's and the
critic's update), `timing/broadcast` (weights into vLLM) and `timing/step_total` (their sum, in the
synchronous trainer; the asynchronous one, `--train.async_enable`, measures it by the wall clock,
its generation overlapping the update: flagged asynchronous), with `rollout/response_length_mean`,
`rollout/truncated_rate` and the update's `response_length` and `total_length` (means: the
prompt's is their difference). Releases before v0.10.0 print no per-phase timings: such a log has
no timed step. OpenRLHF logs no longest response.

The launch config: the `openrlhf.cli.train_ppo_ray` command's flags where the log shows it
(`--rollout.batch_size 128`; before v0.10, `--rollout_batch_size 128`).
"""

from __future__ import annotations

import re

from workbench.runlog.frameworks.base import (
    CHECKPOINTING, MODEL, ROLLOUT, GEN, STEP, ConfigKey, KeyMap, Parsed, Recognised, clean,
    config_from, to_verl, version_in)
from workbench.runlog.frameworks.engine_lines import engine_lines
from workbench.runlog.frameworks.literals import dashed_flags, printed_dict

NAME = "OpenRLHF"
HINTS = ("Global step",)  # its markers' substrings: tested first
MARKER = re.compile(r"Global step \d+: \{")
_RECORD = re.compile(r"Global step (\d+): (\{.*)$")
TRAINER = "openrlhf/trainer/ppo_trainer.py"
STATS = TRAINER + " _compute_rollout_stats"
TABLE = (
    KeyMap("timing/generation", GEN, TRAINER),
    KeyMap("timing/step_total", STEP, TRAINER),
    KeyMap("timing/make_experience", "timing_s/old_log_prob", TRAINER),
    KeyMap("timing/ppo_train", "timing_s/update_actor", TRAINER),
    KeyMap("timing/broadcast", "timing_s/update_weights", TRAINER),
    KeyMap("rollout/response_length_mean", "response_length/mean", STATS),
    KeyMap("response_length", "response_length/mean", "openrlhf/trainer/ray/ppo_actor.py"),
    KeyMap("rollout/truncated_rate", "response_length/clip_ratio", STATS),
    KeyMap("prompt_length/mean", "prompt_length/mean",
           "openrlhf/trainer/ray/ppo_actor.py: total_length - response_length"),
)
CONFIG = (
    ConfigKey("actor.model_name_or_path", MODEL),
    ConfigKey("pretrain", MODEL),
    ConfigKey("(vllm num_engines x tensor_parallel_size)", "trainer.n_gpus_per_node"),
    ConfigKey("(one node: the engines' GPUs)", "trainer.nnodes"),
    ConfigKey("vllm.tensor_parallel_size", ROLLOUT + "tensor_model_parallel_size"),
    ConfigKey("vllm_tensor_parallel_size", ROLLOUT + "tensor_model_parallel_size"),
    ConfigKey("rollout.batch_size", "data.train_batch_size"),
    ConfigKey("rollout_batch_size", "data.train_batch_size"),
    ConfigKey("rollout.n_samples_per_prompt", ROLLOUT + "n"),
    ConfigKey("n_samples_per_prompt", ROLLOUT + "n"),
    ConfigKey("rollout.max_new_tokens", "data.max_response_length"),
    ConfigKey("generate_max_len", "data.max_response_length"),
    ConfigKey("(OpenRLHF rolls out on vLLM)", ROLLOUT + "name"),
    ConfigKey("vllm.enforce_eager", ROLLOUT + "enforce_eager"),
    ConfigKey("enforce_eager", ROLLOUT + "enforce_eager"),
    ConfigKey("vllm.gpu_memory_utilization", ROLLOUT + "gpu_memory_utilization"),
    ConfigKey("vllm_gpu_memory_utilization", ROLLOUT + "gpu_memory_utilization"),
    ConfigKey("actor.gradient_checkpointing_enable",
              CHECKPOINTING),
    ConfigKey("gradient_checkpointing", CHECKPOINTING),
)
_LAUNCH = re.compile(r"openrlhf\.cli\.train_ppo_ray")
_ASYNC = ("train.async_enable", "async_train")


def identity(text: str) -> Recognised:
    version, where = version_in(text, ("openrlhf",))
    return Recognised(NAME, version, where, "OpenRLHF v0.11.0: openrlhf/trainer/ppo_trainer.py")


TRACKER_STEP = ("global_step",)
TRACKER_MARKER = "timing/make_experience"
TRACKER_PREFIXES = ("train/",)  # openrlhf/utils/logging_utils.py log_train


def derive(values: dict) -> dict:
    """The prompt's mean length: the update's total_length - response_length (means)."""
    total, resp = values.get("total_length"), values.get("response_length")
    if isinstance(total, float) and isinstance(resp, float):
        return {**values, "prompt_length/mean": total - resp}
    return values


def semantics(rows: dict[int, dict]) -> list[str]:
    return []


def is_timer(key: str) -> bool:
    return _is_timer(key)


def _is_timer(key: str) -> bool:
    return key.startswith("timing/")


def _settings(lines: list[str]) -> dict[str, tuple[object, int]]:
    found = dashed_flags(lines, _LAUNCH)
    engines = found.get("vllm.num_engines") or found.get("vllm_num_engines")
    tp = found.get("vllm.tensor_parallel_size") or found.get("vllm_tensor_parallel_size") or (1, 0)
    if engines is not None:
        try:
            found["(vllm num_engines x tensor_parallel_size)"] = (int(engines[0]) * int(tp[0]),
                                                                  engines[1])
            found["(one node: the engines' GPUs)"] = (1, 0)
        except (TypeError, ValueError):
            pass
    if found:
        found["(OpenRLHF rolls out on vLLM)"] = ("vllm", 0)
    return found


def read(text: str, path: str) -> Parsed:
    lines = text.split("\n")
    rows, unmapped, other, repeated, cut = {}, set(), 0, 0, 0
    for n, raw in enumerate(lines, 1):
        m = _RECORD.search(clean(raw)[1])
        if not m:
            other += bool(raw.strip())
            continue
        d = printed_dict(m.group(2))
        if not d.whole:
            cut += 1
            continue
        values = derive(dict(d.values))
        mapped, un = to_verl(values, TABLE, _is_timer, f"{path}:{n}")
        unmapped.update(un)
        step = int(m.group(1))
        repeated += step in rows
        rows[step] = {"step": float(step), "line": float(n), **mapped}
    first = min((int(r["line"]) for r in rows.values()), default=len(lines))
    settings = _settings([clean(x)[1] for x in lines[:first]])
    asynchronous = any(bool(settings.get(k, (False,))[0]) for k in _ASYNC)
    notes = (("--train.async_enable: generation overlaps the update; timing/step_total is the "
              "wall clock",) if asynchronous else ()) + ("OpenRLHF logs no longest response",)
    return Parsed(rows, identity(text), config_from(settings, CONFIG), other_lines=other,
                  truncated=cut, repeated=repeated,
                  unmapped=tuple(sorted(unmapped)), notes=notes, asynchronous=asynchronous,
                  extra={"running": engine_lines([clean(x)[1] for x in lines])})
