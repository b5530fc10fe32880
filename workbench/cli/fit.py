"""`tlt calibrate`: fit a profile to traces."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Optional

import typer

from workbench import calibrate as cal
from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.fileio import write_json
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, save
from workbench.contracts.trace import TraceError, load_trace
from workbench.tables import format_table


@app.command()
def calibrate(
    traces: list[Path] = typer.Argument(..., help="Trace directories (written by `tlt capture` or `tlt train`) to fit on."),
    out: Path = typer.Option(..., help="The fitted profile (.yaml, .yml or .json); it loads wherever a profile does (`tlt sim --profile`)."),
    base: str = typer.Option("cpu-tiny", help="Profile preset or file: its values are kept for what the traces cannot identify."),
    name: Optional[str] = typer.Option(None, help="The fitted profile's name (default: the --out file's stem)."),
    lengths_out: Optional[Path] = typer.Option(None, "--lengths-out", help="Also write a workload file (.yaml/.json): the traces' shape, the fitted length model and this profile."),
    warmup_steps: int = typer.Option(5, min=0, help="First engine steps of each engine that may be warm-up (dropped when they do not fit)."),
) -> None:
    """Fit a profile (step latency vs batch, context and draft length; drafter cost; per-position acceptance) and a length model to traces."""

    for path, what in ((out, "--out"), (lengths_out, "--lengths-out")):
        if path is not None and path.suffix not in (".yaml", ".yml", ".json"):
            fail(ConfigError(what, "<file>", str(path), "a .yaml, .yml or .json file name"))
    try:
        base_prof = load_profile(base)
    except ConfigError as exc:
        fail(exc)
    t0 = time.perf_counter()
    try:
        loaded = []
        for i, t in enumerate(traces):
            loaded.append(load_trace(t))
            typer.echo(f"  [{i + 1}/{len(traces)}] read {t} ({time.perf_counter() - t0:.1f}s)", err=True)
        typer.echo("  fitting step latency (5-fold held out), acceptance and lengths ...", err=True)
        result = cal.calibrate(loaded, base_prof, name=name or out.stem, warmup_steps=warmup_steps)
        typer.echo(f"  fitted ({time.perf_counter() - t0:.1f}s)", err=True)
    except (TraceError, ValueError) as exc:
        fail(exc)
    save(result.profile, out)
    report = out.with_name(out.stem + ".calibration.json")
    write_json(report, result.report(base_prof))
    c = result.costs
    typer.echo(f"calibrated {result.profile.name!r} on {len(loaded)} trace(s), {c.steps_used} engine steps "
               f"(dropped: {', '.join(f'{v} {k}' for k, v in c.steps_dropped.items()) or 'none'}); base {base_prof.name}")
    typer.echo(format_table(result.param_rows(base_prof), ["parameter", "value", "base", "how"]))
    typer.echo("")
    typer.echo(f"step latency, median |error|: {c.mdape_pct:.2f}% in sample, {c.cv_mdape_pct:.2f}% held out "
               f"({cal.CV_FOLDS}-fold); {c.outliers} outlier steps (> 5 robust sd); "
               f"robust fit scaled x{c.mean_scale:.3f} to match total time; knee {c.knee_tokens:.0f} tokens")
    typer.echo(f"a step after requests finish costs {1e3 * c.finish_s:.2f} ms more per finished request "
               f"(fitted, then spread over the profile's parameters: a Profile has no per-finish cost)")
    rows = [[t.trace, str(t.steps), f"{t.bias_pct:+.2f}%", f"{t.median_abs_error_pct:.2f}%"] for t in c.per_trace()]
    typer.echo(format_table(rows, ["trace", "steps", "total-time bias", "median |error|"]))
    if c.warmup_excess_s > 0:
        typer.echo(f"warm-up steps left out took {c.warmup_excess_s:.3f}s more than the fit predicts (all engines)")
    for kind, a in result.acceptance.items():
        typer.echo(f"acceptance {kind}: alpha {a.alpha:.3f}, shape {a.shape:.3f}"
                   f"{'' if a.shape_fitted else ' (base)'} over {a.sd_steps} SD steps; rmse {a.rmse:.4f}")
        curve = a.curve()
        typer.echo(format_table([[str(i + 1), str(a.offered[i]), f"{a.r[i]:.3f}", f"{curve[i]:.3f}", f"{a.r_per_draft[i]:.3f}"]
                           for i in range(len(a.r))], ["position", "offered", "r traced", "r fitted", "per draft"]))
    lf = result.length_fit
    if lf is not None:
        m = lf.model
        typer.echo(f"length model ({lf.responses} responses, {lf.groups} groups, cap {lf.cap}): clip_ratio {m.clip_ratio:.4f} "
                   f"(observed {lf.clip_ratio_observed:.4f}, censored fit {lf.clip_ratio_implied:.4f}), sigma {m.sigma:.3f}, "
                   f"group_correlation {m.group_correlation:.3f}, mean_accuracy {m.mean_accuracy:.3f}, "
                   f"accuracy_concentration {m.accuracy_concentration:.3g}, wrong_factor {m.wrong_factor:.3f}, "
                   f"drift {m.drift_per_step:+.3f}; median length {math.exp(lf.log_median_fit):.0f} fitted, "
                   f"{math.exp(lf.log_median_model):.0f} as the model's clip_ratio implies")
    for note in result.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"wrote {out} and {report} (the fit in full)")
    if lengths_out is not None:
        if result.lengths is None:
            fail(ValueError("--lengths-out: the traces did not support a length model (see the notes above)"))
        wl = cal.trace_workload_spec(loaded[0], result.lengths, out, lengths_out, result.profile.name)
        save(wl, lengths_out)
        typer.echo(f"wrote {lengths_out}")
