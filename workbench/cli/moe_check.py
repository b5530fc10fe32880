"""`tlt moe-check`: MoE decode steps of the measured-database profiles against NVIDIA's end-to-end
serving measurements (workbench/calibrate/database/silicon_check.py). The last line is JSON."""

from __future__ import annotations

import json

import typer

from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.schema import ConfigError
from workbench.report.tables import format_table


@app.command("moe-check")
def moe_check(
    gpus: str = typer.Option("h100,h200,b200", help="GPUs whose measured runs to check."),
) -> None:
    """The time per output token of every selected MoE serving run NVIDIA measured (gpt-oss-120b,
    DeepSeek-V3/R1, Qwen3-235B-A22B-FP8 on vLLM and SGLang), against the profile derived for its
    engine from the operator rows alone; median |error| per model, GPU and engine."""
    from workbench.calibrate.database.catalog import disk_cached_profile
    from workbench.calibrate.database.silicon_check import GPUS, median_abs_error, silicon_check

    chosen = tuple(g.strip() for g in gpus.split(",") if g.strip())
    if not chosen or any(g not in GPUS for g in chosen):
        fail(ConfigError("--gpus", "gpus", gpus, "a comma-separated list of " + ", ".join(GPUS)))

    def profile_of(arch, gpu, tp, framework, ep):
        typer.echo(f"  profile {arch.rsplit('/', 1)[-1]} {gpu} TP{tp} EP{ep or 1} {framework}",
                   err=True)
        return disk_cached_profile(arch, gpu, tp, framework, "h100-qwen2.5-7b-tp1", ep)

    try:
        rows = silicon_check(profile_of, chosen)
    except ConfigError as exc:
        fail(exc)
    typer.echo(format_table(
        [[r.model, r.gpu, r.framework, r.version or "?", f"TP{r.tp} EP{r.ep}", f"{r.isl}/{r.osl}",
          str(r.concurrency), f"{r.measured_ms:.2f}", f"{r.step_ms:.2f}", f"{r.predicted_ms:.2f}",
          f"{r.error_pct:+.1f}%"] for r in rows],
        ["model", "gpu", "engine", "version", "parallel", "in/out", "conc", "TPOT ms",
         "step ms", "predicted", "error"]))
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r.model, r.gpu, r.framework), []).append(r)
    summary = [[m, g, f, str(len(rs)), f"{median_abs_error(rs):.1f}%"]
               for (m, g, f), rs in sorted(groups.items())]
    typer.echo(format_table(summary, ["model", "gpu", "engine", "runs", "median |error|"]))
    typer.echo(f"all {len(rows)} runs: median |error| {median_abs_error(rows):.1f}%, within 15% in "
               f"{sum(abs(r.error_pct) <= 15 for r in rows)}")
    typer.echo(json.dumps({"runs": len(rows), "median_abs_error_pct": round(
        median_abs_error(rows), 2), "groups": {"/".join(k): round(median_abs_error(v), 2)
                                               for k, v in sorted(groups.items())}}))
