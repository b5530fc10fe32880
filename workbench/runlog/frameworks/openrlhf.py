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

How it trains (`training`; openrlhf/cli/train_ppo_ray.py's defaults,
openrlhf/trainer/ppo_utils/experience_maker.py): DeepSpeed ZeRO (`--ds.zero_stage`, 2 by default:
stage 3 gathers the weights per forward as FSDP does) on `--actor.num_nodes` x
`--actor.num_gpus_per_node` GPUs at `--ds.tensor_parallel_size`; `--train.micro_batch_size`
sequences per update micro-batch, `--rollout.micro_batch_size` per experience forward
(`--train.dynamic_batch_enable` packs them to `--train.max_tokens_per_gpu`,
`--rollout.max_tokens_per_gpu`); `rollout.batch_size x n_samples_per_prompt / train.batch_size`
optimizer steps x `--train.max_epochs`; `--actor.gradient_checkpointing_enable`;
`--ds.adam_offload` (the optimizer's state on the host); `--ref.offload` (the reference's weights
on the host, per forward). Sequences are padded to the prompt and response caps unless
`--ds.packing_samples`. `make_experience` holds the policy's, the reference's
(`--algo.kl.init_coef` > 0, 0.01 by default) and the critic's (`--critic.model_name_or_path`)
forwards. Older releases' underscored names (`--micro_train_batch_size`, ...) read the same.
"""

from __future__ import annotations

import re

from workbench.contracts.training_shape import ModelShape, Offload, TrainingShape
from workbench.runlog.frameworks.train_config import (RUN_MODEL, Settings, build, micro,
                                                      timed)
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
                  extra={"running": engine_lines([clean(x)[1] for x in lines])},
                  training=training(settings, rows, path))


# openrlhf/cli/train_ppo_ray.py at v0.11.0 (and the underscored names before v0.10.0)
TRAIN_DEFAULTS = {"actor.num_nodes": 1, "actor.num_gpus_per_node": 8, "ds.zero_stage": 2,
                  "ds.tensor_parallel_size": 1, "train.micro_batch_size": 1,
                  "rollout.micro_batch_size": 1, "train.batch_size": 128,
                  "rollout.batch_size": 1024, "rollout.n_samples_per_prompt": 1,
                  "train.max_epochs": 1, "actor.gradient_checkpointing_enable": False,
                  "ds.adam_offload": False, "ref.offload": False, "algo.kl.init_coef": 0.01,
                  "ds.packing_samples": False, "train.dynamic_batch_enable": False,
                  "train.max_tokens_per_gpu": 16192, "data.prompt_max_len": 1024}
OLD_NAMES = {k: k.replace("train.micro_batch_size", "micro_train_batch_size").replace(
    "rollout.micro_batch_size", "micro_rollout_batch_size").replace(".", "_") for k in
    TRAIN_DEFAULTS}
OLD_NAMES.update({"actor.gradient_checkpointing_enable": "gradient_checkpointing",
                  "algo.kl.init_coef": "init_kl_coef", "ref.offload": "ref_reward_offload",
                  "data.prompt_max_len": "prompt_max_len", "ds.zero_stage": "zero_stage",
                  "ds.adam_offload": "adam_offload", "ds.packing_samples": "packing_samples",
                  "rollout.n_samples_per_prompt": "n_samples_per_prompt",
                  "train.max_epochs": "max_epochs"})


def training(found: dict[str, tuple[object, int]], rows: dict[int, dict], path: str
             ) -> TrainingShape:
    """How the run trains (module docstring)."""
    defaults = {**TRAIN_DEFAULTS, **{OLD_NAMES[k]: v for k, v in TRAIN_DEFAULTS.items()}}
    s = Settings(found, NAME, defaults, path)

    def get(key: str) -> str:
        return s.name(key, OLD_NAMES[key])

    zero = s.int(get("ds.zero_stage"))
    gpus = s.int(get("actor.num_nodes")) * s.int(get("actor.num_gpus_per_node"))
    samples = s.int(get("rollout.batch_size")) * s.int(get("rollout.n_samples_per_prompt"))
    minis = max(1, -(-samples // max(1, s.int(get("train.batch_size")))))
    dynamic = s.flag(get("train.dynamic_batch_enable"))
    tokens = s.int(get("train.max_tokens_per_gpu")) if dynamic else 0
    lp_tokens = s.int("rollout.max_tokens_per_gpu", tokens) if dynamic else 0
    fwd, upd = s.int(get("rollout.micro_batch_size")), s.int(get("train.micro_batch_size"))
    epochs = s.int(get("train.max_epochs"))
    ckpt = s.flag(get("actor.gradient_checkpointing_enable"))
    models = (ModelShape("actor", RUN_MODEL, checkpointing=ckpt, param_bytes=4,
                         optimizer_offload=s.flag(get("ds.adam_offload"))),
              ModelShape("ref", RUN_MODEL, param_offload=Offload.FORWARD if s.flag(
                  get("ref.offload")) else Offload.NONE),
              ModelShape("critic", RUN_MODEL, value_head=True, checkpointing=ckpt, param_bytes=4))
    passes = [micro("old_log_prob", "actor", fwd, lp_tokens),
              micro("update_actor", "actor", upd, tokens, True, epochs, minis),
              micro("update_critic", "critic", upd, tokens, True, epochs, minis)]
    if s.number(get("algo.kl.init_coef")) > 0:
        passes.append(micro("old_log_prob", "ref", fwd, lp_tokens))
    if s.has("critic.model_name_or_path") or s.has("critic_pretrain"):
        passes.append(micro("old_log_prob", "critic", fwd, lp_tokens))
    packed = s.flag(get("ds.packing_samples"))
    return build(s, "zero3" if zero >= 3 else "zero2", models, passes, timed(rows), gpus,
                 s.int(get("ds.tensor_parallel_size")), remove_padding=packed,
                 max_prompt=0 if packed else s.int(get("data.prompt_max_len")))
