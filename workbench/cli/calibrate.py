"""`tlt calibrate`: fit a profile to traces, or (`--model`) capture them on this machine first."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Optional

import typer

from workbench import calibrate as cal
from workbench.cli import runlog as rl
from workbench.cli.apps import app
from workbench.cli.common import WORKERS_OPTION, fail
from workbench.cli.task import REWARD_HELP, TASK_HELP, task_option
from workbench.contracts.fileio import write_json
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, save
from workbench.contracts.task import Task
from workbench.calibrate.captures.drift import apply_recorded
from workbench.calibrate.captures.report import SCHEMA as REPORT_SCHEMA
from workbench.calibrate.captures.run_dir import TRACE_DIR, is_run_dir, load_run
from workbench.calibrate.captures.runs import TABLE_HEADERS, fit_loaded_runs
from workbench.contracts.trace import TraceError, load_trace
from workbench.contracts.policy import DrafterKind
from workbench.report.tables import format_table
from workbench.calibrate.sweeps.split import HELP as HOLD_OUT_HELP
from workbench.contracts.sweep import is_sweep_dir


# The options whose help runs over several lines, out of the signature to keep the command short.
_TRACES_ARGUMENT = typer.Argument(
    None,
    help="Trace directories (written by `tlt capture` or "
         "`tlt train`) to fit on; optional with --model.")
_LENGTHS_OUT_OPTION = typer.Option(
    None, "--lengths-out",
    help="Also write a workload file (.yaml/.json): the traces' "
         "shape, the fitted length model and this profile.")
_MODEL_OPTION = typer.Option(
    None,
    help="Calibrate THIS machine: capture a fit set and a held-out set "
         "on this model (no SD, n-gram, and EAGLE with --drafter), "
         "interleaved and drift-normalised, then fit and validate.")
_DRIFT_OPTION = typer.Option(
    "auto",
    help="With --model: drift normalisation of the profile: probe (a reference workload "
         "timed between the capture's engine steps), reference (its wall time before and "
         "after each capture), cpu (its CPU time over the capture's CPU share), auto "
         "(the first of these measured). Every method's held-out errors are reported.")
_BASE_OPTION = typer.Option(
    "cpu-tiny",
    help="Profile preset or file: its values are kept for what the traces cannot identify (an "
         "engine sweep on a GPU: by default the measured database's profile of its model, GPU "
         "and TP).")
_HOLD_OUT_OPTION = typer.Option(None, "--hold-out",
                                help="With an engine sweep (SWEEP_DIR): " + HOLD_OUT_HELP)
_RUNS_OPTION = typer.Option(
    None, "--run",
    help="A `tlt train` run directory (repeat for more): fits what whole runs show on "
         "top of the rest (update and sync cost, the spot trainers' stop and throughput, "
         "the drafter's learning curve and staleness). Alone: on top of --base.")


@app.command()
def calibrate(
    traces: Optional[list[Path]] = _TRACES_ARGUMENT,
    out: Path = typer.Option(...,
                             help="The fitted profile (.yaml, .yml or .json); it loads "
                                  "wherever a profile does (`tlt sim --profile`)."),
    base: str = _BASE_OPTION,
    name: Optional[str] = typer.Option(None,
                                       help="The fitted profile's name "
                                            "(default: the --out file's stem)."),
    lengths_out: Optional[Path] = _LENGTHS_OUT_OPTION,
    warmup_steps: int = typer.Option(5, min=0,
                                     help="First engine steps of each engine that may "
                                          "be warm-up (dropped when they do not fit)."),
    model: Optional[Path] = _MODEL_OPTION,
    drafter: Optional[Path] = typer.Option(
        None,
        help="EAGLE drafter for --model (default on the reference model: "
             "traces/reference/drafter; without one the EAGLE captures are left out)."),
    rounds: int = typer.Option(
        2, min=1,
        help="With --model: how many times every fit shape is captured per " "drafter kind."),
    seed: int = typer.Option(0, help="With --model: seed of the captures' prompts and sampling; "
                             "with --run-log: of the order each step's modelled responses take."),
    drift: str = _DRIFT_OPTION,
    drift_window: int = typer.Option(2, min=1,
                                     help="With --model: a capture's slowness is "
                                          "the median of the reference measurements "
                                          "nearest it, this many on each side."),
    runs: Optional[list[Path]] = _RUNS_OPTION,
    task: Optional[Path] = typer.Option(None, help="With --model: " + TASK_HELP),
    reward: Optional[str] = typer.Option(None, help="With --task: " + REWARD_HELP),
    run_log: Optional[list[Path]] = typer.Option(None, "--run-log", help=rl.RUN_LOG_CALIBRATE),
    fit_steps: int = typer.Option(100, "--fit-steps", min=1, help="With --run-log: fit on these."),
    workload_out: Optional[Path] = rl.WORKLOAD_OUT,
    engine_profile: Optional[str] = rl.ENGINE_PROFILE,
    arch: Optional[str] = rl.ARCH, gpu: Optional[str] = rl.GPU, gpus: Optional[int] = rl.GPUS,
    tp: Optional[int] = rl.TP, prompts_per_step: Optional[int] = rl.PROMPTS,
    group_size: Optional[int] = rl.GROUP, max_response_tokens: Optional[int] = rl.CAP,
    max_batch: Optional[int] = rl.MAX_BATCH, ep: Optional[int] = rl.EP,
    workers: int = WORKERS_OPTION, hold_out: Optional[list[str]] = _HOLD_OUT_OPTION,
) -> None:
    """Fit a profile (step costs, drafter cost, acceptance) and a length model to traces, or
    (--run-log) run-level factors to a veRL run's log."""

    rl.check_profile_paths(out, lengths_out)
    if run_log:
        flags = rl.shape_flags(arch, gpu, gpus, tp, prompts_per_step, group_size,
                               max_response_tokens, max_batch, ep)
        return rl.calibrate_run_log(run_log, fit_steps, out, workload_out, name, flags, seed,
                                    not (traces or model is not None or runs), engine_profile)
    if traces and len(traces) == 1 and is_sweep_dir(traces[0]):
        return _calibrate_sweep(traces[0], base, hold_out, out, name)
    try:
        base_prof = load_profile(base)
        # refused before anything runs or is written
        loaded_runs = [load_run(r) for r in runs or []]
    except (ConfigError, TraceError) as exc:
        fail(exc)
    if model is None and not traces and loaded_runs:
        fit_runs_only(loaded_runs, base_prof, out, name)
        return
    if task is not None and model is None:
        fail(ValueError("--task: give --model too (the captures "
                        "of --model draw their prompts from it)"))
    user_task = task_option(task, reward)
    if model is not None:
        if traces:
            fail(ValueError("give either trace directories or --model "
                            "(which captures its own), not both"))
        if drift not in ("auto", "probe", "reference", "cpu"):
            fail(ConfigError("--drift", "<option>", drift, "auto, probe, reference or cpu"))
        self_calibrate_cli(model, drafter, out, base_prof, name, lengths_out, warmup_steps, rounds,
                           seed, drift, drift_window, user_task)
    elif not traces:
        fail(ValueError("tlt calibrate needs trace directories (TRACE_DIR...) "
                        "or --model DIR to capture them on this machine"))
    else:
        fit_traces_cli(traces, base_prof, out, name, lengths_out, warmup_steps)
    add_runs(loaded_runs, out)


def _calibrate_sweep(path: Path, base: str, hold_out: Optional[list[str]], out: Path,
                     name: Optional[str]) -> None:
    """`tlt calibrate SWEEP_DIR`: workbench/cli/sweep.py (imported here: its module registers
    engine-sweep after the real backend's commands); --base left at its default: the sweep's
    own base."""
    from workbench.cli.sweep import calibrate_sweep

    calibrate_sweep(path, None if base == "cpu-tiny" else base, hold_out, out, name)


def fit_traces_cli(traces: list[Path], base_prof, out: Path, name: Optional[str],
                   lengths_out: Optional[Path], warmup_steps: int) -> None:
    """`tlt calibrate TRACE_DIR...`: read, fit, write
    the profile, its report and optionally a workload."""
    t0 = time.perf_counter()
    try:
        loaded = []
        for i, t in enumerate(traces):
            tr, factor = apply_recorded(load_trace(t / TRACE_DIR if is_run_dir(t) else t))
            loaded.append(tr)
            scaled = "" if factor is None else (f"; times scaled x{factor:.4f}, the drift factor "
                                                "its meta records (tlt calibrate --model)")
            typer.echo(f"  [{i + 1}/{len(traces)}] read {t} "
                       f"({time.perf_counter() - t0:.1f}s){scaled}", err=True)
        typer.echo("  fitting step latency (5-fold held out), acceptance and lengths ...", err=True)
        result = cal.calibrate(loaded, base_prof, name=name or out.stem, warmup_steps=warmup_steps)
        typer.echo(f"  fitted ({time.perf_counter() - t0:.1f}s)", err=True)
    except (TraceError, ValueError) as exc:
        fail(exc)
    save(result.profile, out)
    report = out.with_name(out.stem + ".calibration.json")
    write_json(report, result.report(base_prof))
    _print_fit(result, len(loaded), base_prof)
    typer.echo(f"wrote {out} and {report} (the fit in full)")
    if lengths_out is not None:
        if result.lengths is None:
            fail(ValueError("--lengths-out: the traces did not support "
                            "a length model (see the notes above)"))
        wl = cal.trace_workload_spec(loaded[0], result.lengths, out, lengths_out,
                                     result.profile.name)
        save(wl, lengths_out)
        typer.echo(f"wrote {lengths_out}")


def _print_runs(fit) -> None:
    typer.echo(f"whole runs ({', '.join(fit.runs)}):")
    typer.echo(format_table(fit.table_rows(), TABLE_HEADERS))
    for note in fit.notes:
        typer.echo(f"note: {note}")


def add_runs(loaded_runs: list, out: Path) -> None:
    """The profile just written at `out`, refitted with what whole runs show; its report gains a
    `runs` section (workbench/calibrate/captures/runs.py)."""
    if not loaded_runs:
        return
    try:
        fit = fit_loaded_runs(loaded_runs, load_profile(out))
    except (TraceError, ValueError) as exc:
        fail(exc)
    report = out.with_name(out.stem + ".calibration.json")
    data = json.loads(report.read_text(encoding="utf-8")) if report.is_file() else {}
    data["runs"] = fit.to_dict()
    save(fit.profile, out)
    write_json(report, data)
    _print_runs(fit)
    typer.echo(f"wrote {out} and {report} again, with the whole runs' parameters")


def fit_runs_only(loaded_runs: list, base_prof, out: Path, name: Optional[str]) -> None:
    """`tlt calibrate --run RUN_DIR... --base P --out Q`: only what whole runs show, on top of P."""
    from dataclasses import replace

    try:
        fit = fit_loaded_runs(loaded_runs, replace(base_prof, name=name or out.stem))
    except (TraceError, ValueError) as exc:
        fail(exc)
    save(fit.profile, out)
    report = out.with_name(out.stem + ".calibration.json")
    write_json(report, {"schema": REPORT_SCHEMA, "profile": fit.profile.name,
                        "base_profile": base_prof.name, "fitted_on": list(fit.profile.fitted_on),
                        "parameters": {
                            p.key: {"value": p.value, "base": None, "fitted": p.fitted,
                                    "why_not_fitted": p.why_not_fitted}
                            for p in fit.params}, "runs": fit.to_dict()})
    _print_runs(fit)
    typer.echo(f"wrote {out} and {report}")


def _print_fit(result, n_traces: int, base_prof) -> None:
    """The fit in tables: parameters, step-latency error,
    per-trace bias, acceptance, length model, notes."""
    c = result.costs
    typer.echo(f"calibrated {result.profile.name!r} on {n_traces} trace(s), "
               f"{c.steps_used} engine steps (dropped: "
               f"{', '.join(f'{v} {k}' for k, v in c.steps_dropped.items()) or 'none'}); "
               f"base {base_prof.name}")
    typer.echo(format_table(result.param_rows(base_prof), ["parameter", "value", "base", "how"]))
    typer.echo("")
    typer.echo(f"step latency, median |error|: {c.mdape_pct:.2f}% in sample, "
               f"{c.cv_mdape_pct:.2f}% held out ({cal.CV_FOLDS}-fold); {c.outliers} "
               f"outlier steps (> 5 robust sd); robust fit scaled x{c.mean_scale:.3f} "
               f"to match total time; knee {c.knee_tokens:.0f} tokens")
    typer.echo(f"a step after requests finish costs {1e3 * c.finish_s:.2f} "
               "ms more per finished request (fitted, then spread over the "
               "profile's parameters: a Profile has no per-finish cost)")
    rows = [[t.trace, str(t.steps), f"{t.bias_pct:+.2f}%",
             f"{t.median_abs_error_pct:.2f}%"] for t in c.per_trace()]
    typer.echo(format_table(rows, ["trace", "steps", "total-time bias", "median |error|"]))
    if c.warmup_excess_s > 0:
        typer.echo(f"warm-up steps left out took {c.warmup_excess_s:.3f}s "
                   "more than the fit predicts (all engines)")
    for kind, a in result.acceptance.items():
        typer.echo(f"acceptance {kind}: alpha {a.alpha:.3f}, shape "
                   f"{a.shape:.3f}{'' if a.shape_fitted else ' (base)'} "
                   f"over {a.sd_steps} SD steps; rmse {a.rmse:.4f}")
        curve = a.curve()
        typer.echo(format_table([[str(i + 1), str(a.offered[i]), f"{a.r[i]:.3f}", f"{curve[i]:.3f}",
                                  f"{a.r_per_draft[i]:.3f}"]
                           for i in range(len(a.r))], ["position", "offered", "r traced",
                                                       "r fitted", "per draft"]))
    lf = result.length_fit
    if lf is not None:
        m = lf.model
        typer.echo(f"length model ({lf.responses} responses, {lf.groups} groups, cap {lf.cap}): "
                   f"clip_ratio {m.clip_ratio:.4f} (observed {lf.clip_ratio_observed:.4f}, "
                   f"censored fit {lf.clip_ratio_implied:.4f}), sigma {m.sigma:.3f}, "
                   f"group_correlation {m.group_correlation:.3f}, mean_accuracy "
                   f"{m.mean_accuracy:.3f}, accuracy_concentration "
                   f"{m.accuracy_concentration:.3g}, wrong_factor {m.wrong_factor:.3f}, drift "
                   f"{m.drift_per_step:+.3f}; median length {math.exp(lf.log_median_fit):.0f} "
                   f"fitted, {math.exp(lf.log_median_model):.0f} as the model's clip_ratio implies")
    for note in result.notes:
        typer.echo(f"note: {note}")


def self_calibrate_cli(model: Path, drafter: Optional[Path], out: Path, base_prof,
                       name: Optional[str], lengths_out: Optional[Path], warmup_steps: int,
                       rounds: int, seed: int, drift: str, drift_window: int,
                       user_task: Optional[Task] = None) -> None:
    """`tlt calibrate --model`: the checks before any
    engine starts, the run, its files and its summary."""
    from real.run.capture import CaptureError
    from real.run.config import default_drafter
    from real.tiny.model import load_model_dir
    from workbench.validate import capture_plan as plans
    from workbench.validate import self_calibration as sc

    try:
        load_model_dir(model)  # its errors name --model
        eagle = next(s.policy() for s in plans.plan_captures() if s.kind == DrafterKind.EAGLE)
        drafter = default_drafter(model, eagle, drafter)
        if drafter is not None and not (Path(drafter) / "config.json").is_file():
            raise CaptureError(f"--drafter {drafter}: no config.json (give an "
                               "EAGLE checkpoint from `tlt drafter train`)")
    except (FileNotFoundError, ValueError) as exc:
        fail(exc)
    # vLLM logs every engine start at INFO on stdout; the progress lines (stderr) say what runs.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        fail(RuntimeError(f"--model needs vLLM ({exc}); install the "
                          "project with its 'cpu' or 'gpu' extra"))
    kinds = plans.KINDS if drafter is not None else (DrafterKind.NONE, DrafterKind.NGRAM)
    plan = plans.plan_captures(kinds, rounds=rounds, seed=seed)
    captures_dir = out.with_name(out.stem + ".captures")
    workload_out = lengths_out or out.with_name(out.stem + ".workload" + out.suffix)
    typer.echo(f"self-calibration of this machine on {model}: {len(plan)} "
               f"captures ({', '.join(kinds)}; {rounds} round(s)), "
               f"drafter {drafter or 'none (no EAGLE captures)'}", err=True)
    try:
        machine = plans.VllmMachine(model, drafter, seed=seed, task=user_task)
        result = sc.run_self_calibration(machine, plan, base_prof, name or out.stem, captures_dir,
                                         progress=lambda p: typer.echo(p.line(), err=True),
                                         warmup_steps=warmup_steps, method=drift,
                                         window=drift_window)
        written = sc.write_self_calibration(result, out, base_prof, captures_dir, workload_out)
    except (TraceError, ValueError) as exc:
        fail(exc)
    _print_self_calibration(result)
    typer.echo(f"wrote {', '.join(map(str, written))}")
    typer.echo(json.dumps(result.summary(out)))


def _print_self_calibration(result) -> None:
    c = result.calibration.costs
    typer.echo(f"calibrated {result.profile.name!r} on "
               f"{sum(r.spec.role == 'fit' for r in result.captures)} fit "
               f"captures, {c.steps_used} engine steps; step latency median "
               f"|error| {c.cv_mdape_pct:.2f}% held out ({cal.CV_FOLDS}-fold)")
    refs = [r.reference_s for r in result.references]
    factors = [r.drift.factor for r in result.captures]
    tracking = ", ".join(f"{m} {c:.2f}" for m, c in result.tracking.correlation_by_method.items())
    probe = [c.factors["probe"] for c in result.captures if "probe" in c.factors]
    prof = result.profile
    seen = (f"the speed probe's mean over each capture moved x{min(probe):.3f}-x{max(probe):.3f} "
            "around the run's median" + (f" ({prof.speed_probe_ms} ms; step slowness = "
                                         f"probe slowness ^ {prof.speed_probe_exponent})"
                         if prof.speed_probe_ms else "") + "; " if probe else "")
    typer.echo(f"drift: {seen}reference {1e3 * min(refs):.1f}-{1e3 * max(refs):.1f} ms over "
               f"{len(refs)} measurements; profile normalised by {result.method} (window "
               f"{result.window}): mean factors x{min(factors):.3f}-x{max(factors):.3f}; "
               "correlation of the slowness measure with the engine's over "
               f"{len(result.tracking.engine_ratio)} captures: {tracking}")
    methods = list(result.heldout[0].errors_by_method) if result.heldout else []
    rows = [[h.trace, h.kind, f"x{h.drift_factor:.3f}",
             f"{h.measured_rollout_s:.2f}", f"{h.predicted_rollout_s:.2f}",
             f"{h.error_pct:+.2f}%", f"{h.raw_error_pct:+.2f}%",
             *(f"{h.errors_by_method[m]:+.2f}%" for m in methods)] for h in result.heldout]
    typer.echo(format_table(rows,
                            ["held out", "kind", "drift", "measured s", "predicted s", "error",
                             "raw error", *(f"error ({m})" for m in methods)]))
    typer.echo(format_table([[b.kind, f"{b.min_batch}-{b.max_batch}", str(b.steps),
                              f"{b.measured_ms:.2f}", f"{b.predicted_ms:.2f}",
                              f"{b.error_pct:+.1f}%"] for b in result.buckets],
                            ["kind", "batch", "steps", "measured ms", "predicted ms", "error"]))
