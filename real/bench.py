"""`tlt bench rollout`: decode throughput with no SD, n-gram and EAGLE at a few batch sizes.

For each method one engine starts (never two at once) with a static draft length K at every
batch size; then, per batch size B, the same B task prompts are decoded greedily to exactly
`max_tokens` tokens each (`ignore_eos`, so every sequence stays in the batch to the end), best of
`repeats` timed runs after a warm-up. The prompts are problems (difficulty mix `flat`) whose
reference solution is at least `max_tokens` characters long, so a trained model is still
solving when decoding stops (text after an ignored end of sequence is out of distribution for
a drafter). Tokens per second = B * max_tokens / wall time. The
outputs of every method are compared token for token with no SD's (greedy SD is lossless).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from workbench.contracts.policy import DrafterConfig, Policy, ScheduleBucket


def bench_policy(method: str, max_batch: int, draft_len: int) -> Policy:
    if method == "none":
        return Policy(name="bench-none")
    pol = Policy(name=f"bench-{method}-k{draft_len}", sd_threshold=max_batch,
                 schedule=(ScheduleBucket(1, max_batch, draft_len),), drafter=DrafterConfig(kind=method))
    pol.check()
    return pol


def _prompts(model: str | Path, n: int, seed: int, max_tokens: int) -> list[Any]:
    """Task problems whose reference solution is at least `max_tokens` long (so a trained model
    is still solving, in distribution, when decoding stops), else random-token prompts."""
    try:
        from real import task
    except ImportError:
        task = None
    if task is not None and hasattr(task, "make_problems"):
        pool = task.make_problems(max(200, 20 * n), seed, "flat")
        long = [p.prompt for p in pool if len(p.solution) >= max_tokens]
        if len(long) >= n:
            return long[:n]
        return (long + [p.prompt for p in pool if p.prompt not in long])[:n]
    from real.eagle import generic_prompts

    return generic_prompts(model, n, seed)


def bench_rollout(model: str | Path, drafter: str | Path | None = None, batches: Sequence[int] = (1, 8, 64),
                  max_tokens: int = 256, draft_len: int = 4, repeats: int = 2, seed: int = 0,
                  log: Callable[[str], None] | None = print) -> dict[str, Any]:
    from real.engine import RolloutEngine, Sampling

    batches = sorted(set(int(b) for b in batches))
    max_b = batches[-1]
    prompts = _prompts(model, max_b, seed, max_tokens)
    methods = ["none", "ngram"] + (["eagle"] if drafter is not None else [])
    greedy = Sampling(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    results: dict[str, dict[int, dict[str, Any]]] = {}
    reference: dict[int, list[list[int]]] = {}
    for method in methods:
        pol = bench_policy(method, max_b, draft_len)
        t0 = time.perf_counter()
        engine = RolloutEngine(model, pol, drafter_dir=drafter if method == "eagle" else None,
                               max_num_seqs=max_b, seed=seed)
        if log:
            log(f"{method}: engine started in {time.perf_counter() - t0:.1f}s")
        try:
            engine.generate(prompts[:max_b], 1, Sampling(temperature=0.0, max_tokens=16, ignore_eos=True))  # warm-up
            results[method] = {}
            for b in batches:
                best, outs, counters = math.inf, None, None
                for _ in range(repeats):
                    c0 = engine.spec_counters()
                    t = time.perf_counter()
                    res = engine.generate(prompts[:b], 1, greedy)
                    dt = time.perf_counter() - t
                    if dt < best:
                        best, outs, counters = dt, res, engine.spec_counters() - c0
                tokens = [s.token_ids for r in outs for s in r.samples]
                n_tok = sum(len(t) for t in tokens)
                if method == "none":
                    reference[b] = tokens
                entry = {"tokens": n_tok, "seconds": round(best, 4), "tokens_per_s": round(n_tok / best, 1),
                         "mean_accepted_length": None if method == "none" else round(counters.mean_accepted_length, 3),
                         "acceptance_rate": None if method == "none" else round(counters.acceptance_rate, 3),
                         "same_as_none": tokens == reference.get(b)}
                results[method][b] = entry
                if log:
                    extra = "" if method == "none" else f", accepted length {entry['mean_accepted_length']}"
                    log(f"  batch {b}: {entry['tokens_per_s']:,.0f} tok/s{extra}")
        finally:
            engine.close()
    for method in methods:
        for b in batches:
            base = results["none"][b]["tokens_per_s"]
            results[method][b]["speedup_vs_none"] = round(results[method][b]["tokens_per_s"] / base, 3)
    return {"model": str(model), "drafter": str(drafter) if drafter else None, "batches": batches,
            "max_tokens": max_tokens, "draft_len": draft_len, "repeats": repeats, "seed": seed,
            "results": {m: {str(b): v for b, v in r.items()} for m, r in results.items()}}
