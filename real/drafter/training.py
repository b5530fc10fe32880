"""Training an EAGLE or EAGLE-3 drafter on its target's hidden states.

`featurize_records` takes the target's hidden states over sequences (and, for an EAGLE-3 head,
the states of the target layers it reads); `train_records` takes one optimiser step of a head's
loss on a minibatch of them (EAGLE's in `train_step`, EAGLE-3's training-time test in
`train_step_eagle3`); `train_drafter` trains a head from scratch or further on a fixed set of
sequences. `tlt drafter train` (real/drafter/from_target.py) and spot training
(real/drafter/spot.py) are built on these.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

from real.drafter.eagle import (
    CE_WEIGHT,
    REG_WEIGHT,
    EagleConfig,
    EagleDrafter,
    eagle_loss,
    load_target,
    target_hidden_states,
)
from real.drafter.eagle3 import Eagle3Drafter, eagle3_loss
from real.drafter.layout import EAGLE, EAGLE3, default_aux_layers
from real.drafter.records import HiddenRecord, split_states
from real.torch_utils import autocast, pad_right, train_device


@dataclass
class DrafterTrainConfig:
    steps: int = 300
    lr: float = 1e-3
    seed: int = 0
    batch_size: int = 8
    max_len: int = 512
    reg_weight: float = REG_WEIGHT
    ce_weight: float = CE_WEIGHT
    warmup: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    noise: float = 0.0  # uniform noise on the input hidden states, +-noise (EAGLE's augmentation)
    # torch threads while training; None: 1 for a small target (hidden <= 512), where thread
    # synchronisation costs more than it gains (many times slower with 2 threads on a busy
    # 2-core machine), else torch's default.
    threads: int | None = None
    # "cpu", or "cuda": the target's forward and the drafter's steps in bf16 autocast on the GPU
    # (float32 weights and AdamW state); the saved drafter is float32 either way.
    device: str = "cpu"
    # EAGLE-3: the training-time test's unrolled draft steps (SafeAILab's traineagle3 unrolls 7)
    ttt_steps: int = 4


def featurize_records(model: nn.Module, sequences: Sequence[Sequence[int]], max_len: int = 512,
                      batch_size: int = 8, aux_layers: Sequence[int] = ()) -> list[HiddenRecord]:
    """A record per sequence of at least 3 tokens (truncated to `max_len`), in the order given:
    the target's final-norm hidden states and, with `aux_layers`, those layers' states. Batches
    hold sequences of similar length: a long-tailed set padded in arrival order costs about twice
    the forward passes."""
    seqs = [torch.tensor(list(s)[:max_len], dtype=torch.long) for s in sequences if len(s) >= 3]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    hidden_size = EagleConfig.from_target_config(model.config).hidden_size
    device = next(model.parameters()).device
    records: dict[int, HiddenRecord] = {}
    for i in range(0, len(order), batch_size):
        chunk = order[i: i + batch_size]
        ids, mask = pad_right([seqs[j] for j in chunk])
        with autocast(device):
            states, _ = target_hidden_states(model, ids.to(device), mask.long().to(device),
                                             aux_layers)
        # float32 on the CPU: the records travel between processes and into checkpoints.
        for r, j in enumerate(chunk):
            records[j] = split_states(seqs[j].tolist(), states[r, : len(seqs[j])].float().cpu(),
                                      hidden_size)
    return [records[j] for j in range(len(seqs))]


def featurize(model: nn.Module, sequences: Sequence[Sequence[int]], max_len: int = 512,
              batch_size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(token ids [L], target hidden [L, H]) per sequence: `featurize_records` for an EAGLE
    head."""
    return [(torch.tensor(r.token_ids, dtype=torch.long), r.hidden)
            for r in featurize_records(model, sequences, max_len, batch_size)]


def train_records(drafter: EagleDrafter | Eagle3Drafter, opt: torch.optim.Optimizer,
                  records: Sequence[HiddenRecord], cfg: DrafterTrainConfig,
                  gen: torch.Generator | None = None) -> dict[str, float]:
    """One optimiser step of the head's loss on a minibatch of records (right-padded)."""
    m = cfg.max_len
    ids, mask = pad_right([torch.as_tensor(r.token_ids[:m], dtype=torch.long) for r in records])
    hidden, _ = pad_right([r.hidden[:m] for r in records])
    if isinstance(drafter, Eagle3Drafter):
        aux, _ = pad_right([r.aux[:m] for r in records])
        return train_step_eagle3(drafter, opt, aux, hidden, ids, mask, cfg)
    return train_step(drafter, opt, hidden, ids, mask, cfg, gen)


def train_step(drafter: EagleDrafter, opt: torch.optim.Optimizer, hidden: torch.Tensor,
               tokens: torch.Tensor, mask: torch.Tensor | None = None,
               cfg: DrafterTrainConfig | None = None,
               gen: torch.Generator | None = None) -> dict[str, float]:
    """One optimiser step of the EAGLE loss on a batch of target hidden states and tokens.

    hidden [B, T, H]: the target's (final-norm) hidden states over prompt + response; tokens
    [B, T]: the same positions' token ids; mask [B, T]: real (not padding) positions, padding on
    the right. The drafter reads (hidden[t], tokens[t+1]) and is trained towards hidden[t+1]
    and the target's distribution lm_head(hidden[t+1]). Returns the loss and its parts.
    """
    cfg = cfg or DrafterTrainConfig()
    # The batch goes where the drafter is (the CPU unless `train_drafter` moved it to a GPU).
    device = next(drafter.parameters()).device
    hidden, tokens = hidden.to(device), tokens.to(device)
    mask = torch.ones(tokens.shape, dtype=torch.bool,
                      device=device) if mask is None else mask.to(device)
    return _optimise(drafter, opt, _noisy(hidden[:, :-1], cfg, gen), tokens[:, 1:], hidden[:, 1:],
                     mask[:, 1:] & mask[:, :-1], cfg)


def train_step_eagle3(drafter: Eagle3Drafter, opt: torch.optim.Optimizer, aux: torch.Tensor,
                      hidden: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                      cfg: DrafterTrainConfig) -> dict[str, float]:
    """One optimiser step of EAGLE-3's training-time-test loss (real/drafter/eagle3.py) over
    `cfg.ttt_steps` unrolled draft steps; aux [B, T, n*H] the target layers' states, hidden
    [B, T, H] its final-norm states, tokens and mask [B, T]."""
    device = next(drafter.parameters()).device
    with autocast(device):
        loss, parts = eagle3_loss(drafter, aux.to(device), tokens.to(device), hidden.to(device),
                                  mask.to(device), cfg.ttt_steps)
    _apply(drafter, opt, loss, cfg)
    return parts


@dataclass
class PackedPairs:
    """EAGLE's training pairs of several sequences packed into one row (no padding): position i
    reads `hidden[i]` (h[t] of its sequence) and `tokens[i]` (the token at t+1) and is trained
    towards `target[i]` (h[t+1])."""

    hidden: torch.Tensor  # [1, N, H]
    tokens: torch.Tensor  # [1, N]
    target: torch.Tensor  # [1, N, H]
    positions: torch.Tensor  # [1, N]: t, restarting at 0 in each sequence
    spans: list[tuple[int, int]]  # each sequence's [start, end) in the row
    sequences: int


def pack_features(feats: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> PackedPairs:
    """(token ids [L], hidden [L, H]) per sequence (`featurize`'s records) as one packed row of
    their L - 1 pairs each: what sequence packing trains on instead of a right-padded batch."""
    feats = [(ids, h) for ids, h in feats if len(ids) >= 2]
    if not feats:
        raise ValueError("no sequence of at least 2 tokens to pack")
    spans, start = [], 0
    for ids, _ in feats:
        spans.append((start, start + len(ids) - 1))
        start += len(ids) - 1
    return PackedPairs(hidden=torch.cat([h[:-1] for _, h in feats])[None],
                       tokens=torch.cat([ids[1:] for ids, _ in feats])[None],
                       target=torch.cat([h[1:] for _, h in feats])[None],
                       positions=torch.cat([torch.arange(len(ids) - 1) for ids, _ in feats])[None],
                       spans=spans, sequences=len(feats))


def train_step_packed(drafter: EagleDrafter, opt: torch.optim.Optimizer, batch: PackedPairs,
                      cfg: DrafterTrainConfig | None = None,
                      gen: torch.Generator | None = None) -> dict[str, float]:
    """`train_step` on a packed row (`pack_features`): the same loss, the mean over the same pairs,
    without computing the padding a right-padded batch of long-tailed sequences carries (the TLT
    paper's spot trainer packs sequences: 29.6 samples/s against 13.3 padded)."""
    cfg = cfg or DrafterTrainConfig()
    device = next(drafter.parameters()).device
    hidden = _noisy(batch.hidden.to(device), cfg, gen)
    return _optimise(drafter, opt, hidden, batch.tokens.to(device), batch.target.to(device), None,
                     cfg, batch.positions.to(device), batch.spans)


def _noisy(hidden: torch.Tensor, cfg: DrafterTrainConfig,
           gen: torch.Generator | None) -> torch.Tensor:
    if cfg.noise <= 0:
        return hidden
    return hidden + ((torch.rand(hidden.shape,
                                 generator=gen) * 2 - 1) * cfg.noise).to(hidden.device)


def _optimise(drafter: EagleDrafter, opt: torch.optim.Optimizer, inp_h: torch.Tensor,
              tokens: torch.Tensor, tgt_h: torch.Tensor, mask: torch.Tensor | None,
              cfg: DrafterTrainConfig, positions: torch.Tensor | None = None,
              spans: list[tuple[int, int]] | None = None) -> dict[str, float]:
    """The EAGLE loss of (inp_h, tokens) towards tgt_h over `mask`'s pairs, one optimiser step."""
    with autocast(inp_h.device):
        pred_h, pred_logits = drafter(inp_h, tokens, positions, spans)
        with torch.no_grad():
            tgt_logits = drafter.lm_head(tgt_h)
        loss, parts = eagle_loss(pred_h.float(), pred_logits.float(), tgt_h, tgt_logits.float(),
                                 mask, cfg.reg_weight, cfg.ce_weight)
    _apply(drafter, opt, loss, cfg)
    return parts


def _apply(drafter: nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor,
           cfg: DrafterTrainConfig) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_([p for p in drafter.parameters() if p.requires_grad],
                                       cfg.grad_clip)
    opt.step()


def new_head(model: nn.Module, method: str, sequences: Sequence[Sequence[int]],
             draft_vocab: int | None = None) -> EagleDrafter | Eagle3Drafter:
    """A fresh head of `method` for the target: EAGLE's, or EAGLE-3's over the `draft_vocab`
    tokens most frequent in `sequences` (SafeAILab's choice; all tokens when None) reading three
    target layers (vLLM's default where it names three distinct layers, else spread evenly)."""
    if method == EAGLE:
        return EagleDrafter.from_target(model)
    if method != EAGLE3:
        raise ValueError(f"method {method!r}: give {EAGLE} or {EAGLE3}")
    vocab = EagleConfig.from_target_config(model.config).vocab_size
    counts = Counter(t for s in sequences for t in s)
    ranked = sorted(range(vocab), key=lambda t: (-counts[t], t))
    layers = int(model.config.num_hidden_layers)
    aux = default_aux_layers(layers)
    if len(set(aux)) < 3 or min(aux) < 1:
        aux = (max(1, layers // 4), layers // 2, layers - 1)
    return Eagle3Drafter.from_target(model, ranked[: draft_vocab or vocab], aux)


def train_drafter(target: str | Path | nn.Module, sequences: Sequence[Sequence[int]],
                  steps: int = 300, lr: float = 1e-3, seed: int = 0,
                  drafter: EagleDrafter | Eagle3Drafter | None = None,
                  config: DrafterTrainConfig | None = None,
                  log: Callable[[str], None] | None = print, log_every: int = 50) -> Any:
    """Train a drafter (a fresh EAGLE head when None) on the target's hidden states over
    `sequences` (prompt + response ids).

    Deterministic for a seed (weights, batches, noise). Prints progress every `log_every` steps
    when `log` is given. The drafter's training history is left in `drafter.train_log`.
    """
    cfg = config or DrafterTrainConfig()
    cfg = DrafterTrainConfig(**{**asdict(cfg), "steps": steps, "lr": lr, "seed": seed})
    model = load_target(target) if isinstance(target, (str, Path)) else target
    threads = cfg.threads
    if threads is None and EagleConfig.from_target_config(model.config).hidden_size <= 512:
        threads = 1
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    device = train_device(cfg.device)
    try:
        drafter = _train(model.to(device), sequences, cfg, drafter, log, log_every)
    finally:
        torch.set_num_threads(before)
        model.to("cpu")
    return drafter.to("cpu")


def _train(model: nn.Module, sequences: Sequence[Sequence[int]], cfg: DrafterTrainConfig,
           drafter: EagleDrafter | Eagle3Drafter | None, log: Callable[[str], None] | None,
           log_every: int) -> Any:
    torch.manual_seed(cfg.seed)
    if drafter is None:
        drafter = EagleDrafter.from_target(model)
    drafter.to(next(model.parameters()).device)
    records = featurize_records(model, sequences, cfg.max_len, cfg.batch_size, drafter.aux_layers)
    if not records:
        raise ValueError("no training sequences (each needs at least 3 tokens)")
    gen = torch.Generator().manual_seed(cfg.seed)
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

    def lr_factor(s: int) -> float:  # linear warm-up, then cosine down to 10%
        progress = min(1.0, s / max(1, cfg.steps))
        return min(1.0, (s + 1) / max(1, cfg.warmup)) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    drafter.train()
    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        idx = torch.randint(len(records), (min(cfg.batch_size, len(records)),),
                            generator=gen).tolist()
        parts = train_records(drafter, opt, [records[i] for i in idx], cfg, gen)
        sched.step()
        history.append({**parts, "step": step + 1})
        if log is not None and (step + 1 == cfg.steps or (step + 1) % log_every == 0 or step == 0):
            recent = history[-log_every:]
            means = "  ".join(f"{k} {sum(h[k] for h in recent) / len(recent):.4f}"
                              for k in parts)
            log(f"  drafter step {step + 1}/{cfg.steps}  {means}  "
                f"({time.perf_counter() - t0:.1f}s)")
    drafter.eval()
    drafter.train_log = history  # type: ignore[attr-defined]
    drafter.train_config = cfg  # type: ignore[attr-defined]
    drafter.train_sequences = len(records)  # type: ignore[attr-defined]
    return drafter
