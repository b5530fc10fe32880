"""Table A from measured parts, and the declared calibration split
(traces/published/calibration-split.yaml).

Measured parts: each tlt-eval workload with its measured-database profile and a length model whose
shape (log-sd, within-group correlation, wrong answers' length) is the DAPO RL log's fit, at the
paper's 32k cap; the median correct answer is the DAPO log's carried to 32k (`for_cap`) for the
model it was measured on, and the pre-registered workload's for the others. Calibrated: the same,
with the split's global parameters (one value for every model and policy) chosen on a grid by
leave-one-model-out: each round's objective reads only the three fit models' figures, so the
fourth's are predictions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from sim.lengths import for_cap, log_median
from sim.results import PolicyRun
from sim.sweep import ProgressFn, sweep
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import Workload, load_workload

SPLIT = Path(__file__).resolve().parents[2] / "traces" / "published" / "calibration-split.yaml"
DAPO_WORKLOAD = "polytrace-dapo-qwen2.5-32b"
DAPO_MODEL = "qwen2.5-32b"
PARAMETERS = ("sigma", "wrong_factor", "train_efficiency")


@dataclass(frozen=True)
class Parameter:
    name: str
    low: float
    high: float
    grid: tuple[float, ...]


@dataclass(frozen=True)
class Split:
    path: str
    parameters: tuple[Parameter, ...]
    models: tuple[str, ...]

    @property
    def name(self) -> str:
        names = ", ".join(p.name for p in self.parameters)
        return f"leave-one-model-out over Table A ({names}; {Path(self.path).name})"

    def points(self) -> list[dict[str, float]]:
        """Every grid combination, in grid order (the first parameter varies slowest)."""
        names = [p.name for p in self.parameters]
        return [dict(zip(names, v, strict=True))
                for v in itertools.product(*(p.grid for p in self.parameters))]


def load_split(path: str | Path = SPLIT) -> Split:
    """The declared split; a malformed file, an unknown parameter or a grid value outside its range
    is refused."""
    path = Path(path)
    try:
        d = yaml.safe_load(path.read_text(encoding="utf-8"))
        params = tuple(Parameter(str(p["name"]), float(p["range"][0]), float(p["range"][1]),
                                 tuple(float(v) for v in p["grid"])) for p in d["parameters"])
        models = tuple(str(m) for m in d["split"]["models"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), "<file>", "unreadable",
                          f"the calibration-split YAML ({exc})") from None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError(str(path), "parameters", repr(exc),
                          "the layout of traces/published/calibration-split.yaml") from None
    for i, p in enumerate(params):
        if p.name not in PARAMETERS:
            raise ConfigError(str(path), f"parameters[{i}].name", p.name,
                              f"one of {', '.join(PARAMETERS)}")
        if not p.grid or any(not p.low <= v <= p.high for v in p.grid):
            raise ConfigError(str(path), f"parameters[{i}].grid", list(p.grid),
                              f"values within range [{p.low}, {p.high}]")
    if len(params) > 3:
        raise ConfigError(str(path), "parameters", len(params),
                          "at most three calibrated parameters")
    return Split(str(path), params, models)


def measured_parts(wl: Workload) -> Workload:
    """The workload with the DAPO log's length shape at its own cap; medians as the module says."""
    dapo = load_workload(DAPO_WORKLOAD)
    shape = dapo.lengths
    if wl.model == DAPO_MODEL:
        median = for_cap(shape, dapo.max_response_tokens, wl.max_response_tokens).median_tokens
    else:
        median = math.exp(log_median(wl.lengths, wl.max_response_tokens))
    lengths = replace(wl.lengths, sigma=shape.sigma, group_correlation=shape.group_correlation,
                      wrong_factor=shape.wrong_factor, median_tokens=float(f"{median:.6g}"))
    return replace(wl, lengths=lengths)


def calibrated(wl: Workload, profile: Profile,
               params: dict[str, float]) -> tuple[Workload, Profile]:
    """Measured parts with the split's global parameters applied (the same for every model and
    policy)."""
    lengths = wl.lengths
    if "sigma" in params:
        lengths = replace(lengths, sigma=params["sigma"])
    if "wrong_factor" in params:
        lengths = replace(lengths, wrong_factor=params["wrong_factor"])
    if "train_efficiency" in params:
        ph = profile.phases
        profile = replace(profile, phases=replace(ph, train_gpu_s_per_token=ph.train_gpu_s_per_token
                                                  / params["train_efficiency"]))
    return replace(wl, lengths=lengths), profile


@dataclass(frozen=True)
class CaseRuns:
    """One model's runs under the three policies (common random numbers)."""

    model: str
    speedups: dict[str, float]  # system -> mean over seeds of baseline step / system step
    base: list[PolicyRun]
    tlt: list[PolicyRun]


def simulate_case(model: str, wl: Workload, profile: Profile, systems: dict[str, str],
                  baseline: str, steps: int, seeds: list[int],
                  progress: ProgressFn | None = None) -> CaseRuns:
    policies = [load_policy(baseline)] + [load_policy(p) for p in systems.values()]
    runs = {(r.policy.name, r.seed): r.run
            for r in sweep(wl, policies, profile, seeds, steps, progress)}
    base = [runs[(baseline, s)] for s in seeds]
    speed = {system: float(np.mean([b.mean("step_time_s") / runs[(name, s)].mean("step_time_s")
                                    for b, s in zip(base, seeds)]))
                                    for system, name in systems.items()}
    return CaseRuns(model, speed, base, [runs[(systems["tlt"], s)] for s in seeds])


@dataclass(frozen=True)
class GridPoint:
    params: dict[str, float]
    speedups: dict[tuple[str, str], float]  # (model, system) -> simulated speedup


# Simulates one model's systems at one parameter point: (model, params) -> system -> speedup.
CaseFn = Callable[[str, dict[str, float]], dict[str, float]]


def evaluate_grid(split: Split, models: list[str], case_fn: CaseFn,
                  on_progress: Callable[[str], None] | None = None) -> list[GridPoint]:
    out = []
    for i, params in enumerate(split.points()):
        sp = {(m, sys): v for m in models for sys, v in case_fn(m, params).items()}
        out.append(GridPoint(params, sp))
        if on_progress:
            on_progress(f"calibration grid: {i + 1}/{len(split.points())} points")
    return out


def loss(point: GridPoint, published: dict[tuple[str, str], float], fit_models: list[str]) -> float:
    """The split's objective: squared log errors over the fit models' figures only."""
    return sum((math.log(v) - math.log(published[k])) ** 2 for k, v in point.speedups.items()
               if k[0] in fit_models)


@dataclass(frozen=True)
class Round:
    held_out: str
    fit_models: tuple[str, ...]
    params: dict[str, float]
    fit_loss: float


def best_point(grid: list[GridPoint], published: dict[tuple[str, str], float],
               fit_models: list[str]) -> GridPoint:
    """The grid point with the smallest loss over `fit_models` (ties: the first in grid order)."""
    seen = {k: v for k, v in published.items() if k[0] in fit_models}
    return min(grid, key=lambda p: loss(p, seen, fit_models))


def leave_one_out(grid: list[GridPoint], published: dict[tuple[str, str], float],
                  models: list[str]) -> list[Round]:
    """One round per model: fit on the others' figures (the held-out model's published figures are
    not passed to the objective at all), keep the chosen parameters."""
    rounds = []
    for held in models:
        fit_models = [m for m in models if m != held]
        visible = {k: v for k, v in published.items() if k[0] != held}
        best = best_point(grid, visible, fit_models)
        rounds.append(Round(held, tuple(fit_models), dict(best.params),
                            loss(best, visible, fit_models)))
    return rounds
