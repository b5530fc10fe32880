"""The tiny model's generation outside vLLM (`transformers`' generate over the KV cache) and its
evaluation on held-out task problems (real/tiny/model.py's `init_model` records it)."""

from __future__ import annotations

import math
import time

from real.tiny import task
from real.tiny.tokenizer import EOS_ID, PAD_ID

EVAL_PROBLEMS = 100  # held-out problems an evaluation decodes


def greedy_generate(model, tok, prompts: list[str],
                    max_new_tokens: int = task.MAX_RESPONSE_TOKENS,
                    batch_size: int = 64) -> list[list[int]]:
    """Greedy (argmax) responses' token ids, each up to and excluding </s> (or the cap).

    A batched argmax loop over the KV cache; prompts of a batch are left-padded. Equal to
    vLLM's greedy output with the same cap (checked by `python -m real.experiments.check_vllm`).
    """
    return generate_responses(model, tok, prompts, max_new_tokens, batch_size)


def generate_responses(model, tok, prompts: list[str],
                       max_new_tokens: int = task.MAX_RESPONSE_TOKENS,
                       batch_size: int = 64, temperature: float = 0.0, seed: int = 0,
                       keep_eos: bool = False) -> list[list[int]]:
    """Responses' token ids, one per prompt (repeat a prompt for several samples), each up to
    the cap or </s>: excluded, or with `keep_eos` kept as the response's last token (as vLLM's
    output token ids keep it).

    `temperature` 0: greedy (argmax); above 0: sampled from softmax(logits / temperature) over
    the whole vocabulary (no top-k or top-p), from torch's RNG seeded with `seed` for the call
    (the caller's RNG state is left as it was). Batches of `batch_size` left-padded prompts
    over the KV cache.
    """
    import torch

    sample = temperature > 0
    knobs = dict(do_sample=False)
    if sample:
        knobs = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    out: list[list[int]] = []
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for k in range(0, len(prompts), batch_size):
            enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts[k:k + batch_size]]
            T = max(len(e) for e in enc)
            ids = torch.tensor([[PAD_ID] * (T - len(e)) + e for e in enc])
            mask = torch.tensor([[0] * (T - len(e)) + [1] * len(e) for e in enc])
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 eos_token_id=EOS_ID, pad_token_id=PAD_ID, **knobs)
            for row in gen[:, T:].tolist():
                resp = []
                for t in row:
                    if t == EOS_ID:
                        if keep_eos:
                            resp.append(t)
                        break
                    resp.append(t)
                out.append(resp)
    return out


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def evaluate(model, tok, n: int = EVAL_PROBLEMS, seed: int = 0, mix: str = "default",
             split: str = "test", variant_name: str = "gcd") -> dict:
    """Greedy accuracy and response lengths (tokens, </s> excluded) on `n` held-out problems;
    for a variant with a preferred style, also the reward (right and in that style) and the
    styles of the responses."""
    probs = task.make_problems(n, seed=10_000 + seed, mix=mix, split=split,
                               variant_name=variant_name)
    t0 = time.perf_counter()
    resp = greedy_generate(model, tok, [p.prompt for p in probs])
    texts = [tok.decode(r, skip_special_tokens=True) for r in resp]
    rewards = [task.reward(p, t) for p, t in zip(probs, texts)]
    styles = [task.style_of(t) for t in texts]
    lens = [len(r) for r in resp]
    ref = [len(tok(p.solution, add_special_tokens=False)["input_ids"]) for p in probs]
    by: dict[str, list[float]] = {}
    for p, r in zip(probs, rewards):
        band = "1-6" if p.difficulty <= 6 else "7-20" if p.difficulty <= 20 else "21+"
        by.setdefault(band, []).append(r)
    right = [n for n, r in zip(lens, rewards) if r]
    wrong = [n for n, r in zip(lens, rewards) if not r]
    return {
        "problems": n, "mix": mix, "split": split,
        "eval_seconds": round(time.perf_counter() - t0, 1),
        "accuracy": sum(rewards) / n,
        "accuracy_by_difficulty": {k: {"n": len(by[k]), "accuracy": sum(by[k]) / len(by[k])}
                                   for k in ("1-6", "7-20", "21+") if k in by},
        "response_tokens": {"p50": _percentile(lens, 50), "p90": _percentile(lens, 90),
                            "max": max(lens), "mean": sum(lens) / n},
        "reference_tokens": {"p50": _percentile(ref, 50), "p90": _percentile(ref, 90),
                             "max": max(ref)},
        "mean_tokens_right": sum(right) / len(right) if right else None,
        "mean_tokens_wrong": sum(wrong) / len(wrong) if wrong else None,
        "hit_cap": sum(n >= task.MAX_RESPONSE_TOKENS for n in lens),
        "exact_solutions": sum(t == p.solution for p, t in zip(probs, texts)),
        "variant": variant_name,
        "reward": sum(task.reward(p, t, variant_name) for p, t in zip(probs, texts)) / n,
        "style_shares": {st: styles.count(st) / n
                         for st in (*task.LINE_FORMATS, None) if styles.count(st)},
    }
