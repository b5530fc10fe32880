"""`tlt bench grpo`: one GRPO step on a long-tailed batch, packed vs padded, timed in one run.

The batch is real: the model's own responses (vLLM, temperature 1) to `prompts` task problems,
`samples` each, capped at `max_tokens`, scored by the task's reward: the step `tlt train` would
update on, with the tail the model really has (the reference model's responses run from ~20
tokens to the 1024 cap). Two GRPOTrainers start from the model with the same seed and config
(`tlt train`'s: minibatches of 16, one epoch), one packed (real/packing.py), one padded (one
right-padded forward per minibatch, the reference path). Their steps alternate, the first
of each pair swapped every repeat (packed, padded, padded, packed, ...), after one untimed step
each, so the machine's drifts hit both alike; a step's cost does not depend on its weights.

tokens/s: the batch's real tokens (prompts and responses, no padding) per second of
`GRPOTrainer.step` (the no-grad pass for old log-probs and hidden states, then the updates),
median over the repeats. Before any timing, the first minibatch's loss and gradients of the two
paths are compared (the largest differences are reported: float rounding, not a change of the
optimisation).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from real.tiny import task
from real.tiny.model import variant_of
from workbench.contracts.seeds import Stream, derive_seed


@dataclass
class GrpoBench:
    model: str
    prompts: int
    samples: int
    max_tokens: int
    seed: int
    threads: int
    minibatch: int = 16
    sequences: int = 0
    tokens: int = 0  # real tokens of the batch, prompts included
    response_tokens: list[int] = field(default_factory=list)
    padded_tokens: int = 0  # what one padded pass over the batch computes, padding included
    # |packed - padded| loss of the first minibatch, before any update
    loss_diff: float = float("nan")
    grad_diff: float = float("nan")  # the largest |packed - padded| gradient entry there
    packed_s: list[float] = field(default_factory=list)
    padded_s: list[float] = field(default_factory=list)
    device: str = "cpu"  # where the update ran: cpu (float32) or cuda (bf16 autocast)

    def tokens_per_s(self, times: list[float]) -> float:
        return self.tokens / statistics.median(times)

    def summary(self) -> dict[str, float]:
        """The last line of `tlt bench grpo`."""
        packed, padded = self.tokens_per_s(self.packed_s), self.tokens_per_s(self.padded_s)
        return {"packed_tokens_per_s": round(packed, 1), "padded_tokens_per_s": round(padded, 1),
                "speedup": round(packed / padded, 3)}


def _responses(model: Path, prompts: int, samples: int, max_tokens: int, seed: int) -> list[Any]:
    """The model's sampled responses to the task's problems, scored, as GRPO's input."""
    from real.grpo import ScoredResponse
    from real.rollout.engine import RolloutEngine
    from real.rollout.requests import Sampling

    problems = task.make_problems(prompts, derive_seed(seed, Stream.PROMPTS, 0))
    sampling = Sampling(
        temperature=1.0, max_tokens=max_tokens, seed=derive_seed(seed, Stream.SAMPLING, 0)
    )
    with RolloutEngine(
        model,
        in_process=True,
        max_num_seqs=64,
        seed=derive_seed(seed, Stream.ENGINE, 0),
        kv_cache_gib=0.5,
    ) as engine:
        results = engine.generate([p.prompt for p in problems], samples, sampling)
    variant = variant_of(model)
    return [
        ScoredResponse(
            list(r.prompt_token_ids), list(s.token_ids), float(task.reward(p, s.text, variant)), i
        )
        for i, (p, r) in enumerate(zip(problems, results))
        for s in r.samples
    ]


def _padded_tokens(batch: list[Any], minibatch: int) -> int:
    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in batch]
    chunks = [lengths[i: i + minibatch] for i in range(0, len(lengths), minibatch)]
    return sum(len(c) * max(c) for c in chunks)


def bench_grpo(
    model: str | Path,
    prompts: int = 16,
    samples: int = 4,
    max_tokens: int = 1024,
    repeats: int = 3,
    seed: int = 0,
    log: Callable[[str], None] | None = print,
    device: str = "cpu",
) -> GrpoBench:
    from real.grpo import GRPOConfig, GRPOTrainer
    from real.torch_utils import train_device

    train_device(device)  # refused before any engine starts
    say = log or (lambda m: None)
    threads = os.cpu_count() or 1
    report = GrpoBench(str(model), prompts, samples, max_tokens, seed, threads, device=device)
    say(f"sampling {prompts} x {samples} responses of {model} (temperature 1, cap {max_tokens})")
    batch = _responses(Path(model), prompts, samples, max_tokens, seed)
    report.sequences = len(batch)
    report.response_tokens = [len(r.response_ids) for r in batch]
    report.tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in batch)
    report.minibatch = min(16, len(batch))
    report.padded_tokens = _padded_tokens(batch, report.minibatch)
    trainers = {
        pack: GRPOTrainer(
            model,
            GRPOConfig(lr=2e-5, minibatch=report.minibatch, pack=pack),
            seed=derive_seed(seed, Stream.GRPO),
            threads=threads,
            device=device,
        )
        for pack in (True, False)
    }
    (loss_p, grads_p), (loss_q, grads_q) = (trainers[p].gradients(batch) for p in (True, False))
    report.loss_diff = abs(loss_p - loss_q)
    report.grad_diff = max(float((grads_p[k] - grads_q[k]).abs().max()) for k in grads_p)
    say(f"first minibatch, before any update: loss {loss_p:.6f} packed vs {loss_q:.6f} padded; "
        f"largest gradient difference {report.grad_diff:.2e}")
    for pack in (True, False):  # untimed: first-call costs (allocator, thread pool)
        trainers[pack].step(batch, keep_hidden=True)
    for r in range(repeats):
        for pack in ((True, False) if r % 2 == 0 else (False, True)):
            t = time.perf_counter()
            trainers[pack].step(batch, keep_hidden=True)
            (report.packed_s if pack else report.padded_s).append(time.perf_counter() - t)
        say(
            f"  repeat {r + 1}/{repeats}: packed {report.packed_s[-1]:.2f} s, padded "
            f"{report.padded_s[-1]:.2f} s"
        )
    return report
