"""AReaL's console log, read as veRL's steps.

Read from AReaL v1.0.4 (github inclusionAI/AReaL, tag v1.0.4): areal/trainer/rl_trainer.py times
each phase of a step with `stats_tracker.record_timing(name)` (areal/utils/stats_tracker.py:
`timeperf/<name>`): `rollout` (the trainer's `prepare_batch`: it waits until a batch of
trajectories is ready), `recompute_logp`, `ref_logp`, `critic_values`, `compute_advantage`,
`train_step`, `critic_train_step`, `update_weights`, `save`, `eval`, ...; the step itself is not
timed (its time here is the sum of its phases, said as such). After each step
areal/utils/stats_logger.py `commit` logs `Epoch e/E Step s/S Train step N/T done.`, then `Stats
(1/1):` and the step's metrics as a table (areal/utils/printing.py `tabulate_stats`: four columns
of `│ key │ value │`, values as `8.8992e+01`). Lengths: areal/trainer/ppo/actor.py's
`ppo_actor/seq_len` and `ppo_actor/prompt_len` (`/avg`, `/min`, `/max`, prompt and response
together; the response's mean is their difference, its longest is not logged) and
`ppo_actor/no_eos_ratios/avg` (the share cut at the cap).

Semantics: AReaL's rollout runs asynchronously. With `rollout.max_head_offpolicyness` > 0 (set
in the launch command or its config) the rollout of step N+1 runs during step N's update, so
`timeperf/rollout` is the trainer's wait for trajectories, not generation: kept as
`timing_s/gen_wait`, the run flagged asynchronous. At AReaL's default, 0, no trajectory may be
generated ahead of the weights, and the wait is the generation.

How it trains (`training`; areal/api/cli_args.py's defaults, rl_trainer.py): the training part of
`allocation_mode` (after `+`: `d8p1t1`, or `fsdp:`/`megatron:` before it; FSDP without a name)
gives its GPUs (d x p x t), TP and PP; `actor.mb_spec.max_tokens_per_mb` packs micro-batches by
tokens, else `actor.mb_spec.n_mbs` (1) splits each rank's share; `actor.ppo_n_minibatches` (4)
optimizer steps; `actor.gradient_checkpointing` (off); the reference (`ref_logp`, where `ref` is
configured and `actor.kl_ctl` > 0) on the host between uses with `ref.offload`.
"""

from __future__ import annotations

import re

from workbench.contracts.training_shape import ModelShape, Offload, TrainingShape
from workbench.runlog.frameworks.train_config import (RUN_GPUS, RUN_MODEL, Settings, build,
                                                      micro, timed)
from workbench.runlog.frameworks.base import (
    CHECKPOINTING, MODEL, ROLLOUT, GEN, WAIT, ConfigKey, KeyMap, Parsed, Recognised, clean,
    config_from, to_verl, version_in)
from workbench.runlog.frameworks.engine_lines import engine_lines
from workbench.runlog.frameworks.literals import setting, yaml_settings

NAME = "AReaL"
HINTS = ("Train step", "timeperf/")  # its markers' substrings: tested first
MARKER = re.compile(r"Train step \d+/\d+ done\.|│ timeperf/")
_DONE = re.compile(r"Train step (\d+)/\d+ done\.")
_CELL = re.compile(r"│\s*([^│]+?)\s*│\s*([-+\d.eE]+|nan|inf|-inf)\s*(?=│)")
TRAINER = "areal/trainer/rl_trainer.py (stats_tracker.record_timing)"
ACTOR = "areal/trainer/ppo/actor.py"
TABLE = (
    KeyMap("timeperf/rollout", GEN, TRAINER),
    KeyMap("timeperf/recompute_logp", "timing_s/old_log_prob", TRAINER),
    KeyMap("timeperf/ref_logp", "timing_s/ref", TRAINER),
    KeyMap("timeperf/critic_values", "timing_s/values", TRAINER),
    KeyMap("timeperf/compute_advantage", "timing_s/adv", TRAINER),
    KeyMap("timeperf/train_step", "timing_s/update_actor", TRAINER),
    KeyMap("timeperf/critic_train_step", "timing_s/update_critic", TRAINER),
    KeyMap("timeperf/update_weights", "timing_s/update_weights", TRAINER),
    KeyMap("timeperf/save", "timing_s/save_checkpoint", TRAINER),
    KeyMap("timeperf/eval", "timing_s/testing", TRAINER),
    KeyMap("response_length/mean", "response_length/mean",
           ACTOR + ": ppo_actor/seq_len/avg - ppo_actor/prompt_len/avg"),
    KeyMap("ppo_actor/prompt_len/avg", "prompt_length/mean", ACTOR),
    KeyMap("ppo_actor/no_eos_ratios/avg", "response_length/clip_ratio", ACTOR),
)
MAX_OFFPOLICY = "rollout.max_head_offpolicyness"
CONFIG = (
    ConfigKey("actor.path", MODEL),
    ConfigKey("(rollout d x p x t of allocation_mode)", "trainer.n_gpus_per_node"),
    ConfigKey("(one node: the rollout's GPUs)", "trainer.nnodes"),
    ConfigKey("(rollout t of allocation_mode)", ROLLOUT + "tensor_model_parallel_size"),
    ConfigKey("train_dataset.batch_size", "data.train_batch_size"),
    ConfigKey("gconfig.n_samples", ROLLOUT + "n"),
    ConfigKey("gconfig.max_new_tokens", "data.max_response_length"),
    ConfigKey("(engine of allocation_mode)", ROLLOUT + "name"),
    ConfigKey("actor.gradient_checkpointing", CHECKPOINTING),
    ConfigKey(MAX_OFFPOLICY, "async.max_head_offpolicyness"),
)
_OVERRIDE = re.compile(r"(?:^|\s)([a-z_][\w.]*)=(\"[^\"]*\"|'[^']*'|\S+)")
_ALLOC = re.compile(r"\b(sglang|vllm)[:.]d(\d+)(?:p(\d+))?(?:t(\d+))?")


def identity(text: str) -> Recognised:
    version, where = version_in(text, ("areal",))
    return Recognised(NAME, version, where, "AReaL v1.0.4: areal/trainer/rl_trainer.py, "
                      "areal/utils/stats_logger.py")


TRACKER_STEP: tuple[str, ...] = ()
TRACKER_MARKER = "timeperf/rollout"
TRACKER_PREFIXES: tuple[str, ...] = ()


def derive(values: dict) -> dict:
    """The response's mean length: sequence - prompt (ppo_actor's means)."""
    seq, prompt = values.get("ppo_actor/seq_len/avg"), values.get("ppo_actor/prompt_len/avg")
    if isinstance(seq, float) and isinstance(prompt, float):
        return {**values, "response_length/mean": seq - prompt}
    return values


def semantics(rows: dict[int, dict]) -> list[str]:
    return ["AReaL times no whole step: each step's time is the sum of its phases",
            "a tracker export holds no launch config: whether the run was asynchronous "
            f"({MAX_OFFPOLICY} > 0) is not known; read as AReaL's default, synchronous"]


def is_timer(key: str) -> bool:
    return _is_timer(key)


def _is_timer(key: str) -> bool:
    return key.startswith("timeperf/")


def _table(lines: list[str], n: int) -> tuple[dict[str, float], int]:
    """The stats table after line n (1-based): key -> value, and its last line."""
    values: dict[str, float] = {}
    last = n
    started = False
    for m in range(n, min(len(lines), n + 400)):
        text = clean(lines[m])[1]
        if "│" in text:
            started = True
            for c in _CELL.finditer(text):
                values[c.group(1)] = float(c.group(2))
            last = m + 1
        elif started and text.strip().startswith("╘"):
            return values, m + 1
        elif _DONE.search(text):
            break
    return values, last


def _settings(lines: list[str]) -> dict[str, tuple[object, int]]:
    """The launch command's overrides (`key=value`) and a printed YAML config (dotted by its
    indentation)."""
    found: dict[str, tuple[object, int]] = {}
    texts = [clean(raw)[1] for raw in lines]
    for n, text in enumerate(texts, 1):
        if "areal" in text and "=" in text:
            for m in _OVERRIDE.finditer(text):
                found.setdefault(m.group(1), (setting(m.group(2)), n))
    for k, v in yaml_settings(texts).items():
        found.setdefault(k, v)
    alloc = next(((v, n) for k, (v, n) in found.items() if k.endswith("allocation_mode")), None)
    m = _ALLOC.search(str(alloc[0])) if alloc else None
    if m:
        d, p, t = (int(g or 1) for g in m.group(2, 3, 4))
        found["(rollout d x p x t of allocation_mode)"] = (d * p * t, alloc[1])
        found["(one node: the rollout's GPUs)"] = (1, 0)
        found["(rollout t of allocation_mode)"] = (t, alloc[1])
        found["(engine of allocation_mode)"] = (m.group(1), alloc[1])
    return found


def read(text: str, path: str) -> Parsed:
    lines = text.split("\n")
    raw_rows = []
    for n, raw in enumerate(lines, 1):
        m = _DONE.search(clean(raw)[1])
        if m:
            values, last = _table(lines, n)
            raw_rows.append((int(m.group(1)), last, values))
    first = min((r[1] for r in raw_rows), default=len(lines))
    settings = _settings(lines[:first])
    offpolicy = settings.get(MAX_OFFPOLICY, (0, 0))[0]
    asynchronous = isinstance(offpolicy, (int, float)) and offpolicy > 0
    rows, unmapped, repeated = {}, set(), 0
    for step, last, values in raw_rows:
        values = derive(values)
        mapped, un = to_verl(values, TABLE, _is_timer, f"{path}:{last}")
        unmapped.update(un)
        if asynchronous and GEN in mapped:
            mapped[WAIT] = mapped.pop(GEN)
        repeated += step in rows
        rows[step] = {"step": float(step), "line": float(last), **mapped}
    notes = [f"{MAX_OFFPOLICY}={offpolicy}: timeperf/rollout is the trainer's wait for "
             "trajectories generated during the previous update, not generation"
             if asynchronous else f"{MAX_OFFPOLICY} {offpolicy}"
             f"{' (AReaL default)' if MAX_OFFPOLICY not in settings else ''}: no trajectory "
             "runs ahead of the weights, so timeperf/rollout is the generation",
             "AReaL times no whole step: each step's time is the sum of its phases",
             "AReaL logs no longest response"]
    return Parsed(rows, identity(text), config_from(settings, CONFIG),
                  other_lines=sum(1 for x in lines if x.strip()) - len(raw_rows),
                  repeated=repeated, unmapped=tuple(sorted(unmapped)), notes=tuple(notes),
                  asynchronous=asynchronous,
                  extra={"running": engine_lines([clean(x)[1] for x in lines])},
                  training=training(settings, rows, path))


_TRAIN_ALLOC = re.compile(r"\+(?:(fsdp|megatron|archon)[:.])?d(\d+)(?:p(\d+))?(?:t(\d+))?")
# areal/api/cli_args.py at v1.0.4, for what a launch leaves out
TRAIN_DEFAULTS = {"actor.mb_spec.n_mbs": 1, "actor.ppo_n_minibatches": 4,
                  "actor.gradient_checkpointing": False, "ref.offload": False,
                  "train_dataset.batch_size": 1, "gconfig.n_samples": 1}


def training(found: dict[str, tuple[object, int]], rows: dict[int, dict], path: str
             ) -> TrainingShape:
    """How the run trains (module docstring)."""
    s = Settings(found, NAME, TRAIN_DEFAULTS, path)
    alloc = next((k for k in found if k.endswith("allocation_mode")), "allocation_mode")
    m = _TRAIN_ALLOC.search(s.text(alloc))
    strategy, gpus, tp, pp = "fsdp", RUN_GPUS, 1, 1
    if m:
        d, pp, tp = (int(g or 1) for g in m.group(2, 3, 4))
        strategy, gpus = ("megatron" if m.group(1) == "megatron" else "fsdp"), d * pp * tp
        s.note("training allocation", m.group(0)[1:], f"{alloc}'s part after +")
    else:
        s.note("training allocation", "the run's GPUs", f"not in {alloc}: colocated assumed")
    samples = s.int("train_dataset.batch_size") * s.int("gconfig.n_samples")
    tokens = s.int("actor.mb_spec.max_tokens_per_mb", 0)
    ranks = max(1, (gpus or 1) // (tp * pp))
    mbs = max(1, -(-samples // (ranks * max(1, s.int("actor.mb_spec.n_mbs")))))
    minis = s.int("actor.ppo_n_minibatches")
    ckpt = s.flag("actor.gradient_checkpointing")
    models = (ModelShape("actor", RUN_MODEL, checkpointing=ckpt, param_bytes=4),
              ModelShape("ref", RUN_MODEL, param_offload=Offload.PHASE if s.flag("ref.offload")
                         else Offload.NONE),
              ModelShape("critic", RUN_MODEL, value_head=True, checkpointing=ckpt, param_bytes=4))
    passes = (micro("old_log_prob", "actor", mbs, tokens), micro("ref", "ref", mbs, tokens),
              micro("values", "critic", mbs, tokens),
              micro("update_actor", "actor", mbs, tokens, True, 1, minis),
              micro("update_critic", "critic", mbs, tokens, True, 1, minis))
    return build(s, strategy, models, passes, timed(rows), gpus, tp, pp)
