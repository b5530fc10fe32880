"""Whether the SD guard's probe predicts the first RL step: its verdict against that step's.

A fresh guarded run (real/run/coordinator.py `probe_sd`) decides before step 0 whether SD pays
on this model, from a probe rollout (real/run/sd_pricing.py `probe_requests`) priced at each
worker's plain engine. Each round here starts one rollout worker as a run starts it
(real/run/worker.py: plain engine measured, then the SD engine with a fresh bandit), decodes the
probe, then a rollout shaped like a worker's share of an RL step (`--prompts` / `--workers`
problems x `--samples`, sampled, cap `--max-tokens`), and prices both at the worker's plain
engine, as the guard does. A probe that predicts well reads on the same side of 1 as the step
(it decodes with the bandit's first draws and fewer, shallower steps, so it misses by ~0.1-0.2x):

    python -m real.experiments.check_probe --model traces/reference/styles/model --rounds 3

The drafter defaults to the one shipped beside a shipped model. The last line is JSON: per round
`probe`, `step` (SD's speed over a plain engine's) and their engine steps. The worker starts at
the policy's own draft lengths, not at a profile's prediction as `tlt bench real` starts it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from real.rollout.requests import RolloutRequest, Sampling, group_requests
from real.run.config import default_drafter
from real.run.engine_plan import EnginePlan
from real.run.sd_pricing import plain_cost, probe_requests, sd_verdict
from real.run.worker import RolloutWorker
from real.tiny.model import variant_of
from real.tiny.task import make_problems
from workbench.contracts.policy import DrafterKind, load_policy
from workbench.contracts.seeds import Stream, derive_seed


def step_requests(
    groups: int, samples: int, max_tokens: int, seed: int, variant: str
) -> list[RolloutRequest]:
    """A worker's share of an RL step: `groups` problems x `samples`, sampled at temperature 1."""
    sampling = Sampling(
        temperature=1.0, max_tokens=max_tokens, seed=derive_seed(seed, Stream.SAMPLING, 0)
    )
    problems = make_problems(
        groups, seed=derive_seed(seed, Stream.PROMPTS, 0), variant_name=variant
    )
    return group_requests([p.prompt for p in problems], samples, sampling)


def check_round(
    model: Path,
    drafter: Path | None,
    policy: str,
    groups: int,
    samples: int,
    max_tokens: int,
    seed: int,
    threads: int,
) -> dict[str, float]:
    pol = load_policy(policy)
    variant = variant_of(model)
    plan = EnginePlan(pol, pol.drafter.kind)
    worker = RolloutWorker(0, str(model), plan, str(drafter) if drafter else None, seed,
                           threads=threads)
    try:
        worker.start()
        cost = plain_cost(worker.plain_rows)
        if cost is None:
            raise RuntimeError("the plain engine's measurement gave too few steps to fit a cost")
        n = min(worker.engine.max_num_seqs, groups * samples)
        probe = sd_verdict(
            worker.probe(
                probe_requests(
                    n, derive_seed(seed, Stream.PROBE, 0), 1.0, max_tokens, "default", variant
                )
            ),
            cost,
        )
        step = sd_verdict(
            worker.rollout(step_requests(groups, samples, max_tokens, seed, variant), 0, 0.0).steps,
            cost,
        )
    finally:
        worker.close()
    return {"probe": round(probe.speedup, 3), "step": round(step.speedup, 3),
            "probe_steps": probe.steps, "step_steps": step.steps}


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser(
        prog="python -m real.experiments.check_probe", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument(
        "--drafter",
        type=Path,
        help="EAGLE drafter (default: the one shipped beside a shipped model)",
    )
    ap.add_argument("--policy", default="tlt-vllm", help="a guarded policy (adaptive SD)")
    ap.add_argument(
        "--prompts", type=int, default=16, help="prompts per RL step, as `tlt train --prompts`"
    )
    ap.add_argument(
        "--workers", type=int, default=2, help="the run's workers: this checks one worker's share"
    )
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the worker's torch threads (a run gives each its share)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if min(a.prompts, a.workers, a.samples, a.max_tokens, a.threads, a.rounds) < 1 or a.seed < 0:
        ap.error(
            "--prompts, --workers, --samples, --max-tokens, --threads and --rounds must be >= 1, "
            "--seed >= 0"
        )
    if not (a.model / "config.json").is_file():
        ap.error(f"--model {a.model}: no config.json (give a Hugging Face model directory)")
    pol = load_policy(a.policy)
    drafter = default_drafter(a.model, pol, a.drafter)
    if pol.drafter.kind == DrafterKind.EAGLE and drafter is None:
        ap.error(
            f"--policy {a.policy} runs EAGLE: give --drafter DIR (a `tlt drafter train` checkpoint)"
        )
    groups = math.ceil(a.prompts / a.workers)
    out = []
    for r in range(a.rounds):
        res = check_round(
            a.model, drafter, a.policy, groups, a.samples, a.max_tokens, a.seed + r, a.threads
        )
        out.append(res)
        print(
            f"round {r + 1}/{a.rounds}: probe {res['probe']:.2f}x ({res['probe_steps']} engine "
            f"steps), step {res['step']:.2f}x ({res['step_steps']} engine steps) SD over a plain "
            "engine",
            flush=True,
        )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
