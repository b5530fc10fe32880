"""`tlt project`: a whole RL run in days, GPU-hours, money
and energy, per policy; `tlt bench sweep`: Ray vs serial."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Optional

import typer

from sim.simulator import check_size
from sim.sweep import sweep_units
from workbench import project as projection
from workbench.cli.apps import app, bench_app
from workbench.compare.intervals import interval_lines
from workbench.compare.run_interval import (RunInterval, covers_line, run_intervals,
                                            short_run_intervals)
from workbench.cli.common import (ADDRESS_OPTION, PROFILE_OPTION, WORKERS_OPTION, fail,
                                  load_inputs, mapper_for)
from workbench.contracts.energy import GpuPower
from workbench.contracts.schema import ConfigError, FieldError
from workbench.deploy.distributed import RayConfig
from workbench.deploy.distributed import bench_sweep as bench_ray_sweep
from workbench.report.tables import format_table

ENERGY_UNKNOWN = ("energy: unknown (the profile {profile!r} records no GPU power); "
                  "give --gpu-watts DECODE,IDLE,TRAIN (watts per GPU, e.g. measured "
                  "with `nvidia-smi --query-gpu=power.draw` during decoding, idle "
                  "and training) or use a profile with a `power` section")


def _fmt(entry: dict | None, digits: int, scale: float = 1.0) -> str:
    if entry is None:
        return "unknown"
    return f"{entry['mean'] * scale:,.{digits}f} ± {entry['std'] * scale:,.{digits}f}"


def _saving(entry: dict | None) -> str:
    return "unknown" if entry is None else f"{entry['mean'] * 100:+.1f}%"


def _table(result: projection.Projection) -> str:
    rows = []
    for name in result.policies:
        e = result.policy_entry(name)
        s = e["saving_vs_first"]
        rows.append([name, _fmt(e["mean_step_min"], 1), _fmt(e["days"], 2), _fmt(e["gpu_hours"], 0),
                     _fmt(e["cost"], 0), _fmt(e["energy_kwh"], 0),
                     f"{e['speedup_vs_first']['mean']:.2f}x",
                     f"{_saving(s['days'])} / {_saving(s['gpu_hours'])} "
                     f"/ {_saving(s['energy_kwh'])}"])
    return format_table(rows, ["policy", "step min", "days", "GPU-hours", "cost", "energy kWh",
                               "speedup", "saving: days / GPU-h / kWh"])


def _interval_lines(intervals: list[RunInterval] | None, reference: str) -> list[str]:
    """Each policy's days and speedup with their 90% intervals, or why there are none."""
    if not intervals:
        return interval_lines(None, "")
    lines = [f"how sure ({covers_line(intervals[0].covers)}):"]
    for r in intervals:
        d, s = r.totals["days"], r.speedup
        line = f"  {r.policy}: {d.low:,.2f}-{d.high:,.2f} days"
        if r.policy != reference:
            line += f"; {s.value:.2f}x, {s.level:.0%}: {s.low:.2f}-{s.high:.2f}x"
        lines.append(line)
    return lines


@app.command()
def project(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policies: str = typer.Option("baseline,static-sd,tlt",
                                 help="Comma-separated policy presets or files; "
                                 "the first is the baseline for savings."),
    steps: Optional[int] = typer.Option(
        None, min=1, help="RL steps of the whole run (default: the workload's)."),
    seeds: int = typer.Option(3, min=1,
                              help="Project seeds 0..K-1 (the same draws for every "
                                   "policy); figures are mean ± std over them."),
    price_per_gpu_hour: Optional[float] = typer.Option(None, min=0.0,
                                                       help="Price of one GPU-hour (any currency); "
                                                            "without it cost is not reported."),
    gpu_watts: Optional[str] = typer.Option(None,
                                            help="Watts per GPU while DECODE,IDLE,TRAIN "
                                                 "(e.g. 650,120,700); default: the "
                                                 "profile's power, else energy is unknown."),
    sample_steps: int = typer.Option(
        projection.DEFAULT_SAMPLE_STEPS, min=1,
        help="Steps simulated per run; a longer run is sampled "
             "in blocks and interpolated (docs/formats.md)."),
    full: bool = typer.Option(False, "--full",
                              help="Simulate every step (no sampling); slow for long runs."),
    out: Path = typer.Option(..., help="Output directory: project.json and project.png."),
    profile: Optional[str] = PROFILE_OPTION,
    workers: int = WORKERS_OPTION,
    address: Optional[str] = ADDRESS_OPTION,
) -> None:
    """Project a whole RL run: days, GPU-hours, cost and energy per policy, and the savings."""

    wl, pols, prof = load_inputs(workload, policies, profile, None)
    n = steps or wl.steps
    try:
        power = GpuPower.parse(gpu_watts, "--gpu-watts") if gpu_watts else prof.power
    except FieldError as exc:
        fail(ValueError(f"--gpu-watts: {exc}"))
    units = projection.projection_units(wl, pols, prof, seeds, n, sample_steps, full)
    if not units[0].starts:
        try:
            check_size(wl, n)  # a run simulated in full: its size is checked before any work
        except ConfigError as exc:
            fail(exc)
    t0 = time.perf_counter()
    progress = lambda done, total, u: typer.echo(  # noqa: E731
        f"  [{done}/{total}] {u.policy.name} seed {u.seed}  ({time.perf_counter() - t0:.1f}s)",
        err=True)
    result = projection.project(wl, pols, prof, seeds, n, sample_steps, full, price_per_gpu_hour,
                                power, mapper=mapper_for(workers, address), on_done=progress)
    intervals = run_intervals(result, short_run_intervals(wl, pols, prof, n))
    result.intervals = {r.policy: r.to_json() for r in intervals} if intervals else None
    elapsed = time.perf_counter() - t0
    result.save(out)
    how = (f"sampled: {len(units[0].starts)} blocks of {units[0].block} "
           "steps simulated per run, the rest interpolated"
           if units[0].starts else "every step simulated")
    typer.echo(f"{wl.name} on {prof.name}: {n} RL steps on {wl.gpus} GPUs, seeds 0..{seeds - 1} "
               f"(same draws for every policy), {how}; projected in {elapsed:.1f}s")
    typer.echo(_table(result))
    price = (f" at {price_per_gpu_hour:g} per GPU-hour" if price_per_gpu_hour is not None
             else " (no --price-per-gpu-hour)")
    typer.echo(f"mean ± std over seeds; cost{price}; saving = 1 "
               f"- policy / {result.policies[0]}, paired by seed")
    for line in _interval_lines(intervals, result.policies[0]):
        typer.echo(line)
    if power is None:
        typer.echo(ENERGY_UNKNOWN.format(profile=prof.name))
    else:
        typer.echo(f"energy: GPUs only, at {power.decode_w:g}/{power.idle_w:g}/{power.train_w:g} "
                   f"W per GPU decoding/idle/training ({power.source or prof.name})")
    typer.echo(f"wrote {out}/project.json and {out}/project.png")


@bench_app.command("sweep")
def bench_sweep(
    workload: str = typer.Option("tlt-eval-qwen2.5-32b", help="Workload to sweep."),
    policies: str = typer.Option("baseline,static-sd,tlt-base,tlt", help="Policies of the sweep."),
    seeds: int = typer.Option(10, min=1, help="Seeds per policy (policies x seeds simulations)."),
    steps: int = typer.Option(5, min=1, help="RL steps per simulation."),
    workers: int = typer.Option(2, min=1, help="Ray workers."),
    repeats: int = typer.Option(2, min=1,
                                help="Serial and Ray runs each, alternating which goes first."),
    address: Optional[str] = typer.Option(None,
                                          help="A Ray cluster to join instead of a local Ray."),
    configurations: int = typer.Option(1000, min=1, help="The sweep size to estimate the time of."),
) -> None:
    """Time a sweep serially and as Ray tasks (interleaved), and estimate a bigger sweep."""

    wl, pols, prof = load_inputs(workload, policies, None, steps)
    units = sweep_units(wl, pols, prof, seeds, steps)
    b = bench_ray_sweep(units, RayConfig(workers, address), repeats)
    rows = [[str(i + 1), f"{s:.2f}", f"{r:.2f}",
             f"{s / r:.2f}x"] for i, (s, r) in enumerate(zip(b.serial_s, b.ray_s))]
    typer.echo(f"{wl.name}: {len(pols)} policies x {seeds} seeds = {b.simulations} "
               f"simulations of {steps} steps; {workers} Ray workers (Ray start "
               f"{b.ray_start_s:.1f}s, {b.task_overhead_s * 1e3:.1f} ms per task)")
    typer.echo(format_table(rows, ["repeat", "serial s", "ray s", "speedup"]))
    speedup = statistics.mean(b.speedups)
    typer.echo(f"speedup {speedup:.2f}x (mean of {len(b.speedups)}); results identical to "
               f"serial: {b.identical}; {b.per_simulation_s:.3f}s per simulation in one process")
    estimates = {n: b.sweep_estimate_s(configurations, n) for n in (1, 2, 16, 64, 256)}
    typer.echo(f"a {configurations:,}-simulation sweep like this one: " + ", ".join(
        f"{n} CPU(s) {s / 60:,.1f} min" for n, s in estimates.items()))
    typer.echo(json.dumps({"workload": wl.name, "simulations": b.simulations, "steps": steps,
                           "workers": workers, "serial_s": [round(s, 3) for s in b.serial_s],
                           "ray_s": [round(s, 3) for s in b.ray_s], "speedup": round(speedup, 3),
                           "identical": b.identical, "ray_start_s": round(b.ray_start_s, 2),
                           "task_overhead_s": round(b.task_overhead_s, 4),
                           "per_simulation_s": round(b.per_simulation_s, 4),
                           "estimate_s": {str(n): round(s, 1) for n, s in estimates.items()}}))
