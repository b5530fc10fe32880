"""The real backend's commands: `tlt model init`, `capture`, `bench rollout` and `bench grpo`
(`tlt train` and `bench real`: workbench/cli/train.py; `tlt drafter`: workbench/cli/drafter.py).
The backend's modules imported here load torch, vLLM and Ray only when they run."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional

import typer

from real.experiments.bench_grpo import bench_grpo as run_bench_grpo
from real.experiments.bench_rollout import bench_rollout as run_bench_rollout
from real.rollout.spec_config import EngineConfigError
from real.run.capture import CaptureError, check_inputs
from real.run.capture import capture as run_capture
from real.tiny import task
from real.tiny.model import DEFAULT_STEPS, init_model
from workbench.cli.apps import app, bench_app, model_app
from workbench.cli.common import fail
from workbench.cli.task import REWARD_HELP, TASK_HELP, task_option
from workbench.contracts.policy import load_policy
from workbench.contracts.schema import ConfigError
from workbench.report.tables import format_table


@model_app.command("init")
def model_init(
    out: Path = typer.Option(
        ...,
        help="Directory to write the model to (Hugging Face format: config.json, "
        "model.safetensors, tokenizer files, training.json).",
    ),
    seed: int = typer.Option(
        0, help="Seed of the initial weights and of the training problems; same seed, same weights."
    ),
    steps: Optional[int] = typer.Option(
        None, min=1, help="SFT optimiser steps (default: real.tiny.model.DEFAULT_STEPS)."
    ),
    mix: str = typer.Option(
        "default", help="Difficulty mix of the training problems (real/tiny/task.py: default, "
                        "easy, hard, flat)."
    ),
    evaluate: bool = typer.Option(
        True, "--eval/--no-eval",
        help="Evaluate greedy answers on held-out problems after training."
    ),
    threads: int = typer.Option(
        2, min=1, help="CPU threads for training (the weights depend on it: same seed and "
                       "threads, same bytes)."
    ),
    variant: str = typer.Option(
        "gcd",
        help="Task variant (real/tiny/task.py): gcd, or gcd-styles (two solution styles, "
        "the reward prefers one: RL then changes what the model writes).",
    ),
) -> None:
    """Build a small Qwen2 and a character tokenizer, train it (SFT) on the GCD task, save it."""
    if mix not in task.MIXES:
        fail(ValueError(f"--mix {mix!r}: allowed: {', '.join(task.MIXES)}"))
    if variant not in task.VARIANTS:
        fail(ValueError(f"--variant {variant!r}: allowed: {', '.join(task.VARIANTS)}"))
    info = init_model(out, seed=seed, steps=steps or DEFAULT_STEPS, mix=mix,
                      evaluate_after=evaluate, threads=threads,
                      log=lambda m: typer.echo(m, err=True), variant_name=variant)
    typer.echo(f"wrote {out} (SFT {info['train_seconds']:.0f}s, "
               f"final loss {info['final_loss']:.4f})")
    if "eval" in info:
        e = info["eval"]
        styled = ""
        if variant != "gcd":
            styled = f"; reward {e['reward']:.2f}, styles {e['style_shares']}"
        typer.echo(f"greedy on {e['problems']} held-out problems: accuracy {e['accuracy']:.2f}; "
                   f"response tokens p50 {e['response_tokens']['p50']:.0f} "
                   f"p90 {e['response_tokens']['p90']:.0f} max {e['response_tokens']['max']}"
                   + styled)


# ------------------------------------------------ real backend: capture, drafter, bench rollout


@app.command()
def capture(
    model: Path = typer.Option(..., help="Target model directory (Hugging Face format, e.g. "
                                         "from `tlt model init`)."),
    policy: str = typer.Option(
        ..., help="Policy preset name or YAML/JSON file: its drafter kind and schedule set "
                  "speculative decoding."
    ),
    drafter: Optional[Path] = typer.Option(
        None, help="EAGLE drafter checkpoint directory (`tlt drafter train`); required by an "
                   "eagle policy."
    ),
    prompts: int = typer.Option(8, min=1, help="Problems drawn from real.tiny.task (or --task)."),
    samples: int = typer.Option(4, min=1, help="Responses per problem (the group size)."),
    max_tokens: int = typer.Option(512, min=1, help="Response cap in tokens."),
    seed: int = typer.Option(0, help="Seed of the problems and of sampling."),
    mix: str = typer.Option("default", help="Difficulty mix of the problems (real/tiny/task.py)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Sampling temperature (0: greedy)."),
    max_num_seqs: int = typer.Option(
        64, min=1, help="vLLM's max_num_seqs: the most requests decoded at once."),
    out: Path = typer.Option(..., help="Trace directory to write (schema: traces/README.md)."),
    task: Optional[Path] = typer.Option(None, help=TASK_HELP),
    reward: Optional[str] = typer.Option(None, help=REWARD_HELP + " Default with --task: exact."),
) -> None:
    """Run one rollout on vLLM step by step and record it as a trace."""
    user_task = task_option(task, reward)
    try:
        pol = load_policy(policy)
    except ConfigError as exc:
        fail(exc)
    try:
        check_inputs(model, pol, drafter, prompts, samples, max_tokens, mix, 2048)
    except (CaptureError, EngineConfigError) as exc:
        fail(exc)
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        fail(RuntimeError(f"capture needs vLLM ({exc}); install the project with its 'cpu' or "
                          "'gpu' extra"))
    trace = run_capture(model, pol, drafter, prompts=prompts, samples=samples,
                        max_tokens=max_tokens, seed=seed, mix=mix, temperature=temperature,
                        max_num_seqs=max_num_seqs, out=out,
                        log=lambda m: typer.echo(m, err=True), task_file=user_task)
    s = trace.meta["summary"]
    rows = [
        [
            pol.name,
            str(s["engine_steps"]),
            str(s["requests"]),
            str(s["response_tokens"]),
            f"{s['rollout_s']:.2f}",
            f"{s['tokens_per_s']:,.0f}",
            "-" if s["mean_accepted_length"] is None else f"{s['mean_accepted_length']:.2f}",
            f"{s['clip_ratio']:.2f}",
            "-" if s["mean_reward"] is None else f"{s['mean_reward']:.2f}",
        ]
    ]
    header = ["policy", "steps", "requests", "tokens", "rollout s", "tok/s", "accept len",
              "clipped", "reward"]
    typer.echo(format_table(rows, header))
    typer.echo(f"wrote {out}")


@bench_app.command("rollout")
def bench_rollout(
    model: Path = typer.Option(..., help="Target model directory."),
    drafter: Optional[Path] = typer.Option(
        None, help="EAGLE drafter directory; without it the eagle rows are left out."
    ),
    batches: str = typer.Option("1,8,64", help="Comma-separated batch sizes."),
    max_tokens: int = typer.Option(256, min=1,
                                   help="Tokens decoded per sequence (greedy, ignore_eos)."),
    draft_len: int = typer.Option(4, min=1, max=16, help="Draft length K of n-gram and EAGLE at "
                                                         "every batch size."),
    repeats: int = typer.Option(2, min=1, help="Timed runs per batch size; the best is kept."),
    seed: int = typer.Option(0, help="Seed of the prompts."),
) -> None:
    """Decode throughput with no SD, n-gram and EAGLE at several batch sizes.

    Greedy decoding, the same prompts for each."""
    try:
        sizes = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        fail(ValueError(f"--batches {batches!r}: give comma-separated integers"))
    if not sizes or min(sizes) < 1 or max(sizes) > 256:
        fail(ValueError(f"--batches {batches!r}: sizes from 1 to 256"))
    report = run_bench_rollout(model, drafter, sizes, max_tokens=max_tokens, draft_len=draft_len,
                               repeats=repeats, seed=seed, log=lambda m: typer.echo(m, err=True))
    rows = []
    for method, per_b in report.results.items():
        for b, r in per_b.items():
            rows.append([method, str(b), f"{r.tokens_per_s:,.0f}", f"{r.speedup_vs_none:.2f}x",
                         "-" if r.mean_accepted_length is None else f"{r.mean_accepted_length:.2f}",
                         "yes" if r.same_as_none else "NO"])
    typer.echo(f"{model}: greedy, {max_tokens} tokens per sequence, K={draft_len}, "
               f"best of {repeats}")
    header = ["method", "batch", "tok/s", "vs none", "accept len", "same tokens"]
    typer.echo(format_table(rows, header))
    typer.echo(json.dumps(report.to_json()))


@bench_app.command("grpo")
def bench_grpo(
    model: Path = typer.Option(..., help="Model directory (Hugging Face format) to sample the "
                                         "batch from and update."),
    seed: int = typer.Option(0, help="Seed of the problems, the sampling and the GRPO minibatch "
                                     "order."),
    prompts: int = typer.Option(16, min=1,
                                help="Task problems in the batch (tlt train's default step)."),
    samples: int = typer.Option(4, min=2, help="Responses per problem (the GRPO group)."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens: the tail's length."),
    repeats: int = typer.Option(3, min=1,
                                help="Timed steps per path, interleaved; medians reported."),
    device: str = typer.Option("cpu", help="Where the update runs: cpu, or cuda (bf16 autocast)."),
) -> None:
    """Time one GRPO step, packed vs padded, on a long-tailed batch.

    The batch: the model's own sampled responses (vLLM, temperature 1) to task prompts. Both paths
    in the same run, steps interleaved; last line JSON."""
    if not (model / "config.json").is_file():
        fail(ValueError(f"--model {model}: no config.json (give a Hugging Face model directory)"))
    try:
        report = run_bench_grpo(model, prompts=prompts, samples=samples, max_tokens=max_tokens,
                                repeats=repeats, seed=seed, log=lambda m: typer.echo(m, err=True),
                                device=device)
    except ValueError as exc:
        fail(exc)
    resp = sorted(report.response_tokens)
    typer.echo(f"{model}: {report.sequences} sequences, {report.tokens} tokens "
               f"(response tokens p50 {resp[len(resp) // 2]}, max {resp[-1]}); "
               f"minibatches of {report.minibatch}, "
               + (f"{report.threads} threads" if device == "cpu" else "on the GPU, bf16"))
    paths = (("packed", report.packed_s, report.tokens),
             ("padded", report.padded_s, report.padded_tokens))
    rows = [[name, f"{statistics.median(ts):.2f}", f"{min(ts):.2f}",
             f"{report.tokens_per_s(ts):,.0f}", str(work)]
            for name, ts, work in paths]
    header = ["path", "median step s", "min s", "tokens/s", "tokens per pass"]
    typer.echo(format_table(rows, header))
    typer.echo(f"first minibatch before any update: |loss difference| {report.loss_diff:.2e}, "
               f"largest |gradient difference| {report.grad_diff:.2e}")
    typer.echo(json.dumps(report.summary()))
