"""`tlt engine-sweep`: a real vLLM engine's step times and acceptance at held batch sizes, contexts
and draft lengths, SD off and on (real/sweep/); and `tlt calibrate SWEEP_DIR`, a profile of that
engine (workbench/calibrate/sweeps/). The last stdout line of each is JSON."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

import typer

from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.cli.task import TASK_HELP, task_option
from workbench.contracts.fileio import write_json
from workbench.contracts.schema import ConfigError, save
from workbench.contracts.sweep import load_sweep
from workbench.contracts.trace import TraceError
from workbench.report.tables import format_table

_METHOD_HELP = ("vLLM's speculative method: ngram, eagle, eagle3, draft_model, or an MTP method "
                "(mtp, deepseek_mtp, ...) where the model has the heads; default: eagle with "
                "--drafter, else ngram.")
_SWITCH_HELP = ("How the draft length changes between arms: live (one SD engine, K set between "
                "steps: vLLM's Dynamic SD table), restart (one SD engine per K, all at once), "
                "auto (live where this vLLM can).")


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        fail(ConfigError(option, option.lstrip("-"), text, "comma-separated integers >= 1"))
    return values


@app.command("engine-sweep")
def engine_sweep(
    model: str = typer.Option(..., help="Target: a Hugging Face causal-LM directory or hub id "
                                        "(read from the local cache when there)."),
    out: Path = typer.Option(..., help="Sweep directory to write (docs/formats.md, Engine "
                                       "sweeps); each cell is written when it finishes."),
    method: Optional[str] = typer.Option(None, help=_METHOD_HELP),
    drafter: Optional[str] = typer.Option(None, help="The drafter: a directory or hub id "
                                                     "(eagle, eagle3, draft_model)."),
    batches: str = typer.Option("1,4,16,64", help="Batch sizes the running batch is held at."),
    contexts: str = typer.Option("128,768", help="Context lengths (tokens) the prompts start at."),
    draft_lens: str = typer.Option("1,2,3", help="Draft lengths K, each timed against the plain "
                                                 "engine and the SD engine with drafts off."),
    rounds: int = typer.Option(4, min=1, help="Times every arm of a cell runs, each round in "
                                              "another order (drift cancels in the ratios)."),
    block_steps: int = typer.Option(8, min=2, help="Decode steps per arm per round."),
    tp: int = typer.Option(1, min=1, help="Tensor-parallel degree."),
    max_num_seqs: Optional[int] = typer.Option(None, min=1, help="vLLM's max_num_seqs "
                                                                "(default: the largest batch)."),
    max_model_len: int = typer.Option(2048, min=16, help="vLLM's max_model_len."),
    gpu_memory_utilization: float = typer.Option(
        0.9, min=0.05, max=0.99, help="vLLM's, shared by the sweep's engines (2: live)."),
    enforce_eager: Optional[bool] = typer.Option(
        None, "--enforce-eager/--cuda-graphs", help="Eager, or CUDA graphs (default: vLLM's: "
                                                    "graphs on a GPU, eager on a CPU)."),
    dtype: str = typer.Option("auto", help="Weights' dtype (auto: the model's on a GPU, float32 "
                                           "on a CPU)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Sampling temperature (0: greedy)."),
    seed: int = typer.Option(0, help="Seed of the prompts and the engines."),
    switch: str = typer.Option("auto", help=_SWITCH_HELP),
    task: Optional[Path] = typer.Option(None, help=TASK_HELP + " Its solutions, where given, take "
                                        "each prompt to its context."),
    graph_edges: Optional[int] = typer.Option(
        None, min=1, help="The engine's largest CUDA-graph capture size in tokens (vLLM's default: "
        "min(2 x max_num_seqs, 512)): also time the batches just inside and outside each draft "
        "length's limit, where a verify of B x (K + 1) tokens goes eager (GPU only)."),
) -> None:
    """Time a real vLLM engine's steps at held batch sizes and contexts, SD off and on.

    SD at each draft length, interleaved; written as a trace set and a summary table (batch x K:
    plain ms, SD ms, accepted, speedup), with the CUDA graphs each engine captured (sweep.json
    `graphs`)."""
    from real.sweep.methods import SweepError
    from real.sweep.run import SweepSettings, run_sweep

    user_task = task_option(task, None)
    settings = SweepSettings(
        model=model, method=method or ("eagle" if drafter else "ngram"), drafter=drafter,
        batches=_ints(batches, "--batches"), contexts=_ints(contexts, "--contexts"),
        draft_lens=_ints(draft_lens, "--draft-lens"), rounds=rounds, block_steps=block_steps,
        tp=tp, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager, dtype=dtype,
        temperature=temperature, seed=seed, switch=switch, task=user_task,
        graph_edges=graph_edges)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    t0 = time.perf_counter()
    try:
        run_sweep(settings, out, say=lambda line: typer.echo(line, err=True))
    except (SweepError, ConfigError) as exc:
        fail(exc)
    sweep = load_sweep(out)
    rows = [r for cell in sweep.cells for r in cell.doc.get("figures", [])]
    typer.echo((out / "summary.md").read_text(encoding="utf-8"))
    typer.echo(f"wrote {out} ({len(sweep.cells)} cells, {len(rows)} rows)")
    typer.echo(json.dumps({"out": str(out), "cells": len(sweep.cells),
                           "status": sweep.doc.get("status"),
                           "elapsed_s": round(time.perf_counter() - t0, 1)}))


def calibrate_sweep(path: Path, base: Optional[str], hold_out: Optional[list[str]], out: Path,
                    name: Optional[str]) -> None:
    """`tlt calibrate SWEEP_DIR --out P.yaml`: fit, predict every cell, write the profile and its
    report, print the cells, the errors and the parameters."""
    from workbench.calibrate.sweeps.base import sweep_base
    from workbench.calibrate.sweeps.fit import fit_sweep
    from workbench.calibrate.sweeps.report import (
        CELL_HEADERS,
        ERROR_HEADERS,
        PARAM_HEADERS,
        cell_rows,
        error_rows,
        param_rows,
        report,
    )
    from workbench.calibrate.sweeps.split import parse_split

    t0 = time.perf_counter()
    try:
        sweep = load_sweep(path)
        split = parse_split(hold_out, sweep.plan)
        base_prof, how, cluster = sweep_base(sweep, base)
        typer.echo(f"  fitting {path} ({len(sweep.cells)} cells; {split.label}) on base "
                   f"{base_prof.name} ...", err=True)
        fit = fit_sweep(sweep, base_prof, split, name or out.stem, how, cluster)
    except (ConfigError, TraceError, ValueError) as exc:
        fail(exc)
    save(fit.profile, out)
    rep = out.with_name(out.stem + ".calibration.json")
    write_json(rep, report(fit, sweep))
    e = fit.profile.engine
    typer.echo(f"engine {e.label}; model {e.model}" + (f", drafter {e.drafter}" if e.drafter
                                                        else ""))
    typer.echo(f"base {base_prof.name}: {how}")
    typer.echo(format_table(cell_rows(fit), CELL_HEADERS))
    typer.echo(format_table(error_rows(fit), ERROR_HEADERS))
    typer.echo(format_table(param_rows(fit), PARAM_HEADERS))
    typer.echo(f"{split.label}; step latency median |error| {fit.profile.fit_error_pct:.1f}% on "
               "held-out steps of the fitted cells (5-fold)")
    typer.echo(f"wrote {out} and {rep}")
    typer.echo(json.dumps({"profile": str(out), "held_out": split.label,
                           "speedup_error_pct": e.speedup_error_pct,
                           "base_speedup_error_pct": e.base_speedup_error_pct,
                           "step_error_pct": e.step_error_pct,
                           "elapsed_s": round(time.perf_counter() - t0, 1)}))
