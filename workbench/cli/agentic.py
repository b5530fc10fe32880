"""`tlt workload check`: an agentic workload's simulated turns against the trace it came from."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

import typer

from workbench.cli.apps import workload_app
from workbench.cli.common import fail
from workbench.contracts.fileio import write_json
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, save
from workbench.contracts.turn_data import read_turns
from workbench.contracts.workload import load_workload
from workbench.report.tables import format_table
from workbench.validate.agentic_engine import trace_engine
from workbench.validate.agentic_trace import StepCheck, check, summary


def _steps(text: str, batches: int) -> list[int]:
    if not text:
        return list(range(batches))
    try:
        steps = sorted({int(s) for s in text.split(",")})
    except ValueError:
        raise ConfigError("--steps/--fit-steps", "steps", text, "step numbers, e.g. 0 or 1,2,3") \
            from None
    bad = [s for s in steps if not 0 <= s < batches]
    if bad:
        raise ConfigError("--steps/--fit-steps", "steps", bad[0],
                          f"a step of the trace, 0 to {batches - 1}")
    return steps


def _table(checks: list[StepCheck], fitted: set[int]) -> str:
    rows = [[f"{c.step}{' (fit)' if c.step in fitted else ''}", f"{c.turns:,}",
             f"{c.median_measured_s:.1f}", f"{c.median_simulated_s:.1f}",
             f"{c.median_error:+.1%}", f"{c.median_abs_error:.1%}",
             f"{c.makespan_measured_s:.0f}", f"{c.makespan_simulated_s:.0f}",
             f"{c.makespan_error:+.1%}", f"{c.prefill_measured:,}", f"{c.prefill_simulated:,}"]
            for c in checks]
    return format_table(rows, ["step", "turns", "turn p50 meas s", "sim s", "error",
                               "|turn error| p50", "makespan meas s", "sim s", "error",
                               "prefill meas", "sim"])


@workload_app.command("check")
def check_trace(
    workload: str = typer.Argument(..., help="An agentic workload replaying a trace with engine "
                                             "latencies (e.g. polytrace-search-r1-qwen2.5-7b)."),
    steps: str = typer.Option("", help="Steps to check, e.g. 1,2,3,4 (default: all)."),
    fit_steps: str = typer.Option("", help="Fit the engine's two run-level factors on these "
                                           "steps first (the measured database's costs for the "
                                           "workload's model, TP and framework, carried to its "
                                           "GPU by datasheet where the database lacks it); "
                                           "default: check the workload's own profile."),
    profile_out: Optional[Path] = typer.Option(None, help="With --fit-steps: write the fitted "
                                                          "profile here."),
    out: Optional[Path] = typer.Option(None, help="Also write OUT/check.json."),
) -> None:
    """Replay an agentic trace's steps and set each turn's simulated engine latency and each step's
    makespan beside the measured ones; the last line is JSON."""
    t0 = time.perf_counter()
    try:
        wl = load_workload(workload)
        if not wl.agentic.enabled or not wl.agentic.data:
            raise ConfigError(workload, "agentic.data", wl.agentic.data or "<none>",
                              "the turns table of an imported agentic trace")
        batches = read_turns(wl.agentic.data).batches
        checked = _steps(steps, batches)
        fitted = _steps(fit_steps, batches) if fit_steps else []
        if fitted:
            name = profile_out.stem if profile_out is not None else ""
            prof, fit = trace_engine(wl, fitted, name, lambda s: typer.echo(s, err=True))
            for line in fit.lines():
                typer.echo(f"fit: {line}")
            if profile_out is not None:
                save(prof, profile_out)
                typer.echo(f"wrote {profile_out}")
        else:
            prof = load_profile(wl.profile)
            fit = None
        typer.echo(f"workload: {wl.description}")
        typer.echo(f"engine: {prof.name}: {prof.description}")
        checks, turns = check(replace(wl, profile=prof.name), prof, checked,
                              lambda s: typer.echo(s, err=True))
    except (ConfigError, ValueError) as exc:
        fail(exc)
    typer.echo(_table(checks, set(fitted)))
    typer.echo(format_table([[str(k), f"{int(r.turns):,}", f"{r.measured_s:.1f}",
                              f"{r.simulated_s:.1f}", f"{r.simulated_s / r.measured_s - 1:+.1%}"]
                             for k, r in turns.iterrows()],
                            ["turn", "turns", "p50 meas s", "p50 sim s", "error"]))
    held = [c for c in checks if c.step not in fitted]
    result = {"steps": checked, "fit_steps": fitted, "held_out": summary(held),
              "per_step": [asdict(c) | {"median_error": c.median_error,
                                        "makespan_error": c.makespan_error} for c in checks]}
    if fit is not None:
        result["fit"] = asdict(fit)
    typer.echo(f"checked in {time.perf_counter() - t0:.1f}s", err=True)
    if out is not None:
        write_json(out / "check.json", result)
    typer.echo(json.dumps({"held_out_steps": [c.step for c in held], **result["held_out"]}))
