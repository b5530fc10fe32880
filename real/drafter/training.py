"""Training an EAGLE drafter from its target: rollouts, the target's hidden states, the EAGLE loss.

`train_from_target` (`tlt drafter train`) samples the target on task prompts (real.tiny.task),
takes its hidden states over the rollouts (`featurize`) and trains a fresh drafter on them
(`train_drafter`, one `train_step` per minibatch), then saves it (real/drafter/checkpoint.py).
Spot training (real/drafter/spot.py) reuses `featurize` and `train_step`.
"""

from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn as nn

from real.drafter.checkpoint import save_drafter
from real.drafter.eagle import (
    CE_WEIGHT,
    REG_WEIGHT,
    EagleConfig,
    EagleDrafter,
    eagle_loss,
    load_target,
    target_hidden_states,
)
from real.rollout.engine import RolloutEngine
from real.rollout.requests import Sampling
from real.tiny import task
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


def featurize(model: nn.Module, sequences: Sequence[Sequence[int]], max_len: int = 512,
              batch_size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(token ids [L], target hidden [L, H]) per sequence, truncated to `max_len` tokens, in
    the order given. Batches hold sequences of similar length: a long-tailed set padded in
    arrival order costs about twice the forward passes."""
    seqs = [torch.tensor(list(s)[:max_len], dtype=torch.long) for s in sequences if len(s) >= 3]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    feats: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for i in range(0, len(order), batch_size):
        chunk = order[i: i + batch_size]
        ids, mask = pad_right([seqs[j] for j in chunk])
        device = next(model.parameters()).device
        with autocast(device):
            hidden, _ = target_hidden_states(model, ids.to(device), mask.long().to(device))
        # float32 on the CPU: the records travel between processes and into checkpoints.
        feats.update((j, (seqs[j], hidden[r, : len(seqs[j])].float().cpu().clone()))
                     for r, j in enumerate(chunk))
    return [feats[j] for j in range(len(seqs))]


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
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_([p for p in drafter.parameters() if p.requires_grad],
                                       cfg.grad_clip)
    opt.step()
    return parts


def train_drafter(target: str | Path | nn.Module, sequences: Sequence[Sequence[int]],
                  steps: int = 300, lr: float = 1e-3, seed: int = 0,
                  drafter: EagleDrafter | None = None, config: DrafterTrainConfig | None = None,
                  log: Callable[[str], None] | None = print, log_every: int = 50) -> EagleDrafter:
    """Train an EAGLE drafter on the target's hidden states over `sequences` (prompt + response
    ids).

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
           drafter: EagleDrafter | None, log: Callable[[str], None] | None,
           log_every: int) -> EagleDrafter:
    torch.manual_seed(cfg.seed)
    if drafter is None:
        drafter = EagleDrafter.from_target(model)
    drafter.to(next(model.parameters()).device)
    feats = featurize(model, sequences, cfg.max_len, cfg.batch_size)
    if not feats:
        raise ValueError("no training sequences (each needs at least 3 tokens)")
    gen = torch.Generator().manual_seed(cfg.seed)
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    def lr_factor(s: int) -> float:  # linear warm-up, then cosine down to 10%
        progress = min(1.0, s / max(1, cfg.steps))
        return min(1.0, (s + 1) / max(1, cfg.warmup)) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
        )

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    drafter.train()
    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        idx = torch.randint(len(feats), (min(cfg.batch_size, len(feats)),), generator=gen).tolist()
        ids, mask = pad_right([feats[i][0] for i in idx])
        hid, _ = pad_right([feats[i][1] for i in idx])
        parts = train_step(drafter, opt, hid, ids, mask, cfg, gen)
        sched.step()
        parts["step"] = step + 1
        history.append(parts)
        if log is not None and (step + 1 == cfg.steps or (step + 1) % log_every == 0 or step == 0):
            recent = history[-log_every:]
            mean = lambda k: sum(h[k] for h in recent) / len(recent)  # noqa: E731
            log(f"  drafter step {step + 1}/{cfg.steps}  loss {mean('loss'):.4f}  reg "
                f"{mean('reg'):.4f}  ce {mean('ce'):.3f}  top1 {mean('top1'):.3f}  "
                f"({time.perf_counter() - t0:.1f}s)")
    drafter.eval()
    drafter.train_log = history  # type: ignore[attr-defined]
    drafter.train_config = cfg  # type: ignore[attr-defined]
    drafter.train_sequences = len(feats)  # type: ignore[attr-defined]
    return drafter


def rollout_sequences(model_dir: str | Path, prompts: Sequence[str | Sequence[int]], samples: int,
                      max_tokens: int, seed: int, temperature: float = 1.0,
                      log: Callable[[str], None] | None = print) -> list[list[int]]:
    """Prompt + response token ids from the target: per prompt one greedy response and
    `samples - 1` sampled at `temperature`, generated by vLLM (one engine, closed after), or by
    `transformers` one sequence at a time where vLLM is not installed."""
    t0 = time.perf_counter()
    if importlib.util.find_spec("vllm") is None:
        seqs = hf_rollouts(model_dir, prompts, samples, max_tokens, seed, temperature)
        if log:
            log(f"rollouts (transformers; vLLM is not installed): {len(seqs)} sequences, "
                f"{sum(len(s) for s in seqs)} tokens in {time.perf_counter() - t0:.1f}s")
        return seqs
    engine = RolloutEngine(model_dir, None, max_num_seqs=min(64, max(1, len(prompts) * samples)),
                           seed=seed)
    try:
        results = engine.generate(prompts, 1, Sampling(temperature=0.0, max_tokens=max_tokens))
        if samples > 1:
            sampled = engine.generate(prompts, samples - 1,
                                      Sampling(temperature=temperature, max_tokens=max_tokens,
                                               seed=seed))
            for r, s in zip(results, sampled):
                r.samples += s.samples
    finally:
        engine.close()
    seqs = [r.prompt_token_ids + s.token_ids for r in results for s in r.samples]
    if log:
        n_tok = sum(len(s) for s in seqs)
        log(f"rollouts: {len(seqs)} sequences, {n_tok} tokens in {time.perf_counter() - t0:.1f}s")
    return seqs


@torch.no_grad()
def hf_rollouts(model_dir: str | Path, prompts: Sequence[str | Sequence[int]], samples: int,
                max_tokens: int, seed: int, temperature: float) -> list[list[int]]:
    """`rollout_sequences` without vLLM: `transformers`, one sequence at a time on the CPU (the
    first sample of each prompt greedy); prompts as text or token ids."""
    from transformers import AutoTokenizer

    model = load_target(model_dir)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    eos = model.config.eos_token_id
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for p in prompts:
        ids = tok(p, add_special_tokens=True)["input_ids"] if isinstance(p, str) else list(p)
        for j in range(samples):
            out = list(ids)
            past, inp = None, torch.tensor([ids])
            for _ in range(max_tokens):
                o = model(input_ids=inp, past_key_values=past, use_cache=True)
                past, logits = o.past_key_values, o.logits[0, -1]
                if j == 0 or temperature <= 0:
                    nxt = int(logits.argmax())
                else:
                    nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1,
                                                generator=gen))
                out.append(nxt)
                if nxt == eos:
                    break
                inp = torch.tensor([[nxt]])
            seqs.append(out)
    return seqs


def train_from_target(model_dir: str | Path, out_dir: str | Path, steps: int = 300, seed: int = 0,
                      prompts: int = 32, samples: int = 4, max_tokens: int = 256, lr: float = 1e-3,
                      mix: str = "default", temperature: float = 1.0,
                      log: Callable[[str], None] | None = print, device: str = "cpu") -> Path:
    """`tlt drafter train`: sample the target on task prompts (real.tiny.task), train a drafter on
    the rollouts' hidden states, save it atomically. `device`: where the drafter trains (cpu or
    cuda)."""
    train_device(device)  # refused before any rollout
    prompt_list = [p.prompt for p in task.make_problems(prompts, seed, mix)]
    if log:
        log(f"training data: {len(prompt_list)} prompts from {task.__name__}, {samples} samples "
            f"each, up to {max_tokens} tokens")
    seqs = rollout_sequences(model_dir, prompt_list, samples, max_tokens, seed, temperature, log)
    model = load_target(model_dir)
    # Train on whole responses: a drafter never shown positions past max_len collapses there
    # (its acceptance falls to a fraction beyond that context).
    config = DrafterTrainConfig(max_len=max(len(s) for s in seqs), device=device)
    drafter = train_drafter(model, seqs, steps=steps, lr=lr, seed=seed, config=config, log=log)
    return save_drafter(drafter, out_dir, model.config,
                        extra={"target": str(model_dir), "prompts": len(prompt_list),
                               "prompt_source": task.__name__, "samples": samples,
                               "max_tokens": max_tokens, "temperature": temperature})
