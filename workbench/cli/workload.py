"""`tlt workload import` and `tlt workload show`: real response lengths in, as a Workload."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import typer
import yaml

from workbench.cli.apps import workload_app
from workbench.cli.common import fail
from workbench.contracts.length_data import read_observed
from workbench.contracts.schema import ConfigError, to_mapping
from workbench.contracts.workload import load_workload
from workbench.workloads.build import (
    MODES,
    format_report,
    import_workload,
    infer_cap,
    report,
)
from workbench.workloads.mixture import fit_mixture


@workload_app.command("import")
def import_(
    files: list[Path] = typer.Argument(...,
                                       help="Length files or directories: PolyTrace packed_lengths "
                                            "JSONL (with dapo_filter_indices.jsonl), a "
                                            "CSV/JSONL/Parquet table with step, prompt, length "
                                            "[prompt_tokens, correct, rank], or veRL's per-step "
                                            "response_length/* metrics; multi-turn: PolyTrace's "
                                            "multiturn_workload JSONL or a turns table "
                                            "(docs/formats.md)."),
    out: Path = typer.Option(...,
                             help="The Workload YAML to write (the lengths "
                                  "go beside it: OUT.lengths.parquet)."),
    mode: str = typer.Option("replay", help=f"Length model: {', '.join(MODES)}."),
    cap: int | None = typer.Option(None, min=16,
                                   help="max_response_tokens of the run (default: a mass at "
                                        "the longest length, else the next power of two)."),
    base: str = typer.Option("tlt-eval-qwen2.5-32b",
                             help="Workload preset or file whose hardware (profile, workers, "
                             "TP, max_batch) the new workload runs on."),
    name: str | None = typer.Option(None, help="Workload name (default: OUT's stem)."),
    responses_per_step: int | None = typer.Option(None, min=2,
                                                  help="Summary tables only: responses "
                                                       "behind each step's max (default: "
                                                       "the base's prompts x group size)."),
    description: str = typer.Option("",
                                    help="The workload's description (default: where its lengths "
                                    "and shape come from)."),
) -> None:
    """Import real response lengths: report what is in them, fit the length model, write a Workload."""  # noqa: E501
    t0 = time.perf_counter()
    command = "tlt workload import"
    if "import" in sys.argv:
        command = "tlt workload " + " ".join(shlex.quote(a)
                                             for a in sys.argv[sys.argv.index("import"):])
    try:
        result = import_workload(files, out, load_workload(base), mode, cap, name,
                                 responses_per_step, source=f"built by: {command}",
                                 description=description)
    except ConfigError as exc:
        fail(exc)
    for line in result.lines:
        typer.echo(line)
    typer.echo(f"imported in {time.perf_counter() - t0:.2f}s", err=True)


@workload_app.command("show")
def show(workload: str = typer.Argument(..., help="Workload preset or file.")) -> None:
    """A workload in full and, over observed lengths, their report and the fit."""
    try:
        wl = load_workload(workload)
        typer.echo(yaml.safe_dump(to_mapping(wl), sort_keys=False), nl=False)
        if wl.lengths.data:
            obs = read_observed(wl.lengths.data)
            cap, how = infer_cap(obs, wl.max_response_tokens)
            imported = report(obs, cap, how, list(range(obs.batches)))
            for line in format_report(imported, fit_mixture(obs, cap)):
                typer.echo(line)
    except ConfigError as exc:
        fail(exc)
