"""A veRL run's training side (workbench/contracts/training_shape.py) from its log: what runs each
timed phase, at what micro-batch, offloaded or not, with LoRA or checkpointing, on which
parallelism.

Each field comes from the launch command's override, else the printed config, else veRL's default,
said as such. The defaults and the rules that differ between veRL's versions:

- micro-batches: `*_micro_batch_size_per_gpu` (newer), else `*_micro_batch_size` divided by the
  data-parallel ranks (older veRL's global size), else older veRL's defaults (OLD_DEFAULTS);
  `use_dynamic_bsz` packs micro-batches up to
  `ppo_max_token_len_per_gpu` tokens (`log_prob_max_token_len_per_gpu` for the log-prob passes);
  the critic's values pass takes `forward_micro_batch_size[_per_gpu]`, by default its update's;
- the reference model: with LoRA it is the actor without its adapters (no model of its own). Its
  parameter offload is FSDP's CPUOffload, a copy in for every forward, in the veRL that has the
  `*_per_gpu` keys (from January 2025, which forces it on the reference), and a move in and out
  at the phase's edges before;
- the actor's and the critic's offload (`fsdp_config.param_offload`, `optimizer_offload`,
  `grad_offload`) move in and out at each phase's edges; their master weights are fp32 (4 bytes a
  parameter), the reference's bf16;
- gradient checkpointing: veRL's default since 2025, on; `use_remove_padding`: off (each
  sequence padded to the prompt and response caps);
- Megatron (MEGATRON_RECOMPUTE, veRL's code read at each change): its models run the sequences
  packed (veRL's RmPad models, whatever `use_remove_padding` says; newer veRL's
  `megatron.use_remove_padding`, true by default) and pad their logits back to the caps before
  the log-probs; they recompute activations only with a recompute granularity of `full`
  (`model.enable_gradient_checkpointing`, FSDP's switch, recomputes nothing under Megatron: before
  April 2025 veRL passed it nowhere, then only with `gradient_checkpointing_kwargs`'
  granularity, since May 2025 `megatron.override_transformer_config.recompute_granularity`);
  the reference and the critic train at the actor's TP and PP (one process holds them all, its
  parallel state set once from the actor's config: their own `megatron` sizes are not used).
- mini-batches: `train_batch_size / ppo_mini_batch_size` optimizer steps per `ppo_epochs`.
"""

from __future__ import annotations

import math

from workbench.contracts.schema import ConfigError
from workbench.contracts.training_shape import (ModelShape, Offload, PhaseShape, TrainingShape,
                                                TrainingTaken)
from workbench.runlog.reader import TIMING, RunLog
from workbench.runlog.shape import RunShape, resolve_arch, setting

ARO = "actor_rollout_ref."
ACTOR, ROLL, REF, CRITIC = ARO + "actor.", ARO + "rollout.", ARO + "ref.", "critic."
DEFAULT_MAX_TOKENS = 16384  # veRL's ppo_max_token_len_per_gpu default
OLD_DEFAULTS = {"ppo_micro_batch_size": 64, "log_prob_micro_batch_size": 128,
                "forward_micro_batch_size": 64}  # veRL's global sizes before 2025
CRITIC_MAX_TOKENS = 32768
# where a Megatron model's recompute granularity is set: newer veRL's (May 2025 on), then the one
# of April-May 2025 (read only with enable_gradient_checkpointing)
MEGATRON_RECOMPUTE = ("megatron.override_transformer_config.recompute_granularity",
                      "model.gradient_checkpointing_kwargs.activations_checkpoint_granularity")


class _Reader:
    """The log's settings, each read once and recorded with where it came from."""

    def __init__(self, log: RunLog):
        self.log, self.taken = log, []

    def get(self, key: str, default: object, why: str = "veRL's default") -> str:
        found = setting(self.log, key)
        if found is None:
            self.taken.append(TrainingTaken(key, str(default), why))
            return str(default)
        self.taken.append(TrainingTaken(key, found.value, found.source))
        return found.value

    def has(self, key: str) -> bool:
        return setting(self.log, key) is not None

    def flag(self, key: str, default: bool) -> bool:
        return self.get(key, default).strip().lower() in ("true", "1", "yes")

    def int(self, key: str, default: int) -> int:
        text = self.get(key, default)
        try:
            return int(float(text))
        except ValueError:
            raise ConfigError(self.log.path, key, text, "a whole number") from None

    def optional_text(self, key: str) -> str | None:
        """The setting where the log gives one (none, null or empty: None)."""
        found = setting(self.log, key)
        if found is None or found.value.strip().lower() in ("none", "null", ""):
            return None
        self.taken.append(TrainingTaken(key, found.value, found.source))
        return found.value

    def optional_int(self, key: str) -> int | None:
        found = setting(self.log, key)
        if found is None or found.value.strip().lower() in ("none", "null", ""):
            return None
        self.taken.append(TrainingTaken(key, found.value, found.source))
        try:
            return int(float(found.value))
        except ValueError:
            raise ConfigError(self.log.path, key, found.value, "a whole number") from None


def _micro(r: _Reader, prefix: str, name: str, dp: int, fallback: int | None) -> int | None:
    """Sequences per micro-batch and GPU: the per-GPU key, else the global one over the ranks."""
    per_gpu = r.optional_int(f"{prefix}{name}_per_gpu")
    if per_gpu is not None:
        return per_gpu
    total = r.optional_int(prefix + name)
    return max(1, total // dp) if total is not None else fallback


def _phase(r: _Reader, phase: str, role: str, prefix: str, name: str, dp: int,
           dynamic: tuple[str, str, int], update: bool = False, fallback: int | None = None,
           epochs: int = 1, minis: int = 1) -> PhaseShape:
    use_key, tokens_key, tokens_default = dynamic
    if r.flag(use_key, False):
        return PhaseShape(phase, role, 0, r.int(tokens_key, tokens_default), update, epochs,
                          minis)
    micro = _micro(r, prefix, name, dp, fallback)
    if micro is None:  # veRL before 2025 had defaults; newer veRL refuses a run without one
        total = OLD_DEFAULTS[name]
        micro = max(1, total // dp)
        r.taken.append(TrainingTaken(prefix + name, str(total), "veRL's default before 2025 "
                                     f"(global: {micro} a GPU); newer veRL requires it"))
    return PhaseShape(phase, role, micro, 0, update, epochs, minis)


def _recompute(r: _Reader, role: str, prefix: str, model: str, megatron: bool) -> bool:
    """Whether the backward recomputes the forward (module docstring: Megatron's rule)."""
    if not megatron:
        return r.flag(model + "model.enable_gradient_checkpointing", True)
    newer, older = (r.optional_text(prefix + MEGATRON_RECOMPUTE[0]),
                    r.optional_text(model + MEGATRON_RECOMPUTE[1]))
    if older is not None and not r.flag(model + "model.enable_gradient_checkpointing", False):
        older = None
    granularity = newer or older
    if granularity is None:
        r.taken.append(TrainingTaken(f"{role} recompute", "off", "Megatron recomputes nothing "
                                     "without a recompute granularity (not in the log)"))
    return (granularity or "").strip().lower() == "full"


def _models(r: _Reader, shape: RunShape, newer: bool, lora: int,
            megatron: bool = False) -> list[ModelShape]:
    actor = ModelShape(
        "actor", shape.arch, checkpointing=_recompute(r, "actor", ACTOR, ARO, megatron),
        lora_rank=lora, param_offload=Offload.PHASE if r.flag(ACTOR + "fsdp_config.param_offload",
                                                               False) else Offload.NONE,
        grad_offload=r.flag(ACTOR + "fsdp_config.grad_offload", False),
        optimizer_offload=r.flag(ACTOR + "fsdp_config.optimizer_offload", False), param_bytes=4)
    out = [actor]
    if lora == 0:
        off = r.flag(REF + "fsdp_config.param_offload", False)
        mode = (Offload.FORWARD if newer else Offload.PHASE) if off else Offload.NONE
        out.append(ModelShape("ref", shape.arch, param_offload=mode, param_bytes=2))
    if TIMING + "values" in r.log.metrics.columns or TIMING + "update_critic" in \
            r.log.metrics.columns:
        path = r.get(CRITIC + "model.path", shape.arch, "the actor's model (not in the log)")
        try:
            arch = resolve_arch(path)
        except ConfigError:
            arch = shape.arch  # a checkpoint directory: the critic is the actor's model
            r.taken.append(TrainingTaken("critic model", arch, f"{path} names no architecture "
                                         "here: the actor's"))
        out.append(ModelShape(
            "critic", arch, value_head=True,
            checkpointing=_recompute(r, "critic", CRITIC, CRITIC, megatron),
            param_offload=(Offload.PHASE if r.flag(CRITIC + "model.fsdp_config.param_offload",
                                                   False) else Offload.NONE),
            grad_offload=r.flag(CRITIC + "model.fsdp_config.grad_offload", False),
            optimizer_offload=r.flag(CRITIC + "model.fsdp_config.optimizer_offload", False),
            param_bytes=4))
    return out


def _phases(r: _Reader, shape: RunShape, dp: int, lora: int) -> list[PhaseShape]:
    timed = {c[len(TIMING):] for c in r.log.metrics.columns if str(c).startswith(TIMING)}
    prompts = shape.prompts_per_step
    minis = max(1, math.ceil(prompts / r.int(ACTOR + "ppo_mini_batch_size", prompts)))
    epochs = r.int(ACTOR + "ppo_epochs", 1)
    actor_dyn = (ACTOR + "use_dynamic_bsz", ACTOR + "ppo_max_token_len_per_gpu",
                 DEFAULT_MAX_TOKENS)
    lp_dyn = (ROLL + "log_prob_use_dynamic_bsz", ROLL + "log_prob_max_token_len_per_gpu",
              DEFAULT_MAX_TOKENS)
    out = [_phase(r, "update_actor", "actor", ACTOR, "ppo_micro_batch_size", dp, actor_dyn,
                  True, epochs=epochs, minis=minis)]
    # older veRL computes the old log-probs inside generate_sequences: timed in gen
    out.append(_phase(r, "old_log_prob" if "old_log_prob" in timed else "gen", "actor", ROLL,
                      "log_prob_micro_batch_size", dp, lp_dyn, fallback=out[0].micro_batch))
    if "ref" in timed:
        ref_dyn = (REF + "log_prob_use_dynamic_bsz", REF + "log_prob_max_token_len_per_gpu",
                   DEFAULT_MAX_TOKENS)
        out.append(_phase(r, "ref", "actor" if lora else "ref", REF, "log_prob_micro_batch_size",
                          dp, ref_dyn, fallback=out[1].micro_batch))
    if "update_critic" in timed or "values" in timed:
        c_dyn = (CRITIC + "use_dynamic_bsz", CRITIC + "ppo_max_token_len_per_gpu",
                 CRITIC_MAX_TOKENS)
        upd = _phase(r, "update_critic", "critic", CRITIC, "ppo_micro_batch_size", dp, c_dyn,
                     True, epochs=r.int(CRITIC + "ppo_epochs", epochs), minis=minis)
        fwd_dyn = (c_dyn[0], CRITIC + "forward_max_token_len_per_gpu", CRITIC_MAX_TOKENS)
        fwd = _phase(r, "values", "critic", CRITIC, "forward_micro_batch_size", dp, fwd_dyn,
                     fallback=upd.micro_batch)
        out += [p for p in (fwd, upd) if p.phase in timed]
    return [p for p in out if p.phase in timed]


def training_shape(log: RunLog, shape: RunShape) -> TrainingShape:
    """The run's training side (module docstring)."""
    r = _Reader(log)
    strategy = r.get(ACTOR + "strategy", "fsdp").lower()
    if strategy not in ("fsdp", "fsdp2", "megatron"):
        raise ConfigError(log.path, ACTOR + "strategy", strategy, "fsdp, fsdp2 or megatron")
    tp = pp = 1
    if strategy == "megatron":
        tp = r.int(ACTOR + "megatron.tensor_model_parallel_size", 1)
        pp = r.int(ACTOR + "megatron.pipeline_model_parallel_size", 1)
    dp = max(1, shape.gpus // (tp * pp))
    newer = any(r.has(k) for k in (ACTOR + "ppo_micro_batch_size_per_gpu",
                                   ROLL + "log_prob_micro_batch_size_per_gpu",
                                   REF + "log_prob_micro_batch_size_per_gpu"))
    lora = r.int(ARO + "model.lora_rank", 0)
    megatron = strategy == "megatron"
    models = _models(r, shape, newer, lora, megatron)
    phases = _phases(r, shape, dp, lora)
    if megatron:  # packed in the layers unless newer veRL's switch says not (module docstring)
        packed = r.get(ACTOR + "megatron.use_remove_padding", True, "veRL's Megatron models "
                       "run packed (RmPad)").strip().lower() in ("true", "1", "yes")
    else:
        packed = r.flag(ARO + "model.use_remove_padding", False)
    ts = TrainingShape(
        strategy, shape.gpus, tuple(models), tuple(phases), tp, pp, remove_padding=packed,
        max_prompt_tokens=r.int("data.max_prompt_length", 0),
        max_response_tokens=shape.max_response_tokens,
        log_probs_in_gen=any(p.phase == "gen" for p in phases), logits_padded=megatron,
        taken=tuple(r.taken))
    ts.check()
    return ts
