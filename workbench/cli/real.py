"""The real backend's commands: `tlt model init`, `capture`, `drafter train`, `train`,
`bench rollout`, `bench grpo` and `bench real`. The backend's modules imported here load torch,
vLLM and Ray only when they run; the torch-only ones (drafter training) are imported when their
command runs."""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from real.experiments.bench_grpo import bench_grpo as run_bench_grpo
from real.experiments.bench_rollout import bench_rollout as run_bench_rollout
from real.experiments.bench_training import bench_real as run_bench_real
from real.experiments.bench_training import MIN_ARM_STEPS, decode_speedup, spot_interference
from real.rollout.spec_config import EngineConfigError
from real.run.capture import CaptureError, check_inputs
from real.run.capture import capture as run_capture
from real.run.coordinator import RunConfig, TrainError, default_drafter, run_training
from real.tiny import task
from real.tiny.model import DEFAULT_STEPS, init_model
from real.torch_utils import train_device
from workbench.validate.bench_prediction import predict_bench
from workbench.cli.apps import app, bench_app, drafter_app, model_app
from workbench.cli.common import fail
from workbench.cli.task import REWARD_HELP, TASK_HELP, task_option
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.task import Task
from workbench.schedule import start_tables
from workbench.report.tables import format_table

DEFAULT_PROFILE = "cpu-tiny"
PROFILE_HELP = ("Profile (preset or file) whose cost and acceptance models pick the draft length each batch bucket "
                "starts at (workbench/schedule.py; a learning bandit corrects it online); 'none': the policy's own "
                "schedule. Fixed-table policies always run their schedule as written.")


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
        "default", help="Difficulty mix of the training problems (real/tiny/task.py: default, easy, hard, flat)."
    ),
    evaluate: bool = typer.Option(
        True, "--eval/--no-eval", help="Evaluate greedy answers on held-out problems after training."
    ),
    threads: int = typer.Option(
        2, min=1, help="CPU threads for training (the weights depend on it: same seed and threads, same bytes)."
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
    info = init_model(out, seed=seed, steps=steps or DEFAULT_STEPS, mix=mix, evaluate_after=evaluate, threads=threads,
                      log=lambda m: typer.echo(m, err=True), variant_name=variant)
    typer.echo(f"wrote {out} (SFT {info['train_seconds']:.0f}s, final loss {info['final_loss']:.4f})")
    if "eval" in info:
        e = info["eval"]
        typer.echo(f"greedy on {e['problems']} held-out problems: accuracy {e['accuracy']:.2f}; response tokens "
                   f"p50 {e['response_tokens']['p50']:.0f} p90 {e['response_tokens']['p90']:.0f} "
                   f"max {e['response_tokens']['max']}"
                   + (f"; reward {e['reward']:.2f}, styles {e['style_shares']}" if variant != "gcd" else ""))


# ---------------------------------------------------------------- real backend: capture, drafter, bench rollout


@app.command()
def capture(
    model: Path = typer.Option(..., help="Target model directory (Hugging Face format, e.g. from `tlt model init`)."),
    policy: str = typer.Option(
        ..., help="Policy preset name or YAML/JSON file: its drafter kind and schedule set speculative decoding."
    ),
    drafter: Optional[Path] = typer.Option(
        None, help="EAGLE drafter checkpoint directory (`tlt drafter train`); required by an eagle policy."
    ),
    prompts: int = typer.Option(8, min=1, help="Problems drawn from real.tiny.task (or --task)."),
    samples: int = typer.Option(4, min=1, help="Responses per problem (the group size)."),
    max_tokens: int = typer.Option(512, min=1, help="Response cap in tokens."),
    seed: int = typer.Option(0, help="Seed of the problems and of sampling."),
    mix: str = typer.Option("default", help="Difficulty mix of the problems (real/tiny/task.py)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Sampling temperature (0: greedy)."),
    max_num_seqs: int = typer.Option(64, min=1, help="vLLM's max_num_seqs: the most requests decoded at once."),
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
        fail(RuntimeError(f"capture needs vLLM ({exc}); install the project with its 'cpu' or 'gpu' extra"))
    trace = run_capture(model, pol, drafter, prompts=prompts, samples=samples, max_tokens=max_tokens, seed=seed,
                        mix=mix, temperature=temperature, max_num_seqs=max_num_seqs, out=out,
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
    typer.echo(
        format_table(
            rows, ["policy", "steps", "requests", "tokens", "rollout s", "tok/s", "accept len", "clipped", "reward"]
        )
    )
    typer.echo(f"wrote {out}")


@drafter_app.command("train")
def drafter_train(
    model: Path = typer.Option(..., help="Target model directory."),
    out: Path = typer.Option(
        ..., help="Drafter checkpoint directory to write (vLLM loads it as EagleLlamaForCausalLM)."
    ),
    steps: int = typer.Option(300, min=1, help="Optimiser steps."),
    seed: int = typer.Option(0, help="Seed of the prompts, the sampling, the initial weights and the batches."),
    prompts: int = typer.Option(32, min=1, help="Prompts to sample the target on (real.tiny.task problems)."),
    samples: int = typer.Option(4, min=1, help="Responses per prompt: one greedy, the rest sampled."),
    max_tokens: int = typer.Option(256, min=1, help="Response cap of the training rollouts."),
    lr: float = typer.Option(1e-3, min=0.0, help="AdamW learning rate (cosine decay to a tenth, 20 warm-up steps)."),
    mix: str = typer.Option("default", help="Difficulty mix of the task prompts (real/tiny/task.py)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Temperature of the sampled responses."),
    device: str = typer.Option("cpu", help="Where the drafter trains: cpu, or cuda (bf16 autocast)."),
) -> None:
    """Sample the target, then train an EAGLE drafter on its hidden states (EAGLE loss)."""
    from real.drafter.training import train_from_target

    if not (model / "config.json").is_file():
        fail(ValueError(f"--model {model}: no config.json (give a Hugging Face model directory)"))
    if mix not in task.MIXES:
        fail(ValueError(f"--mix {mix!r}: allowed: {', '.join(task.MIXES)}"))
    try:
        train_device(device)
    except ValueError as exc:
        fail(exc)
    t0 = time.perf_counter()
    path = train_from_target(model, out, steps=steps, seed=seed, prompts=prompts, samples=samples,
                             max_tokens=max_tokens, lr=lr, mix=mix, temperature=temperature,
                             log=lambda m: typer.echo(m, err=True), device=device)
    info = json.loads((path / "tlt_drafter.json").read_text())
    final = info.get("final", {})
    typer.echo(f"wrote {path} in {time.perf_counter() - t0:.0f}s: loss {final.get('loss', float('nan')):.4f}, "
               f"top-1 agreement with the target {final.get('top1', float('nan')):.3f} (last 50 steps)")


@bench_app.command("rollout")
def bench_rollout(
    model: Path = typer.Option(..., help="Target model directory."),
    drafter: Optional[Path] = typer.Option(
        None, help="EAGLE drafter directory; without it the eagle rows are left out."
    ),
    batches: str = typer.Option("1,8,64", help="Comma-separated batch sizes."),
    max_tokens: int = typer.Option(256, min=1, help="Tokens decoded per sequence (greedy, ignore_eos)."),
    draft_len: int = typer.Option(4, min=1, max=16, help="Draft length K of n-gram and EAGLE at every batch size."),
    repeats: int = typer.Option(2, min=1, help="Timed runs per batch size; the best is kept."),
    seed: int = typer.Option(0, help="Seed of the prompts."),
) -> None:
    """Decode throughput with no SD, n-gram and EAGLE at several batch sizes (greedy, same prompts)."""
    try:
        sizes = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        fail(ValueError(f"--batches {batches!r}: give comma-separated integers"))
    if not sizes or min(sizes) < 1 or max(sizes) > 256:
        fail(ValueError(f"--batches {batches!r}: sizes from 1 to 256"))
    report = run_bench_rollout(model, drafter, sizes, max_tokens=max_tokens, draft_len=draft_len, repeats=repeats,
                               seed=seed, log=lambda m: typer.echo(m, err=True))
    rows = []
    for method, per_b in report.results.items():
        for b, r in per_b.items():
            rows.append([method, str(b), f"{r.tokens_per_s:,.0f}", f"{r.speedup_vs_none:.2f}x",
                         "-" if r.mean_accepted_length is None else f"{r.mean_accepted_length:.2f}",
                         "yes" if r.same_as_none else "NO"])
    typer.echo(f"{model}: greedy, {max_tokens} tokens per sequence, K={draft_len}, best of {repeats}")
    typer.echo(format_table(rows, ["method", "batch", "tok/s", "vs none", "accept len", "same tokens"]))
    typer.echo(json.dumps(report.to_json()))


@bench_app.command("grpo")
def bench_grpo(
    model: Path = typer.Option(..., help="Model directory (Hugging Face format) to sample the batch from and update."),
    seed: int = typer.Option(0, help="Seed of the problems, the sampling and the GRPO minibatch order."),
    prompts: int = typer.Option(16, min=1, help="Task problems in the batch (tlt train's default step)."),
    samples: int = typer.Option(4, min=2, help="Responses per problem (the GRPO group)."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens: the tail's length."),
    repeats: int = typer.Option(3, min=1, help="Timed steps per path, interleaved; medians reported."),
    device: str = typer.Option("cpu", help="Where the update runs: cpu, or cuda (bf16 autocast)."),
) -> None:
    """Time one GRPO step, packed vs padded, on a long-tailed batch: the model's own sampled responses
    (vLLM, temperature 1) to task prompts. Both paths in the same run, steps interleaved; last line JSON."""
    if not (model / "config.json").is_file():
        fail(ValueError(f"--model {model}: no config.json (give a Hugging Face model directory)"))
    try:
        report = run_bench_grpo(model, prompts=prompts, samples=samples, max_tokens=max_tokens, repeats=repeats,
                                seed=seed, log=lambda m: typer.echo(m, err=True), device=device)
    except ValueError as exc:
        fail(exc)
    resp = sorted(report.response_tokens)
    typer.echo(f"{model}: {report.sequences} sequences, {report.tokens} tokens (response tokens p50 "
               f"{resp[len(resp) // 2]}, max {resp[-1]}); minibatches of {report.minibatch}, "
               + (f"{report.threads} threads" if device == "cpu" else "on the GPU, bf16"))
    rows = [[name, f"{statistics.median(ts):.2f}", f"{min(ts):.2f}", f"{report.tokens_per_s(ts):,.0f}", str(work)]
            for name, ts, work in (("packed", report.packed_s, report.tokens),
                                   ("padded", report.padded_s, report.padded_tokens))]
    typer.echo(format_table(rows, ["path", "median step s", "min s", "tokens/s", "tokens per pass"]))
    typer.echo(f"first minibatch before any update: |loss difference| {report.loss_diff:.2e}, "
               f"largest |gradient difference| {report.grad_diff:.2e}")
    typer.echo(json.dumps(report.summary()))


def _run_config(model: Path, policy: str, out: Path, steps: int, workers: int, seed: int, prompts: int, samples: int,
                max_tokens: int, drafter: Optional[Path], lr: float, address: Optional[str], mix: str,
                profile: str = DEFAULT_PROFILE, task_file: Optional[Task] = None, device: str = "cpu") -> RunConfig:
    """The run's RunConfig, checked; for a learning bandit, its start tables predicted on `profile`
    ('none': the policy's own schedule)."""
    try:
        pol = load_policy(policy)
    except Exception as exc:
        fail(exc)
    tables: dict = {}
    source = ""
    if profile.strip().lower() != "none":
        try:
            prof = load_profile(profile)
        except ConfigError as exc:
            fail(exc)
        predicted = start_tables(pol, prof)
        if predicted:  # the run starts there; the policy stays as written (the trace records both)
            tables = {k: v.table for k, v in predicted.items()}
            source = f"profile {prof.name} (workbench/schedule.py)"
    drafter = default_drafter(model, pol, drafter)
    cfg = RunConfig(model=model, policy=pol, out=out, steps=steps, workers=workers, seed=seed, prompts=prompts,
                    samples=samples, max_tokens=max_tokens, drafter=drafter, lr=lr, address=address, mix=mix,
                    start_tables=tables, start_source=source, task=task_file, device=device)
    try:
        cfg.check()
    except TrainError as exc:
        fail(exc)
    return cfg


def _show_start(cfg: RunConfig) -> None:
    """The draft lengths each bucket starts at, per drafter kind (stderr: the run's log)."""
    if not cfg.start_tables:
        return
    rows = cfg.policy.schedule
    for kind, table in cfg.start_tables.items():
        cells = ", ".join(f"{r.min_batch}-{r.max_batch}: {k}" for r, k in zip(rows, table))
        typer.echo(f"{cfg.policy.name}: {kind} starts at draft lengths {cells} (from {cfg.start_source}; "
                   f"SD off above batch {cfg.policy.sd_threshold})", err=True)


_STEP_HEADER = ["step", "step s", "rollout s", "train s", "sync s", "bubble", "tail", "spot-train", "accept", "reward",
                "pass@G", "drafter", "d-steps", "d-loss", "est eagle/static/ngram", "styled", "SD/plain"]


def _step_row(m) -> list[str]:
    return [str(m.rl_step), f"{m.step_s:.2f}", f"{m.rollout_s:.2f}", f"{m.train_s:.2f}", f"{m.sync_s:.2f}",
            f"{m.bubble_fraction:.0%}", "-" if math.isnan(m.tail_fraction) else f"{m.tail_fraction:.0%}",
            f"{m.drafter_train_fraction:.0%}", f"{m.mean_accept_len:.2f}", f"{m.reward:.3f}",
            f"{m.pass_at_g:.2f}", m.drafter_kind, str(m.drafter_steps),
            "-" if m.drafter_loss != m.drafter_loss else f"{m.drafter_loss:.3f}", _estimates(m),
            "-" if math.isnan(m.style_share) else f"{m.style_share:.0%}",
            "-" if math.isnan(m.sd_speedup) else f"{m.sd_speedup:.2f}x"]


def _estimates(m) -> str:
    """The drafters judged this step (estimated tokens per verify pass): the learned one the engines
    ran, the initial one kept static (staleness), n-gram; '-' where not judged."""
    cells = ["-" if math.isnan(v) else f"{v:.2f}" for v in (m.eagle_est, m.static_est, m.ngram_est)]
    return "-" if cells == ["-"] * 3 else "/".join(cells)


@app.command()
def train(
    model: Path = typer.Option(..., help="Target model directory (Hugging Face format; e.g. traces/reference/model)."),
    policy: str = typer.Option(..., help="Policy preset name or YAML/JSON file (e.g. one `tlt tune` wrote)."),
    steps: int = typer.Option(20, min=1, help="RL steps to run (in all, counting steps done before a --resume)."),
    workers: int = typer.Option(2, min=1, help="Rollout workers (Ray actors, one vLLM engine each)."),
    seed: int = typer.Option(0, help="Seed of prompts, sampling, GRPO, drafter and bandits."),
    out: Path = typer.Option(..., help="Run directory: checkpoints/, metrics.csv, trace/, drafter/."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last finished step."),
    prompts: int = typer.Option(16, min=1, help="Prompts per RL step."),
    samples: int = typer.Option(4, min=2, help="Samples per prompt (the GRPO group)."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens."),
    drafter: Optional[Path] = typer.Option(None, help="Warm-start EAGLE drafter (policies with drafter.warm_start; "
                                                      "on the reference model, traces/reference/drafter by default)."),
    lr: float = typer.Option(2e-5, min=0.0, help="GRPO learning rate (AdamW)."),
    mix: str = typer.Option("default", help="Difficulty mix of the task prompts (real/tiny/task.py)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address to join (default: a local Ray)."),
    profile: str = typer.Option(DEFAULT_PROFILE, help=PROFILE_HELP),
    task: Optional[Path] = typer.Option(None, help=TASK_HELP),
    reward: Optional[str] = typer.Option(None, help=REWARD_HELP + " Default with --task: exact."),
    device: str = typer.Option("cpu", help="Where the GRPO update and drafter training run: cpu, or cuda (bf16)."),
) -> None:
    """GRPO on vLLM rollouts with spot drafter training and adaptive SD (real/run/coordinator.py)."""
    user_task = task_option(task, reward)
    cfg = _run_config(model, policy, out, steps, workers, seed, prompts, samples, max_tokens, drafter, lr, address, mix,
                      profile, user_task, device)
    _show_start(cfg)
    typer.echo("  ".join(_STEP_HEADER))

    def on_step(m) -> None:
        typer.echo("  ".join(_step_row(m)))

    try:
        run = run_training(cfg, resume=resume, log=lambda m: typer.echo(m, err=True), on_step=on_step)
    except ValueError as exc:
        fail(exc)
    typer.echo(format_table([_step_row(m) for m in run.metrics], _STEP_HEADER))
    typer.echo(f"wrote {out}/metrics.csv, {out}/trace (tlt calibrate reads it), {out}/checkpoints"
               + (f", {out}/drafter (vLLM loads it)" if run.drafter_dir else ""))


@bench_app.command("real")
def bench_real(
    model: Path = typer.Option(..., help="Target model directory."),
    policies: Optional[str] = typer.Option(None, help="Comma-separated policies (preset names or files), the first "
                                                      "the reference, e.g. baseline,tlt-vllm,tuned.yaml; all run at "
                                                      "once, their steps round-robin (default: baseline,--policy)."),
    policy: Optional[str] = typer.Option(None, help="Shorthand for --policies baseline,POLICY (default tlt-vllm)."),
    drafter: Optional[Path] = typer.Option(None, help="Warm-start EAGLE drafter for a warm-starting policy "
                                                      "(default on the reference model: traces/reference/drafter)."),
    profile: str = typer.Option(DEFAULT_PROFILE, help=PROFILE_HELP + " Also the profile the simulator predicts "
                                                                     "every policy's speedup on, printed beside the "
                                                                     "measured one ('none': no prediction)."),
    steps: int = typer.Option(10, min=1, help="RL steps per policy."),
    workers: int = typer.Option(2, min=1, help="Rollout workers per policy (all runs' workers are alive at once)."),
    seed: int = typer.Option(0, help="Seed shared by all runs."),
    out: Path = typer.Option(Path("bench-real"), help="Directory for the runs (one OUT/NAME per policy)."),
    prompts: int = typer.Option(16, min=1, help="Prompts per RL step."),
    samples: int = typer.Option(4, min=2, help="Samples per prompt."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens."),
    lr: float = typer.Option(2e-5, min=0.0, help="GRPO learning rate."),
) -> None:
    """Policies (default baseline vs tlt-vllm) from the same model and seed, steps interleaved; then one
    row per policy (speedups over the first, predicted beside measured), the phases, the speed per
    batch bucket and the response lengths; last line JSON."""
    if policies is not None and policy is not None:
        fail(ValueError("--policy P is shorthand for --policies baseline,P: give one of them"))
    names = [p.strip() for p in (policies or f"baseline,{policy or 'tlt-vllm'}").split(",") if p.strip()]
    configs = [_run_config(model, p, out, steps, workers, seed, prompts, samples, max_tokens, drafter, lr, None,
                           "default", profile) for p in names]
    _check_bench(configs, policies, out)
    for cfg in configs:
        _show_start(cfg)

    def on_step(name, m) -> None:
        typer.echo(f"{name:9s} " + "  ".join(_step_row(m)), err=True)

    report = run_bench_real(configs, log=lambda m: typer.echo(m, err=True), on_step=on_step)
    prediction = _predict(report, profile, seed)
    _show_bench(report, configs[0].max_tokens, prediction)
    typer.echo(f"{report.paper_policy}: engine steps beside another worker's spot training, each over like steps "
               "without it (same batch size, draft length, context within 2x):")
    typer.echo(spot_interference(report.runs[report.paper_policy] / "trace").round(2).to_string())
    typer.echo(json.dumps(bench_json(report, prediction)))


def _check_bench(configs: list[RunConfig], given: Optional[str], out: Path) -> None:
    """Two or more differently named policies, each run into a fresh OUT/NAME (sets `cfg.out`)."""
    names = [c.policy.name for c in configs]
    opt = f"--policies {given}" if given is not None else f"--policy {names[-1]}"
    if len(configs) < 2:
        fail(ValueError(f"{opt}: name two or more policies, the first the reference (e.g. baseline,tlt-vllm)"))
    for name in names:
        if names.count(name) > 1:
            fail(ValueError(f"{opt}: two policies are named '{name}' (each run is written to OUT/NAME): "
                            "rename one in its file"))
        if name in (".", "..") or "/" in name or "\\" in name:
            fail(ValueError(f"{opt}: policy name '{name}' is not a directory name (each run is written to OUT/NAME)"))
    for cfg in configs:
        cfg.out = out / cfg.policy.name
        if (cfg.out / "checkpoints").exists():
            fail(ValueError(f"--out {out}: {cfg.out} holds a run already; choose another --out"))


def _predict(report, profile: str, seed: int):
    """The simulator's prediction of every run (workbench/validate/bench_prediction.py), or None
    for --profile none."""
    if profile.strip().lower() == "none":
        return None
    try:
        return predict_bench(report.runs, load_profile(profile), report.reference, seed=seed)
    except (ValueError, KeyError, OSError) as exc:  # the measurement (minutes of runs) still gets reported
        typer.echo(f"no prediction on profile {profile}: {exc}", err=True)
        return None


def rnd(v):
    """A JSON value: floats to 4 places, NaN as null."""
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 4)
    return v


def bench_json(report, prediction) -> dict:
    """The last line: the paper's configuration's figures under the original keys, and every policy's."""
    pred = {r.name: r for r in prediction.rows} if prediction is not None else {}
    per = {}
    for name, r in report.policies.items():
        per[name] = {k: rnd(v) for k, v in asdict(r).items()}
        if name in pred:
            per[name].update(predicted_speedup_step=rnd(pred[name].predicted_speedup_step),
                             prediction_error_pct=rnd(pred[name].prediction_error_pct))
    data = {k: rnd(v) for k, v in asdict(report.summary).items()}
    if report.paper_policy in pred:
        data.update({k: per[report.paper_policy][k] for k in ("predicted_speedup_step", "prediction_error_pct")})
    data.update(reference=report.reference, paper_policy=report.paper_policy, policies=per)
    return data


def _show_bench(report, max_tokens: int, prediction) -> None:
    rows = [[name] + _step_row(m) for name, ms in report.steps.items() for m in ms]
    typer.echo(format_table(rows, ["policy"] + _STEP_HEADER))
    pred = {r.name: r for r in prediction.rows} if prediction is not None else {}
    rows = []
    for name, r in report.policies.items():
        row = [name, f"{r.step_s:.2f}", f"{r.rollout_s:.2f}", f"{r.speedup_step:.2f}x ({r.speedup_step_median:.2f}x)",
               f"{r.speedup_rollout:.2f}x ({r.speedup_rollout_median:.2f}x)", f"{r.reward:.3f}",
               f"{r.mean_accept_len:.2f}", f"{r.rollout_share:.0%}",
               "-" if math.isnan(r.sd_probe_speedup) else f"{r.sd_probe_speedup:.2f}x",
               "-" if math.isnan(r.sd_speedup_est) else f"{r.sd_speedup_est:.2f}x", str(r.sd_off_steps),
               f"{r.setup_s:.1f}"]
        if pred:
            p = pred.get(name)
            row += ["-" if p is None else f"{p.predicted_speedup_step:.2f}x",
                    "-" if p is None or math.isnan(p.prediction_error_pct) else f"{p.prediction_error_pct:+.1f}%"]
        rows.append(row)
    header = ["policy", "step s", "rollout s", "step speedup (paired median)", "rollout speedup (paired median)",
              "reward", "accept len", "rollout share", "SD/plain probe", "SD/plain est", "no-SD steps", "set-up s"] + \
        (["predicted step speedup", "error"] if pred else [])
    typer.echo(f"per policy, speedups over {report.reference}"
               + (f" (predicted on profile {prediction.profile})" if pred else "") + ":")
    typer.echo(format_table(rows, header))
    rows = [[name, f"{p.step_s:.2f}", f"{p.rollout_s:.2f}", f"{p.train_s:.2f}", f"{p.sync_s:.2f}",
             f"{p.rollout_share:.0%}"] for name, p in report.phases.items()]
    typer.echo("mean seconds per RL step, by phase:")
    typer.echo(format_table(rows, ["policy", "step", "rollout", "update", "sync", "rollout share"]))
    for name, buckets in report.buckets.items():
        rows = [[b.bucket, f"{b.baseline_time_share:.0%}", f"{b.baseline_rate:.0f}", f"{b.tlt_rate:.0f}",
                 f"{b.speedup:.2f}x", b.tlt_draft_lens,
                 "-" if b.best_draft_len < 0 else f"K{b.best_draft_len} ({b.best_speedup:.2f}x)"] for b in buckets]
        typer.echo(f"{name}: decoding by batch size (tokens per sequence per second; prefill steps left out):")
        typer.echo(format_table(rows, ["batch", f"{report.reference} time", report.reference, name, "speedup",
                                       "draft lengths run", "fastest draft length"]))
        typer.echo(f"{name}: decoding {decode_speedup(buckets):.2f}x {report.reference}'s over all batch sizes; "
                   f"{decode_speedup(buckets, best=True):.2f}x at each bucket's fastest draft length (read off this "
                   f"run, >= {MIN_ARM_STEPS} steps; its contexts differ by draft length: a rough bound)")
    rows = [
        [name, f"{s.p50:.0f}", f"{s.p90:.0f}", str(s.max), f"{s.clip_ratio:.1%}"] for name, s in report.lengths.items()
    ]
    typer.echo(f"response tokens (cap {max_tokens}):")
    typer.echo(format_table(rows, ["policy", "p50", "p90", "max", "clipped"]))
