"""`tlt paper`: the simulator against the TLT paper's published figures."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from workbench.calibrate.published.microbenchmarks import PUBLISHED, load_published
from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.fileio import write_json
from workbench.contracts.schema import ConfigError, save
from workbench.paper import report
from workbench.paper.calibration import SPLIT, load_split
from workbench.paper.measured_lengths import load_declaration, sources_text
from workbench.paper.peers import peer_rows
from workbench.paper.profiles import refit
from workbench.paper.reproduce import reproduce
from workbench.report.tables import format_table


@app.command()
def paper(
    out: Path = typer.Option(...,
                             help="Output directory: paper.json (and "
                                  "profiles/ with --write-profiles)."),
    steps: int = typer.Option(20, min=1, help="RL steps simulated per Table A case."),
    seeds: int = typer.Option(1, min=1,
                              help="Simulate seeds 0..K-1 per case "
                                   "(the same draws for every system)."),
    published: Path = typer.Option(PUBLISHED, help="The published tables (YAML)."),
    write_profiles: bool = typer.Option(False, "--write-profiles",
                                        help="Also write the refitted GPU profiles "
                                             "to OUT/profiles/ (copy them over "
                                             "workbench/contracts/presets/profiles/ "
                                             "to update the presets)."),
    calib_steps: int = typer.Option(
        4, min=1, help="RL steps per simulation on the calibration grid (seed 0)."),
    split: Path = typer.Option(SPLIT,
                               help="The declared calibration split "
                                    "(YAML): parameters, ranges, grid."),
    calibrate: bool = typer.Option(True, "--calibrate/--no-calibrate",
                                   help="Add the measured-parts and leave-one-model-out columns."),
    peers: bool = typer.Option(False, "--peers",
                               help="Instead: TLT's peers (RollPacker, APRIL, "
                                    "fully-async RL, SPEC-RL), each in its "
                                    "own setting, against its published claim."),
) -> None:
    """Reproduce the TLT paper: Table A and G predicted; Tables C and E fitted."""
    t0 = time.perf_counter()
    if peers:
        _peers(out, steps, seeds, t0)
        return
    try:
        pub = load_published(published)
        the_split = load_split(split) if calibrate else None
    except ConfigError as exc:
        fail(exc)
    fit, profiles = refit(published)
    typer.echo(f"fitted {len(fit.rows)} published microbenchmarks: median "
               f"|error| {fit.median_abs_error_pct:.1f}%, max "
               f"{fit.max_abs_error_pct:.1f}% ({time.perf_counter() - t0:.1f}s)", err=True)
    stale = report.stale_presets(profiles)
    if stale:
        typer.echo(f"warning: the shipped profile presets {', '.join(stale)} "
                   "differ from this fit; rerun with --write-profiles and "
                   "copy them into workbench/contracts/presets/profiles/", err=True)
    if write_profiles:
        for p in report.profiles_to_write(profiles):
            save(p, out / "profiles" / f"{p.name}.yaml")
    rep = reproduce(fit, pub, steps=steps, seeds=list(range(seeds)),
                    on_progress=lambda m: typer.echo(f"  {m} ({time.perf_counter() - t0:.1f}s)",
                                                     err=True),
                    split=the_split, calib_steps=calib_steps)
    path = report.write(rep, out)
    typer.echo(f"TLT paper vs the simulator ({steps} steps x {seeds} seed(s) per Table A case); "
               "fit: the profiles were fitted to that row; predicted: not fitted to it")
    _columns(rep)
    if rep.accept_counts:
        typer.echo("")
        typer.echo("Table G counted as FastRL's logs count it (SGLang's scheduler) beside tlt "
                   "paper's rows:")
        g = pub.table_g
        typer.echo(report.accept_counts_text(rep, (g["rl_base_aligned"], g["rl_adapted"])))
    if rep.rounds:
        typer.echo("")
        typer.echo("Leave-one-model-out rounds (grid simulated "
                   f"at {rep.calib_steps} steps, seed 0):")
        typer.echo(report.rounds_text(rep))
    typer.echo("")
    typer.echo("Where Table A's time goes (per batch bucket: baseline's slowest "
               "engine's share of decode time / tlt's share of decode time with "
               "SD on / tlt's tokens per pass with SD on; SD is off above 32):")
    typer.echo(report.explanations_text(rep))
    _ceilings(rep, pub)
    typer.echo(f"wrote {path}" + (f" and {out / 'profiles'}/" if write_profiles else ""))
    typer.echo(json.dumps(report.summary(rep)))


def _columns(rep) -> None:
    """What each column is, the table, and where each row's measured lengths come from."""
    typer.echo("pre-registered: the tlt-eval workloads as written before any "
               "run; measured lengths: the same clusters and batches replaying the closest public "
               "measured lengths (traces/published/table-a-lengths.yaml); measured parts: DAPO-log "
               "length shape, measured-database GPU costs, nothing fitted; calibrated (LOO): "
               + (rep.split or "off"))
    typer.echo(report.rows_text(rep))
    typer.echo("")
    typer.echo("Measured lengths, per Table A model (declared before any result on them):")
    typer.echo(sources_text(load_declaration()))


def _ceilings(rep, pub) -> None:
    typer.echo("")
    typer.echo("Table A's TLT rows at the paper's own SD speedups (each SD bucket's decoding at "
               "Table C's best speedup at its smallest batch, none above 32; the baseline's "
               "slowest engine and rollout share as simulated): a row out of reach is held down "
               "by its batch sizes, not by SD's price (workbench/paper/ceiling.py)")
    typer.echo(report.ceilings_text(rep, pub))


def _peers(out: Path, steps: int, seeds: int, t0: float) -> None:
    rows, expl = peer_rows(steps, list(range(seeds)),
                           on_progress=lambda m: typer.echo(
                               f"  {m} ({time.perf_counter() - t0:.1f}s)", err=True))
    doc = report.peers_document(rows, expl, steps, list(range(seeds)))
    write_json(out / "peers.json", doc)
    typer.echo(f"TLT's peers in their own settings ({steps} steps x "
               f"{seeds} seed(s); published: the middle of the claim)")
    typer.echo(format_table([[r.case, f"{r.published:,.2f}", f"{r.predicted:,.2f}",
                              f"{r.error_pct:+.1f}%"] for r in rows],
                            ["case", "published", "predicted", "error"]))
    typer.echo("")
    typer.echo("What drives each prediction (means over the steps counted):")
    typer.echo(report.peers_text(expl))
    typer.echo(f"wrote {out / 'peers.json'}")
    typer.echo(json.dumps(doc["summary"]))

