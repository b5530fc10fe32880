"""Training throughput on the device, on random weights of real shapes (a step's cost does not
depend on the weights' values):

- `grpo`: one GRPO step (real/grpo.py: the no-grad pass for the old log-probs, then the minibatch
  updates) on a synthetic long-tailed batch, packed (padding-free forwards, real/packing.py)
  against padded (one right-padded forward per minibatch). One trainer alternates the two paths,
  the first of each pair swapped every repeat, after one untimed step each. tokens/s: the batch's
  real tokens (prompts and responses) over the median step. The hidden-state records for the
  drafter are not kept (`keep_hidden=False`): the update alone is timed.
- `drafter`: spot training of an EAGLE drafter at a target's hidden size (one decoder layer and
  fc on a frozen embedding and LM head, real/drafter/): the same minibatches of long-tailed
  sequences of hidden states, right-padded (`train_step`) against packed (`train_step_packed`).
  The features live on the CPU, as spot training's records do, so each step includes building
  its batch and copying it to the device. samples/s: sequences over the median step.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import replace
from typing import Callable

import torch

from real.gpu_check.plan import SHAPES, DrafterShape, GrpoShape, hf_config
from workbench.contracts.architecture import Architecture, from_hf_config, load_architecture

Save = Callable[[], None]


def architecture(name: str) -> Architecture:
    """An architecture preset, or one of the check's own shapes (plan.SHAPES)."""
    return from_hf_config(hf_config(name), name) if name in SHAPES else load_architecture(name)


def lengths(rng: random.Random, n: int, median: int, cap: int, sigma: float = 1.0) -> list[int]:
    """Lognormal lengths around `median`, cut at `cap`: an RL step's long tail in miniature."""
    return [max(2, min(cap, round(rng.lognormvariate(math.log(median), sigma)))) for _ in range(n)]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _peak_reset(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None


def grpo_batch(shape: GrpoShape, vocab: int, seed: int = 0) -> list:
    from real.grpo import ScoredResponse

    rng = random.Random(seed)
    out = []
    for g in range(shape.prompts):
        prompt = [rng.randrange(3, vocab) for _ in range(shape.prompt_tokens)]
        for k, n in enumerate(lengths(rng, shape.samples, shape.median_response, shape.cap)):
            out.append(
                ScoredResponse(prompt, [rng.randrange(3, vocab) for _ in range(n)], float(k % 2), g)
            )
    return out


def _padded_tokens(sizes: list[int], minibatch: int) -> int:
    """What one padded pass over the batch computes, padding included (minibatches in order)."""
    chunks = [sizes[i : i + minibatch] for i in range(0, len(sizes), minibatch)]
    return sum(len(c) * max(c) for c in chunks)


def _timed(device: str, fn: Callable[[], object]) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def interleaved(
    device: str,
    steps: dict[str, Callable[[], object]],
    repeats: int,
    entry: dict,
    summarise: Callable[[dict], dict],
    budget,
    save: Save,
) -> None:
    """One untimed step of each path, then `repeats` rounds of both, the first of each pair swapped
    every round; `entry` updated and saved after each round (a budget cut keeps what was timed)."""
    names = list(steps)
    entry["warmup_s"], entry["peak_gib_by_path"], entry["times_s"] = {}, {}, {n: [] for n in names}
    for n in names:
        budget.check()
        _peak_reset(device)
        entry["warmup_s"][n] = round(_timed(device, steps[n]), 4)
        entry["peak_gib_by_path"][n] = _peak_gib(device)
        save()
    for r in range(repeats):
        for n in names if r % 2 == 0 else names[::-1]:
            budget.check()
            entry["times_s"][n].append(round(_timed(device, steps[n]), 4))
        entry.update(summarise(entry["times_s"]))
        save()


def grpo(shape: GrpoShape, device: str, budget, entry: dict, save: Save) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from real.grpo import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config(**SHAPES[shape.model])).float()
    cfg = GRPOConfig(lr=1e-6, minibatch=shape.minibatch, micro_tokens=shape.micro_tokens, pack=True)
    trainer = GRPOTrainer(shape.model, cfg, seed=0, device=device, model=model)
    batch = grpo_batch(shape, model.config.vocab_size)
    sizes = [len(r.prompt_ids) + len(r.response_ids) for r in batch]
    resp = sorted(len(r.response_ids) for r in batch)
    entry.update(
        model=shape.model,
        params=sum(p.numel() for p in model.parameters()),
        sequences=len(batch),
        tokens=sum(sizes),
        padded_tokens=_padded_tokens(sizes, shape.minibatch),
        minibatch=shape.minibatch,
        micro_tokens=shape.micro_tokens,
        prompt_tokens=shape.prompt_tokens,
        response_tokens={
            "p50": resp[len(resp) // 2],
            "max": resp[-1],
            "mean": sum(resp) / len(resp),
        },
        precision="bf16 autocast, float32 weights and AdamW" if device == "cuda" else "float32",
    )

    def step(pack: bool) -> Callable[[], object]:
        def run():
            trainer.config = replace(trainer.config, pack=pack)
            trainer.step(batch, keep_hidden=False)

        return run

    def summarise(times: dict) -> dict:
        tps = {n: entry["tokens"] / statistics.median(ts) for n, ts in times.items() if ts}
        out = {f"{n}_tokens_per_s": round(v, 1) for n, v in tps.items()}
        if len(tps) == 2:
            out["speedup"] = round(tps["packed"] / tps["padded"], 3)
        return out

    interleaved(
        device,
        {"packed": step(True), "padded": step(False)},
        shape.repeats,
        entry,
        summarise,
        budget,
        save,
    )


def _features(shape: DrafterShape, a: Architecture, pool: int, seed: int = 0) -> list:
    """(token ids [L], hidden [L, H]) on the CPU, float32: what featurize() hands spot training."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randint(3, a.vocab, (n,), generator=gen), torch.randn(n, a.hidden, generator=gen))
        for n in lengths(rng, pool, shape.median_tokens, shape.cap)
    ]


def drafter(shape: DrafterShape, device: str, budget, entry: dict, save: Save) -> None:
    from real.drafter.eagle import EagleConfig, EagleDrafter
    from real.drafter.training import (
        DrafterTrainConfig,
        pack_features,
        train_step,
        train_step_packed,
    )
    from real.torch_utils import pad_right

    a = architecture(shape.target)
    cfg = EagleConfig(
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        vocab_size=a.vocab,
    )
    torch.manual_seed(0)
    with torch.device(device):
        d = EagleDrafter(
            cfg
        )  # its own random embedding and LM head stand for the target's (frozen)
    train = DrafterTrainConfig(lr=1e-5)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=train.lr)
    feats = _features(shape, a, 2 * shape.batch)
    rng = random.Random(1)
    draws = [rng.sample(range(len(feats)), shape.batch) for _ in range(shape.repeats + 1)]
    real_tokens = statistics.mean(sum(len(feats[i][0]) for i in b) for b in draws)
    entry.update(
        target=shape.target,
        hidden=a.hidden,
        vocab=a.vocab,
        batch=shape.batch,
        trainable_params=sum(p.numel() for p in d.parameters() if p.requires_grad),
        tokens_per_batch=round(real_tokens, 1),
        padded_tokens_per_batch=statistics.mean(
            len(b) * max(len(feats[i][0]) for i in b) for b in draws
        ),
    )
    turn = {"plain": 0, "packed": 0}

    def step(kind: str) -> Callable[[], object]:
        def run():
            chosen = [feats[i] for i in draws[turn[kind] % len(draws)]]
            turn[kind] += 1
            if kind == "packed":
                return train_step_packed(d, opt, pack_features(chosen), train)
            ids, mask = pad_right([f[0] for f in chosen])
            hid, _ = pad_right([f[1] for f in chosen])
            return train_step(d, opt, hid, ids, mask, train)

        return run

    def summarise(times: dict) -> dict:
        sps = {n: shape.batch / statistics.median(ts) for n, ts in times.items() if ts}
        out = {f"{n}_samples_per_s": round(v, 2) for n, v in sps.items()}
        out.update(
            {f"{n}_tokens_per_s": round(v * real_tokens / shape.batch, 1) for n, v in sps.items()}
        )
        if len(sps) == 2:
            out["speedup"] = round(sps["packed"] / sps["plain"], 3)
        return out

    interleaved(
        device,
        {"plain": step("plain"), "packed": step("packed")},
        shape.repeats,
        entry,
        summarise,
        budget,
        save,
    )
