"""`tlt tail`: the long tail checked: real rollouts' drains (the Search-R1 trace's steps, public
measurements of others) beside the simulator's, with each set-up's unknowns varied."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.fileio import write_json
from workbench.contracts.schema import ConfigError
from workbench.report.tail_plot import tail_figure
from workbench.validate.tail_report import (DRAWS, document, item_text, panels, run_tail,
                                            trace_text)


@app.command()
def tail(
    out: Path = typer.Option(..., help="Output directory: tail.json and tail.png."),
    chart: Optional[Path] = typer.Option(None, help="Also draw the chart here (a PNG path)."),
    seeds: int = typer.Option(3, min=1, help="Seeds 0..K-1 per evidence case."),
    profile: Optional[str] = typer.Option(None, help="Replay the trace's steps on this engine (a "
                                                     "preset or a file; default: the trace "
                                                     "workload's)."),
    draws: int = typer.Option(DRAWS, min=0, help="Also on this many engines drawn from the "
                                                 "engine's trace fit (its factors' covariance)."),
) -> None:
    """The tail checked: completion curves and time at each running batch, measured vs simulated."""
    t0 = time.perf_counter()
    try:
        run = run_tail(tuple(range(seeds)), profile, draws, progress=lambda m: typer.echo(
            f"  {m} ({time.perf_counter() - t0:.1f}s)", err=True))
    except (ConfigError, ValueError) as exc:
        fail(exc)
    typer.echo(f"The tail checked: {run.trace}'s steps, measured (its turns' engine and tool "
               "latencies) beside the simulator's replay; largest gap = the most the share of "
               "trajectories done differs at any moment (goal: 10 points); the engine's fit "
               "step(s) marked, the others held out")
    typer.echo(trace_text(run))
    typer.echo("")
    typer.echo("Public measurements (traces/published/tail-evidence.yaml; each simulated case on "
               f"seeds 0-{seeds - 1}, the median and range of its largest gap to the measured "
               "points; engine-time and tok/s per engine at the measured running batches):")
    for it, results in run.evidence:
        typer.echo("")
        typer.echo(item_text(it, results))
    doc = document(run)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "tail.json", doc)
    fig = tail_figure(panels(run))
    for path in [out / "tail.png"] + ([chart] if chart else []):
        tmp = path.with_suffix(".tmp.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, dpi=110)
        tmp.replace(path)
    typer.echo(f"wrote {out / 'tail.json'}, {out / 'tail.png'}" + (f" and {chart}" if chart else "")
               + f" ({time.perf_counter() - t0:.1f}s)")
    typer.echo(json.dumps(doc["summary"]))

