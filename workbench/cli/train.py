"""The real backend's training commands: `tlt train` (real/run/coordinator.py) and `tlt bench
real` (several runs' steps interleaved, real/experiments/bench_training.py), with the step table
both print. The backend's modules imported here load torch, vLLM and Ray only when they run."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from real.experiments.bench_training import bench_real as run_bench_real
from real.experiments.bench_training import MIN_ARM_STEPS, decode_speedup, spot_interference
from real.drafter.layout import DrafterError
from real.drafter.resolve import resolve_drafter
from real.hub_cache import is_hub_id, local_model
from real.run.coordinator import RunConfig, TrainError, default_drafter, run_training
from workbench.validate.bench_prediction import predict_bench
from workbench.cli.apps import app, bench_app
from workbench.cli.common import fail
from workbench.cli.task import REWARD_HELP, TASK_HELP, task_option
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.task import Task
from workbench.schedule import start_tables
from workbench.report.tables import format_table

DEFAULT_PROFILE = "cpu-tiny"
PROFILE_HELP = (
    "Profile (preset or file) whose cost and acceptance models pick the draft length each batch "
    "bucket starts at (workbench/schedule.py; a learning bandit corrects it online); 'none': the "
    "policy's own schedule. Fixed-table policies always run their schedule as written."
)

def _run_config(model: str | Path, policy: str, out: Path, steps: int, workers: int, seed: int,
                prompts: int, samples: int, max_tokens: int, drafter: str | Path | None,
                lr: float, address: Optional[str], mix: str, profile: str = DEFAULT_PROFILE,
                task_file: Optional[Task] = None, device: str = "cpu") -> RunConfig:
    """The run's RunConfig, checked; for a learning bandit, its start tables predicted on `profile`
    ('none': the policy's own schedule). `model` and `drafter` may be hub ids in this machine's
    Hugging Face cache (real/hub_cache.py, real/drafter/resolve.py)."""
    try:
        pol = load_policy(policy)
        model = local_model(model)
        if drafter is not None and is_hub_id(drafter):
            drafter = resolve_drafter(drafter, model, need_local=True).local
    except DrafterError as exc:
        fail(ValueError(f"--{exc}"))
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
    drafter = default_drafter(model, pol, Path(drafter) if drafter is not None else None)
    cfg = RunConfig(model=model, policy=pol, out=out, steps=steps, workers=workers, seed=seed,
                    prompts=prompts, samples=samples, max_tokens=max_tokens, drafter=drafter,
                    lr=lr, address=address, mix=mix, start_tables=tables, start_source=source,
                    task=task_file, device=device)
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
        typer.echo(f"{cfg.policy.name}: {kind} starts at draft lengths {cells} "
                   f"(from {cfg.start_source}; SD off above batch {cfg.policy.sd_threshold})",
                   err=True)


_STEP_HEADER = ["step", "step s", "rollout s", "train s", "sync s", "bubble", "tail", "spot-train",
                "accept", "reward", "pass@G", "drafter", "d-steps", "d-loss",
                "est eagle/static/ngram", "styled", "SD/plain"]


def _step_row(m) -> list[str]:
    return [str(m.rl_step), f"{m.step_s:.2f}", f"{m.rollout_s:.2f}", f"{m.train_s:.2f}",
            f"{m.sync_s:.2f}", f"{m.bubble_fraction:.0%}",
            "-" if math.isnan(m.tail_fraction) else f"{m.tail_fraction:.0%}",
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
    model: str = typer.Option(..., help="Target model: a Hugging Face directory (e.g. "
                                        "traces/reference/model) or a hub id in this machine's "
                                        "Hugging Face cache."),
    policy: str = typer.Option(..., help="Policy preset name or YAML/JSON file "
                                         "(e.g. one `tlt tune` wrote)."),
    steps: int = typer.Option(20, min=1, help="RL steps to run (in all, counting steps done "
                                              "before a --resume)."),
    workers: int = typer.Option(2, min=1,
                                help="Rollout workers (Ray actors, one vLLM engine each)."),
    seed: int = typer.Option(0, help="Seed of prompts, sampling, GRPO, drafter and bandits."),
    out: Path = typer.Option(..., help="Run directory: checkpoints/, metrics.csv, trace/, "
                                       "drafter/."),
    resume: bool = typer.Option(False, "--resume",
                                help="Continue the run in --out from its last finished step."),
    prompts: int = typer.Option(16, min=1, help="Prompts per RL step."),
    samples: int = typer.Option(4, min=2, help="Samples per prompt (the GRPO group)."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens."),
    drafter: Optional[str] = typer.Option(
        None, help="Warm-start drafter (policies with drafter.warm_start): an EAGLE or EAGLE-3 "
                   "head, ours or a public one (SafeAILab, SpecForge), as a directory or a hub "
                   "id in the cache; spot training continues it. On the reference model, "
                   "traces/reference/drafter by default."),
    lr: float = typer.Option(2e-5, min=0.0, help="GRPO learning rate (AdamW)."),
    mix: str = typer.Option("default",
                            help="Difficulty mix of the task prompts (real/tiny/task.py)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address to join "
                                                     "(default: a local Ray)."),
    profile: str = typer.Option(DEFAULT_PROFILE, help=PROFILE_HELP),
    task: Optional[Path] = typer.Option(None, help=TASK_HELP),
    reward: Optional[str] = typer.Option(None, help=REWARD_HELP + " Default with --task: exact."),
    device: str = typer.Option("cpu", help="Where the GRPO update and drafter training run: "
                                           "cpu, or cuda (bf16)."),
) -> None:
    """GRPO on vLLM rollouts with spot drafter training and adaptive SD.

    The loop: real/run/coordinator.py."""
    user_task = task_option(task, reward)
    cfg = _run_config(model, policy, out, steps, workers, seed, prompts, samples, max_tokens,
                      drafter, lr, address, mix, profile, user_task, device)
    _show_start(cfg)
    typer.echo("  ".join(_STEP_HEADER))

    def on_step(m) -> None:
        typer.echo("  ".join(_step_row(m)))

    try:
        run = run_training(cfg, resume=resume, log=lambda m: typer.echo(m, err=True),
                           on_step=on_step)
    except ValueError as exc:
        fail(exc)
    typer.echo(format_table([_step_row(m) for m in run.metrics], _STEP_HEADER))
    typer.echo(f"wrote {out}/metrics.csv, {out}/trace (tlt calibrate reads it), {out}/checkpoints"
               + (f", {out}/drafter (vLLM loads it)" if run.drafter_dir else ""))


@bench_app.command("real")
def bench_real(
    model: Path = typer.Option(..., help="Target model directory."),
    policies: Optional[str] = typer.Option(
        None, help="Comma-separated policies (preset names or files), the first the reference, "
                   "e.g. baseline,tlt-vllm,tuned.yaml; all run at once, their steps round-robin "
                   "(default: baseline,--policy)."),
    policy: Optional[str] = typer.Option(None, help="Shorthand for --policies baseline,POLICY "
                                                    "(default tlt-vllm)."),
    drafter: Optional[Path] = typer.Option(
        None, help="Warm-start EAGLE drafter for a warm-starting policy "
                   "(default on the reference model: traces/reference/drafter)."),
    profile: str = typer.Option(
        DEFAULT_PROFILE, help=PROFILE_HELP + " Also the profile the simulator predicts every "
                                             "policy's speedup on, printed beside the measured "
                                             "one ('none': no prediction)."),
    steps: int = typer.Option(10, min=1, help="RL steps per policy."),
    workers: int = typer.Option(2, min=1, help="Rollout workers per policy (all runs' workers "
                                               "are alive at once)."),
    seed: int = typer.Option(0, help="Seed shared by all runs."),
    out: Path = typer.Option(Path("bench-real"),
                             help="Directory for the runs (one OUT/NAME per policy)."),
    prompts: int = typer.Option(16, min=1, help="Prompts per RL step."),
    samples: int = typer.Option(4, min=2, help="Samples per prompt."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens."),
    lr: float = typer.Option(2e-5, min=0.0, help="GRPO learning rate."),
) -> None:
    """Real runs of policies (default baseline vs tlt-vllm), side by side.

    The same model and seed, steps interleaved; then one row per policy (speedups over the first,
    predicted beside measured), the phases, the speed per batch bucket and the response lengths;
    last line JSON."""
    if policies is not None and policy is not None:
        fail(ValueError("--policy P is shorthand for --policies baseline,P: give one of them"))
    given = policies or f"baseline,{policy or 'tlt-vllm'}"
    names = [p.strip() for p in given.split(",") if p.strip()]
    configs = [_run_config(model, p, out, steps, workers, seed, prompts, samples, max_tokens,
                           drafter, lr, None, "default", profile)
               for p in names]
    _check_bench(configs, policies, out)
    for cfg in configs:
        _show_start(cfg)

    def on_step(name, m) -> None:
        typer.echo(f"{name:9s} " + "  ".join(_step_row(m)), err=True)

    report = run_bench_real(configs, log=lambda m: typer.echo(m, err=True), on_step=on_step)
    prediction = _predict(report, profile, seed)
    _show_bench(report, configs[0].max_tokens, prediction)
    typer.echo(f"{report.paper_policy}: engine steps beside another worker's spot training, "
               "each over like steps without it (same batch size, draft length, context within "
               "2x):")
    typer.echo(spot_interference(report.runs[report.paper_policy] / "trace").round(2).to_string())
    typer.echo(json.dumps(bench_json(report, prediction)))


def _check_bench(configs: list[RunConfig], given: Optional[str], out: Path) -> None:
    """Two or more differently named policies, each run into a fresh OUT/NAME (sets `cfg.out`)."""
    names = [c.policy.name for c in configs]
    opt = f"--policies {given}" if given is not None else f"--policy {names[-1]}"
    if len(configs) < 2:
        fail(ValueError(f"{opt}: name two or more policies, the first the reference "
                        "(e.g. baseline,tlt-vllm)"))
    for name in names:
        if names.count(name) > 1:
            fail(ValueError(f"{opt}: two policies are named '{name}' (each run is written to "
                            "OUT/NAME): rename one in its file"))
        if name in (".", "..") or "/" in name or "\\" in name:
            fail(ValueError(f"{opt}: policy name '{name}' is not a directory name (each run is "
                            "written to OUT/NAME)"))
    for cfg in configs:
        cfg.out = out / cfg.policy.name
        if (cfg.out / "checkpoints").exists():
            fail(ValueError(f"--out {out}: {cfg.out} holds a run already; choose another --out"))


def _predict(report, profile: str, seed: int):
    """The simulator's prediction of every run (workbench/validate/bench_prediction.py), or None for
    --profile none."""
    if profile.strip().lower() == "none":
        return None
    try:
        return predict_bench(report.runs, load_profile(profile), report.reference, seed=seed)
    except (ValueError, KeyError, OSError) as exc:
        # the measurement (minutes of runs) still gets reported
        typer.echo(f"no prediction on profile {profile}: {exc}", err=True)
        return None


def rnd(v):
    """A JSON value: floats to 4 places, NaN as null."""
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 4)
    return v


def bench_json(report, prediction) -> dict:
    """The last line: the paper's configuration's figures under the original keys, and every
    policy's."""
    pred = {r.name: r for r in prediction.rows} if prediction is not None else {}
    per = {}
    for name, r in report.policies.items():
        per[name] = {k: rnd(v) for k, v in asdict(r).items()}
        if name in pred:
            per[name].update(predicted_speedup_step=rnd(pred[name].predicted_speedup_step),
                             prediction_error_pct=rnd(pred[name].prediction_error_pct))
    data = {k: rnd(v) for k, v in asdict(report.summary).items()}
    if report.paper_policy in pred:
        keys = ("predicted_speedup_step", "prediction_error_pct")
        data.update({k: per[report.paper_policy][k] for k in keys})
    data.update(reference=report.reference, paper_policy=report.paper_policy, policies=per)
    return data


def _show_bench(report, max_tokens: int, prediction) -> None:
    rows = [[name] + _step_row(m) for name, ms in report.steps.items() for m in ms]
    typer.echo(format_table(rows, ["policy"] + _STEP_HEADER))
    _show_policies(report, prediction)
    rows = [[name, f"{p.step_s:.2f}", f"{p.rollout_s:.2f}", f"{p.train_s:.2f}", f"{p.sync_s:.2f}",
             f"{p.rollout_share:.0%}"] for name, p in report.phases.items()]
    typer.echo("mean seconds per RL step, by phase:")
    typer.echo(format_table(rows, ["policy", "step", "rollout", "update", "sync", "rollout share"]))
    for name, buckets in report.buckets.items():
        _show_buckets(report.reference, name, buckets)
    rows = [[name, f"{s.p50:.0f}", f"{s.p90:.0f}", str(s.max), f"{s.clip_ratio:.1%}"]
            for name, s in report.lengths.items()]
    typer.echo(f"response tokens (cap {max_tokens}):")
    typer.echo(format_table(rows, ["policy", "p50", "p90", "max", "clipped"]))


def _show_policies(report, prediction) -> None:
    """One row per policy: speedups over the reference, predicted beside measured."""
    pred = {r.name: r for r in prediction.rows} if prediction is not None else {}
    rows = []
    for name, r in report.policies.items():
        row = [name, f"{r.step_s:.2f}", f"{r.rollout_s:.2f}",
               f"{r.speedup_step:.2f}x ({r.speedup_step_median:.2f}x)",
               f"{r.speedup_rollout:.2f}x ({r.speedup_rollout_median:.2f}x)", f"{r.reward:.3f}",
               f"{r.mean_accept_len:.2f}", f"{r.rollout_share:.0%}",
               "-" if math.isnan(r.sd_probe_speedup) else f"{r.sd_probe_speedup:.2f}x",
               "-" if math.isnan(r.sd_speedup_est) else f"{r.sd_speedup_est:.2f}x",
               str(r.sd_off_steps), f"{r.setup_s:.1f}"]
        if pred:
            p = pred.get(name)
            err = "-"
            if p is not None and not math.isnan(p.prediction_error_pct):
                err = f"{p.prediction_error_pct:+.1f}%"
            row += ["-" if p is None else f"{p.predicted_speedup_step:.2f}x", err]
        rows.append(row)
    header = ["policy", "step s", "rollout s", "step speedup (paired median)",
              "rollout speedup (paired median)", "reward", "accept len", "rollout share",
              "SD/plain probe", "SD/plain est", "no-SD steps", "set-up s"]
    if pred:
        header += ["predicted step speedup", "error"]
    typer.echo(f"per policy, speedups over {report.reference}"
               + (f" (predicted on profile {prediction.profile})" if pred else "") + ":")
    typer.echo(format_table(rows, header))


def _show_buckets(reference: str, name: str, buckets) -> None:
    """Run `name`'s decoding speed per batch bucket against the reference's."""
    rows = [[b.bucket, f"{b.baseline_time_share:.0%}", f"{b.baseline_rate:.0f}",
             f"{b.tlt_rate:.0f}", f"{b.speedup:.2f}x", b.tlt_draft_lens,
             "-" if b.best_draft_len < 0 else f"K{b.best_draft_len} ({b.best_speedup:.2f}x)"]
            for b in buckets]
    typer.echo(f"{name}: decoding by batch size (tokens per sequence per second; prefill steps "
               "left out):")
    typer.echo(format_table(rows, ["batch", f"{reference} time", reference, name, "speedup",
                                   "draft lengths run", "fastest draft length"]))
    typer.echo(f"{name}: decoding {decode_speedup(buckets):.2f}x {reference}'s over all batch "
               f"sizes; {decode_speedup(buckets, best=True):.2f}x at each bucket's fastest draft "
               f"length (read off this run, >= {MIN_ARM_STEPS} steps; its contexts differ by draft "
               "length: a rough bound)")
