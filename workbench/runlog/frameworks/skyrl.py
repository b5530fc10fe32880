"""SkyRL's console log, read as veRL's steps.

Read from SkyRL skyrl-v0.3.0 (github NovaSky-AI/SkyRL, tag skyrl-v0.3.0): skyrl/train/trainer.py
times each phase with skyrl/train/utils/utils.py's `Timer`, which logs `Started: 'name'` and
`Finished: 'name', time cost: Xs` (loguru) and sums the time into the step's timings: `step`
around `generate`, `postprocess_generator_output`, `convert_to_training_input`,
`fwd_logprobs_values_reward` (the policy's, the reference's and the critic's forward passes and the
reward), `compute_advantages_and_returns` (which also logs `avg_final_rewards: R,
avg_response_length: L`), `train_critic_and_policy` (`policy_train`, `critic_train` inside),
`save_checkpoints`, `sync_weights`; `eval` runs after the step's timer. The tracker gets them as
`timing/<name>` with `generate/{avg,max,min}_num_tokens`
(skyrl/train/generators/utils.py `get_rollout_metrics`); with the console tracker
(skyrl/train/utils/tracking.py `ConsoleLogger`) the log holds the same dict after `Step N:`,
pretty-printed with its floats as 4-decimal strings.

A step is the console tracker's `Step N:` dict where the log has it, else the Timer lines from
`Started: 'step'` to `Finished: 'step'` (numbered 1, 2, ... in order: SkyRL's global_step starts at
1). SkyRL logs neither a prompt length nor a clip ratio.

How it trains (`training`; skyrl/train/config/config.py's defaults, trainer.py
`fwd_logprobs_values_reward`): `trainer.strategy` (fsdp, fsdp2 or megatron at
`trainer.policy.megatron_config`'s tensor x pipeline sizes) on
`trainer.placement.policy_num_gpus_per_node` x `policy_num_nodes` GPUs (with `colocate_all`, the
default, the engines' GPUs); `trainer.micro_train_batch_size_per_gpu` sequences per update
micro-batch, `micro_forward_batch_size_per_gpu` per forward (`max_tokens_per_microbatch` > 0
packs them by tokens instead); `train_batch_size / policy_mini_batch_size` optimizer steps (both
in prompts) x `update_epochs_per_batch`; `gradient_checkpointing` (on); LoRA
(`trainer.policy.model.lora.rank`). `fwd_logprobs_values_reward` holds the critic's values pass
(`advantage_estimator` gae), the reference's (`use_kl_loss`, on by default, or
`use_kl_in_reward`) and the policy's; with `colocate_all` each model is moved onto the GPU for its
pass and off after (with the optimizer's state for an update); `fsdp_config.cpu_offload` is FSDP's
per-forward offload.
"""

from __future__ import annotations

import re

from workbench.contracts.training_shape import ModelShape, Offload, TrainingShape
from workbench.runlog.frameworks.train_config import (RUN_GPUS, RUN_MODEL, Settings, build,
                                                      micro, timed)
from workbench.runlog.frameworks.base import (
    CHECKPOINTING, MODEL, ROLLOUT, GEN, STEP, ConfigKey, KeyMap, Parsed, Recognised, clean,
    config_from, to_verl, version_in)
from workbench.runlog.frameworks.engine_lines import engine_lines
from workbench.runlog.frameworks.literals import printed_dict
from workbench.runlog.printed_config import parse_printed_config

NAME = "SkyRL"
HINTS = ("time cost:", "timing/fwd_logprobs")  # its markers' substrings: tested first
MARKER = re.compile(r"Finished: '[\w/]+', time cost: [\d.]+s|'timing/fwd_logprobs_values_reward'")
_FINISHED = re.compile(r"Finished: '([\w/]+)', time cost: ([-+\d.eE]+)s")
_STARTED_STEP = re.compile(r"Started: 'step'")
_AVG_LEN = re.compile(r"avg_response_length: ([-+\d.eE]+|nan)")
_CONSOLE_STEP = re.compile(r"\bStep (\d+): *$")
TRAINER = "skyrl/train/trainer.py (Timer: skyrl/train/utils/utils.py)"
METRICS = "skyrl/train/generators/utils.py get_rollout_metrics"
TABLE = (
    KeyMap("timing/generate", GEN, TRAINER),
    KeyMap("timing/step", STEP, TRAINER),
    KeyMap("timing/fwd_logprobs_values_reward", "timing_s/old_log_prob", TRAINER),
    KeyMap("timing/compute_advantages_and_returns", "timing_s/adv", TRAINER),
    KeyMap("timing/policy_train", "timing_s/update_actor", TRAINER),
    KeyMap("timing/train_critic_and_policy", "timing_s/update_actor", TRAINER),
    KeyMap("timing/critic_train", "timing_s/update_critic", TRAINER),
    KeyMap("timing/sync_weights", "timing_s/update_weights", TRAINER),
    KeyMap("timing/save_checkpoints", "timing_s/save_checkpoint", TRAINER),
    KeyMap("generate/avg_num_tokens", "response_length/mean", METRICS),
    KeyMap("avg_response_length", "response_length/mean", TRAINER + " (console)"),
    KeyMap("generate/max_num_tokens", "response_length/max", METRICS),
    KeyMap("generate/min_num_tokens", "response_length/min", METRICS),
)
ENGINE = "generator.inference_engine."
CONFIG = (
    ConfigKey("trainer.policy.model.path", MODEL),
    ConfigKey("(engines x TP)", "trainer.n_gpus_per_node"),
    ConfigKey("(one node: the engines' GPUs)", "trainer.nnodes"),
    ConfigKey(ENGINE + "tensor_parallel_size", ROLLOUT + "tensor_model_parallel_size"),
    ConfigKey("trainer.train_batch_size", "data.train_batch_size"),
    ConfigKey("generator.n_samples_per_prompt", ROLLOUT + "n"),
    ConfigKey("generator.sampling_params.max_generate_length", "data.max_response_length"),
    ConfigKey(ENGINE + "backend", ROLLOUT + "name"),
    ConfigKey(ENGINE + "max_num_seqs", ROLLOUT + "max_num_seqs"),
    ConfigKey(ENGINE + "enforce_eager", ROLLOUT + "enforce_eager"),
    ConfigKey(ENGINE + "gpu_memory_utilization", ROLLOUT + "gpu_memory_utilization"),
    ConfigKey("trainer.gradient_checkpointing", CHECKPOINTING),
)
# skyrl/train/config/config.py's defaults at skyrl-v0.3.0, for what a launch leaves out
DEFAULTS = {ENGINE + "num_engines": 1, ENGINE + "tensor_parallel_size": 1,
            "trainer.train_batch_size": 1024, "generator.n_samples_per_prompt": 5,
            "generator.sampling_params.max_generate_length": 1024, ENGINE + "backend": "vllm",
            ENGINE + "max_num_seqs": 1024, "trainer.gradient_checkpointing": True}
_OVERRIDE = re.compile(r"(?:^|\s)\+{0,2}([a-z_][\w.]*)=(\"[^\"]*\"|'[^']*'|\S+)")


def identity(text: str) -> Recognised:
    version, where = version_in(text, ("skyrl", "skyrl-train", "skyrl_train"))
    return Recognised(NAME, version, where, "SkyRL skyrl-v0.3.0: skyrl/train/trainer.py, "
                      "skyrl/train/utils/utils.py, skyrl/train/utils/tracking.py")


TRACKER_STEP = ("trainer/global_step",)
TRACKER_MARKER = "timing/fwd_logprobs_values_reward"
TRACKER_PREFIXES: tuple[str, ...] = ()


def derive(values: dict) -> dict:
    return values


def semantics(rows: dict[int, dict]) -> list[str]:
    return []


def is_timer(key: str) -> bool:
    return _is_timer(key)


def _is_timer(key: str) -> bool:
    return key.startswith("timing/")


def _dict_after(lines: list[str], n: int) -> tuple[dict, int]:
    """The pretty-printed dict that starts on the line after `n` (1-based): values, last line."""
    parts, depth, last = [], 0, n
    for m in range(n, min(len(lines), n + 400)):
        text = clean(lines[m])[1]
        if not parts and not text.lstrip().startswith("{"):
            break
        parts.append(text)
        depth += text.count("{") - text.count("}")
        last = m + 1
        if depth <= 0:
            break
    return (printed_dict(" ".join(parts)).values if parts else {}), last


def _steps(lines: list[str]) -> list[tuple[int, int, dict]]:
    """(step, line, values) per step: the console tracker's dicts, else the Timer lines."""
    dicts = []
    for n, raw in enumerate(lines, 1):
        m = _CONSOLE_STEP.search(clean(raw)[1])
        if m:
            values, last = _dict_after(lines, n)
            if any(k.startswith("timing/") for k in values):
                dicts.append((int(m.group(1)), last, values))
    if dicts:
        return dicts
    steps, current, count = [], None, 0
    for n, raw in enumerate(lines, 1):
        text = clean(raw)[1]
        if _STARTED_STEP.search(text):
            current = {}
            continue
        if current is None:
            continue
        if (m := _AVG_LEN.search(text)) is not None:
            current["avg_response_length"] = m.group(1)
        if (m := _FINISHED.search(text)) is not None:
            current["timing/" + m.group(1)] = m.group(2)
            if m.group(1) == "step":
                count += 1
                steps.append((count, n, current))
                current = None
    return steps


def _settings(lines: list[str]) -> dict[str, tuple[object, int]]:
    """The launch command's Hydra overrides and the printed config (a pretty-printed dict)."""
    found: dict[str, tuple[object, int]] = {}
    for n, raw in enumerate(lines, 1):
        text = clean(raw)[1]
        if "skyrl" not in text or "=" not in text:
            continue
        for m in _OVERRIDE.finditer(text):
            found.setdefault(m.group(1), (m.group(2).strip("\"'"), n))
    for k, v in parse_printed_config(lines).values:
        found.setdefault(k, (v.value, v.line))
    for k, v in DEFAULTS.items():
        found.setdefault(k, (v, 0))  # line 0: SkyRL's default (config_from says so)
    engines, tp = found[ENGINE + "num_engines"], found[ENGINE + "tensor_parallel_size"]
    try:
        found["(engines x TP)"] = (int(engines[0]) * int(tp[0]), max(engines[1], tp[1]))
        found["(one node: the engines' GPUs)"] = (1, 0)
    except (TypeError, ValueError):
        pass
    return found


def read(text: str, path: str) -> Parsed:
    lines = text.split("\n")
    rows, unmapped, repeated = {}, set(), 0
    steps = _steps(lines)
    for step, n, values in steps:
        mapped, un = to_verl(values, TABLE, _is_timer, f"{path}:{n}")
        unmapped.update(un)
        repeated += step in rows
        rows[step] = {"step": float(step), "line": float(n), **mapped}
    first = min((int(r["line"]) for r in rows.values()), default=len(lines))
    settings = _settings(lines[:first])
    config = config_from(settings, CONFIG, f"{NAME}'s default")
    return Parsed(rows, identity(text), config, training=training(settings, rows, path),
                  other_lines=sum(1 for x in lines if x.strip()) - len(steps),
                  repeated=repeated, unmapped=tuple(sorted(unmapped)),
                  notes=("SkyRL logs no prompt length and no clip ratio",),
                  extra={"running": engine_lines([clean(x)[1] for x in lines])})


T = "trainer."
# skyrl/train/config/config.py at skyrl-v0.3.0, for what a launch leaves out
TRAIN_DEFAULTS = {T + "strategy": "fsdp", T + "placement.colocate_all": True,
                  T + "placement.policy_num_gpus_per_node": 1, T + "placement.policy_num_nodes": 1,
                  T + "micro_train_batch_size_per_gpu": 1,
                  T + "micro_forward_batch_size_per_gpu": 1, T + "policy_mini_batch_size": 256,
                  T + "update_epochs_per_batch": 1, T + "max_tokens_per_microbatch": -1,
                  T + "gradient_checkpointing": True, T + "algorithm.advantage_estimator": "grpo",
                  T + "algorithm.use_kl_loss": True, T + "algorithm.use_kl_in_reward": False,
                  T + "policy.model.lora.rank": 0, T + "policy.fsdp_config.cpu_offload": False,
                  T + "policy.megatron_config.tensor_model_parallel_size": 1,
                  T + "policy.megatron_config.pipeline_model_parallel_size": 1}


def training(found: dict[str, tuple[object, int]], rows: dict[int, dict], path: str
             ) -> TrainingShape:
    """How the run trains (module docstring)."""
    s = Settings(found, NAME, {**DEFAULTS, **TRAIN_DEFAULTS}, path)
    strategy = s.text(T + "strategy").lower()
    strategy = strategy if strategy in ("fsdp", "fsdp2", "megatron") else "fsdp"
    meg = T + "policy.megatron_config."
    tp = s.int(meg + "tensor_model_parallel_size") if strategy == "megatron" else 1
    pp = s.int(meg + "pipeline_model_parallel_size") if strategy == "megatron" else 1
    colocated = s.flag(T + "placement.colocate_all")
    gpus = RUN_GPUS if colocated and not s.has(T + "placement.policy_num_gpus_per_node") else (
        s.int(T + "placement.policy_num_gpus_per_node") * s.int(T + "placement.policy_num_nodes"))
    minis = max(1, -(-s.int(T + "train_batch_size") // max(1, s.int(T + "policy_mini_batch_size"))))
    tokens = max(0, s.int(T + "max_tokens_per_microbatch"))  # -1: off
    fwd, upd = (s.int(T + "micro_forward_batch_size_per_gpu"),
                s.int(T + "micro_train_batch_size_per_gpu"))
    epochs = s.int(T + "update_epochs_per_batch")
    moved = Offload.PHASE if colocated else Offload.NONE
    off = Offload.FORWARD if s.flag(T + "policy.fsdp_config.cpu_offload") else moved
    ckpt = s.flag(T + "gradient_checkpointing")
    models = (ModelShape("actor", RUN_MODEL, checkpointing=ckpt, param_bytes=4, param_offload=off,
                         lora_rank=s.int(T + "policy.model.lora.rank"),
                         optimizer_offload=colocated),
              ModelShape("ref", RUN_MODEL, param_offload=moved),
              ModelShape("critic", RUN_MODEL, value_head=True, checkpointing=ckpt, param_bytes=4,
                         param_offload=moved, optimizer_offload=colocated))
    passes = [micro("old_log_prob", "actor", fwd, tokens),
              micro("update_actor", "actor", upd, tokens, True, epochs, minis),
              micro("update_critic", "critic", upd, tokens, True, epochs, minis)]
    if s.flag(T + "algorithm.use_kl_loss") or s.flag(T + "algorithm.use_kl_in_reward"):
        passes.append(micro("old_log_prob", "ref", fwd, tokens))
    if s.text(T + "algorithm.advantage_estimator").lower() == "gae":
        passes.append(micro("old_log_prob", "critic", fwd, tokens))
    return build(s, strategy, models, passes, timed(rows), gpus, tp, pp)
