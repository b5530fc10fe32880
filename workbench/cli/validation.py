"""`tlt validate`: judge a profile by re-simulating traced runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.trace import TraceError, load_trace
from workbench.tables import format_table
from workbench.validate import save_validations, validations_summary
from workbench.validate import validate as run_validate


@app.command()
def validate(
    traces: list[Path] = typer.Argument(..., help="Trace directory to re-simulate (several: each, then the total)."),
    profile: str = typer.Option(..., help="Profile preset name or file to test (e.g. one `tlt calibrate` wrote)."),
    seed: int = typer.Option(0, help="Seed of the simulator's acceptance noise."),
    out: Optional[Path] = typer.Option(None, help="Also write OUT/validate.json (every run in detail) and OUT/validate.png."),
) -> None:
    """Re-simulate traced runs with a profile; the last line is JSON {predicted_rollout_s, measured_rollout_s, error_pct}."""

    try:
        prof = load_profile(profile)
    except ConfigError as exc:
        fail(exc)
    results = []
    try:
        for t in traces:
            results.append(run_validate(prof, load_trace(t), seed=seed))
    except (TraceError, ValueError) as exc:
        fail(exc)
    rows = []
    for v in results:
        d = v.details
        rows.append([v.trace, str(d.workers), f"{d.prompts}x{d.samples}", str(d.max_batch), d.drafter,
                     f"{d.accept_len_traced:.2f}/{d.accept_len_simulated:.2f}",
                     f"{v.predicted_rollout_s:,.3f}", f"{v.measured_rollout_s:,.3f}", f"{v.error_pct:+.2f}%"])
    typer.echo(f"profile {prof.name}: traced runs re-simulated with their own lengths, schedule and drafter")
    typer.echo(format_table(rows, ["trace", "engines", "prompts", "batch", "drafter", "accept len trace/sim",
                             "predicted s", "measured s", "error"]))
    for v in results:
        d = v.details
        extra = (f"; schedule buckets set from the trace: {[o.to_dict() for o in d.schedule_overridden]}"
                 if d.schedule_overridden else "")
        span = d.span_vs_rollout_pct
        typer.echo(f"{v.trace}: measured from {d.measured_basis}"
                   + (f" (request span differs by {span:+.2f}%)" if span is not None else "")
                   + f"; groups on their traced engine: {100 * d.shards_match:.0f}%{extra}")
        typer.echo(f"  engine steps traced {d.engine_steps_traced}, simulated {d.engine_steps_simulated:,.0f}; "
                   f"the profile on the traced steps gives {d.step_cost_rollout_s:,.3f}s "
                   f"(cost model {d.cost_error_pct:+.2f}%, simulator pacing {d.pace_error_pct:+.2f}%)")
    if out is not None:
        save_validations(results, out, prof)
        typer.echo(f"wrote {out}/validate.json and {out}/validate.png")
    typer.echo(json.dumps(validations_summary(results)))
