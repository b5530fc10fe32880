"""NeMo-RL's GRPO console log, read as veRL's steps.

Read from NeMo-RL v0.7.0 (github NVIDIA-NeMo/RL, tag v0.7.0), nemo_rl/algorithms/grpo.py: each step
opens with `===== Step N/M =====` and closes with `📊 Training Results:` (`• Mean Generation
Length: X`), `⏱️  Timing:` (`• Total step time: Xs`, then each timer as `• name: Xs (p%)`, the
`Timer` of nemo_rl/utils/timer.py summed over the step: `generation`,
`prepare_for_generation/total` (the refit: weights into the engine, its
`prepare_for_generation/transfer_and_update_weights` inside it), `policy_and_reference_logprobs`,
`policy_training`, `reward_calculation`, `advantage_calculation`, `checkpointing`, ...) and
`🔍 Performance Metrics:` (nemo_rl/algorithms/utils.py `print_performance_metrics`: `• Mean Total
Tokens per Sample: X`, prompt and response). The same metrics go to the trackers as
`timing/train/<name>` and `train/<metric>` (`train/mean_gen_tokens_per_sample`,
`train/max_gen_tokens_per_sample`, `train/truncation_rate`, `train/mean_prompt_length`).

Semantics: `policy_and_reference_logprobs` times the old policy's and the reference's passes
together (veRL's old_log_prob; its own `policy_logprobs` and `reference_logprobs`, where printed,
map to old_log_prob and ref). Asynchronous GRPO (`grpo.async_grpo.enabled`) times
`exposed_generation`, the trainer's wait for trajectories, not the generation: flagged
asynchronous. The console prints no longest response: a step's longest is unknown unless its
truncation rate says responses reached the cap (the trackers' `max_gen_tokens_per_sample` has it).

The launch config: the `Final config:` dict examples/run_grpo.py pretty-prints.

How it trains (`training`; examples/configs/grpo_math_1B.yaml's defaults, nemo_rl/models/policy/
workers/dtensor_policy_worker_v2.py): DTensor (FSDP2) at `policy.dtensor_cfg.tensor_parallel_size`,
or Megatron (`policy.megatron_cfg.enabled`) at its tensor x pipeline sizes, on the run's GPUs
(generation colocated); `policy.train_micro_batch_size` sequences per micro-batch
(`policy.logprob_batch_size` for the log-prob passes), packed (`policy.sequence_packing`, on by
default, or `dynamic_batching`) to max_total_sequence_length x that many tokens, else padded to
`policy.max_total_sequence_length`; `policy.train_global_batch_size` samples per optimizer step;
`activation_checkpointing`; LoRA (`dtensor_cfg.lora_cfg`); `dtensor_cfg.cpu_offload` (FSDP2's
parameter offload, per forward). The reference pass runs where `loss_fn.reference_policy_kl_penalty`
> 0: the policy's model with the reference's weights copied in from the host and the policy's out
and back (`use_reference_model`), inside `policy_and_reference_logprobs`.
"""

from __future__ import annotations

import re

from workbench.contracts.training_shape import ModelShape, Offload, TrainingShape
from workbench.runlog.frameworks.base import (
    CHECKPOINTING, MODEL, ROLLOUT, GEN, STEP, WAIT, ConfigKey, KeyMap, Parsed, Recognised,
    clean, config_from, to_verl, version_in)
from workbench.runlog.frameworks.train_config import (RUN_MODEL, Settings, build, micro,
                                                      mini_batches, timed)
from workbench.runlog.frameworks.engine_lines import engine_lines
from workbench.runlog.printed_config import parse_printed_config

NAME = "NeMo-RL"
HINTS = ("Total step time",)  # its markers' substrings: tested first
MARKER = re.compile(r"Total step time: [\d.]+s")
_HEADER = re.compile(r"={5,} Step (\d+)/\d+ ={5,}")
_BULLET = re.compile(r"^\s*•\s*([^:]+):\s*([-+\d.eE]+|nan|inf)s?\b")
GRPO = "nemo_rl/algorithms/grpo.py (Timer: nemo_rl/utils/timer.py)"
ROLLOUTS = "nemo_rl/experience/rollouts.py (rollout metrics, logged as train/...)"
TABLE = (
    KeyMap("generation", GEN, GRPO),
    KeyMap("total_step_time", STEP, GRPO),
    KeyMap("policy_logprobs", "timing_s/old_log_prob", GRPO),
    KeyMap("policy_and_reference_logprobs", "timing_s/old_log_prob", GRPO),
    KeyMap("reference_logprobs", "timing_s/ref", GRPO),
    KeyMap("policy_training", "timing_s/update_actor", GRPO),
    KeyMap("prepare_for_generation/total", "timing_s/update_weights", GRPO),
    KeyMap("weight_sync", "timing_s/update_weights", GRPO + " (async GRPO)"),
    KeyMap("reward_calculation", "timing_s/reward", GRPO),
    KeyMap("advantage_calculation", "timing_s/adv", GRPO),
    KeyMap("checkpointing", "timing_s/save_checkpoint", GRPO),
    KeyMap("Mean Generation Length", "response_length/mean", GRPO + " (console)"),
    KeyMap("mean_gen_tokens_per_sample", "response_length/mean", ROLLOUTS),
    KeyMap("max_gen_tokens_per_sample", "response_length/max", ROLLOUTS),
    KeyMap("truncation_rate", "response_length/clip_ratio", ROLLOUTS),
    KeyMap("mean_prompt_length", "prompt_length/mean", GRPO),
    KeyMap("prompt_length/mean", "prompt_length/mean",
           "nemo_rl/algorithms/utils.py: Mean Total Tokens per Sample - Mean Generation Length"),
)
CONFIG = (
    ConfigKey("policy.model_name", MODEL),
    ConfigKey("cluster.gpus_per_node", "trainer.n_gpus_per_node"),
    ConfigKey("cluster.num_nodes", "trainer.nnodes"),
    ConfigKey("policy.generation.vllm_cfg.tensor_parallel_size",
              ROLLOUT + "tensor_model_parallel_size"),
    ConfigKey("grpo.num_prompts_per_step", "data.train_batch_size"),
    ConfigKey("grpo.num_generations_per_prompt", ROLLOUT + "n"),
    ConfigKey("policy.generation.max_new_tokens", "data.max_response_length"),
    ConfigKey("policy.max_total_sequence_length", "data.max_response_length"),
    ConfigKey("policy.generation.backend", ROLLOUT + "name"),
    ConfigKey("policy.generation.vllm_cfg.enforce_eager", ROLLOUT + "enforce_eager"),
    ConfigKey("policy.generation.vllm_cfg.gpu_memory_utilization",
              ROLLOUT + "gpu_memory_utilization"),
    ConfigKey("policy.dtensor_cfg.activation_checkpointing",
              CHECKPOINTING),
)
ASYNC_KEY = "grpo.async_grpo.enabled"


def identity(text: str) -> Recognised:
    version, where = version_in(text, ("nemo_rl", "nemo-rl", "nemo rl"))
    return Recognised(NAME, version, where, "NeMo-RL v0.7.0: nemo_rl/algorithms/grpo.py, "
                      "nemo_rl/algorithms/utils.py")


def _blocks(lines: list[str]) -> list[tuple[int, int, int]]:
    """(step, first line, last line) of each `Step N/M` block."""
    heads = []
    for n, raw in enumerate(lines, 1):
        m = _HEADER.search(clean(raw)[1])
        if m:
            heads.append((int(m.group(1)), n))
    ends = [n - 1 for _, n in heads[1:]] + [len(lines)]
    return [(s, n, e) for (s, n), e in zip(heads, ends)]


def _values(lines: list[str], a: int, b: int) -> tuple[dict, int]:
    """The bullets of one step's block (timings are `name: Xs (p%)`); the last one's line."""
    values: dict[str, float] = {}
    last = a
    for n in range(a, b + 1):
        text = clean(lines[n - 1])[1]
        m = _BULLET.match(text)
        if not m:
            continue
        name, value = m.group(1).strip(), m.group(2)
        name = "total_step_time" if name == "Total step time" else name
        values[name] = float(value)
        last = n
    if "Mean Total Tokens per Sample" in values and "Mean Generation Length" in values:
        values["prompt_length/mean"] = (values["Mean Total Tokens per Sample"]
                                        - values["Mean Generation Length"])
    return values, last


TRACKER_STEP: tuple[str, ...] = ()
TRACKER_MARKER = "total_step_time"
TRACKER_PREFIXES = ("timing/train/", "train/")  # nemo_rl/utils/logger.py log_metrics(prefix=...)


def derive(values: dict) -> dict:
    return values


def semantics(rows: dict[int, dict]) -> list[str]:
    for r in rows.values():
        if "exposed_generation" in r and GEN not in r:
            r[WAIT] = r.pop("exposed_generation")
    return []


def is_timer(key: str) -> bool:
    return _is_timer(key)


def _is_timer(key: str) -> bool:
    return key not in {m.theirs for m in TABLE} and not key[:1].isupper()


def read(text: str, path: str) -> Parsed:
    lines = text.split("\n")
    blocks = _blocks(lines)
    rows, unmapped, repeated = {}, set(), 0
    for step, a, b in blocks:
        values, last = _values(lines, a, b)
        mapped, un = to_verl(values, TABLE, _is_timer, f"{path}:{last}")
        unmapped.update(un)
        if "exposed_generation" in mapped:  # asynchronous GRPO: its rollout timer is the wait
            mapped[WAIT] = mapped.pop("exposed_generation")
        repeated += step in rows
        rows[step] = {"step": float(step), "line": float(last), **mapped}
    head = [clean(x)[1] for x in lines[: blocks[0][1] if blocks else len(lines)]]
    printed = parse_printed_config(head)
    settings = {k: (v.value, v.line) for k, v in printed.values}
    asynchronous = bool(settings.get(ASYNC_KEY, (False,))[0]) or any(
        WAIT in r for r in rows.values())
    notes = (("asynchronous GRPO: exposed_generation is the trainer's wait for trajectories, "
              "not generation",) if asynchronous else ())
    return Parsed(rows, identity(text), config_from(settings, CONFIG),
                  other_lines=sum(1 for x in lines if x.strip()) - len(blocks), repeated=repeated,
                  unmapped=tuple(sorted(unmapped)), notes=notes, asynchronous=asynchronous,
                  extra={"running": engine_lines([clean(x)[1] for x in lines])},
                  training=training(settings, rows, path))


P = "policy."
DT, MG = P + "dtensor_cfg.", P + "megatron_cfg."
# examples/configs/grpo_math_1B.yaml at v0.7.0, for what a config leaves out
DEFAULTS = {"grpo.num_prompts_per_step": 32, "grpo.num_generations_per_prompt": 16,
            P + "train_global_batch_size": 512, P + "train_micro_batch_size": 4,
            P + "max_total_sequence_length": 512, MG + "enabled": False,
            DT + "tensor_parallel_size": 1, DT + "activation_checkpointing": False,
            DT + "cpu_offload": False, DT + "lora_cfg.enabled": False, DT + "lora_cfg.dim": 8,
            MG + "tensor_model_parallel_size": 1, MG + "pipeline_model_parallel_size": 1,
            MG + "activation_checkpointing": False, P + "sequence_packing.enabled": True,
            P + "dynamic_batching.enabled": False, "loss_fn.reference_policy_kl_penalty": 0.01}


def training(found: dict[str, tuple[object, int]], rows: dict[int, dict], path: str
             ) -> TrainingShape:
    """How the run trains (module docstring)."""
    s = Settings(found, NAME, DEFAULTS, path)
    meg = s.flag(MG + "enabled")
    cfg = MG if meg else DT
    tp = s.int(MG + "tensor_model_parallel_size" if meg else DT + "tensor_parallel_size")
    pp = s.int(MG + "pipeline_model_parallel_size") if meg else 1
    samples = s.int("grpo.num_prompts_per_step") * s.int("grpo.num_generations_per_prompt")
    minis = mini_batches(s, samples, P + "train_global_batch_size", samples)
    mbs = s.int(P + "train_micro_batch_size")
    lps = s.int(P + "logprob_batch_size", mbs)
    seq = s.int(P + "max_total_sequence_length")
    packed = s.flag(P + "sequence_packing.enabled") or s.flag(P + "dynamic_batching.enabled")
    tokens, lp_tokens = (seq * mbs, seq * lps) if packed else (0, 0)
    lora = s.int(DT + "lora_cfg.dim") if not meg and s.flag(DT + "lora_cfg.enabled") else 0
    off = Offload.FORWARD if not meg and s.flag(DT + "cpu_offload") else Offload.NONE
    actor = ModelShape("actor", RUN_MODEL, checkpointing=s.flag(cfg + "activation_checkpointing"),
                       lora_rank=lora, param_offload=off, param_bytes=4)
    ref = ModelShape("ref", RUN_MODEL, param_offload=Offload.PHASE, param_bytes=4)
    phases = timed(rows)
    passes = [micro("old_log_prob", "actor", lps, lp_tokens),
              micro("update_actor", "actor", mbs, tokens, True, 1, minis)]
    if s.number("loss_fn.reference_policy_kl_penalty") > 0 or "ref" in phases:
        where = "ref" if "ref" in phases else "old_log_prob"  # else inside the combined timer
        passes.append(micro(where, "ref", lps, lp_tokens))
    return build(s, "megatron" if meg else "fsdp2", (actor, ref), passes, phases, tp=tp, pp=pp,
                 remove_padding=packed, max_response=0 if packed else seq)
