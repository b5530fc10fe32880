"""Drafter drift: a static drafter's acceptance falls as the policy moves; a spot-trained one holds.

`drift_experiment` runs a small GRPO loop on the real components, without vLLM: each RL step
samples `samples` responses for each of `prompts` task prompts from the current policy with
`transformers` (temperature 1, seeded, KV cache), scores them with `real.tiny.task.reward` and
takes one GRPO step (real/grpo.py). Two EAGLE drafters follow the policy, both started from the
same saved drafter (`drafter_dir`, trained on the initial policy):

- static: never trained. After each update it shares the new policy's embedding and LM head
  (`SpotTrainer.set_target`), as vLLM's drafter shares the reloaded target's.
- spot: the same, and then `spot_steps` drafter steps (`SpotTrainer.train_until`) on the hidden
  states of the new policy's responses (the rollout of the next RL step) plus those of the
  step before (a `DrafterBuffer` of `spot_buffer` steps): what TLT's idle rollout workers train
  it on.

At the start and after updates both are measured with `SpotTrainer.estimate_accept_len` (chain
drafts of `k` tokens, greedy verification) on held-out records: greedy responses (by default) of
the policy of that moment to fixed test-split prompts, which neither drafter trained on.

    python -m real.experiments.drift --updates 20    # a table per update; last line JSON

prints a table and, last, {"static_accept_len", "spot_accept_len", "ratio"} after the last update.
Deterministic for a seed on one machine and torch build (fixed threads, deterministic algorithms);
every random choice draws from the seed's streams (`workbench.contracts.seeds`: the problems and
sampling of each RL step, the held-out problems and their sampling, GRPO, the spot trainer).

The default GRPO learning rate (1e-3) moves the policy far within a few updates, by degrading it
(its reward falls towards 0); gentler rates keep the policy working but move the drafters less.
Figures: docs/results.md, "Drafter staleness".
"""

from __future__ import annotations

import argparse
import copy
import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from transformers import AutoTokenizer

from real.drafter.spot import DrafterBuffer, SpotTrainer
from real.grpo import GRPOConfig, GRPOTrainer, ScoredResponse
from real.tiny import task
from real.tiny.generation import generate_responses
from real.tiny.model import variant_of
from real.torch_utils import torch_settings
from workbench.contracts.seeds import Stream, derive_seed

REFERENCE = Path(__file__).resolve().parents[2] / "traces" / "reference"


@dataclass(frozen=True)
class DriftConfig:
    """The experiment's settings (`drift_experiment`'s arguments; its result's "config")."""

    model: str
    drafter: str
    updates: int = 20
    prompts: int = 8
    samples: int = 4
    max_tokens: int = 200
    lr: float = 1e-3
    spot_steps: int = 40
    seed: int = 0
    k: int = 4
    eval_prompts: int = 16
    eval_samples: int = 1
    eval_temperature: float = 0.0
    max_starts: int = 16
    spot_lr: float = 1e-3
    spot_buffer: int = 2
    minibatch: int = 16
    measure_every: int = 1
    mix: str = "default"
    threads: int = 1


class _DriftLoop:
    """The policy being trained, the two drafters following it, and the held-out problems."""

    def __init__(self, cfg: DriftConfig, log: Callable[[str], None] | None):
        self.cfg, self.log = cfg, log
        self.variant = variant_of(cfg.model)
        self.tok = AutoTokenizer.from_pretrained(cfg.model)
        self.grpo = GRPOTrainer(cfg.model, GRPOConfig(lr=cfg.lr, minibatch=cfg.minibatch),
                                seed=derive_seed(cfg.seed, Stream.GRPO))
        self.policy = self.grpo.model
        spot_seed = derive_seed(cfg.seed, Stream.SPOT, 0)
        self.static = SpotTrainer(copy.deepcopy(self.policy), cfg.drafter, seed=spot_seed)
        self.spot = SpotTrainer(
            copy.deepcopy(self.policy), cfg.drafter, lr=cfg.spot_lr, seed=spot_seed
        )
        self.held_out = task.make_problems(
            cfg.eval_prompts,
            seed=derive_seed(cfg.seed, Stream.EVAL_PROMPTS),
            mix=cfg.mix,
            split="test",
        )
        self.buffer = DrafterBuffer(cfg.spot_buffer)

    def sample(self, problems: list[task.Problem], n: int, sample_seed: int,
               temperature: float = 1.0) -> tuple[list[list[int]], list[ScoredResponse]]:
        """n responses per problem from the current policy: the sequences and the scored
        responses."""
        texts = [p.prompt for p in problems for _ in range(n)]
        responses = generate_responses(
            self.policy,
            self.tok,
            texts,
            self.cfg.max_tokens,
            batch_size=len(texts),
            temperature=temperature,
            seed=sample_seed,
            keep_eos=True,
        )
        scored = []
        for i, (text, resp) in enumerate(zip(texts, responses)):
            answer = self.tok.decode(resp, skip_special_tokens=True)
            prompt_ids = self.tok(text, add_special_tokens=False)["input_ids"]
            scored.append(
                ScoredResponse(
                    prompt_ids,
                    resp,
                    task.reward(problems[i // n], answer, self.variant),
                    group=i // n,
                )
            )
        return [r.prompt_ids + r.response_ids for r in scored], scored

    def rollout(self, step: int) -> tuple[list[list[int]], list[ScoredResponse]]:
        cfg = self.cfg
        problems = task.make_problems(
            cfg.prompts,
            seed=derive_seed(cfg.seed, Stream.PROMPTS, step),
            mix=cfg.mix,
            split="train",
        )
        return self.sample(problems, cfg.samples, derive_seed(cfg.seed, Stream.SAMPLING, step))

    def row(
        self, update: int, batch: list[ScoredResponse], spot_loss: float, t0: float
    ) -> dict[str, Any]:
        cfg = self.cfg
        r = dict(
            update=update,
            reward=sum(b.reward for b in batch) / len(batch),
            static_accept_len=None,
            spot_accept_len=None,
            spot_loss=spot_loss,
        )
        if update % cfg.measure_every == 0 or update == cfg.updates:
            # The same prompts and sampling seed at every measurement: only the policy moves.
            seqs, _ = self.sample(
                self.held_out,
                cfg.eval_samples,
                derive_seed(cfg.seed, Stream.EVAL_SAMPLING),
                cfg.eval_temperature,
            )
            records = self.static.hidden_records(seqs)
            r["static_accept_len"] = self.static.estimate_accept_len(records, cfg.k, cfg.max_starts)
            r["spot_accept_len"] = self.spot.estimate_accept_len(records, cfg.k, cfg.max_starts)
        r["seconds"] = time.perf_counter() - t0
        if self.log:
            lens = "  ".join(f"{x:10.3f}" if x is not None else f"{'-':>10}"
                             for x in (r["static_accept_len"], r["spot_accept_len"]))
            self.log(
                f"{update:>6}  {r['reward']:6.3f}  {lens}  {spot_loss:9.4f}  {r['seconds']:6.1f}s"
            )
        return r

    def run(self) -> list[dict[str, Any]]:
        """Row 0 (the start), then one row per update."""
        if self.log:
            self.log(
                f"{'update':>6}  {'reward':>6}  {'static_len':>10}  {'spot_len':>10}  "
                f"{'spot_loss':>9}  {'time':>7}"
            )
        never = threading.Event()
        t0 = time.perf_counter()
        _, batch = self.rollout(0)
        rows = [self.row(0, batch, float("nan"), t0)]
        for u in range(1, self.cfg.updates + 1):
            t0 = time.perf_counter()
            self.grpo.step(batch, keep_hidden=False)
            target = copy.deepcopy(self.policy)  # frozen by set_target; the policy goes on training
            self.static.set_target(target)
            self.spot.set_target(target)
            seqs, batch = self.rollout(u)  # the next RL step's rollout, from the updated policy
            self.buffer.add(u, self.spot.hidden_records(seqs))
            res = self.spot.train_until(never, self.buffer.records(), max_steps=self.cfg.spot_steps)
            rows.append(self.row(u, batch, res.loss, t0))
        return rows


def drift_experiment(
    model_dir: str | Path = REFERENCE / "model",
    drafter_dir: str | Path = REFERENCE / "drafter",
    updates: int = 20,
    prompts: int = 8,
    samples: int = 4,
    max_tokens: int = 200,
    lr: float = 1e-3,
    spot_steps: int = 40,
    seed: int = 0,
    log: Callable[[str], None] | None = print,
    **options: Any,
) -> dict:
    """Run the loop; returns {"config", "updates": [one row per update, row 0 the start: update,
    reward, static_accept_len, spot_accept_len, spot_loss, seconds], "initial_accept_len",
    "static_accept_len", "spot_accept_len" (after the last update), "ratio" (spot / static),
    "seconds"}. `reward` is the mean reward of the rollout sampled from that update's policy.

    `options` are DriftConfig's other fields. The accepted lengths are measured at the start,
    every `measure_every` updates and after the last (None in the rows between). The held-out
    records are `eval_samples` responses to each of `eval_prompts` test-split prompts at
    `eval_temperature` (0: greedy, where the estimate is exact; sampled records give a lower
    bound). `minibatch`: responses per GRPO optimiser step. `log` (None: silent) gets one line
    per update."""
    cfg = DriftConfig(
        model=str(model_dir),
        drafter=str(drafter_dir),
        updates=updates,
        prompts=prompts,
        samples=samples,
        max_tokens=max_tokens,
        lr=lr,
        spot_steps=spot_steps,
        seed=seed,
        **options,
    )
    if updates < 1 or prompts < 1 or samples < 2 or spot_steps < 0 or cfg.measure_every < 1:
        raise ValueError(
            "need updates >= 1, prompts >= 1, samples >= 2 (a GRPO group), spot_steps >= 0, "
            f"measure_every >= 1; got {updates}, {prompts}, {samples}, {spot_steps}, "
            f"{cfg.measure_every}"
        )
    t_start = time.perf_counter()
    with torch_settings(cfg.threads):
        rows = _DriftLoop(cfg, log).run()
    last = rows[-1]
    return dict(
        config=asdict(cfg),
        updates=rows,
        initial_accept_len=rows[0]["static_accept_len"],
        static_accept_len=last["static_accept_len"],
        spot_accept_len=last["spot_accept_len"],
        ratio=last["spot_accept_len"] / last["static_accept_len"],
        seconds=time.perf_counter() - t_start,
    )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        prog="python -m real.experiments.drift", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--model", default=str(REFERENCE / "model"), help="the initial policy (HF model directory)"
    )
    ap.add_argument(
        "--drafter",
        default=str(REFERENCE / "drafter"),
        help="EAGLE drafter trained on the initial policy",
    )
    ap.add_argument("--updates", type=int, default=20, help="GRPO updates")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per RL step")
    ap.add_argument("--samples", type=int, default=4, help="responses per prompt (GRPO group size)")
    ap.add_argument("--max-tokens", type=int, default=200, help="response cap")
    ap.add_argument("--lr", type=float, default=1e-3, help="GRPO learning rate")
    ap.add_argument(
        "--spot-steps", type=int, default=40, help="spot drafter steps after each update"
    )
    ap.add_argument("--spot-lr", type=float, default=1e-3, help="spot drafter learning rate")
    ap.add_argument("--k", type=int, default=4, help="draft length of the accepted-length estimate")
    ap.add_argument(
        "--measure-every",
        type=int,
        default=1,
        help="measure the drafters every N updates (and the last)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args(argv)
    out = drift_experiment(
        args.model,
        args.drafter,
        args.updates,
        args.prompts,
        args.samples,
        args.max_tokens,
        args.lr,
        args.spot_steps,
        args.seed,
        print,
        k=args.k,
        spot_lr=args.spot_lr,
        measure_every=args.measure_every,
        threads=args.threads,
    )
    print(f"start {out['initial_accept_len']:.3f}; {out['seconds']:.0f}s")
    print(
        json.dumps(
            {key: round(out[key], 4) for key in ("static_accept_len", "spot_accept_len", "ratio")}
        )
    )
    return out


if __name__ == "__main__":
    main()
