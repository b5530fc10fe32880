"""`tlt calibrate --run-log` and `tlt validate --run-log`: a run's log in, its steps predicted
(workbench/runlog/). The shape flags are shared by both commands."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from workbench.cli.common import fail
from workbench.contracts.fileio import save_figure, write_json
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import ConfigError, save
from workbench.runlog import calibrate as cal
from workbench.runlog.prepared import Prepared, prepare
from workbench.runlog import factor_report, report
from workbench.runlog.run_workload import full_path, run_workloads
from workbench.runlog.shape import ShapeFlags
from workbench.workloads.build import data_path, write_workload

RUN_LOG_HELP = (
    "A run log: veRL's console output (step:N - key:value lines; .gz read too), or slime/miles', "
    "NeMo-RL's, SkyRL's, OpenRLHF's, AReaL's or ROLL's (recognised by their own lines), or the "
    "same metrics as a W&B/TensorBoard export (CSV/JSONL/JSON/Parquet with a step column, or an "
    "events.out.tfevents file)."
)
RUN_LOG_CALIBRATE = (RUN_LOG_HELP + " Fits run-level factors over the measured database on its "
                     "first --fit-steps steps, predicts the rest. Repeat for runs of the same "
                     "cluster (LOG::field=value,... sets one log's own shape fields).")
ARCH = typer.Option(
    None,
    "--arch",
    help="Run-log shape: the model, an architecture preset or a config.json "
    "(default: the log's actor_rollout_ref.model.path).",
)
GPU = typer.Option(
    None,
    "--gpu",
    help="Run-log shape: the GPU type (a veRL log never names it; the decode factor "
    "absorbs a difference). With --profile: the profile's.",
)
GPUS = typer.Option(
    None,
    "--gpus",
    min=1,
    help="Run-log shape: GPUs in all (default: the log's "
    "trainer.n_gpus_per_node x trainer.nnodes).",
)
TP = typer.Option(
    None,
    "--tp",
    min=1,
    help="Run-log shape: the rollout's tensor parallelism (default: the log's "
    "rollout.tensor_model_parallel_size).",
)
EP = typer.Option(
    None,
    "--ep",
    min=1,
    help="Run-log shape: a mixture-of-experts model's expert parallelism inside each engine "
    "(default: the framework's, EP1: experts tensor-parallel).",
)
PROMPTS = typer.Option(
    None,
    "--prompts-per-step",
    min=1,
    help="Run-log shape: prompts per step (default: the log's data.train_batch_size).",
)
GROUP = typer.Option(
    None,
    "--group-size",
    min=1,
    help="Run-log shape: responses per prompt (default: the log's rollout.n).",
)
CAP = typer.Option(
    None,
    "--max-response-tokens",
    min=16,
    help="Run-log shape: the response cap (default: the log's data.max_response_length).",
)
MAX_BATCH = typer.Option(
    None,
    "--max-batch",
    min=1,
    help="Run-log shape: sequences an engine decodes at once "
    "(default: the log's rollout.max_num_seqs, else veRL's 1024).",
)


WORKLOAD_OUT = typer.Option(
    None, "--workload-out", help="With --run-log: also write the run's workload (replayed): W a "
    "sample of 12 steps spread over the run (tlt compare's default), W-full the whole run.")
ENGINE_PROFILE = typer.Option(
    None, "--engine-profile", help="With --run-log: a profile measured on the run's GPU and engine "
    "(an engine sweep's) whose per-token and per-step costs become the factors' priors.")


def shape_flags(
    arch: Optional[str],
    gpu: Optional[str],
    gpus: Optional[int],
    tp: Optional[int],
    prompts: Optional[int],
    group: Optional[int],
    cap: Optional[int],
    max_batch: Optional[int],
    ep: Optional[int] = None,
) -> ShapeFlags:
    return ShapeFlags(arch, gpu, gpus, tp, prompts, group, cap, max_batch, ep=ep)


def check_profile_paths(*paths: Optional[Path],
                        names: tuple[str, ...] = ("--out", "--lengths-out")) -> None:
    """Profiles and workloads are written as .yaml, .yml or .json."""
    for path, what in zip(paths, names):
        if path is not None and path.suffix not in (".yaml", ".yml", ".json"):
            fail(ConfigError(what, "<file>", str(path), "a .yaml, .yml or .json file name"))


class Progress:
    """Prints the steps worked out (every tenth) and notes when the fit's steps were all done."""

    def __init__(self, fit_steps: Optional[int] = None):
        self.t0, self.fit_steps, self.fit_ready_s = time.perf_counter(), fit_steps, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter() - self.t0
        if self.fit_steps is not None and done >= self.fit_steps and not self.fit_ready_s:
            self.fit_ready_s = now  # all the fit needs is read and worked out
        if done == total or done % max(1, total // 10) == 0:
            typer.echo(f"  worked out {done}/{total} steps ({now:.1f}s)", err=True)


OVERRIDES = ("arch", "gpu", "gpus", "tp", "prompts_per_step", "group_size", "max_response_tokens",
             "max_batch")


def log_and_flags(arg: Path, flags: ShapeFlags) -> tuple[Path, ShapeFlags]:
    """`LOG` or `LOG::field=value,...` (that log's own shape fields, over the flags: with several
    logs a flag applies to all, so a field one of them lacks goes here)."""
    text = str(arg)
    if "::" not in text:
        return arg, flags
    path, _, spec = text.partition("::")
    changes: dict = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in OVERRIDES:
            fail(ConfigError("--run-log", "LOG::FIELD=VALUE", item,
                             f"a field of {', '.join(OVERRIDES)}, e.g. ppo.log::group_size=1"))
        try:
            changes[key] = value.strip() if key in ("arch", "gpu") else int(value)
        except ValueError:
            fail(ConfigError("--run-log", key, value, "a whole number"))
    return Path(path), replace(flags, **changes)


def _prepare(run_log: Path, flags: ShapeFlags, seed: int, fit_steps: Optional[int] = None,
             progress: Optional[Progress] = None,
             engine_profile: Optional[Profile] = None) -> Prepared:
    run_log, flags = log_and_flags(run_log, flags)
    typer.echo(f"reading {run_log}, then each step's work at the database's costs ...", err=True)
    try:
        p = prepare(run_log, flags, seed, progress or Progress(fit_steps), fit_steps,
                    engine_profile=engine_profile)
    except (ConfigError, ValueError) as exc:
        fail(exc)
    for line in report.shape_lines(p):
        typer.echo(line)
    return p


def calibrate_run_log(run_logs: list[Path], fit_steps: int, out: Path,
                      workload_out: Optional[Path], name: Optional[str], flags: ShapeFlags,
                      seed: int, alone: bool = True,
                      engine_profile: Optional[str] = None) -> None:
    """Read, simulate, fit on the first steps (of each log: runs of one cluster), predict the rest;
    then write the profile (its figure and per-step JSON beside it) and, if asked, the first run's
    workload. Nothing is written on an error."""
    if not alone:
        fail(ValueError("--run-log: give it alone (not with traces, --model or --run)"))
    t0 = time.perf_counter()
    check_profile_paths(workload_out, names=("--workload-out",))
    measured = None
    if engine_profile is not None:
        try:
            measured = load_profile(engine_profile)
        except ConfigError as exc:
            fail(exc)
    first = Progress(fit_steps)
    preps = [_prepare(log, flags, seed, fit_steps, first if i == 0 else None, measured)
             for i, log in enumerate(run_logs)]
    typer.echo(f"fitting the factors on the first {fit_steps} steps of {len(preps)} log(s), "
               "their posterior sampled ...", err=True)
    try:
        result = cal.calibrate(preps[0], fit_steps, name or out.stem, preps[1:])
        workloads = []
        if workload_out is not None:
            workloads = run_workloads(result, workload_out.stem, _relative(out, workload_out))
    except (ConfigError, ValueError) as exc:
        fail(exc)
    for line in report.calibration_lines(result):
        typer.echo(line)
    png, doc = out.with_suffix(".png"), out.with_name(out.stem + ".runlog.json")
    save(result.profile, out)
    save_figure(_figure(preps[0], result.predicted, fit_steps), png)
    for lf in result.also:  # each other log's figure beside: P.<log>.png
        other = out.with_name(f"{out.stem}.{Path(lf.prepared.log.path).stem}.png")
        save_figure(_figure(lf.prepared, lf.predicted, fit_steps), other)
    write_json(doc, report.calibration_document(result))
    typer.echo(f"wrote {out}, {png} and {doc}")
    paths = (workload_out, full_path(workload_out)) if workload_out is not None else ()
    for (wl, obs), path in zip(workloads, paths):
        write_workload(wl, obs, path)
        typer.echo(f"wrote {path} and {data_path(path)}: {wl.description.rsplit('; ', 1)[-1]}")
    typer.echo(f"read and calibrated in {time.perf_counter() - t0:.1f}s (the {fit_steps} fit steps "
               f"read and worked out after {first.fit_ready_s:.1f}s)", err=True)
    typer.echo(json.dumps(report.calibration_summary(result)))


def _figure(p: Prepared, predicted, fit_steps: int):
    title = (f"{Path(p.log.path).name}: predicted (simulated) vs measured, factors fitted on the "
             f"first {fit_steps} steps")
    return report.figure(p, predicted, fit_steps, title)


def _relative(profile: Path, workload: Path) -> str:
    """The profile as the workload names it: beside it by name, else its absolute path."""
    return (
        profile.name
        if profile.resolve().parent == workload.resolve().parent
        else str(profile.resolve())
    )


def validate_run_log(run_log: Path, prof: Profile, flags: ShapeFlags,
                     out: Optional[Path]) -> None:
    """Every step of a second log predicted with the profile's factors over its own engine."""
    if flags.gpu is None and prof.cluster is not None:  # the same cluster: the profile's GPU
        flags = replace(flags, gpu=prof.cluster.gpu)
    p = _prepare(run_log, flags, 0)
    try:
        v = cal.validate(p, prof)
    except (ConfigError, ValueError) as exc:
        fail(exc)
    f = prof.run_factors
    sample = (
        "IN-SAMPLE: the profile was fitted on this log's first steps"
        if v.in_sample
        else "held out: the profile was not fitted on this log"
    )
    typer.echo(f"profile {prof.name} ({f.fitted_on}) over {p.database.name}; {sample}")
    for line in factor_report.engine_lines(p.engine):
        typer.echo(line)
    g = v.run_profile.run_factors
    typer.echo(f"factors over this run's engine: decode {g.decode_speed:.3g}x, "
               f"{1e3 * g.step_overhead_s:.3g} ms per engine step, {g.rl_step_s:.3g} s per RL "
               f"step, kernels outside the rollout {g.train_speed:.3g}x, "
               + ", ".join(f"{x.name} {x.value:.3g}" for x in g.extra)
               + " (the profile's multiples of this run's config's priors)")
    for line in report.error_lines(v.errors, "all steps"):
        typer.echo(line)
    if v.heldout is not None:  # in sample: the steps after the fitted ones are still held out
        for line in report.error_lines(v.heldout, "HELD OUT"):
            typer.echo(line)
    label = "held out" if v.in_sample else "all steps"
    for line in factor_report.coverage_line(label, v.coverage):
        typer.echo(line)
    if v.coverage is None:
        typer.echo("no interval: the profile records no uncertainty of its costs")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        doc = {
            "schema": report.SCHEMA,
            "log": p.log.path,
            "profile": prof.name,
            "summary": report.validation_summary(v),
            "per_step": report.per_step(p, v.predicted),
        }
        write_json(out / "validate-runlog.json", doc)
        save_figure(
            report.figure(
                p, v.predicted, 0, f"{run_log.name}: predicted with {prof.name} vs measured"
            ),
            out / "validate-runlog.png",
        )
        typer.echo(f"wrote {out}/validate-runlog.json and {out}/validate-runlog.png")
    typer.echo(json.dumps(report.validation_summary(v)))
