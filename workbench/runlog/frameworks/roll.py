"""ROLL's RLVR console log, read as veRL's steps.

Read from ROLL v0.3.0 (github alibaba/ROLL, tag v0.3.0), roll/pipeline/rlvr/rlvr_pipeline.py: each
step logs `pipeline step N start...`, then (every `logging_steps`, 1 by default) its metrics as one
JSON line (`logger.info(json.dumps(metrics))`) and `pipeline step N finished`. Timers
(`time/<name>`): `step_generate`, `step_model_update` (weights into the engines),
`ref_log_probs_values`, `old_log_probs`, `step_train`, `val_step`, and `step_total`; token counts
(roll/utils/metrics/metrics_manager.py `add_token_metrics`): `token/response_length/{mean,max,
min}`, `token/prompt_length/mean`, `token/total_response_length/clip` (a count of responses at the
cap).

Semantics: `time/step_total` is reported a step late: step N's line holds step N-1's total (the
pipeline logs `pre_step_total_time` at the start of the next step), so it is moved back one step;
the last step's total is never logged (that step keeps its phases but not its total). The clip
count becomes a share over the step's responses (rollout_batch_size x num_return_sequences_in_group
from the printed config).

The launch config: the YAML examples/start_rlvr_pipeline.py prints (`OmegaConf.to_yaml`).

How it trains (`training`; roll/configs/worker_config.py, training_args.py, base_config.py
defaults; rlvr_pipeline.py): `actor_train.strategy_args.strategy_name` (megatron_train, else
DeepSpeed's ZeRO or FSDP2 as named) at its `strategy_config` tensor x pipeline sizes
(`recompute_granularity: full`: checkpointing) on `actor_train.device_mapping`'s GPUs;
`training_args.per_device_train_batch_size` sequences per update micro-batch,
`actor_train.infer_batch_size` (16) per log-prob forward (`use_dynamic_batching_in_train` /
`_in_infer` pack them to `max_tokens_per_microbatch_in_train` / `_in_infer`); `rollout_batch_size
x n / (micro x ranks x gradient_accumulation_steps)` optimizer steps x `ppo_epochs`.
`ref_log_probs_values` is the reference's pass; `old_log_probs` holds the policy's (where
`enable_old_logprobs_recompute`, off by default) and the critic's values (`adv_estimator: gae`).
"""

from __future__ import annotations

import json
import re

from workbench.contracts.training_shape import ModelShape, TrainingShape
from workbench.runlog.frameworks.train_config import (RUN_GPUS, RUN_MODEL, Settings, build,
                                                      micro, timed)
from workbench.runlog.frameworks.base import (
    MODEL, ROLLOUT, GEN, STEP, ConfigKey, KeyMap, Parsed, Recognised, clean, config_from,
    to_verl, version_in)
from workbench.runlog.frameworks.engine_lines import engine_lines
from workbench.runlog.frameworks.literals import yaml_settings

NAME = "ROLL"
HINTS = ("pipeline step", "time/step_generate")  # its markers' substrings: tested first
MARKER = re.compile(r"pipeline step \d+ finished|\"time/step_generate\"")
_FINISHED = re.compile(r"pipeline step (\d+) finished")
PIPELINE = "roll/pipeline/rlvr/rlvr_pipeline.py"
TOKENS = "roll/utils/metrics/metrics_manager.py add_token_metrics"
TABLE = (
    KeyMap("time/step_generate", GEN, PIPELINE),
    KeyMap("step_total (moved back a step)", STEP, PIPELINE + " (time/step_total, a step late)"),
    KeyMap("time/old_log_probs", "timing_s/old_log_prob", PIPELINE),
    KeyMap("time/ref_log_probs_values", "timing_s/ref", PIPELINE),
    KeyMap("time/step_train", "timing_s/update_actor", PIPELINE),
    KeyMap("time/step_model_update", "timing_s/update_weights", PIPELINE),
    KeyMap("time/val_step", "timing_s/testing", PIPELINE),
    KeyMap("token/response_length/mean", "response_length/mean", TOKENS),
    KeyMap("token/response_length/max", "response_length/max", TOKENS),
    KeyMap("token/response_length/min", "response_length/min", TOKENS),
    KeyMap("token/prompt_length/mean", "prompt_length/mean", TOKENS),
    KeyMap("clip share", "response_length/clip_ratio",
           TOKENS + ": token/total_response_length/clip over the step's responses"),
)
CONFIG = (
    ConfigKey("pretrain", MODEL),
    ConfigKey("(GPUs of actor_infer.device_mapping)", "trainer.n_gpus_per_node"),
    ConfigKey("(one node: the rollout's GPUs)", "trainer.nnodes"),
    ConfigKey("actor_infer.strategy_args.strategy_config.tensor_parallel_size",
              ROLLOUT + "tensor_model_parallel_size"),
    ConfigKey("rollout_batch_size", "data.train_batch_size"),
    ConfigKey("num_return_sequences_in_group", ROLLOUT + "n"),
    ConfigKey("response_length", "data.max_response_length"),
    ConfigKey("actor_infer.strategy_args.strategy_name", ROLLOUT + "name"),
    ConfigKey("actor_infer.strategy_args.strategy_config.enforce_eager",
              ROLLOUT + "enforce_eager"),
    ConfigKey("actor_infer.strategy_args.strategy_config.gpu_memory_utilization",
              ROLLOUT + "gpu_memory_utilization"),
)
_RANGE = re.compile(r"range\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def identity(text: str) -> Recognised:
    version, where = version_in(text, ("roll", "alibaba-roll"))
    return Recognised(NAME, version, where, "ROLL v0.3.0: roll/pipeline/rlvr/rlvr_pipeline.py")


def _is_timer(key: str) -> bool:
    return key.startswith("time/") and key != "time/step_total"


def _gpus(mapping: object) -> int | None:
    """How many GPUs a ROLL device_mapping names (`list(range(0,8))` or `[0, 1, 2]`)."""
    text = str(mapping)
    m = _RANGE.search(text)
    if m:
        return int(m.group(2)) - int(m.group(1))
    ids = re.findall(r"\d+", text)
    return len(ids) or None


def _settings(lines: list[str]) -> dict[str, tuple[object, int]]:
    found = yaml_settings(lines)
    mapping = found.get("actor_infer.device_mapping")
    if mapping is not None and _gpus(mapping[0]):
        found["(GPUs of actor_infer.device_mapping)"] = (_gpus(mapping[0]), mapping[1])
        found["(one node: the rollout's GPUs)"] = (1, 0)
    return found


def _records(lines: list[str]) -> tuple[list[tuple[int, int, dict]], int]:
    """(step, line, metrics) per JSON metrics line, numbered by the `finished` line after it."""
    out, pending, other = [], None, 0
    for n, raw in enumerate(lines, 1):
        text = clean(raw)[1]
        start = text.find('{"')
        if start >= 0 and '"time/' in text:
            try:
                pending = (n, json.loads(text[start:]))
            except ValueError:
                pending = None
            continue
        m = _FINISHED.search(text)
        if m and pending is not None:
            out.append((int(m.group(1)), pending[0], pending[1]))
            pending = None
        else:
            other += bool(text.strip())
    return out, other


def read(text: str, path: str) -> Parsed:
    lines = text.split("\n")
    records, other = _records(lines)
    first = min((r[1] for r in records), default=len(lines))
    settings = _settings([clean(x)[1] for x in lines[:first]])
    responses = None
    try:
        responses = int(settings["rollout_batch_size"][0]) * int(
            settings["num_return_sequences_in_group"][0])
    except (KeyError, TypeError, ValueError):
        pass
    shifted = shift_totals({step: m for step, _, m in records})
    rows, unmapped, repeated = {}, set(), 0
    for step, n, metrics in records:
        values = {k: v for k, v in shifted[step].items() if isinstance(v, (int, float))}
        clip = values.get("token/total_response_length/clip")
        if clip is not None and responses:
            values["clip share"] = clip / responses
        mapped, un = to_verl(values, TABLE, _is_timer, f"{path}:{n}")
        unmapped.update(un)
        repeated += step in rows
        rows[step] = {"step": float(step), "line": float(n), **mapped}
    notes = semantics(rows)
    return Parsed(rows, identity(text), config_from(settings, CONFIG), other_lines=other,
                  repeated=repeated, unmapped=tuple(sorted(unmapped)), notes=tuple(notes),
                  extra={"running": engine_lines([clean(x)[1] for x in lines])},
                  training=training(settings, rows, path))


NOTE = ("time/step_total is logged a step late: each step's total is taken from the next "
        "step's line; the last step has none")
TRACKER_STEP: tuple[str, ...] = ()
TRACKER_MARKER = "time/step_generate"
TRACKER_PREFIXES: tuple[str, ...] = ()


def derive(values: dict) -> dict:
    return values


def shift_totals(steps: dict[int, dict]) -> dict[int, dict]:
    """Each step's metrics with `time/step_total` taken from the next step's (module docstring):
    kept as "step_total (moved back a step)"; the last step gets none."""
    out = {}
    for step, m in steps.items():
        values = {k: v for k, v in m.items() if k != "time/step_total"}
        nxt = steps.get(step + 1, {}).get("time/step_total")
        if isinstance(nxt, (int, float)):
            values["step_total (moved back a step)"] = nxt
        out[step] = values
    return out


def semantics(rows: dict[int, dict]) -> list[str]:
    if rows:  # the last step's total is never logged: its step time is unknown
        rows[max(rows)].setdefault(STEP, float("nan"))
    return [NOTE]


def is_timer(key: str) -> bool:
    return _is_timer(key)



A = "actor_train."
SC = A + "strategy_args.strategy_config."
# ROLL v0.3.0's dataclass defaults, for what a config leaves out
TRAIN_DEFAULTS = {A + "strategy_args.strategy_name": "megatron_train",
                  SC + "tensor_model_parallel_size": 1, SC + "pipeline_model_parallel_size": 1,
                  SC + "recompute_granularity": None, A + "infer_batch_size": 16,
                  A + "training_args.per_device_train_batch_size": 8,
                  A + "training_args.gradient_accumulation_steps": 1, "ppo_epochs": 1,
                  "enable_old_logprobs_recompute": False, "adv_estimator": "grpo",
                  A + "use_dynamic_batching_in_train": False,
                  A + "use_dynamic_batching_in_infer": False}
STRATEGIES = {"megatron": "megatron", "fsdp2": "fsdp2", "deepspeed": "zero3"}


def training(found: dict[str, tuple[object, int]], rows: dict[int, dict], path: str
             ) -> TrainingShape:
    """How the run trains (module docstring)."""
    s = Settings(found, NAME, TRAIN_DEFAULTS, path)
    name = s.text(A + "strategy_args.strategy_name").lower()
    strategy = next((v for k, v in STRATEGIES.items() if k in name), "megatron")
    meg = strategy == "megatron"
    tp = s.int(SC + "tensor_model_parallel_size") if meg else 1
    pp = s.int(SC + "pipeline_model_parallel_size") if meg else 1
    gpus = _gpus(s.text(A + "device_mapping")) or RUN_GPUS
    upd, fwd = (s.int(A + "training_args.per_device_train_batch_size"),
                s.int(A + "infer_batch_size"))
    tokens = s.int(A + "max_tokens_per_microbatch_in_train", 0) if s.flag(
        A + "use_dynamic_batching_in_train") else 0
    lp_tokens = s.int(A + "max_tokens_per_microbatch_in_infer", 0) if s.flag(
        A + "use_dynamic_batching_in_infer") else 0
    samples = s.int("rollout_batch_size", 1) * s.int("num_return_sequences_in_group", 1)
    ranks = max(1, (gpus or 1) // (tp * pp))
    per_step = upd * ranks * max(1, s.int(A + "training_args.gradient_accumulation_steps"))
    minis = max(1, -(-samples // per_step))
    epochs = s.int("ppo_epochs")
    ckpt = s.text(SC + "recompute_granularity").lower() == "full"
    models = (ModelShape("actor", RUN_MODEL, checkpointing=ckpt, param_bytes=4),
              ModelShape("ref", RUN_MODEL),
              ModelShape("critic", RUN_MODEL, value_head=True, checkpointing=ckpt, param_bytes=4))
    passes = [micro("ref", "ref", fwd, lp_tokens),
              micro("update_actor", "actor", upd, tokens, True, epochs, minis)]
    if s.flag("enable_old_logprobs_recompute"):
        passes.append(micro("old_log_prob", "actor", fwd, lp_tokens))
    if s.text("adv_estimator").lower() == "gae":
        passes.append(micro("old_log_prob", "critic", fwd, lp_tokens))
    return build(s, strategy, models, passes, timed(rows), gpus, tp, pp)
