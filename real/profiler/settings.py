"""What one profiler run measures and how (`Settings`), validated before torch is imported, so a
bad option fails at once on a bare machine, naming the option and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from real.profiler.grid import GRIDS
from real.profiler.shard import Link, shard
from workbench.contracts.architecture import Architecture, load_architecture
from workbench.contracts.schema import ConfigError

DTYPE_NAMES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Settings:
    arch: Architecture
    tp: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    grid: str = "cpu"  # a grid.GRIDS name
    repeats: int = 30
    warmup: int = 3
    seed: int = 0
    link: Link = field(default_factory=Link)
    threads: int | None = None  # torch CPU threads (None: torch's default)
    check_rounds: int = 5  # interleaved rounds of the whole-model check (0: no check)
    passes: int = 1  # interleaved passes over the inference points (each keeps its fastest pass)


def make_settings(
    arch: str | Path,
    device: str = "cpu",
    tp: int = 1,
    dtype: str | None = None,
    grid: str | None = None,
    repeats: int | None = None,
    warmup: int = 3,
    seed: int = 0,
    threads: int | None = None,
    check_rounds: int = 5,
    passes: int | None = None,
    link: Link | None = None,
) -> Settings:
    """Settings with the device's defaults (cuda: bfloat16, 30 runs, 1 pass; cpu: float32, 20
    runs, 3 passes and 1 thread, timed on the thread's CPU clock, since other processes share a
    CPU's cores: timing.py); errors name the option."""
    if device not in ("cpu", "cuda"):
        raise ConfigError("--device", "device", device, "cpu or cuda")
    cuda = device == "cuda"
    dtype = dtype or ("bfloat16" if cuda else "float32")
    if dtype not in DTYPE_NAMES:
        raise ConfigError("--dtype", "dtype", dtype, " or ".join(DTYPE_NAMES))
    grid = grid or device
    if grid not in GRIDS:
        raise ConfigError("--grid", "grid", grid, " or ".join(GRIDS))
    a = load_architecture(arch)
    shard(a, tp)
    counts = {
        "repeats": repeats,
        "warmup": warmup,
        "threads": threads,
        "check_rounds": check_rounds,
        "passes": passes,
    }
    for name, v in counts.items():
        if v is not None and v < (0 if name in ("warmup", "check_rounds") else 1):
            raise ConfigError(f"--{name.replace('_', '-')}", name, v, "a larger integer")
    return Settings(
        arch=a,
        tp=tp,
        device=device,
        dtype=dtype,
        grid=grid,
        repeats=repeats or (30 if cuda else 20),
        warmup=warmup,
        seed=seed,
        link=link or Link(),
        threads=threads or (None if cuda else 1),
        check_rounds=check_rounds,
        passes=passes or (1 if cuda else 3),
    )
