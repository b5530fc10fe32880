r"""The SD guard's plain engine, checked: what a plain engine's steps cost, and how well they are
priced.

Why the guard measures a plain engine at all (real/run/sd_pricing.py): an EAGLE engine held at K=0
is not plain decoding (the drafter's first pass still runs), so its K=0 steps, net of the drafting
the engine times (`EngineStepRow.draft_s`), would overstate what a plain engine takes. This runs
greedy batches of the task's prompts on a plain engine and on an EAGLE engine held at K=0,
alternately (`--rounds` of each, engines restarted in this process, so drifts of a shared machine
hit both), and prints per batch size the median step time of each, that estimate, and the
estimate over the plain engine's time (1.0: exact; above: the K=0 steps are slower):

    python -m real.experiments.plain_estimate --model traces/reference/model \
        --drafter traces/reference/drafter

The last line is JSON: per batch size `plain_ms`, `eagle_k0_ms`, `estimate_ms`,
`estimate_over_plain`.

`--check-guard` checks the guard's own plain engine instead: on one plain engine, per round, the
measurement a worker makes at start-up (real/run/sd_pricing.py `plain_requests`) and then a sampled
rollout of 8 prompts x 4 (cap 1024), priced at that fit (1.0: the fit prices a plain rollout at
its own time; above: the guard leans towards keeping SD). Its last line is JSON: per round
`priced_over_measured`, `fixed_ms`, `per_seq_ms`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from real.rollout.engine import RolloutEngine
from real.rollout.requests import RolloutRequest, Sampling, group_requests
from real.tiny.task import make_problems
from workbench.contracts.policy import load_policy


def step_times(
    engine: RolloutEngine, batch: int, max_tokens: int, seed: int
) -> tuple[list[float], list[float]]:
    """Wall and drafting seconds of the steps that decoded the whole batch (prefill left out)."""
    reqs = [RolloutRequest(i, 0, p.prompt, Sampling(temperature=0.0, max_tokens=max_tokens))
            for i, p in enumerate(make_problems(batch, seed=seed))]
    run = engine.run_steps(reqs)
    steps = [r for r in run.steps if r.prefill_requests == 0 and r.decode_requests == batch]
    return [r.wall_s for r in steps], [0.0 if math.isnan(r.draft_s) else r.draft_s for r in steps]


def measure(
    model: Path, drafter: Path, batches: list[int], rounds: int, max_tokens: int, seed: int
) -> dict[int, dict[str, float]]:
    walls: dict[tuple[str, int], list[float]] = {}
    estimates: dict[int, list[float]] = {}
    for r in range(rounds):
        for name in ("plain", "eagle"):
            policy, d = (
                (load_policy("baseline"), None)
                if name == "plain"
                else (load_policy("tlt-vllm"), drafter)
            )
            engine = RolloutEngine(
                model,
                policy,
                drafter_dir=d,
                adaptive=True,
                in_process=True,
                kv_cache_gib=0.5,
                seed=seed,
            )
            try:
                if engine.spec:
                    engine.set_draft_lengths([(1, engine.max_num_seqs, 0)])
                step_times(engine, 2, 16, seed)  # warm-up
                for b in batches:
                    wall, draft = step_times(engine, b, max_tokens, seed)
                    walls.setdefault((name, b), []).append(statistics.median(wall))
                    if name == "eagle":
                        estimates.setdefault(b, []).append(
                            statistics.median(w - d for w, d in zip(wall, draft))
                        )
            finally:
                engine.close()
            print(f"round {r + 1}/{rounds}: {name} measured", flush=True)
    out = {}
    for b in batches:
        plain, eagle, est = (
            statistics.median(walls[("plain", b)]),
            statistics.median(walls[("eagle", b)]),
            statistics.median(estimates[b]),
        )
        out[b] = {"plain_ms": round(plain * 1e3, 3), "eagle_k0_ms": round(eagle * 1e3, 3),
                  "estimate_ms": round(est * 1e3, 3), "estimate_over_plain": round(est / plain, 3)}
    return out


def check_guard(model: Path, rounds: int, seed: int) -> list[dict[str, float]]:
    from dataclasses import replace

    from real.run.sd_pricing import PLAIN_BATCH, plain_cost, plain_requests, sd_verdict

    engine = RolloutEngine(
        model, load_policy("baseline"), in_process=True, kv_cache_gib=0.5, seed=seed
    )
    out = []
    try:
        step_times(engine, 2, 16, seed)  # warm-up
        for r in range(rounds):
            cal = engine.run_steps(plain_requests(PLAIN_BATCH, seed + r))
            cost = plain_cost([replace(s, draft_s=0.0) for s in cal.steps])
            reqs = group_requests([p.prompt for p in make_problems(8, seed=1000 + seed + r)], 4,
                                  Sampling(temperature=1.0, max_tokens=1024, seed=seed + r))
            v = sd_verdict(engine.run_steps(reqs).steps, cost)
            out.append(
                {
                    "priced_over_measured": round(v.speedup, 3),
                    "fixed_ms": round(cost.fixed_s * 1e3, 3),
                    "per_seq_ms": round(cost.per_seq_s * 1e3, 4),
                }
            )
            print(
                f"round {r + 1}/{rounds}: a plain rollout priced at {v.speedup:.3f}x its measured "
                f"time (fit {cost.fixed_s * 1e3:.2f} ms + {cost.per_seq_s * 1e3:.3f} ms per "
                "sequence)",
                flush=True,
            )
    finally:
        engine.close()
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        prog="python -m real.experiments.plain_estimate", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument(
        "--drafter", type=Path, help="the EAGLE drafter (not needed with --check-guard)"
    )
    ap.add_argument(
        "--check-guard",
        action="store_true",
        help="check the SD guard's plain engine measurement instead",
    )
    ap.add_argument("--batches", default="1,4,16,48", help="batch sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        batches = [int(x) for x in a.batches.split(",")]
    except ValueError:
        ap.error(f"--batches {a.batches!r}: give batch sizes separated by commas, e.g. 1,4,16")
    if a.rounds < 1 or any(b < 1 for b in batches):
        ap.error("--rounds and every batch size must be >= 1")
    if a.check_guard:
        checks = check_guard(a.model, a.rounds, a.seed)
        print(json.dumps(checks))
        return {"check_guard": checks}
    if a.drafter is None:
        ap.error("--drafter DIR is needed (the EAGLE drafter of --model), unless --check-guard")
    res = measure(a.model, a.drafter, batches, a.rounds, a.max_tokens, a.seed)
    for b, r in res.items():
        print(
            f"batch {b:3d}: plain {r['plain_ms']:.2f} ms, EAGLE at K=0 {r['eagle_k0_ms']:.2f} ms, "
            f"estimate {r['estimate_ms']:.2f} ms ({r['estimate_over_plain']:.2f}x the plain "
            "engine's)"
        )
    print(json.dumps({str(b): r for b, r in res.items()}))
    return res


if __name__ == "__main__":
    main()
