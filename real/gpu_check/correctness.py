"""Correctness on the device: the GRPO update (packed) and one EAGLE drafter step on the shipped
tiny model give the CPU's losses and updated weights, within a stated tolerance.

The reference is the CPU in float32. The candidate is the device's path: CUDA runs its forwards in
bf16 autocast over float32 weights (real/torch_utils.py), so it cannot match to float rounding;
`TOLERANCES` says how close it must be. On a machine without CUDA the candidate is the CPU under
bf16 autocast (the same rounding of matrix products, so the CPU run exercises the comparison and
its tolerance). The drafter's packed step (sequence packing, real/drafter/training.py) is also
checked against its padded step, both float32 on the CPU: the same loss to float rounding.

Weights are compared by their update (after - before): AdamW moves each weight by about the
learning rate whatever its gradient's size, so an absolute bound says little; the cosine of the
two updates says whether both moved the same way, and their relative distance how far apart.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

# Each of 2 minibatches: 4 optimiser steps, the second GRPO step from updated weights.
GRPO_STEPS = 2


@dataclass(frozen=True)
class Tolerance:
    loss_abs: float  # |candidate - reference| <= loss_abs + loss_rel * |reference|
    loss_rel: float
    min_update_cosine: float  # cosine of the two weight updates

    def loss_ok(self, ref: float, cand: float) -> bool:
        return abs(cand - ref) <= self.loss_abs + self.loss_rel * abs(ref)


# bf16 keeps 8 bits of mantissa: log-probs and hidden states move by ~1e-2 relative, and so do
# the losses built on them; a few weights whose gradient is below that noise may step the other way.
TOLERANCES = {
    "bfloat16": Tolerance(loss_abs=5e-3, loss_rel=2e-2, min_update_cosine=0.9),
    "float32": Tolerance(loss_abs=1e-5, loss_rel=1e-4, min_update_cosine=0.9999),
}


def candidate(device: str) -> tuple[str, str]:
    """(the device a candidate runs on, its description)."""
    if device == "cuda":
        return "cuda", "CUDA, bf16 autocast over float32 weights"
    return "cpu", "CPU under bf16 autocast (no CUDA here: stands in for CUDA's bf16)"


def _autocast(device: str):
    # On CUDA the trainers autocast themselves; the CPU stand-in is autocast from outside.
    return torch.autocast("cpu", dtype=torch.bfloat16) if device == "cpu" else nullcontext()


def _trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        k: p.detach().double().cpu().clone() for k, p in model.named_parameters() if p.requires_grad
    }


def compare_updates(before: dict, ref: dict, cand: dict) -> dict:
    """The two updates' cosine, their relative distance and the largest weight difference."""
    d_ref = torch.cat([(ref[k] - before[k]).flatten() for k in before])
    d_cand = torch.cat([(cand[k] - before[k]).flatten() for k in before])
    norm = float(d_ref.norm())
    return {
        "update_cosine": float(d_ref @ d_cand / (norm * float(d_cand.norm()) or 1.0)),
        "update_rel_distance": float((d_cand - d_ref).norm() / (norm or 1.0)),
        "weight_max_abs_diff": float((d_cand - d_ref).abs().max()),
        "update_max_abs": float(d_ref.abs().max()),
        "parameters": int(d_ref.numel()),
    }


def verdict(losses: list[tuple[float, float]], updates: dict, tol: Tolerance) -> dict:
    ok_loss = all(tol.loss_ok(r, c) for r, c in losses)
    ok = ok_loss and updates["update_cosine"] >= tol.min_update_cosine
    return {"losses_ok": ok_loss, "passed": bool(ok), "tolerance": asdict(tol)}


def rollouts(
    model_dir: Path, prompts: int = 4, samples: int = 4, max_tokens: int = 48
) -> list[tuple[list, list]]:
    """The model's own (prompt ids, response ids) on task prompts (transformers on the CPU, the
    first sample greedy): log-probs a trained policy really sees. Random tokens would sit at log-
    probs near -20, where one optimiser step moves the ratio by a factor of e and bf16's rounding
    then decides the path the update takes."""
    from transformers import AutoTokenizer

    from real.drafter.from_target import hf_rollouts
    from real.tiny import task

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = [
        tok(p.prompt, add_special_tokens=True)["input_ids"] for p in task.make_problems(prompts, 0)
    ]
    seqs = hf_rollouts(model_dir, ids, samples, max_tokens, seed=0, temperature=1.0)
    return [(ids[i // samples], s[len(ids[i // samples]) :]) for i, s in enumerate(seqs)]


def scored(pairs: list[tuple[list, list]], samples: int = 4):
    """GRPO's input: rewards 0/1 alternating within each prompt's group (every group teaches)."""
    from real.grpo import ScoredResponse

    return [
        ScoredResponse(list(p), list(r), float(i % 2), i // samples)
        for i, (p, r) in enumerate(pairs)
    ]


def grpo(model_dir: Path, device: str, pairs: list[tuple[list, list]]) -> dict:
    """GRPO_STEPS packed GRPO steps on the CPU (float32) and on the candidate: same seed, batch."""
    from real.grpo import GRPOConfig, GRPOTrainer

    cfg = GRPOConfig(lr=1e-5, minibatch=8, pack=True)
    batch = scored(pairs)
    runs = {}
    for name, dev, ctx in (
        ("reference", "cpu", nullcontext()),
        ("candidate", device, _autocast(device)),
    ):
        tr = GRPOTrainer(model_dir, cfg, seed=0, device=dev)
        before = _trainable(tr.model)
        with ctx:
            stats = [tr.step(batch, keep_hidden=False)[0] for _ in range(GRPO_STEPS)]
        runs[name] = (before, _trainable(tr.model), stats)
    (before, w_ref, s_ref), (_, w_cand, s_cand) = runs["reference"], runs["candidate"]
    losses = [(a.loss, b.loss) for a, b in zip(s_ref, s_cand)]
    updates = compare_updates(before, w_ref, w_cand)
    keep = ("loss", "grad_norm", "ratio_mean", "clip_frac", "tokens")
    out = {
        "steps": GRPO_STEPS,
        "optimizer_steps": GRPO_STEPS * 2,
        "lr": cfg.lr,
        "reference": [{k: getattr(s, k) for k in keep} for s in s_ref],
        "candidate": [{k: getattr(s, k) for k in keep} for s in s_cand],
        **updates,
    }
    return {**out, **verdict(losses, updates, TOLERANCES["bfloat16"])}


def _drafter_inputs(model_dir: Path, pairs: list[tuple[list, list]]):
    from real.drafter.eagle import EagleDrafter, load_target
    from real.drafter.training import featurize

    target = load_target(model_dir)
    feats = featurize(target, [p + r for p, r in pairs[:8]], max_len=128, batch_size=8)
    torch.manual_seed(0)
    return EagleDrafter.from_target(target), feats


def drafter(model_dir: Path, device: str, pairs: list[tuple[list, list]]) -> dict:
    """One EAGLE step: CPU float32 against the candidate (padded batch), and the CPU's packed step
    against its padded one (float32)."""
    from real.drafter.training import (
        DrafterTrainConfig,
        pack_features,
        train_step,
        train_step_packed,
    )
    from real.torch_utils import pad_right

    base, feats = _drafter_inputs(model_dir, pairs)
    ids, mask = pad_right([f[0] for f in feats])
    hid, _ = pad_right([f[1] for f in feats])
    cfg = DrafterTrainConfig(lr=1e-3)
    before = _trainable(base)

    def step(dev: str, packed: bool = False, ctx=None) -> tuple[dict, dict]:
        d = copy.deepcopy(base).to(dev)
        opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=cfg.lr)
        with ctx or nullcontext():
            parts = (
                train_step_packed(d, opt, pack_features(feats), cfg)
                if packed
                else train_step(d, opt, hid, ids, mask, cfg)
            )
        return parts, _trainable(d)

    (p_ref, w_ref), (p_cand, w_cand) = step("cpu"), step(device, ctx=_autocast(device))
    p_pack, w_pack = step("cpu", packed=True)
    cand = compare_updates(before, w_ref, w_cand)
    pack = compare_updates(before, w_ref, w_pack)
    return {
        "sequences": len(feats),
        "tokens": int(mask.sum()),
        "padded_tokens": int(mask.numel()),
        "lr": cfg.lr,
        "reference": p_ref,
        "candidate": p_cand,
        **cand,
        **verdict(
            [(p_ref[k], p_cand[k]) for k in ("loss", "reg", "ce")], cand, TOLERANCES["bfloat16"]
        ),
        "packed_vs_padded": {
            "packed": p_pack,
            **pack,
            **verdict(
                [(p_ref[k], p_pack[k]) for k in ("loss", "reg", "ce")], pack, TOLERANCES["float32"]
            ),
        },
    }


def run(model_dir: Path, device: str) -> dict:
    dev, what = candidate(device)
    pairs = rollouts(model_dir)
    return {
        "model": str(model_dir),
        "reference_path": "CPU, float32",
        "candidate_path": what,
        "sequences": len(pairs),
        "grpo": grpo(model_dir, dev, pairs),
        "drafter": drafter(model_dir, dev, pairs),
    }
