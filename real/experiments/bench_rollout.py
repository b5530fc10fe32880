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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from real.rollout.engine import RolloutEngine
from real.rollout.requests import PromptResult, Sampling, SpecCounters
from real.tiny import task
from workbench.contracts.policy import DrafterConfig, DrafterKind, Policy
from workbench.contracts.strategy import ScheduleBucket


@dataclass
class BenchEntry:
    """One method at one batch size (the JSON keys, in this order)."""

    tokens: int
    seconds: float
    tokens_per_s: float
    mean_accepted_length: float | None  # None for no SD
    acceptance_rate: float | None  # None for no SD
    same_as_none: bool  # the same tokens as no SD's
    speedup_vs_none: float = math.nan


@dataclass
class RolloutBench:
    """`bench_rollout`'s result; `to_json()` is the last line `tlt bench rollout` prints."""

    model: str
    drafter: str | None
    batches: list[int]
    max_tokens: int
    draft_len: int
    repeats: int
    seed: int
    # method -> batch -> entry
    results: dict[str, dict[int, BenchEntry]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "results"}
        out["results"] = {
            m: {str(b): asdict(e) for b, e in per_b.items()} for m, per_b in self.results.items()
        }
        return out


def bench_policy(method: DrafterKind, max_batch: int, draft_len: int) -> Policy:
    if method == DrafterKind.NONE:
        return Policy(name="bench-none")
    pol = Policy(
        name=f"bench-{method}-k{draft_len}",
        sd_threshold=max_batch,
        schedule=(ScheduleBucket(1, max_batch, draft_len),),
        drafter=DrafterConfig(kind=method),
    )
    pol.check()
    return pol


def bench_prompts(n: int, seed: int, max_tokens: int) -> list[str]:
    """Task problems whose reference solution is at least `max_tokens` long (so a trained model
    is still solving, in distribution, when decoding stops), then others to make up `n`."""
    pool = task.make_problems(max(200, 20 * n), seed, "flat")
    long = [p.prompt for p in pool if len(p.solution) >= max_tokens]
    if len(long) >= n:
        return long[:n]
    return (long + [p.prompt for p in pool if p.prompt not in long])[:n]


def _best_run(engine: RolloutEngine, prompts: list[str], sampling: Sampling,
              repeats: int) -> tuple[float, list[PromptResult], SpecCounters]:
    """The fastest of `repeats` runs: its seconds, outputs and spec-decode counters."""
    best, outs, counters = math.inf, [], SpecCounters()
    for _ in range(repeats):
        c0 = engine.spec_counters()
        t = time.perf_counter()
        res = engine.generate(prompts, 1, sampling)
        dt = time.perf_counter() - t
        if dt < best:
            best, outs, counters = dt, res, engine.spec_counters() - c0
    return best, outs, counters


def _bench_method(method: DrafterKind, engine: RolloutEngine, prompts: list[str],
                  report: RolloutBench, reference: dict[int, list[list[int]]],
                  log: Callable[[str], None] | None) -> None:
    greedy = Sampling(temperature=0.0, max_tokens=report.max_tokens, ignore_eos=True)
    max_b = report.batches[-1]
    # warm-up
    engine.generate(prompts[:max_b], 1, Sampling(temperature=0.0, max_tokens=16, ignore_eos=True))
    report.results[method] = {}
    for b in report.batches:
        best, outs, counters = _best_run(engine, prompts[:b], greedy, report.repeats)
        tokens = [s.token_ids for r in outs for s in r.samples]
        n_tok = sum(len(t) for t in tokens)
        if method == DrafterKind.NONE:
            reference[b] = tokens
        sd = method != DrafterKind.NONE
        entry = BenchEntry(
            tokens=n_tok,
            seconds=round(best, 4),
            tokens_per_s=round(n_tok / best, 1),
            mean_accepted_length=round(counters.mean_accepted_length, 3) if sd else None,
            acceptance_rate=round(counters.acceptance_rate, 3) if sd else None,
            same_as_none=tokens == reference.get(b),
        )
        report.results[method][b] = entry
        if log:
            extra = f", accepted length {entry.mean_accepted_length}" if sd else ""
            log(f"  batch {b}: {entry.tokens_per_s:,.0f} tok/s{extra}")


def bench_rollout(
    model: str | Path,
    drafter: str | Path | None = None,
    batches: Sequence[int] = (1, 8, 64),
    max_tokens: int = 256,
    draft_len: int = 4,
    repeats: int = 2,
    seed: int = 0,
    log: Callable[[str], None] | None = print,
) -> RolloutBench:
    sizes = sorted(set(int(b) for b in batches))
    report = RolloutBench(
        str(model), str(drafter) if drafter else None, sizes, max_tokens, draft_len, repeats, seed
    )
    max_b = sizes[-1]
    prompts = bench_prompts(max_b, seed, max_tokens)
    methods = [DrafterKind.NONE, DrafterKind.NGRAM]
    if drafter is not None:
        methods.append(DrafterKind.EAGLE)
    reference: dict[int, list[list[int]]] = {}
    for method in methods:
        t0 = time.perf_counter()
        engine = RolloutEngine(model, bench_policy(method, max_b, draft_len),
                               drafter_dir=drafter if method == DrafterKind.EAGLE else None,
                               max_num_seqs=max_b, seed=seed)
        if log:
            log(f"{method}: engine started in {time.perf_counter() - t0:.1f}s")
        try:
            _bench_method(method, engine, prompts, report, reference, log)
        finally:
            engine.close()
    for method in methods:
        for b in sizes:
            entry = report.results[method][b]
            entry.speedup_vs_none = round(
                entry.tokens_per_s / report.results["none"][b].tokens_per_s, 3
            )
    return report
