"""What every command does alike: fail with a clear message,
load the inputs before any work, pick where sweeps run."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import Callable, NoReturn, Optional

import typer

from sim.simulator import check_size
from sim.sweep import Runner, sweep
from workbench.contracts.cluster_check import check_workload_profile
from workbench.contracts.policy import Policy, load_policy
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import Workload, load_workload
from workbench.deploy.distributed import RayConfig, ray_mapper, ray_runner
from workbench.project import serial_map


# Options several commands share, one wording each.
PROFILE_OPTION = typer.Option(None,
                              help="Profile preset or file, or cluster:MODEL:GPU:FRAMEWORK[:epN] "
                                   "(derived from the measured database at the workload's "
                                   "TP; epN: a mixture of experts' expert parallelism; default: "
                                   "the workload's profile).")
WORKERS_OPTION = typer.Option(1, min=1,
                              help="Simulations run at once: 1 runs them here one after another; "
                                   "more run them as Ray tasks (same results, same order).")
ADDRESS_OPTION = typer.Option(None, help="A Ray cluster to run the simulations on (e.g. 'auto' or "
                              "'ray://HOST:10001'); default: a local Ray when --workers > 1.")


def fail(exc: Exception) -> NoReturn:
    """Print the error (it names the file, the field and the fix) and exit 2."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


CLUSTER_PREFIX = "cluster:"


def cluster_profile(spec: str, wl: Workload) -> Profile:
    """`--profile cluster:MODEL:GPU:FRAMEWORK`: the profile of that cluster at the workload's TP
    (gpus_per_worker), derived from the measured database and kept on disk; acceptance and the
    drafter's learning curve come from the workload's own profile."""
    from workbench.calibrate.database.catalog import disk_cached_profile, model_choices

    parts = spec[len(CLUSTER_PREFIX):].split(":")
    ep = parts.pop() if len(parts) == 4 else None
    if len(parts) != 3 or not all(parts) or (ep is not None and not _ep_part(ep)):
        raise ConfigError("--profile", "profile", spec,
                          "cluster:MODEL:GPU:FRAMEWORK[:epN], e.g. cluster:qwen2.5-7b:h200:vllm "
                          "or cluster:qwen3-30b-a3b:h100:sglang:ep4")
    model, gpu, framework = parts
    arch = model_choices().get(model, model)
    base = wl.profile if not wl.profile.startswith(CLUSTER_PREFIX) else "h100-qwen2.5-7b-tp1"
    return disk_cached_profile(arch, gpu, wl.gpus_per_worker, framework, base,
                               int(ep[2:]) if ep else None)


def _ep_part(text: str) -> bool:
    return text.startswith("ep") and text[2:].isdigit() and int(text[2:]) >= 1


def load_inputs(workload: str, policies: str, profile: Optional[str],
                steps: Optional[int] = None) -> tuple[Workload, list[Policy], Profile]:
    """Everything is loaded and validated, and the run's size checked, before any simulation
    starts or any file is written."""
    try:
        wl = load_workload(workload)
        spec = profile or wl.profile
        prof = cluster_profile(spec, wl) if spec.startswith(CLUSTER_PREFIX) else load_profile(spec)
        if spec.startswith(CLUSTER_PREFIX):  # the cluster asked for is the workload's from here on
            c = prof.cluster
            wl = replace(wl, profile=prof.name, model=c.model, gpu=c.gpu, framework=c.framework)
        check_workload_profile(wl, prof, f"{workload} with profile {spec}")
        pols = [load_policy(p.strip()) for p in policies.split(",") if p.strip()]
        check_size(wl, steps or wl.steps)
    except ConfigError as exc:
        fail(exc)
    if not pols:
        fail(ValueError("--policy: give at least one policy name or file"))
    names = [p.name for p in pols]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        fail(ValueError(f"--policy: two policies are named {dupes[0]!r}; "
                        "give each file a distinct 'name' field"))
    return wl, pols, prof


def runner_for(workers: int, address: Optional[str]) -> Runner:
    """The serial sweep for one worker and no cluster; else
    Ray (local with `workers` CPUs, or the cluster)."""
    if workers <= 1 and address is None:
        return sweep
    _need_ray()
    return ray_runner(RayConfig(workers, address))


def mapper_for(workers: int, address: Optional[str]) -> Callable:
    """As `runner_for`, for projections (workbench/project.py's Mapper)."""
    if workers <= 1 and address is None:
        return serial_map
    _need_ray()
    return ray_mapper(RayConfig(workers, address))


def _need_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        fail(ValueError("--workers/--address: Ray is not installed; install it (pip install "
                        "'ray>=2.40', or this project's [cpu] extra) or run with --workers 1"))
