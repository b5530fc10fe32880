"""Each timed phase outside the rollout, priced from what runs it: per step, the physical quantities
(BASES) that the training factors (workbench/runlog/priors.py's TRAIN_FACTORS) turn into seconds.

A phase's seconds = sum over BASES of basis x factor, summed over the passes its timer holds (one
for veRL's; another framework's combined timer holds several: training_shape.py):

- compute (the database's seconds, x train_speed): the phase's micro-batches, each a forward of b
  sequences of L tokens (workbench/runlog/forward_costs.py) on one data-parallel rank, times the
  forwards each pays: 1 for a log-prob or values pass; an update 1 + 2 (backward) + 1 (gradient
  checkpointing's recompute), its backward 1 with LoRA (no weight gradients but the adapters'),
  times its epochs; a Megatron pipeline of pp stages runs (micro-batches + pp - 1) stage times;
  a policy's logits read and written over the vocabulary (forward_costs.py: `logits_s`), a
  tensor-parallel rank's share of it (the LM head is split over TP), over the step's tokens, or
  over the response cap where the logits are padded back to the caps (`logits_padded`);
  each optimizer step reads and writes the optimizer's state and the weights (OPTIMIZER_BYTES a
  trained parameter, LoRA's adapters only) at the GPU's memory bandwidth. L is the step's mean
  sequence (prompt + response) with `remove_padding`, else the prompt and response caps (veRL pads
  each sequence to them); b the phase's micro-batch, or with dynamic micro-batches as many
  sequences as fill its token budget;
- launch (x launch_s, seconds per layer and forward): each micro-batch forward runs its model's
  layers (a pipeline stage's share), a backward counting as its forwards;
- gather (x gather_s_per_gb): under FSDP with more than one rank, each micro-batch gathers its
  model's bf16 weights from the other ranks for its forward, UPDATE_GATHERS times for an update's
  (forward, backward, and the fp32 gradients' reduce-scatter): gigabytes each rank receives;
- offload (x offload_s_per_gb): gigabytes over the host link per rank: a model offloaded at the
  phase's edges moves its shard in and out (its gradients too with grad_offload), one offloaded
  per forward (FSDP's CPUOffload) moves its bf16 shard in for every micro-batch, an update with
  optimizer_offload moves the optimizer's state in and out;
- fixed (x phase_s): one per pass (dispatch, the batch to and from the workers, the cache
  emptied); the weight sync a log times on its own (`update_weights`) counts as
  SYNC_CALLS_S + its bf16 bytes at SYNC_BYTES_PER_S over the prior's phase_s;
- reward (x reward_s): one per response, for `reward` and for `adv` where the log times no
  `reward` (the veRL that scores the responses inside its `adv` timer); where `reward` is timed on
  its own, `adv` is the advantage alone (GRPO's group statistics, GAE's scan: milliseconds on the
  driver), one fixed cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.contracts.architecture import Architecture, load_architecture
from workbench.contracts.training_shape import Offload, PhaseShape, TrainingShape
from workbench.runlog.forward_costs import ForwardGrid
from workbench.runlog.lengths import StepStats

BASES = ("compute", "launch", "gather", "offload", "fixed", "reward")
UPDATE_GATHERS = 4
OPTIMIZER_BYTES = 28  # Adam: weight, gradient and two moments read (fp32), three written
ADAM_STATE_BYTES = 8  # the two moments, fp32: what optimizer_offload moves
SYNC_CALLS_S, SYNC_BYTES_PER_S = 1.5, 10e9  # as workbench/runlog/priors.py's weight sync
GB = 1e9


@dataclass(frozen=True)
class StepBases:
    """Per timed phase (`phases`' order), per step, the BASES: array phases x steps x BASES."""

    phases: tuple[str, ...]
    values: np.ndarray

    def of(self, phase: str) -> np.ndarray:
        return self.values[self.phases.index(phase)]

    def rows(self, rows: np.ndarray) -> StepBases:
        return StepBases(self.phases, self.values[:, rows])

    def seconds(self, factors: np.ndarray) -> np.ndarray:
        """phases x steps: each phase priced with the BASES' factors (their values)."""
        return self.values @ factors


def lora_params(a: Architecture, rank: int) -> float:
    """Adapters on every linear layer (q, k, v, o, gate, up, down): rank x (in + out) each."""
    q, kv, h, i = a.heads * a.head_dim, a.kv_heads * a.head_dim, a.hidden, a.intermediate
    return float(rank * a.layers * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)))


def _forwards(p: PhaseShape, checkpointing: bool, lora: bool) -> int:
    if not p.update:
        return 1
    return (1 + (1 if lora else 2) + int(checkpointing)) * p.epochs


def _micro_batches(p: PhaseShape, seqs: float, length: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """Per step (micro-batches per rank, sequences in each)."""
    if p.max_tokens:
        n = np.maximum(1.0, np.ceil(seqs * length / p.max_tokens))
        return n, seqs / n
    n = np.full(len(length), float(np.ceil(seqs / p.micro_batch)))
    return n, np.full(len(length), seqs / n[0])


def phase_bases(t: TrainingShape, p: PhaseShape, grid: ForwardGrid, length: np.ndarray,
                responses: int) -> np.ndarray:
    """steps x BASES of one phase that runs a model (module docstring)."""
    m = t.model(p.role)
    a = load_architecture(m.arch)
    lora = m.lora_rank > 0 and p.role == "actor"
    k = _forwards(p, m.checkpointing, lora)
    seqs = responses / t.dp
    n, b = _micro_batches(p, seqs, length)
    stage = grid.forward_s(b, length) / t.pp
    out = np.zeros((len(length), len(BASES)))
    logit_tokens = seqs * (np.full(len(length), float(t.max_response_tokens)) if t.logits_padded
                           else length)
    out[:, 0] = (k * stage * (n + t.pp - 1)
                 + p.epochs * grid.logits_s(logit_tokens, p.update) / t.tp)
    trained = lora_params(a, m.lora_rank) if lora else float(a.params)
    if p.update:
        steps = p.epochs * p.mini_batches
        out[:, 0] += steps * trained / t.dp * OPTIMIZER_BYTES / grid.memory_bytes_per_s
    out[:, 1] = n * k * a.layers / t.pp
    if t.gathers:
        gathers = UPDATE_GATHERS * p.epochs if p.update else 1
        out[:, 2] = n * gathers * 2.0 * a.params * (t.dp - 1) / t.dp / GB
    out[:, 3] = offload_gb(t, p, a, trained) * (n if m.param_offload == Offload.FORWARD and
                                                 p.phase != "gen" else 1.0)
    out[:, 4] = 1.0
    return out


def offload_gb(t: TrainingShape, p: PhaseShape, a: Architecture, trained: float) -> float:
    """Gigabytes per rank one phase moves over the host link (per micro-batch for a model
    offloaded per forward)."""
    m = t.model(p.role)
    shard = a.params / t.dp
    if m.param_offload == Offload.FORWARD:
        return shard * 2 / GB
    gb = 0.0
    if m.param_offload == Offload.PHASE:
        gb += 2 * shard * m.param_bytes / GB
        if m.grad_offload and p.update:
            gb += 2 * shard * 4 / GB
    if m.optimizer_offload and p.update:
        gb += 2 * trained / t.dp * ADAM_STATE_BYTES / GB
    return gb


def sequence_length(t: TrainingShape, stats: StepStats) -> np.ndarray:
    """Per step, the tokens a sequence occupies in the forward (module docstring)."""
    if t.remove_padding:
        return stats.prompt_mean + stats.mean
    return np.full(len(stats.mean), float(t.max_prompt_tokens + t.max_response_tokens))


def step_bases(t: TrainingShape, grids: dict[str, ForwardGrid], stats: StepStats,
               responses: int, timed: tuple[str, ...], sync_fixed: float) -> StepBases:
    """Every timed phase's BASES per step (module docstring). `gen` holds what the rollout's
    timer holds beyond the rollout: the old log-probs' pass where this veRL runs it there, and an
    offloaded actor's weights moved in and out; `adv` and `reward` run on the driver (no
    dispatch); `sync_fixed` is the weight sync in phase_s's prior's units."""
    length = sequence_length(t, stats)
    steps = len(length)
    rows, names = [], []
    for name in timed:
        passes = [q for q in t.phases if q.phase == name]  # a combined timer: several passes
        p = passes[0] if passes else None
        if passes:
            out = sum(phase_bases(t, q, grids[q.role], length, responses) for q in passes)
        else:
            out = np.zeros((steps, len(BASES)))
            if name == "adv" and "reward" in timed:
                out[:, 4] = 1.0  # scored under `reward`: the advantage alone
            elif name in ("adv", "reward"):
                out[:, 5] = responses
            elif name == "update_weights":
                out[:, 4] = sync_fixed
        if name == "gen":
            out[:, 4] = 0.0  # the rollout's fixed costs are its own factors'
            actor = t.model("actor")
            if p is None and actor.param_offload == Offload.PHASE:
                out[:, 3] = 2 * load_architecture(actor.arch).params / t.dp * actor.param_bytes / GB
        rows.append(out)
        names.append(name)
    return StepBases(tuple(names), np.stack(rows) if rows else np.zeros((0, steps, len(BASES))))
