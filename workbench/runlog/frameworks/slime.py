"""slime's and miles' console logs (miles is slime's fork: the same lines), read as veRL's steps.

Read from slime v0.3.1 (github THUDM/slime, commit 624b824a): each rollout id N prints two
`perf N: {...}` lines. The rollout manager's (slime/observability/rollout_metrics.py,
`log_rollout_data`; miles: miles/ray/rollout/metrics.py) holds `perf/rollout_time` (the rollout,
from the request of rollout N to its last sample), `rollout/response_len/{mean,median,max,min}`,
`rollout/truncated_ratio` and, with speculative decoding, `rollout/spec_accept_length`. The
trainer's (slime/observability/train_metric_utils.py `log_perf_data`; miles:
miles/utils/train_metric_utils.py; slime before v0.2.1: slime/backends/megatron_utils/data.py,
`print`ed) holds its `Timer`'s sums since the previous perf line: `perf/{sleep,update_weights,
wake_up,save_model,data_preprocess,ref_log_probs,log_probs,actor_train,train}_time`,
`perf/train_wait_time` (from the end of train N-1 to the start of train N) and `perf/step_time` =
train_wait + train (`perf/total_train_time` before v0.2.1). The trainer's `rollout N: {...}` line
(train_metric_utils.py `log_rollout_data`) holds per-sample means: `rollout/response_lengths`,
`rollout/total_lengths` (the prompt's length is their difference).

Semantics honoured (slime's train.py loop: generate N, train N, save, update_weights, eval):
- the trainer's perf N timers are those of the transition before train N: its `update_weights`,
  `sleep`, `wake_up` and `save_model` ran after train N-1, its `train_wait` holds rollout N. So
  perf N's step time spans update_weights(N-1 -> N) + rollout N + train N: one RL step;
- the first perf line's train_wait starts at the trainer's init (model load, the first weight push,
  an eval before training): that step is left out, said as such;
- an `eval N` line's evaluation runs inside train_wait of N+1: with its `perf/eval_time` it is
  taken out as veRL's `testing`; without one, step N+1 is left out (its step time holds an eval
  of unknown length);
- train_async.py in the log: the rollout overlaps the update, so `perf/rollout_time` is not the
  step's critical path (flagged asynchronous).

The launch config: Megatron's `arguments` dump (`  rollout_batch_size ........ 32`, one per
line), else a shell trace of the launch (`train.py --rollout-batch-size 32 ...`).

How it trains (`training`; slime/utils/arguments.py and slime/backends/megatron_utils/actor.py at
the same commit): Megatron on `actor_num_nodes` x `actor_num_gpus_per_node` GPUs at
`tensor_model_parallel_size` x `pipeline_model_parallel_size` (the rest data-parallel, context
parallelism counted there); `micro_batch_size` sequences per micro-batch (default 1), or with
`use_dynamic_batch_size` micro-batches packed to `max_tokens_per_gpu` tokens
(`log_probs_max_tokens_per_gpu` for the log-prob passes); `global_batch_size` samples per optimizer
step (else rollout_batch_size x n_samples_per_prompt / num_steps_per_rollout, else one step);
`recompute_granularity full` recomputes each layer's forward in the backward (selective recomputes
only attention's core: counted as none); sequences packed (no padding). The reference's pass runs
the actor's model with the reference's weights, swapped in from the host before its timer starts
(so not in `ref_log_probs`); `sleep` and `wake_up` (the colocated trainer's memory released and
taken back) are timed on their own and not priced.
"""

from __future__ import annotations

import re

from workbench.contracts.training_shape import ModelShape, TrainingShape
from workbench.runlog.frameworks.base import (
    CHECKPOINTING, MODEL, ROLLOUT, GEN, STEP, ConfigKey, KeyMap, Parsed, Recognised, clean,
    config_from, to_verl, version_in)
from workbench.runlog.frameworks.train_config import RUN_MODEL, Settings, build, micro, timed
from workbench.runlog.frameworks.engine_lines import engine_lines
from workbench.runlog.frameworks.literals import dashed_flags, megatron_args, printed_dict

NAME = "slime"
HINTS = ("perf ",)  # its markers' substrings: tested first
MARKER = re.compile(r"\bperf \d+: \{")
_RECORD = re.compile(r"(?:^|[\s\-])(perf|rollout|eval) (\d+): (\{.*)$")
ROLLOUT_SRC = "slime/observability/rollout_metrics.py (miles/ray/rollout/metrics.py)"
TRAIN_SRC = "slime/observability/train_metric_utils.py (miles/utils/train_metric_utils.py)"
ACCEPT = "sd/accept_length"  # tokens per verify pass, as SGLang counts them (the bonus included)

TABLE = (
    KeyMap("perf/rollout_time", GEN, ROLLOUT_SRC),
    KeyMap("perf/step_time", STEP, TRAIN_SRC),
    KeyMap("perf/total_train_time", STEP, "slime/backends/megatron_utils/data.py (before v0.2.1)"),
    KeyMap("perf/log_probs_time", "timing_s/old_log_prob", TRAIN_SRC),
    KeyMap("perf/ref_log_probs_time", "timing_s/ref", TRAIN_SRC),
    KeyMap("perf/actor_train_time", "timing_s/update_actor", TRAIN_SRC),
    KeyMap("perf/critic_train_time", "timing_s/update_critic", TRAIN_SRC),
    KeyMap("perf/update_weights_time", "timing_s/update_weights", TRAIN_SRC),
    KeyMap("perf/save_model_time", "timing_s/save_checkpoint", TRAIN_SRC),
    KeyMap("perf/eval_time", "timing_s/testing", ROLLOUT_SRC),
    KeyMap("rollout/response_len/mean", "response_length/mean", ROLLOUT_SRC),
    KeyMap("rollout/response_len/max", "response_length/max", ROLLOUT_SRC),
    KeyMap("rollout/response_len/min", "response_length/min", ROLLOUT_SRC),
    KeyMap("rollout/truncated_ratio", "response_length/clip_ratio", ROLLOUT_SRC),
    KeyMap("rollout/spec_accept_length", ACCEPT, ROLLOUT_SRC),
    KeyMap("prompt_length/mean", "prompt_length/mean", TRAIN_SRC + ": total_lengths - "
           "response_lengths of its `rollout N` line"),
)
SGLANG = "(slime rolls out on SGLang)"
ONE_NODE = "(rollout_num_gpus counts every node's)"
CONFIG = (
    ConfigKey("hf_checkpoint", MODEL),
    ConfigKey("rollout_num_gpus", "trainer.n_gpus_per_node"),
    ConfigKey(ONE_NODE, "trainer.nnodes"),
    ConfigKey("rollout_num_gpus_per_engine", ROLLOUT + "tensor_model_parallel_size"),
    ConfigKey("rollout_batch_size", "data.train_batch_size"),
    ConfigKey("n_samples_per_prompt", ROLLOUT + "n"),
    ConfigKey("rollout_max_response_len", "data.max_response_length"),
    ConfigKey(SGLANG, ROLLOUT + "name"),
    ConfigKey("sglang_max_running_requests", ROLLOUT + "max_num_seqs"),
    ConfigKey("sglang_disable_cuda_graph", ROLLOUT + "enforce_eager"),
    ConfigKey("sglang_mem_fraction_static", ROLLOUT + "gpu_memory_utilization"),
    ConfigKey("gradient_checkpointing", CHECKPOINTING),
    ConfigKey("sglang_speculative_algorithm", "sd.algorithm"),
    ConfigKey("sglang_speculative_num_steps", "sd.num_steps"),
    ConfigKey("sglang_speculative_eagle_topk", "sd.topk"),
    ConfigKey("sglang_speculative_num_draft_tokens", "sd.num_draft_tokens"),
)
_LAUNCH = re.compile(r"\btrain(?:_async)?\.py\b")


TRACKER_STEP = ("rollout/step",)
TRACKER_MARKER = "perf/rollout_time"
TRACKER_PREFIXES: tuple[str, ...] = ()


def derive(values: dict) -> dict:
    """The prompt's mean length from the trainer's `rollout N` means (total - response)."""
    total, resp = values.get("rollout/total_lengths"), values.get("rollout/response_lengths")
    if isinstance(total, float) and isinstance(resp, float):
        return {**values, "prompt_length/mean": total - resp}
    return values


def semantics(rows: dict[int, dict]) -> list[str]:
    """A tracker's rows: the first step left out as the console's (module docstring)."""
    return _left_out(rows, min(rows, default=None), {})


def is_timer(key: str) -> bool:
    return _timer(key)


def _timer(key: str) -> bool:
    return key.startswith("perf/") and key.endswith("_time")


def _settings(lines: list[str]) -> dict[str, tuple[object, int]]:
    found = {**dashed_flags(lines, _LAUNCH), **megatron_args(lines)}
    if found:
        found[SGLANG] = ("sglang", 0)
        found[ONE_NODE] = (1, 0)
        granularity = found.get("recompute_granularity")
        if granularity is not None:
            found["gradient_checkpointing"] = (granularity[0] is not None, granularity[1])
    return found


def identity(text: str) -> Recognised:
    miles = len(re.findall(r"\bmiles[./]", text)) > len(re.findall(r"\bslime[./]", text))
    name = "miles" if miles else NAME
    version, where = version_in(text, (name,))
    newer = "perf/step_time" in text or "perf/total_train_time" not in text
    code = ("miles (radixark/miles, commit 31f1ca96): miles/ray/rollout/metrics.py, "
            "miles/utils/train_metric_utils.py" if miles else
            "slime v0.3.1: slime/observability/rollout_metrics.py, train_metric_utils.py")
    if not newer:
        code += "; its perf/total_train_time is slime's name before v0.2.1"
    return Recognised(name, version, where if version else
                      "not in the log (slime and miles print none)", code)


def _records(lines: list[str]) -> tuple[list, int, int]:
    """(kind, rollout id, line, PrintedDict) per record; other lines; records cut short."""
    out, other, cut = [], 0, 0
    for n, raw in enumerate(lines, 1):
        _, text = clean(raw)
        m = _RECORD.search(text)
        if not m:
            other += bool(text.strip())
            continue
        d = printed_dict(m.group(3))
        if not d.whole:
            cut += 1
            if n != len(lines):
                continue
        out.append((m.group(1), int(m.group(2)), n, d))
    return out, other, cut


def read(text: str, path: str) -> Parsed:
    lines = text.split("\n")
    records, other, cut = _records(lines)
    merged: dict[int, dict] = {}
    lines_of: dict[int, int] = {}
    evals: dict[int, dict] = {}
    for kind, rid, n, d in records:
        if kind == "eval":
            evals[rid] = d.values
            continue
        row = merged.setdefault(rid, {})
        if kind == "rollout":
            row.update(derive(d.values))
            continue
        row.update(d.values)
        lines_of[rid] = max(lines_of.get(rid, 0), n)
    for rid in merged:
        lines_of.setdefault(rid, 0)
    rows, unmapped, notes = {}, set(), []
    first = min(merged, default=None)
    for rid in sorted(merged):
        if rid - 1 in evals and "perf/eval_time" in evals[rid - 1]:
            merged[rid]["perf/eval_time"] = evals[rid - 1]["perf/eval_time"]
        values, un = to_verl(merged[rid], TABLE, _timer, f"{path}:{lines_of.get(rid, 0)}")
        unmapped.update(un)
        rows[rid] = {"step": float(rid), "line": float(lines_of.get(rid, 0)), **values}
    notes += _left_out(rows, first, evals)
    rb = engine_lines([clean(x)[1] for x in lines])
    head = lines[: min((r[2] for r in records), default=len(lines))]
    settings = _settings([clean(x)[1] for x in head])
    asynchronous = "train_async.py" in text
    if asynchronous:
        notes.append("train_async.py: the rollout overlaps the update (asynchronous)")
    return Parsed(rows, identity(text), config_from(settings, CONFIG), other_lines=other,
                  truncated=cut, unmapped=tuple(sorted(unmapped)),
                  notes=tuple(notes), asynchronous=asynchronous, extra={"running": rb},
                  training=training(settings, rows, path))


# slime/utils/arguments.py's and Megatron's defaults for what a launch leaves out
DEFAULTS = {"actor_num_nodes": 1, "actor_num_gpus_per_node": 8, "micro_batch_size": 1,
            "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
            "use_dynamic_batch_size": False, "recompute_granularity": None,
            "n_samples_per_prompt": 1}


def training(found: dict[str, tuple[object, int]], rows: dict[int, dict], path: str
             ) -> TrainingShape:
    """How the run trains (module docstring)."""
    s = Settings(found, NAME, DEFAULTS, path)
    gpus = s.int("actor_num_nodes") * s.int("actor_num_gpus_per_node")
    samples = s.int("rollout_batch_size", 0) * s.int("n_samples_per_prompt")
    steps = s.int("num_steps_per_rollout", 0) if s.has("num_steps_per_rollout") else 0
    size = s.int("global_batch_size", 0) or (samples // steps if steps else samples)
    minis = max(1, -(-samples // size)) if size else 1
    dynamic = s.flag("use_dynamic_batch_size")
    tokens = s.int("max_tokens_per_gpu", 0) if dynamic else 0
    lp_tokens = s.int("log_probs_max_tokens_per_gpu", tokens) if dynamic else 0
    mbs = s.int("micro_batch_size")
    ckpt = s.text("recompute_granularity").lower() == "full"
    models = (ModelShape("actor", RUN_MODEL, checkpointing=ckpt, param_bytes=4),
              ModelShape("ref", RUN_MODEL),
              ModelShape("critic", RUN_MODEL, value_head=True, checkpointing=ckpt, param_bytes=4))
    passes = (micro("old_log_prob", "actor", mbs, lp_tokens), micro("ref", "ref", mbs, lp_tokens),
              micro("update_actor", "actor", mbs, tokens, True, 1, minis),
              micro("update_critic", "critic", mbs, tokens, True, 1, minis))
    return build(s, "megatron", models, passes, timed(rows), gpus,
                 s.int("tensor_model_parallel_size"), s.int("pipeline_model_parallel_size"))


def _left_out(rows: dict[int, dict], first: int | None, evals: dict[int, dict]) -> list[str]:
    """The steps whose step time is not one RL step's (module docstring), taken out."""
    notes = []
    if first is not None and first in rows and STEP in rows[first]:
        del rows[first]
        notes.append(f"rollout {first} left out: its train_wait counts from the trainer's start "
                     "(model load, the first weight push)")
    after_eval = [rid + 1 for rid, e in evals.items()
                  if rid + 1 in rows and "perf/eval_time" not in e]
    for rid in after_eval:
        del rows[rid]
    if after_eval:
        notes.append(f"{len(after_eval)} steps after an eval left out (their train_wait holds "
                     "an evaluation the log does not time)")
    return notes
