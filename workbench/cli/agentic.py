"""Agentic workloads on the command line: `tlt workload check` (an agentic workload's simulated
turns against the trace it came from), and what `tlt compare` adds for them (where the time goes
around the tool calls; `--tool-latency`, the sweep)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

import typer

from sim.sweep import Runner
from workbench.cli.apps import workload_app
from workbench.cli.common import CLUSTER_PREFIX, cluster_profile, fail
from workbench.compare.agentic import AgenticWhy
from workbench.compare.tool_sweep import tool_latency_sweep
from workbench.contracts.fileio import write_json
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import ConfigError, save
from workbench.contracts.turn_data import read_turns
from workbench.contracts.workload import Workload, load_workload
from workbench.report.tables import format_table
from workbench.validate.agentic_engine import carried_engine, trace_engine
from workbench.validate.engine_factors import FIT_FACTORS, with_factors
from workbench.validate.agentic_trace import StepCheck, check, summary


def _steps(text: str, batches: int) -> list[int]:
    if not text:
        return list(range(batches))
    try:
        steps = sorted({int(s) for s in text.split(",")})
    except ValueError:
        raise ConfigError("--steps/--fit-steps", "steps", text, "step numbers, e.g. 0 or 1,2,3") \
            from None
    bad = [s for s in steps if not 0 <= s < batches]
    if bad:
        raise ConfigError("--steps/--fit-steps", "steps", bad[0],
                          f"a step of the trace, 0 to {batches - 1}")
    return steps


def _table(checks: list[StepCheck], fitted: set[int]) -> str:
    rows = [[f"{c.step}{' (fit)' if c.step in fitted else ''}", f"{c.turns:,}",
             f"{c.median_measured_s:.1f}", f"{c.median_simulated_s:.1f}",
             f"{c.median_error:+.1%}", f"{c.median_abs_error:.1%}",
             f"{c.makespan_measured_s:.0f}", f"{c.makespan_simulated_s:.0f}",
             f"{c.makespan_error:+.1%}", f"{c.prefill_measured:,}", f"{c.prefill_simulated:,}"]
            for c in checks]
    return format_table(rows, ["step", "turns", "turn p50 meas s", "sim s", "error",
                               "|turn error| p50", "makespan meas s", "sim s", "error",
                               "prefill meas", "sim"])


def _declared(wl: Workload, factors: dict[str, float]) -> Profile:
    """The traced engine (the database's costs carried to the workload's GPU) with `factors`
    declared, nothing fitted."""
    prof, note = carried_engine(wl)
    typer.echo("declared: " + ", ".join(f"{k} {v:g}" for k, v in factors.items()) + f" on {note}")
    return with_factors(prof, factors)


@workload_app.command("check")
def check_trace(
    workload: str = typer.Argument(..., help="An agentic workload replaying a trace with engine "
                                             "latencies (e.g. polytrace-search-r1-qwen2.5-7b)."),
    steps: str = typer.Option("", help="Steps to check, e.g. 1,2,3,4 (default: all)."),
    fit_steps: str = typer.Option("", help="Fit the engine's run-level factors on these steps "
                                           "first (the measured database's costs for the "
                                           "workload's model, TP and framework, carried to its "
                                           "GPU by datasheet where the database lacks it); "
                                           "default: check the workload's own profile."),
    fit_factors: str = typer.Option(",".join(FIT_FACTORS), help="With --fit-steps: the factors "
                                    "to fit (docs/formats.md, 'Agentic workloads')."),
    profile_out: Optional[Path] = typer.Option(None, help="With --fit-steps: write the fitted "
                                                          "profile here."),
    profile: Optional[str] = typer.Option(None, help="Check this profile (a preset, a file or "
                                                     "cluster:MODEL:GPU:FRAMEWORK) instead of "
                                                     "the workload's."),
    per_seq_s: Optional[float] = typer.Option(
        None, min=0.0, help="Check the traced engine (the measured database's costs, carried to "
        "the workload's GPU) with this cost per sequence per decode step, in seconds, and "
        "--prefill-factor: declared, nothing fitted."),
    prefill_factor: float = typer.Option(1.0, min=0.0, help="With --per-seq-s: the multiplier "
                                                            "on the prefill cost per token."),
    overhead_s: float = typer.Option(0.0, min=0.0, help="With --per-seq-s: the fixed cost of "
                                                        "every decode step, in seconds."),
    kv_s_per_token: Optional[float] = typer.Option(None, min=0.0, help="With --per-seq-s: the "
                                                   "decode cost per sequence per context token."),
    out: Optional[Path] = typer.Option(None, help="Also write OUT/check.json."),
) -> None:
    """Replay an agentic trace's steps and set each turn's simulated engine latency and each step's
    makespan beside the measured ones; the last line is JSON."""
    t0 = time.perf_counter()
    try:
        wl = load_workload(workload)
        if not wl.agentic.enabled or not wl.agentic.data:
            raise ConfigError(workload, "agentic.data", wl.agentic.data or "<none>",
                              "the turns table of an imported agentic trace")
        batches = read_turns(wl.agentic.data).batches
        checked = _steps(steps, batches)
        fitted = _steps(fit_steps, batches) if fit_steps else []
        fit = None
        if per_seq_s is not None:
            declared = {"per_seq_s": per_seq_s, "prefill_factor": prefill_factor,
                        "overhead_s": overhead_s, "kv_s_per_token": kv_s_per_token}
            prof = _declared(wl, {k: v for k, v in declared.items() if v is not None})
        elif fitted:
            name = profile_out.stem if profile_out is not None else ""
            names = tuple(n.strip() for n in fit_factors.split(",") if n.strip())
            prof, fit = trace_engine(wl, fitted, name, names, lambda s: typer.echo(s, err=True))
            for line in fit.lines():
                typer.echo(f"fit: {line}")
        elif profile is not None and profile.startswith(CLUSTER_PREFIX):
            prof = cluster_profile(profile, wl)
        else:
            prof = load_profile(profile or wl.profile)
        typer.echo(f"workload: {wl.description}")
        typer.echo(f"engine: {prof.name}: {prof.description}")
        checks, turns = check(replace(wl, profile=prof.name), prof, checked,
                              lambda s: typer.echo(s, err=True))
    except (ConfigError, ValueError) as exc:
        fail(exc)
    typer.echo(_table(checks, set(fitted)))
    typer.echo(format_table([[str(k), f"{int(r.turns):,}", f"{r.measured_s:.1f}",
                              f"{r.simulated_s:.1f}", f"{r.simulated_s / r.measured_s - 1:+.1%}"]
                             for k, r in turns.iterrows()],
                            ["turn", "turns", "p50 meas s", "p50 sim s", "error"]))
    held = [c for c in checks if c.step not in fitted]
    if fit is not None and profile_out is not None:
        # its fit error: the held-out steps' median turn-latency error, as checked just now
        error = abs(summary(held)["median_turn_latency_error"]) if held else float("nan")
        save(replace(prof, fit_error_pct=round(100 * error, 2) if held else None), profile_out)
        typer.echo(f"wrote {profile_out}")
    result = {"steps": checked, "fit_steps": fitted, "held_out": summary(held),
              "per_step": [asdict(c) | {"median_error": c.median_error,
                                        "makespan_error": c.makespan_error} for c in checks]}
    if fit is not None:
        result["fit"] = asdict(fit.fit) | {"evaluations": fit.evaluations}
    typer.echo(f"checked in {time.perf_counter() - t0:.1f}s", err=True)
    if out is not None:
        write_json(out / "check.json", result)
    typer.echo(json.dumps({"held_out_steps": [c.step for c in held], **result["held_out"]}))


TOOL_LATENCY_OPTION = typer.Option(
    "", help="Agentic workloads: also sweep the tools' latency, e.g. 0.1,0.3,1,3,10 (x the "
             "workload's): each policy's speedup at each, in OUT/tool_latency.json and .png.")


def tool_scales(text: str, wl: Workload) -> list[float]:
    """`--tool-latency`'s factors (empty: no sweep); refused for a single-turn workload."""
    if not text.strip():
        return []
    try:
        scales = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        fail(ConfigError("--tool-latency", "tool_latency", text,
                         "factors separated by commas, e.g. 0.1,0.3,1,3,10"))
    if not scales or any(not 0 <= s <= 1000 for s in scales):
        fail(ConfigError("--tool-latency", "tool_latency", text, "factors from 0 to 1000"))
    if not wl.agentic.enabled:
        fail(ConfigError(wl.name, "agentic.enabled", False,
                         "an agentic workload for --tool-latency (its tool calls are what the "
                         "sweep slows)"))
    return scales


def print_agentic(rows: list[AgenticWhy], over: str) -> None:
    """Where each policy's time goes around the tool calls (agentic workloads only: nothing for
    none); `over`: what the rows are of ("means over seeds", "seed 0"). `tlt sim` and `tlt
    compare` print it alike."""
    if not rows:
        return
    typer.echo(f"around the tool calls ({over}; docs/formats.md, 'Agentic'):")
    typer.echo(format_table(
        [[a.policy, f"{a.tool_share:.1%}", f"{a.tool_wait_share:.1%}", f"{a.tail_share:.1%}",
          f"{a.tail_in_tools:.0%}", f"{a.turn_latency_s:.1f}"] for a in rows],
        ["policy", "trajectory time in tools", "engines waiting on tools", "small-batch decoding",
         "of it during tool calls", "turn p50 s"]))
    for a in rows[:1]:
        typer.echo(f"  {a.sentence}")


def run_tool_sweep(wl: Workload, pols: list[Policy], prof: Profile, scales: list[float],
                   seeds: int, steps: Optional[int], out: Path, runner: Runner) -> None:
    t0 = time.perf_counter()
    progress = lambda done, total, name, seed: typer.echo(  # noqa: E731
        f"  tools: [{done}/{total}] {name} seed {seed}  ({time.perf_counter() - t0:.1f}s)",
        err=True)
    sw = tool_latency_sweep(wl, pols, prof, scales, seeds, steps, progress, runner)
    sw.save(out)
    names = sw.policies
    typer.echo(f"tool latency sweep ({wl.name}, speedup vs {names[0]} at each scale):")
    typer.echo(format_table(
        [[f"{p.scale:g}x", f"{p.step_s[names[0]]:,.1f}", f"{p.tool_share:.1%}",
          f"{p.tool_wait_share:.1%}", *(f"{p.speedup[n]:.2f}x" for n in names[1:])]
         for p in sw.points],
        ["tools", f"{names[0]} step s", "time in tools", "engines waiting",
         *names[1:]]))
    typer.echo(f"wrote {out}/tool_latency.json and {out}/tool_latency.png")
