"""GRPO (DeepSeekMath's group-relative policy optimisation) on a `transformers` causal LM.

One `GRPOTrainer.step(responses)` is one RL step: the scored responses of a step (a group per
prompt, each with a scalar reward) become group-normalised advantages, and the policy takes
`epochs` passes of minibatch AdamW updates on the token-level clipped surrogate

    -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)  (+ kl_coef * k3 KL to a frozen reference)

averaged over the response tokens of a minibatch (never the prompt's), where ratio =
exp(logp_new - logp_old) and logp_old are the weights the responses were sampled from: the weights
before this step's first update (vLLM's rollout weights, when the caller syncs every step).

The first pass of a step (no grad, before any update) computes the old log-probs, the reference
log-probs when there is a KL term (the frozen reference's forward over the same packed chunks),
and the target's final-norm hidden states over prompt + response: the features the EAGLE
drafter trains on (real/drafter/), returned as `HiddenRecord`s at no extra forward.

Packing (`GRPOConfig.pack`, the default): forwards run on packed rows without padding
(real/packing.py: sequences concatenated, attention within each), cut into micro-batches of at
most `micro_tokens` tokens (dynamic batch size) whose gradients accumulate into the minibatch's
one optimiser step. The optimisation is the padded one's: the same minibatches in the same
order, one optimiser step each, the loss averaged over the minibatch's response tokens; loss
and gradients agree with `pack=False` (right-padded forwards of a minibatch, or of
`micro_batch` sequences at a time, kept as the reference and for `tlt bench grpo`) to float
rounding. On the reference model's long-tailed
batches the padded forward spent most of its work on padding (real/experiments/bench_grpo.py).

`save(out_dir)` writes an HF model directory (safetensors, float32) that `transformers` and vLLM
reload, atomically; `state_dict()` / `load_state_dict()` carry the optimiser and the step count,
so that a trainer re-created from a saved directory resumes exactly.
"""

from __future__ import annotations

import copy
import math
import random
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

from real.drafter.eagle import load_target
from real.drafter.records import HiddenRecord, drafter_states, split_states
from real.packing import packed_forward, token_chunks
from real.torch_utils import autocast, pad_right, torch_settings, train_device
from workbench.contracts.fileio import write_dir_atomic
from workbench.contracts.seeds import Stream, derive_seed

# Weight files of an HF model directory: `save` writes its own, every other file is copied over.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf",
                    ".safetensors.index.json", ".bin.index.json")


@dataclass(frozen=True)
class GRPOConfig:
    lr: float = 1e-5  # AdamW
    clip_eps: float = 0.2  # PPO-style clipped ratio
    kl_coef: float = 0.0  # >0: KL to a frozen reference model (k3 estimator, as DeepSeekMath GRPO)
    epochs: int = 1  # passes over the step's responses
    minibatch: int = 16  # sequences per optimiser step
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    pack: bool = True  # packed, padding-free forwards (real/packing.py); False: right-padded ones
    # packed: tokens per forward (memory only; the optimisation is the same)
    micro_tokens: int = 16384
    # padded: sequences per forward, gradients accumulating over a minibatch's (veRL's micro-batch
    # per GPU; memory only); 0: the whole minibatch in one forward
    micro_batch: int = 0
    # target layers whose states the hidden records carry too (an EAGLE-3 drafter's inputs)
    drafter_layers: tuple[int, ...] = ()


@dataclass
class ScoredResponse:
    """One response of one prompt, with its reward."""

    prompt_ids: list[int]
    response_ids: list[int]
    reward: float
    group: int  # prompt index in the step; samples of one prompt share it


@dataclass
class StepStats:
    loss: float  # mean over minibatches
    kl: float  # mean k3 over response tokens and updates; 0 without a reference
    clip_frac: float  # response tokens whose clipped term was the active one
    ratio_mean: float
    grad_norm: float  # mean over optimiser steps, before clipping
    tokens: int  # response tokens of the step
    sequences: int
    adv_std: float
    seconds: float


def group_advantages(rewards: Sequence[float], groups: Sequence[int],
                     eps: float = 1e-6) -> list[float]:
    """(r - mean of its group) / (std of its group + eps), std unbiased (as TRL's and verl's GRPO).

    A group whose rewards are all equal (one sample included) teaches nothing: its advantages are
    exactly 0, not the rounding noise of its mean divided by eps."""
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} groups")
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    adv = [0.0] * len(rewards)
    for idx in members.values():
        rs = [float(rewards[i]) for i in idx]
        if max(rs) == min(rs):
            continue
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / (len(rs) - 1))
        for i, r in zip(idx, rs):
            adv[i] = (r - mean) / (std + eps)
    return adv


def padded_forward(model, sequences: Sequence[Sequence[int]], prompt_lens: Sequence[int],
                   hidden: bool = False, layers: Sequence[int] = ()
                   ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """`packed_forward`'s contract with one right-padded forward (the path before packing)."""
    for s, p in zip(sequences, prompt_lens):
        if not 1 <= p <= len(s):
            raise ValueError(f"prompt length {p} of a {len(s)}-token sequence: the first response "
                             "token needs a prompt token before it")
    seqs = [torch.as_tensor(list(s), dtype=torch.long) for s in sequences]
    ids, mask = pad_right(seqs)
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    # Not real.drafter.eagle.target_hidden_states (no-grad only, a KV cache); the same states.
    out = model(input_ids=ids, attention_mask=mask.long(), output_hidden_states=hidden,
                use_cache=False)
    logits = out.logits[:, :-1].float()
    # log_softmax gathered without materialising a second [B, T, V] tensor (vocabularies are large).
    tok_lp = logits.gather(-1, ids[:, 1:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    lps = [tok_lp[i, p - 1: len(s) - 1] for i, (s, p) in enumerate(zip(seqs, prompt_lens))]
    if not hidden:
        return lps, None
    h = drafter_states(out.hidden_states, layers)
    # clone: a slice would keep the whole padded batch alive for as long as the record lives.
    return lps, [h[i, : len(s)].detach().float().cpu().clone() for i, s in enumerate(seqs)]


def response_logprobs(model, sequences: Sequence[Sequence[int]],
                      prompt_lens: Sequence[int]) -> list[torch.Tensor]:
    """Log-probs of each sequence's response tokens (positions prompt_len..end) under `model`;
    differentiable unless called under no_grad."""
    return packed_forward(model, sequences, prompt_lens)[0]


class GRPOTrainer:
    def __init__(self, model_dir, config: GRPOConfig = GRPOConfig(), seed: int = 0,
                 reference_dir=None, threads: int | None = None, device: str = "cpu",
                 model: torch.nn.Module | None = None):
        """The policy from `model_dir` (float32 weights); a frozen reference (from `reference_dir`,
        default `model_dir`) only when `config.kl_coef > 0`. `threads`: torch threads (and
        deterministic algorithms) during `step`; None leaves the caller's settings. `device`:
        "cpu", or "cuda" (forwards in bf16 autocast, weights and AdamW state float32 on the GPU;
        refused where torch sees no GPU). `model`: an already-built float32 policy used instead of
        loading `model_dir` (a benchmark's random-weight model of a real shape: real/gpu_check/);
        `save` still copies `model_dir`'s other files."""
        self.device = train_device(device)
        c = config
        if c.minibatch < 1 or c.epochs < 1 or c.micro_tokens < 1 or c.micro_batch < 0:
            raise ValueError(f"minibatch, epochs and micro_tokens must be >= 1 and micro_batch"
                             f" >= 0, got {c.minibatch}, {c.epochs}, {c.micro_tokens}, "
                             f"{c.micro_batch}")
        self.model_dir = Path(model_dir)
        self.config = config
        self.seed = seed
        self.threads = threads
        torch.manual_seed(seed)
        self._model = (load_target(self.model_dir) if model is None
                       else model.eval()).to(self.device)
        # Eval mode while training too: the responses were sampled without dropout, and the hidden
        # states handed to the drafter must be the ones vLLM computes.
        self._model.requires_grad_(True)
        self.reference = None
        if config.kl_coef > 0:
            ref = copy.deepcopy(self._model) if model is not None and reference_dir is None else \
                load_target(reference_dir or model_dir)
            self.reference = ref.requires_grad_(False).to(self.device)
        self._params = [p for p in self._model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self._params, lr=config.lr,
                                           weight_decay=config.weight_decay)
        self.steps = 0

    @property
    def model(self):
        return self._model

    def _settings(self):
        return torch_settings(self.threads) if self.threads else nullcontext()

    def step(self, responses: Sequence[ScoredResponse],
             keep_hidden: bool = True) -> tuple[StepStats, list[HiddenRecord]]:
        """One GRPO update on a step's scored responses; returns its statistics and (with
        `keep_hidden`) the pre-update hidden states, one record per response in the given order."""
        if not responses:
            raise ValueError("no responses")
        with self._settings():
            return self._step(list(responses), keep_hidden)

    def _step(self, responses: list[ScoredResponse],
              keep_hidden: bool) -> tuple[StepStats, list[HiddenRecord]]:
        t0 = time.perf_counter()
        seqs = [list(r.prompt_ids) + list(r.response_ids) for r in responses]
        plens = [len(r.prompt_ids) for r in responses]
        adv = group_advantages([r.reward for r in responses], [r.group for r in responses])
        n = len(responses)
        old, ref, records = self._before_update(seqs, plens, keep_hidden)
        sums, updates, tok_seen = self._update(seqs, plens, adv, old, ref)
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1

        mean_adv = sum(adv) / n
        stats = StepStats(
            loss=sums["loss"] / max(1, updates),
            kl=sums["kl"] / max(1, tok_seen),
            clip_frac=sums["clip"] / max(1, tok_seen),
            ratio_mean=sums["ratio"] / max(1, tok_seen),
            grad_norm=sums["grad"] / max(1, updates),
            tokens=sum(o.numel() for o in old),
            sequences=n,
            adv_std=math.sqrt(sum((x - mean_adv) ** 2 for x in adv) / n),
            seconds=time.perf_counter() - t0,
        )
        return stats, records

    def gradients(self,
                  responses: Sequence[ScoredResponse]) -> tuple[float, dict[str, torch.Tensor]]:
        """The loss and gradients of the first minibatch `step` would update on (its order, its
        loss normalisation), at the current weights, with no optimiser step; gradients are cleared
        afterwards. For comparing the packed and padded paths (tests, `tlt bench grpo`)."""
        if not responses:
            raise ValueError("no responses")
        with self._settings():
            seqs = [list(r.prompt_ids) + list(r.response_ids) for r in responses]
            plens = [len(r.prompt_ids) for r in responses]
            adv = group_advantages([r.reward for r in responses], [r.group for r in responses])
            old, ref, _ = self._before_update(seqs, plens, keep_hidden=False)
            order = list(range(len(seqs)))
            random.Random(derive_seed(self.seed, Stream.GRPO, self.steps)).shuffle(order)
            idx = order[: self.config.minibatch]
            sums = dict(loss=0.0, kl=0.0, clip=0.0, ratio=0.0)
            self.optimizer.zero_grad(set_to_none=True)
            self._accumulate(idx, max(1, sum(old[i].numel() for i in idx)), seqs, plens, adv, old,
                             ref, sums)
            named = self._model.named_parameters()
            grads = {k: p.grad.detach().clone() for k, p in named if p.grad is not None}
            self.optimizer.zero_grad(set_to_none=True)
        return sums["loss"], grads

    def _chunks(self, seqs: Sequence[Sequence[int]]) -> list[list[int]]:
        """Micro-batches (indices into `seqs`): by token budget when packing, else by
        `micro_batch` (default the minibatch size) sequences."""
        if self.config.pack:
            return token_chunks([len(x) for x in seqs], self.config.micro_tokens)
        mb = self.config.micro_batch or self.config.minibatch
        return [list(range(i, min(i + mb, len(seqs)))) for i in range(0, len(seqs), mb)]

    def _forward(self, model, seqs: Sequence[Sequence[int]], plens: Sequence[int],
                 hidden: bool = False):
        run = packed_forward if self.config.pack else padded_forward
        with autocast(self.device):
            return run(model, seqs, plens, hidden, self.config.drafter_layers if hidden else ())

    def _before_update(self, seqs: list[list[int]], plens: list[int], keep_hidden: bool
                       ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[HiddenRecord]]:
        """The one no-grad pass before any update, chunk by chunk: old log-probs and, with
        `keep_hidden`, the hidden-state records from the policy's forward; reference log-probs
        (with a KL term) from the reference's forward of the same chunk."""
        old: list[torch.Tensor] = []
        ref: list[torch.Tensor] = []
        records: list[HiddenRecord] = []
        with torch.no_grad():
            for idx in self._chunks(seqs):
                s, p = [seqs[i] for i in idx], [plens[i] for i in idx]
                lps, hidden = self._forward(self._model, s, p, hidden=keep_hidden)
                old += lps
                if hidden is not None:
                    size = hidden[0].shape[-1] // (1 + len(self.config.drafter_layers))
                    records += [split_states(x, h, size) for x, h in zip(s, hidden)]
                if self.reference is not None:
                    ref += self._forward(self.reference, s, p)[0]
        return old, ref, records

    def _update(self, seqs: list[list[int]], plens: list[int], adv: list[float],
                old: list[torch.Tensor],
                ref: list[torch.Tensor]) -> tuple[dict[str, float], int, int]:
        """`epochs` passes of minibatch updates; returns the summed statistics, the number of
        optimiser steps and the response tokens they saw."""
        cfg, n, mb = self.config, len(seqs), self.config.minibatch
        # The order depends on the seed and the step count only, so a resumed trainer replays it.
        rng = random.Random(derive_seed(self.seed, Stream.GRPO, self.steps))
        sums = dict(loss=0.0, kl=0.0, clip=0.0, ratio=0.0, grad=0.0)
        updates = tok_seen = 0
        for _ in range(cfg.epochs):
            order = list(range(n))
            rng.shuffle(order)
            for j in range(0, n, mb):
                idx = order[j: j + mb]
                tokens = sum(old[i].numel() for i in idx)
                if not tokens:
                    continue  # nothing to average over: an AdamW step on zero gradients still moves
                self.optimizer.zero_grad(set_to_none=True)
                self._accumulate(idx, tokens, seqs, plens, adv, old, ref, sums)
                clip_to = (
                    cfg.max_grad_norm if cfg.max_grad_norm and cfg.max_grad_norm > 0 else math.inf
                )
                sums["grad"] += float(torch.nn.utils.clip_grad_norm_(self._params, clip_to))
                self.optimizer.step()
                updates += 1
                tok_seen += tokens
        return sums, updates, tok_seen

    def _accumulate(self, idx: list[int], tokens: int, seqs: list[list[int]], plens: list[int],
                    adv: list[float], old: list[torch.Tensor], ref: list[torch.Tensor],
                    sums: dict[str, float]) -> None:
        """Gradients of one minibatch's loss (the mean over its `tokens` response tokens of the
        clipped surrogate, plus the KL term) into `.grad`, micro-batch by micro-batch; its
        statistics added to `sums`."""
        cfg = self.config
        for part in self._chunks([seqs[i] for i in idx]):
            mi = [idx[k] for k in part]
            new = torch.cat(self._forward(self._model, [seqs[i] for i in mi],
                                          [plens[i] for i in mi])[0])
            old_t = torch.cat([old[i] for i in mi])
            a = torch.cat([torch.full((old[i].numel(),), adv[i], device=new.device) for i in mi])
            ratio = torch.exp(new - old_t)
            per_tok = -torch.minimum(ratio * a, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * a)
            kl = None
            if self.reference is not None:
                log_r = torch.cat([ref[i] for i in mi]) - new
                # k3 = r - log r - 1 >= 0 exactly; the clamp removes rounding's -1e-15.
                kl = (torch.expm1(log_r) - log_r).clamp_min(0.0)
                per_tok = per_tok + cfg.kl_coef * kl
            # Summed over the micro-batch, divided by the whole minibatch's tokens: the parts add
            # up to the minibatch mean, so gradients equal one forward of the whole minibatch.
            loss = per_tok.sum() / tokens
            loss.backward()
            with torch.no_grad():
                low = (ratio < 1 - cfg.clip_eps) & (a < 0)
                clipped = low | ((ratio > 1 + cfg.clip_eps) & (a > 0))
                sums["loss"] += loss.item()
                sums["clip"] += clipped.sum().item()
                sums["ratio"] += ratio.sum().item()
                sums["kl"] += kl.sum().item() if kl is not None else 0.0

    def save(self, out_dir) -> Path:
        """An HF model directory of the current weights, atomically: the source directory's files
        (tokenizer, generation config, ...) but its weights and config.json, then save_pretrained's
        model.safetensors (float32) and config.json: the layout vLLM loaded the source from."""
        out = Path(out_dir)

        def fill(tmp: Path) -> None:
            for f in sorted(self.model_dir.iterdir()):
                if (
                    f.is_file()
                    and f.name != "config.json"
                    and not f.name.endswith(_WEIGHT_SUFFIXES)
                ):
                    shutil.copy2(f, tmp / f.name)
            # One bar for one shard, printed every RL step, would bury `tlt train`'s step lines.
            from transformers.utils import logging as hf_logging

            was_on = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                self._model.save_pretrained(str(tmp), safe_serialization=True)
            finally:
                if was_on:
                    hf_logging.enable_progress_bar()

        write_dir_atomic(out, fill)
        return out

    def state_dict(self) -> dict:
        """What a checkpoint needs beyond the saved weights: optimiser, step count, torch RNG."""
        # Deep copy: the optimiser's moment tensors are updated in place by later steps.
        return {"optimizer": copy.deepcopy(self.optimizer.state_dict()), "steps": self.steps,
                "seed": self.seed, "torch_rng": torch.get_rng_state(),
                "config": asdict(self.config)}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
        self.seed = int(state.get("seed", self.seed))  # the minibatch order derives from it
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])


__all__ = ["GRPOConfig", "GRPOTrainer", "ScoredResponse", "StepStats", "group_advantages",
           "padded_forward", "response_logprobs"]
