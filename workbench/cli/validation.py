"""`tlt validate`: judge a profile by re-simulating traced runs, or whole `tlt train` runs.

A trace directory (`tlt capture`) is judged on its rollout (`workbench.validate.capture`); a run
directory (`tlt train --out`: metrics.csv beside trace/) on every phase of every RL step
(`workbench.validate.run_prediction`). One command takes one kind, so its last JSON line has one
meaning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from workbench.calibrate.captures.run_dir import TRACE_DIR, is_run_dir
from workbench.cli import runlog as rl
from workbench.cli.apps import app
from workbench.cli.common import WORKERS_OPTION, fail
from workbench.contracts.fileio import write_json
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.trace import TraceError, load_trace
from workbench.validate.run_prediction import PHASES, RunPrediction, error_pct, predict_run
from workbench.report.tables import format_table
from workbench.validate.capture import save_validations, validations_summary
from workbench.validate.capture import validate as run_validate

RUN_SCHEMA = "tlt-validate-run/2"  # 2: a step's key is rl_step (1: step)


@app.command()
def validate(
    traces: Optional[list[Path]] = typer.Argument(
        None, help="Trace directory to re-simulate, or a `tlt train` run directory (metrics.csv "
        "and trace/: every phase of every RL step predicted); several: each, then the total."),
    profile: str = typer.Option(...,
                                help="Profile preset name or file to test "
                                     "(e.g. one `tlt calibrate` wrote)."),
    seed: int = typer.Option(0, help="Seed of the simulator's acceptance noise (and bandits)."),
    out: Optional[Path] = typer.Option(
        None, help="Also write OUT/validate.json and OUT/validate.png (traces), "
        "OUT/validate-run.json (runs) or OUT/validate-runlog.json and .png (--run-log)."),
    run_log: Optional[Path] = typer.Option(
        None, "--run-log", help=rl.RUN_LOG_HELP + " Every step predicted with --profile's "
        "run-level factors (from tlt calibrate --run-log) over this run's own engine."),
    arch: Optional[str] = rl.ARCH, gpu: Optional[str] = rl.GPU, gpus: Optional[int] = rl.GPUS,
    tp: Optional[int] = rl.TP, prompts_per_step: Optional[int] = rl.PROMPTS,
    group_size: Optional[int] = rl.GROUP, max_response_tokens: Optional[int] = rl.CAP,
    max_batch: Optional[int] = rl.MAX_BATCH, ep: Optional[int] = rl.EP,
    workers: int = WORKERS_OPTION,
) -> None:
    """Re-simulate traced runs with a profile and print each error.

    The last line is JSON {predicted_rollout_s, measured_rollout_s, error_pct}; for run
    directories {predicted_step_s, measured_step_s, error_pct, phases}; for --run-log {steps,
    gen_median_abs_error_pct, step_median_abs_error_pct, ...}."""

    try:
        prof = load_profile(profile)
    except ConfigError as exc:
        fail(exc)
    if run_log is not None:
        if traces:
            fail(ValueError("--run-log: give it alone, not with trace or run directories"))
        flags = rl.shape_flags(arch, gpu, gpus, tp, prompts_per_step, group_size,
                               max_response_tokens, max_batch, ep)
        rl.validate_run_log(run_log, prof, flags, out)
        return
    if not traces:
        fail(ValueError("tlt validate needs trace or run directories, or --run-log LOG"))
    runs = [is_run_dir(t) for t in traces]
    if any(runs) and not all(runs):
        fail(ValueError(f"{traces[runs.index(False)] if any(runs) else traces[0]}: "
                        "mixes trace and run directories; validate traces (tlt "
                        "capture) and runs (tlt train --out) in separate commands"))
    if all(runs):
        validate_runs(traces, prof, seed, out)
    else:
        validate_traces(traces, prof, seed, out)


def validate_traces(traces: list[Path], prof: Profile, seed: int, out: Optional[Path]) -> None:
    results = []
    try:
        for t in traces:
            results.append(run_validate(prof, load_trace(t), seed=seed))
    except (TraceError, ValueError) as exc:
        fail(exc)
    rows = []
    for v in results:
        d = v.details
        drift = "-" if v.drift_factor is None else f"x{v.drift_factor:.3f}"
        rows.append([v.trace, str(d.workers), f"{d.prompts}x{d.samples}", str(d.max_batch),
                     d.drafter, f"{d.accept_len_traced:.2f}/{d.accept_len_simulated:.2f}",
                     f"{v.predicted_rollout_s:,.3f}", f"{v.measured_rollout_s:,.3f}", drift,
                     f"{v.error_pct:+.2f}%", f"{v.raw_error_pct:+.2f}%"])
    typer.echo(f"profile {prof.name}: traced runs re-simulated "
               "with their own lengths, schedule and drafter")
    typer.echo(format_table(rows, ["trace", "engines", "prompts", "batch", "drafter",
                                   "accept len trace/sim",
                             "predicted s", "measured s", "drift", "error", "raw error"]))
    if any(v.drift_factor is not None for v in results):
        typer.echo("measured s and error at the profile's machine speed (speed probe "
                   f"{prof.speed_probe_ms} ms): each stretch of a trace at its probe samples' "
                   "speed, drift its mean factor (workbench/calibrate/captures/probe_drift.py); "
                   "raw error: against the clock, the machine's drift in")
    elif prof.speed_probe_ms is None:
        typer.echo("no drift correction: the profile records no machine speed (fitted on "
                   "traces without a speed probe); error includes whatever the machine drifted")
    for v in results:
        d = v.details
        extra = ("; schedule buckets set from the trace: "
                 f"{[o.to_dict() for o in d.schedule_overridden]}"
                 if d.schedule_overridden else "")
        span = d.span_vs_rollout_pct
        typer.echo(f"{v.trace}: measured from {d.measured_basis}"
                   + (f" (request span differs by {span:+.2f}%)" if span is not None else "")
                   + f"; groups on their traced engine: {100 * d.shards_match:.0f}%{extra}")
        typer.echo(f"  engine steps traced {d.engine_steps_traced}, simulated "
                   f"{d.engine_steps_simulated:,.0f}; the profile on the traced steps "
                   f"gives {d.step_cost_rollout_s:,.3f}s (cost model "
                   f"{d.cost_error_pct:+.2f}%, simulator pacing {d.pace_error_pct:+.2f}%)")
    if out is not None:
        save_validations(results, out, prof)
        typer.echo(f"wrote {out}/validate.json and {out}/validate.png")
    typer.echo(json.dumps(validations_summary(results)))


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:+.1f}%"


def show_run(p: RunPrediction) -> None:
    """One run's per-phase means and per-step rows."""
    sample = ("IN-SAMPLE: the profile was fitted on this run" if p.in_sample
              else "held out: the profile was not fitted on this run")
    typer.echo(f"run {p.run} (policy {p.policy}), profile "
               f"{p.profile}, {len(p.steps)} RL steps; {sample}")
    typer.echo(format_table([[ph, f"{p.predicted.get(ph):.3f}", f"{p.measured.get(ph):.3f}",
                              _pct(p.phase_error_pct(ph))]
                             for ph in PHASES], ["phase (mean per step)", "predicted s",
                                                 "measured s", "error"]))
    rows = []
    for s in p.steps:
        pr, me = s.predicted, s.measured
        rows.append([str(s.rl_step)] + [f"{pr.get(ph):.2f}/{me.get(ph):.2f}" for ph in (
            "rollout", "train", "sync",
            "step")]
                    + [_pct(error_pct(pr.step_s, me.step_s)),
                       f"{s.accept_len_predicted:.2f}/{s.accept_len_measured:.2f}",
                       f"{s.drafter_predicted}/{s.drafter_measured or '?'}"])
    typer.echo(format_table(rows, ["step", "rollout s pred/meas", "update s", "sync s", "step s",
                                   "step error", "accept len", "drafter"]))
    typer.echo("  sync includes the wait for the spot trainers to stop (metrics.csv "
               "stop_latency_s; the profile's phases.spot_stop_s); 'other' is the rest of the "
               "measured step (rewards, the checkpoint), which the simulator does not model")


def validate_runs(runs: list[Path], prof: Profile, seed: int, out: Optional[Path]) -> None:
    try:
        preds = [predict_run(load_trace(r / TRACE_DIR), prof, seed=seed) for r in runs]
    except (TraceError, ValueError) as exc:
        fail(exc)
    typer.echo(f"profile {prof.name}: runs re-simulated from their own responses and their "
               "recorded policy (bandit, drafter and spot training simulated, not replayed)")
    for p in preds:
        show_run(p)
    if out is not None:
        write_json(out / "validate-run.json", {"schema": RUN_SCHEMA, "profile": prof.name,
                                               "fitted_on": list(prof.fitted_on),
                                               "runs": [p.to_dict() for p in preds]})
        typer.echo(f"wrote {out}/validate-run.json")
    if len(preds) == 1:
        typer.echo(json.dumps(preds[0].summary()))
        return
    pred, meas = sum(p.predicted.step_s for p in preds), sum(p.measured.step_s for p in preds)
    typer.echo(json.dumps({"predicted_step_s": round(pred, 4), "measured_step_s": round(meas, 4),
                           "error_pct": round(error_pct(pred, meas), 3),
                           "runs": {p.run: p.summary() for p in preds}}))
