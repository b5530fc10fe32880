"""`tlt workload import` and `tlt workload show`: real response lengths in, as a Workload."""

from __future__ import annotations

import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import typer
import yaml

from workbench.cli.apps import workload_app
from workbench.cli.common import fail
from workbench.contracts.length_data import read_observed
from workbench.contracts.schema import ConfigError, to_mapping
from workbench.contracts.workload import load_workload
from workbench.workloads.build import (
    ASK_CLUSTER,
    CLUSTER_FLAGS,
    MODES,
    UNPLACED,
    Placement,
    format_report,
    import_workload,
    infer_cap,
    report,
)
from workbench.runlog.length_summary import LengthSummary, run_log_summaries
from workbench.workloads.mixture import fit_mixture


@workload_app.command("import")
def import_(
    files: list[Path] = typer.Argument(...,
                                       help="Length files or directories: PolyTrace packed_lengths "
                                            "JSONL (with dapo_filter_indices.jsonl), a "
                                            "CSV/JSONL/Parquet table with step, prompt, length "
                                            "[prompt_tokens, correct, rank], or veRL's per-step "
                                            "response_length/* metrics, or any framework's "
                                            "run log (veRL, slime/miles, NeMo-RL, SkyRL, "
                                            "OpenRLHF, AReaL, ROLL: its per-step length "
                                            "statistics); multi-turn: PolyTrace's "
                                            "multiturn_workload JSONL or a turns table "
                                            "(docs/formats.md)."),
    out: Path = typer.Option(...,
                             help="The Workload YAML to write (the lengths "
                                  "go beside it: OUT.lengths.parquet)."),
    mode: str = typer.Option("replay", help=f"Length model: {', '.join(MODES)}."),
    cap: int | None = typer.Option(None, min=16,
                                   help="max_response_tokens of the run (default: a mass at "
                                        "the longest length, else the next power of two)."),
    model: str | None = typer.Option(None, "--model", "--arch",
                                     help="The cluster (as What-if asks): the model the lengths "
                                          "came from, an architecture preset, a model of the "
                                          "measured database or a config.json."),
    gpu: str | None = typer.Option(None, help="The cluster: the rollout engines' GPU type "
                                              "(h100, h200, a100, ...)."),
    tp: int | None = typer.Option(None, min=1, help="The cluster: tensor-parallel GPUs per "
                                                    "engine."),
    framework: str | None = typer.Option(None, help="The cluster: the engine, vllm or sglang."),
    engines: int | None = typer.Option(None, min=1,
                                       help="The cluster: rollout engines (default: the files' "
                                            "data-parallel ranks, else 1)."),
    base: str | None = typer.Option(None,
                                    help="Instead of the cluster flags, or beside them for a "
                                         "per-step summary's shape: a workload preset or file "
                                         "whose cluster (profile, workers, TP, max_batch) the "
                                         "new workload runs on."),
    name: str | None = typer.Option(None, help="Workload name (default: OUT's stem)."),
    responses_per_step: int | None = typer.Option(None, min=2,
                                                  help="Summary tables only: responses "
                                                       "behind each step's max (default: "
                                                       "the base's prompts x group size)."),
    description: str = typer.Option("",
                                    help="The workload's description (default: where its lengths "
                                    "and shape come from)."),
) -> None:
    """Import real response lengths: what is in them, the fitted length model, a Workload."""
    t0 = time.perf_counter()
    command = "tlt workload import"
    if "import" in sys.argv:
        command = "tlt workload " + " ".join(shlex.quote(a)
                                             for a in sys.argv[sys.argv.index("import"):])
    with tempfile.TemporaryDirectory(prefix="tlt-runlog-") as tmp:
        try:
            placement = cluster_placement(model, gpu, tp, framework, engines, base is not None)
            files, summaries = run_log_summaries(files, Path(tmp))
            base_wl = load_workload(base) if base else None
            for s in summaries:
                typer.echo(f"read {s.describe()}")
            if summaries and summaries[0].shape is not None:
                responses_per_step = responses_per_step or summaries[0].responses_per_step
                if base_wl is None and placement is not None:  # the shape from the log's config
                    p, n, top = summaries[0].shape
                    base_wl = replace(UNPLACED, prompts_per_step=p, group_size=n,
                                      max_response_tokens=top)
                    typer.echo(f"shape from the log's config: {p} prompts x {n}, cap {top}")
            result = import_workload(files, out, base_wl, mode, cap, name, responses_per_step,
                                     source=f"built by: {command}", description=description,
                                     placement=placement)
        except ConfigError as exc:
            fail(_said_of_log(exc, summaries if "summaries" in locals() else []))
    for line in result.lines:
        typer.echo(line)
    typer.echo(f"imported in {time.perf_counter() - t0:.2f}s", err=True)


def _said_of_log(exc: ConfigError, summaries: list[LengthSummary]) -> ConfigError:
    """An error about a run log's summary table, said of the log itself (the table is ours)."""
    for sm in summaries:
        if str(sm.table) in exc.source:
            where = exc.source.replace(str(sm.table), sm.log.path)
            logs = ", ".join(sm.columns) or "no length statistics"
            return ConfigError(where, exc.field, exc.value,
                               f"{exc.allowed} ({sm.log.framework.name} logs {logs})")
    return exc


def cluster_placement(model: str | None, gpu: str | None, tp: int | None, framework: str | None,
                      engines: int | None, has_base: bool) -> Placement | None:
    """The cluster flags as a Placement (its profile derived from the measured database, kept in
    the disk cache); None when none is given and --base names the cluster. Refused, naming the
    flags, when only some are given or neither they nor --base are."""
    given = dict(zip(CLUSTER_FLAGS, (model, gpu, tp, framework)))
    missing = [flag for flag, v in given.items() if v is None]
    if len(missing) == len(given) and engines is None:
        if has_base:
            return None
        raise ConfigError(", ".join(CLUSTER_FLAGS), "<option>", "not given (the length files "
                          "name no model, GPU, TP degree or engine)", ASK_CLUSTER)
    if missing:
        raise ConfigError(", ".join(missing), "<option>", "not given", "the four cluster flags "
                          "together: --model M --gpu G --tp N --framework F [--engines N]")
    from workbench.calibrate.database.catalog import (
        default_base_profile,
        disk_cached_profile,
        model_choices,
    )

    arch = model_choices().get(model, model)
    typer.echo(f"deriving the profile of {model} on {tp}x {gpu} ({framework}) from the measured "
               "database...", err=True)
    try:
        prof = disk_cached_profile(arch, gpu, tp, framework, default_base_profile(arch, tp))
    except (ValueError, RuntimeError, KeyError) as exc:  # the package refuses some shapes
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(", ".join(CLUSTER_FLAGS), "<option>",
                          f"name a cluster the measured database cannot price ({exc})",
                          "a model, GPU, TP and framework it measured (`tlt profile --help`)"
                          ) from None
    return Placement(prof, engines)


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
