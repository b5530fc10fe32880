"""The profile the workbench would use for a swept engine without its sweep: the fit's base, and
what its cell predictions are measured against (workbench/calibrate/sweeps/fit.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from workbench.calibrate.database.catalog import default_base_profile, disk_cached_profile
from workbench.calibrate.gpu_check.check_file import gpu_key
from workbench.contracts.cluster import Cluster
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.sweep import Sweep

CPU_BASE = "cpu-tiny"


def sweep_base(sweep: Sweep, given: str | None) -> tuple[Profile, str, Cluster | None]:
    """(base, why it is the base, the cluster a fitted profile holds for). `given`: --base.

    On a GPU the database knows: the measured database's profile of the swept model (its
    config.json), GPU and TP degree under vLLM. On a CPU: `cpu-tiny`, the shipped profile of this
    project's engine on its machines."""
    ident = sweep.identity
    gpu = gpu_key({"gpu": ident.get("device", "")})
    model_dir = sweep.doc.get("model_dir")
    config = Path(model_dir) / "config.json" if model_dir else None
    cluster = None
    if given is not None:
        return load_profile(given), f"--base {given}", None
    if gpu is None:
        return load_profile(CPU_BASE), (f"{CPU_BASE}: the shipped profile of the CPU engine (no "
                                        "measured database for this device)"), None
    if config is None or not config.is_file():
        raise ConfigError(str(sweep.path), "model_dir", model_dir,
                          "the swept model's directory with its config.json (or give --base)")
    tp = int(ident.get("tp", 1))
    try:
        prof = disk_cached_profile(str(config), gpu, tp, "vllm",
                                   default_base_profile(str(config), tp))
    except (ConfigError, ValueError, KeyError) as exc:
        raise ConfigError(str(config), "architecture", ident.get("model"),
                          f"a model the measured database has rows for ({exc}); or give --base "
                          "PROFILE") from None
    if prof.cluster is not None:
        cluster = replace(prof.cluster, framework_version=str(ident.get("version", "")))
    label = prof.cluster.label if prof.cluster else gpu
    return prof, f"the measured database's profile of {label}", cluster
