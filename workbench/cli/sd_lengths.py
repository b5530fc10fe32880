"""`tlt gpu-check`'s part on SD's speedup by draft length: every public figure measured at several
draft lengths beside its prediction, and per series and batch the best draft length published and
predicted (workbench/calibrate/published/sd_length.py)."""

from __future__ import annotations

import typer

from workbench.report.tables import format_table


def sd_by_length_report() -> None:
    from workbench.calibrate.published import sd_length as sl
    from workbench.calibrate.published.sd_series import SD_LENGTH_PUBLISHED
    from workbench.cli.sd_reports import shipped_constants

    used = shipped_constants()
    series = sl.length_series()
    checks = sl.length_checks(series, used)
    typer.echo(f"SD's speedup by draft length ({SD_LENGTH_PUBLISHED}, with the TLT paper's Table "
               "C and depth x TV grid and sd-by-batch.yaml's series at several lengths):")
    typer.echo(format_table(
        [[c.series, c.role, str(c.batch), c.strategy, f"TP{c.tp}", f"{c.published:.3f}",
          f"{c.predicted:.3f}", f"{c.error_pct:+.1f}%"] for c in checks],
        ["series", "role", "batch", "strategy", "tp", "published", "predicted", "error"]))
    best = sl.best_lengths(checks)
    typer.echo("the best draft length per series and batch, among those measured:")
    typer.echo(format_table(
        [[b.series, b.role, str(b.batch), " ".join(b.candidates), b.published, b.predicted,
          "agrees" if b.agrees else "differs"] for b in best],
        ["series", "role", "batch", "measured", "best published", "best predicted", ""]))
    s = sl.summarise(checks)
    typer.echo(f"held out: {s.held_out_points} speedups, median |error| "
               f"{s.held_out_median_abs_error_pct:.1f}% (goal 20%); best draft length the same "
               f"in {s.best_agree} of {s.best_total} series x batch; fit: median |error| "
               f"{s.fit_median_abs_error_pct:.1f}%")
    for name, why in sl.unpriced(series, used):
        pts = next(x for x in series if x.name == name).points
        figures = ", ".join(f"{p.strategy.name} at batch {p.batch}: {p.value:.3f}" for p in pts)
        typer.echo(f"context, not priced here ({why}): {name}: {figures}")
