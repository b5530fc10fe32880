"""How an RL run trains: the models outside the rollout, their sizes, and how each timed phase runs
them (micro-batches, offload, LoRA, checkpointing, the training parallelism).

A log reader fills it from what its framework prints (veRL: workbench/runlog/training.py); the
phase model (workbench/runlog/phases.py) prices each phase from it alone, so a reader of another
framework's logs that fills it, and names its timers as veRL's canonical phases (PHASES), gets the
same model. Every field a reader took from the log, or from the framework's default, is said in
`taken` (field, value, where).

A timer that holds several passes (NeMo-RL's `policy_and_reference_logprobs`, SkyRL's
`fwd_logprobs_values_reward`, OpenRLHF's `make_experience`: the policy's, the reference's and the
critic's forwards under one name) lists one PhaseShape per pass under that timer's name; the phase
model prices the timer as their sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from workbench.contracts.schema import require

# veRL's canonical phase timers (`timing_s/<name>`), in the order its trainer runs them.
PHASES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic",
          "update_actor", "update_weights")
ROLES = ("actor", "ref", "critic")
# DeepSpeed's ZeRO (OpenRLHF, ROLL): stage 3 shards the parameters and gathers them for every
# forward as FSDP does; stages 1 and 2 keep them whole on every rank ("zero2")
STRATEGIES = ("fsdp", "fsdp2", "megatron", "zero2", "zero3")
GATHERED = ("fsdp", "fsdp2", "zero3")  # parameters sharded over the ranks, gathered per forward


class Offload(str, Enum):
    """Where a model's parameters live between uses: on the GPU; on the host, moved in at the start
    of each phase that uses them and out at its end; on the host, moved in for every forward
    (FSDP's CPUOffload: each micro-batch's forward copies the GPU's shard in). A member equals its
    string, so files and messages read as the string."""

    NONE = "none"
    PHASE = "phase"
    FORWARD = "forward"

    def __str__(self) -> str:
        return self.value


OFFLOAD = tuple(o.value for o in Offload)


@dataclass(frozen=True)
class ModelShape:
    """One model the step runs outside the rollout engine."""

    role: str  # actor, ref or critic
    arch: str  # an architecture preset name or a config.json path
    value_head: bool = False  # a critic: one value per token, no LM head over the vocabulary
    checkpointing: bool = False  # gradient checkpointing: the backward recomputes the forward
    lora_rank: int = 0  # > 0: LoRA adapters train, the base weights are frozen
    param_offload: str = Offload.NONE  # an Offload
    grad_offload: bool = False  # gradients moved to the host after each update and back before
    optimizer_offload: bool = False  # the optimizer's state likewise
    param_bytes: int = 2  # bytes per parameter as held (fp32 master weights: 4; bf16: 2)

    def check(self) -> None:
        require(self.role in ROLES, "role", self.role, ", ".join(ROLES))
        require(self.param_offload in OFFLOAD, "param_offload", self.param_offload,
                ", ".join(OFFLOAD))
        require(self.lora_rank >= 0, "lora_rank", self.lora_rank, "an integer >= 0")
        require(self.param_bytes in (2, 4), "param_bytes", self.param_bytes, "2 (bf16) or 4")


@dataclass(frozen=True)
class PhaseShape:
    """One timed phase that runs a model: a forward over every sequence of the step (log-probs,
    values) or an update (forward, backward and optimizer steps)."""

    phase: str  # PHASES' name
    role: str  # the model it runs (ROLES)
    micro_batch: int = 0  # sequences per micro-batch and GPU (0: dynamic, by `max_tokens`)
    max_tokens: int = 0  # dynamic micro-batches: tokens per micro-batch and GPU
    update: bool = False  # forward, backward and optimizer steps (else one forward)
    epochs: int = 1  # passes over the step's data (an update's ppo_epochs)
    mini_batches: int = 1  # optimizer steps per epoch

    def check(self) -> None:
        require(self.phase in PHASES, "phase", self.phase, ", ".join(PHASES))
        require(self.role in ROLES, "role", self.role, ", ".join(ROLES))
        require(self.micro_batch >= 1 or self.max_tokens >= 1, "micro_batch", self.micro_batch,
                "sequences per micro-batch >= 1, or max_tokens >= 1 (dynamic micro-batches)")
        require(self.epochs >= 1 and self.mini_batches >= 1, "epochs", self.epochs,
                "epochs and mini_batches >= 1")


@dataclass(frozen=True)
class TrainingTaken:
    """One training-shape field and where the reader took it."""

    field: str
    value: str
    source: str


@dataclass(frozen=True)
class TrainingShape:
    """The run's training side (module docstring)."""

    strategy: str  # fsdp, fsdp2 or megatron
    gpus: int  # GPUs the models train on (all of them in a colocated run)
    models: tuple[ModelShape, ...]
    phases: tuple[PhaseShape, ...]  # the phases that run a model; others (adv, reward) need none
    tp: int = 1  # the training's tensor parallelism (Megatron; FSDP: 1)
    pp: int = 1  # pipeline stages (Megatron)
    remove_padding: bool = True  # sequences packed; else each padded to the caps below
    max_prompt_tokens: int = 0  # the prompt cap (what a padded sequence's prompt occupies)
    max_response_tokens: int = 0
    # the old log-probs computed inside the rollout's timer (older veRL, in generate_sequences)
    log_probs_in_gen: bool = False
    # the logits padded back to the caps before the log-probs (veRL's Megatron models: their
    # layers run packed, their logits are padded out again): the vocabulary's traffic runs over
    # the response cap, not the tokens
    logits_padded: bool = False
    taken: tuple[TrainingTaken, ...] = ()

    @property
    def dp(self) -> int:
        """Data-parallel ranks: each holds its share of the step's sequences."""
        return max(1, self.gpus // (self.tp * self.pp))

    @property
    def gathers(self) -> bool:
        """Each forward gathers the model's weights from the other ranks (GATHERED, over ranks)."""
        return self.strategy in GATHERED and self.dp > 1

    def model(self, role: str) -> ModelShape:
        for m in self.models:
            if m.role == role:
                return m
        raise KeyError(role)

    def phase(self, name: str) -> PhaseShape | None:
        return next((p for p in self.phases if p.phase == name), None)

    def check(self) -> None:
        require(self.strategy in STRATEGIES, "strategy", self.strategy, ", ".join(STRATEGIES))
        require(self.gpus >= 1 and self.tp >= 1 and self.pp >= 1, "gpus", self.gpus,
                "gpus, tp and pp >= 1")
        require(self.gpus % (self.tp * self.pp) == 0, "tp", self.tp,
                f"tp x pp dividing the {self.gpus} GPUs")
        roles = {m.role for m in self.models}
        for p in self.phases:
            require(p.role in roles, "phases", p.phase, f"a phase of a model given ({roles})")
        require(self.remove_padding or self.max_prompt_tokens + self.max_response_tokens > 0,
                "max_prompt_tokens", self.max_prompt_tokens,
                "the caps a padded sequence fills (remove_padding false)")
