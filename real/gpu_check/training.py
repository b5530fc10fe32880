"""Training throughput on the device, on random weights of real shapes (a step's cost does not
depend on the weights' values):

- `grpo`: one GRPO step (real/grpo.py: the no-grad pass for the old log-probs, then the minibatch
  updates) on a synthetic long-tailed batch, packed (padding-free forwards, real/packing.py)
  against padded (right-padded forwards of a minibatch, or of `padded_micro` sequences). One
  trainer alternates the paths (GRPO_PATHS), their order reversed every other repeat, after
  one untimed step each. tokens/s: the batch's real tokens (prompts and responses) over the
  median step. The hidden-state records for the drafter are not kept (`keep_hidden=False`):
  the update alone is timed.
- `drafter`: spot training of an EAGLE drafter at a target's hidden size (one decoder layer and
  fc on a frozen embedding and LM head, real/drafter/): the same minibatches of long-tailed
  sequences of hidden states, right-padded (`train_step`) against packed (`train_step_packed`).
  The features live on the CPU, as spot training's records do, so each step includes building
  its batch and copying it to the device. samples/s: sequences over the median step.

The packed paths besides "packed" (which runs real/span_attention.py's "auto") pin the packed
attention to one backend: "packed_per_span" (per sequence, no cuDNN) and "packed_sdpa_default"
(per sequence, PyTorch's own kernel choice), so one run shows what the attention costs.
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
from real.span_attention import backend, last_backend, varlen_unavailable
from workbench.contracts.architecture import Architecture, from_hf_config, load_architecture

Save = Callable[[], None]
# path -> (packed?, real.span_attention backend of its packed attention)
GRPO_PATHS = {
    "packed": (True, "auto"),
    "padded": (False, "auto"),
    "packed_per_span": (True, "per-span"),
    "packed_sdpa_default": (True, "per-span-default"),
}
DRAFTER_PATHS = {
    "plain": (False, "auto"),
    "packed": (True, "auto"),
    "packed_per_span": (True, "per-span"),
    "packed_sdpa_default": (True, "per-span-default"),
}


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


def _padded_tokens(sizes: list[int], per_forward: int) -> int:
    """What one padded pass over the batch computes, padding included (forwards of
    `per_forward` sequences in order)."""
    chunks = [sizes[i : i + per_forward] for i in range(0, len(sizes), per_forward)]
    return sum(len(c) * max(c) for c in chunks)


def timed(device: str, fn: Callable[[], object]) -> float:
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
    """One untimed step of each path, then `repeats` rounds of all, their order reversed every
    other round; `entry` updated and saved after each round (a budget cut keeps what was
    timed)."""
    names = list(steps)
    entry["warmup_s"], entry["peak_gib_by_path"], entry["times_s"] = {}, {}, {n: [] for n in names}
    for n in names:
        budget.check()
        _peak_reset(device)
        entry["warmup_s"][n] = round(timed(device, steps[n]), 4)
        entry["peak_gib_by_path"][n] = _peak_gib(device)
        save()
    for r in range(repeats):
        for n in names if r % 2 == 0 else names[::-1]:
            budget.check()
            entry["times_s"][n].append(round(timed(device, steps[n]), 4))
        entry.update(summarise(entry["times_s"]))
        save()


def _rates(times: dict, per_step: float, unit: str, base: str, digits: int) -> dict:
    """Each path's `unit`s per second over its median step, and its ratio to path `base`
    (`speedup`: packed's)."""
    rates = {n: per_step / statistics.median(ts) for n, ts in times.items() if ts}
    out: dict = {f"{n}_{unit}_per_s": round(v, digits) for n, v in rates.items()}
    if base in rates and len(rates) > 1:
        out[f"ratio_to_{base}"] = {
            n: round(v / rates[base], 3) for n, v in rates.items() if n != base
        }
        if "packed" in rates:
            out["speedup"] = out[f"ratio_to_{base}"]["packed"]
    out["varlen_unavailable"] = varlen_unavailable()
    return out


def _under(entry: dict, path: str, attention: str, packed: bool, fn: Callable[[], object]):
    """`fn` with the packed attention pinned to `attention`; a packed path records the backend
    that ran (entry["attention_by_path"])."""

    def run():
        with backend(attention):
            out = fn()
        if packed:
            entry.setdefault("attention_by_path", {})[path] = last_backend()
        return out

    return run


def grpo(shape: GrpoShape, device: str, budget, entry: dict, save: Save) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from real.grpo import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config(**SHAPES[shape.model])).float()
    cfg = GRPOConfig(
        lr=1e-6,
        minibatch=shape.minibatch,
        micro_tokens=shape.micro_tokens,
        micro_batch=shape.padded_micro,
        pack=True,
    )
    trainer = GRPOTrainer(shape.model, cfg, seed=0, device=device, model=model)
    batch = grpo_batch(shape, model.config.vocab_size)
    sizes = [len(r.prompt_ids) + len(r.response_ids) for r in batch]
    resp = sorted(len(r.response_ids) for r in batch)
    entry.update(
        model=shape.model,
        params=sum(p.numel() for p in model.parameters()),
        sequences=len(batch),
        tokens=sum(sizes),
        padded_tokens=_padded_tokens(sizes, shape.padded_micro or shape.minibatch),
        minibatch=shape.minibatch,
        micro_tokens=shape.micro_tokens,
        padded_micro=shape.padded_micro or shape.minibatch,
        prompt_tokens=shape.prompt_tokens,
        response_tokens={
            "p50": resp[len(resp) // 2],
            "max": resp[-1],
            "mean": sum(resp) / len(resp),
        },
        precision="bf16 autocast, float32 weights and AdamW" if device == "cuda" else "float32",
    )

    def step(path: str) -> Callable[[], object]:
        pack, attention = GRPO_PATHS[path]

        def run():
            trainer.config = replace(trainer.config, pack=pack)
            trainer.step(batch, keep_hidden=False)

        return _under(entry, path, attention, pack, run)

    interleaved(
        device,
        {p: step(p) for p in shape.paths},
        shape.repeats,
        entry,
        lambda times: _rates(times, entry["tokens"], "tokens", "padded", 1),
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
    turn = {p: 0 for p in shape.paths}

    def step(path: str) -> Callable[[], object]:
        pack, attention = DRAFTER_PATHS[path]

        def run():
            chosen = [feats[i] for i in draws[turn[path] % len(draws)]]
            turn[path] += 1
            if pack:
                return train_step_packed(d, opt, pack_features(chosen), train)
            ids, mask = pad_right([f[0] for f in chosen])
            hid, _ = pad_right([f[1] for f in chosen])
            return train_step(d, opt, hid, ids, mask, train)

        return _under(entry, path, attention, pack, run)

    def summarise(times: dict) -> dict:
        out = _rates(times, shape.batch, "samples", "plain", 2)
        per_token = real_tokens / shape.batch
        out.update(
            {
                k.replace("_samples_", "_tokens_"): round(v * per_token, 1)
                for k, v in out.items()
                if k.endswith("_samples_per_s")
            }
        )
        return out

    interleaved(
        device,
        {p: step(p) for p in shape.paths},
        shape.repeats,
        entry,
        summarise,
        budget,
        save,
    )
