"""`tlt project`: a whole RL run in days, GPU-hours, money and energy, per policy."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from workbench import project as projection
from workbench.cli.apps import app
from workbench.cli.common import fail, load_inputs, mapper_for
from workbench.contracts.energy import GpuPower
from workbench.contracts.schema import FieldError
from workbench.tables import format_table

ENERGY_UNKNOWN = ("energy: unknown (the profile {profile!r} records no GPU power); give --gpu-watts DECODE,IDLE,TRAIN "
                  "(watts per GPU, e.g. measured with `nvidia-smi --query-gpu=power.draw` during decoding, idle and "
                  "training) or use a profile with a `power` section")


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
                     _fmt(e["cost"], 0), _fmt(e["energy_kwh"], 0), f"{e['speedup_vs_first']['mean']:.2f}x",
                     f"{_saving(s['days'])} / {_saving(s['gpu_hours'])} / {_saving(s['energy_kwh'])}"])
    return format_table(rows, ["policy", "step min", "days", "GPU-hours", "cost", "energy kWh", "speedup",
                               "saving: days / GPU-h / kWh"])


@app.command()
def project(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policies: str = typer.Option("baseline,static-sd,tlt", help="Comma-separated policy presets or files; the first is the baseline for savings."),
    steps: Optional[int] = typer.Option(None, min=1, help="RL steps of the whole run (default: the workload's)."),
    seeds: int = typer.Option(3, min=1, help="Project seeds 0..K-1 (the same draws for every policy); figures are mean ± std over them."),
    price_per_gpu_hour: Optional[float] = typer.Option(None, min=0.0, help="Price of one GPU-hour (any currency); without it cost is not reported."),
    gpu_watts: Optional[str] = typer.Option(None, help="Watts per GPU while DECODE,IDLE,TRAIN (e.g. 650,120,700); default: the profile's power, else energy is unknown."),
    sample_steps: int = typer.Option(projection.DEFAULT_SAMPLE_STEPS, min=1, help="Steps simulated per run; a longer run is sampled in blocks and interpolated (docs/formats.md)."),
    full: bool = typer.Option(False, "--full", help="Simulate every step (no sampling); slow for long runs."),
    out: Path = typer.Option(..., help="Output directory: project.json and project.png."),
    profile: Optional[str] = typer.Option(None, help="Profile preset or file (default: the workload's profile)."),
    workers: int = typer.Option(1, min=1, help="Runs projected at once: more than 1 runs them as Ray tasks (same results)."),
    address: Optional[str] = typer.Option(None, help="A Ray cluster to run on (e.g. 'auto'); default: local Ray when --workers > 1."),
) -> None:
    """Project a whole RL run: wall-clock days, GPU-hours, cost and energy per policy, with savings vs the first."""

    wl, pols, prof = load_inputs(workload, policies, profile, None)
    n = steps or wl.steps
    try:
        power = GpuPower.parse(gpu_watts, "--gpu-watts") if gpu_watts else prof.power
    except FieldError as exc:
        fail(ValueError(f"--gpu-watts: {exc}"))
    units = projection.projection_units(wl, pols, prof, seeds, n, sample_steps, full)
    if full:
        load_inputs(workload, policies, profile, n)  # a full run's size is checked before it starts
    t0 = time.perf_counter()
    progress = lambda done, total, u: typer.echo(  # noqa: E731
        f"  [{done}/{total}] {u.policy.name} seed {u.seed}  ({time.perf_counter() - t0:.1f}s)", err=True)
    result = projection.project(wl, pols, prof, seeds, n, sample_steps, full, price_per_gpu_hour, power,
                                mapper=mapper_for(workers, address), on_done=progress)
    elapsed = time.perf_counter() - t0
    result.save(out)
    how = (f"sampled: {len(units[0].starts)} blocks of {units[0].block} steps simulated per run, the rest interpolated"
           if units[0].starts else "every step simulated")
    typer.echo(f"{wl.name} on {prof.name}: {n} RL steps on {wl.gpus} GPUs, seeds 0..{seeds - 1} (same draws for every "
               f"policy), {how}; projected in {elapsed:.1f}s")
    typer.echo(_table(result))
    price = f" at {price_per_gpu_hour:g} per GPU-hour" if price_per_gpu_hour is not None else " (no --price-per-gpu-hour)"
    typer.echo(f"mean ± std over seeds; cost{price}; saving = 1 - policy / {result.policies[0]}, paired by seed")
    if power is None:
        typer.echo(ENERGY_UNKNOWN.format(profile=prof.name))
    else:
        typer.echo(f"energy: GPUs only, at {power.decode_w:g}/{power.idle_w:g}/{power.train_w:g} W per GPU "
                   f"decoding/idle/training ({power.source or prof.name})")
    typer.echo(f"wrote {out}/project.json and {out}/project.png")
