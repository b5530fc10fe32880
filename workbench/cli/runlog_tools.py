"""`tlt runlog extract` (a console log's metrics, launch command and printed config with its
provenance, to ship where the log itself may not be) and `tlt runlog transfer` (the transfer
table: every log of a manifest calibrated on its own first steps, and each predicting the others
of its cluster or recipe)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from workbench.cli.apps import runlog_app
from workbench.cli.common import fail
from workbench.contracts.fileio import write_atomic, write_json
from workbench.contracts.schema import ConfigError
from workbench.runlog.extract import Excerpt, Provenance, extract
from workbench.runlog.transfer_table import build, load_manifest, table_json, table_lines

MANIFEST = "traces/published/verl-runs/transfer.json"


@runlog_app.command("extract")
def extract_cmd(
    log: Path = typer.Argument(..., help="A veRL console log (.gz read too)."),
    repository: str = typer.Option(..., help="Where the log is published (owner/name)."),
    commit: str = typer.Option(..., help="The commit of that repository the log is read at."),
    path: str = typer.Option(..., help="The log's path in that repository."),
    out: Path = typer.Option(..., help="NAME.metrics.json to write."),
    excerpt_of_chars: int = typer.Option(0, min=0, help="LOG is a verbatim excerpt (the lines "
                                         "the reader uses) of an original of this many "
                                         "characters, read through a text index: its sha256 "
                                         "is not taken (0: LOG is the original)."),
    read_id: list[str] = typer.Option([], help="The text index's id of the original read "
                                      "(with --excerpt-of-chars; repeat for several)."),
) -> None:
    """Extract a console log into a file every --run-log reads like the log.

    Its step metrics, launch command and printed config, with the original file's provenance
    (sha256)."""
    try:
        if read_id and not excerpt_of_chars:
            raise ConfigError("--read-id", "<option>", " ".join(read_id),
                              "--excerpt-of-chars N with it (the original's size)")
        excerpt = Excerpt(excerpt_of_chars, tuple(read_id)) if excerpt_of_chars else None
        doc = extract(log, Provenance(repository, commit, path), out, excerpt)
    except ConfigError as exc:
        fail(exc)
    src = doc["source"]
    sha = (f"the log's sha256 {src['sha256'][:16]}" if src["sha256"] else
           f"an excerpt of {src['excerpt']['total_chars']:,} characters (sha256 not taken)")
    typer.echo(f"wrote {out}: {len(doc['steps']['rows'])} steps, "
               f"{len(doc['steps']['columns']) - 2} metrics, {len(doc['command']['settings'])} "
               f"launch overrides, {len(doc['config']['values'])} printed config fields; {sha}")


@runlog_app.command("transfer")
def transfer_cmd(
    manifest: Path = typer.Option(Path(MANIFEST), help="The logs, their flags, clusters and "
                                  "recipes (docs/formats.md, \"Transfer manifest\")."),
    out: Path = typer.Option(..., help="Output directory: transfer.md and transfer.json."),
    seeds: int = typer.Option(2, min=0, help="Seeds of TLT's simulation on each calibrated run "
                              "(0: no speedup column)."),
) -> None:
    """The transfer table: each log calibrated, then predicting the others of its cluster or recipe.

    Each log fitted on its first steps and checked on the rest, then predicting every other log of
    its cluster or recipe; TLT's end-to-end speedup on each."""
    t0 = time.perf_counter()
    try:
        logs = load_manifest(manifest)
        table = build(logs, lambda s: typer.echo(f"  {s} ({time.perf_counter() - t0:.0f}s)",
                                                 err=True), seeds)
    except (ConfigError, ValueError) as exc:
        fail(exc)
    lines = table_lines(table)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "transfer.md", "\n".join(lines) + "\n")
    write_json(out / "transfer.json", table_json(table))
    for line in lines:
        typer.echo(line)
    typer.echo(f"wrote {out}/transfer.md and {out}/transfer.json "
               f"({time.perf_counter() - t0:.0f}s)")
    typer.echo(json.dumps({"model_error": round(table.model_error, 4),
                           "pairs": len(table.pairs), "logs": len(table.own)}))
