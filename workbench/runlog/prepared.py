"""A run's log read and worked: its shape, engine config, training shape and factors' priors, each
step's modelled lengths, its rollout's engine work and its phases' bases at the measured
database's costs (`prepare`), ready for a calibration or a validation
(workbench/runlog/calibrate.py) to price with factors.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.training_shape import TrainingShape, TrainingTaken
from workbench.runlog import engine, errors, fit
from workbench.runlog.engine_config import EngineConfig, engine_config
from workbench.runlog.forward_costs import ForwardGrid, forward_grid
from workbench.runlog.frameworks.train_config import RUN_GPUS, RUN_MODEL
from workbench.runlog.lengths import ModelledLengths, StepStats, model_lengths, step_stats
from workbench.runlog.phases import SYNC_BYTES_PER_S, SYNC_CALLS_S, step_bases
from workbench.runlog.priors import PHASE_S, RunPriors, engine_profile_priors, run_priors
from workbench.runlog.reader import RunLog, read_run_log
from workbench.runlog.shape import RunShape, ShapeFlags, run_shape
from workbench.runlog.training import training_shape

GRID_STEPS = 128  # a step's modelled lengths are multiples of cap / GRID_STEPS (its longest exact)
FITTED = re.compile(r"first (\d+) timed steps.*sha256 ([0-9a-f]{16})")


@dataclass(frozen=True)
class Prepared:
    """A log read, shaped, its engine, training and priors known, modelled and worked at the
    database's costs."""

    log: RunLog
    shape: RunShape
    stats: StepStats
    lengths: ModelledLengths
    database: Profile
    work: engine.StepWork
    measured: errors.Measured
    digest: str  # sha256 of the log file
    engine: EngineConfig
    priors: RunPriors
    training: TrainingShape

    @property
    def steps(self) -> np.ndarray:
        return self.log.metrics["step"].to_numpy().astype(int)

    def fit_set(self, fit_steps: int) -> fit.FitSet:
        return fit.FitSet(self.work, self.measured, fit_steps, self.priors)


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _grids(shape: RunShape, t: TrainingShape) -> dict[str, ForwardGrid]:
    """Each model's forward grid (workbench/runlog/forward_costs.py) at the training's TP."""
    return {m.role: forward_grid(m.arch, shape.gpu, t.tp, shape.framework, m.value_head)
            for m in t.models}


def work_of(log: RunLog, shape: RunShape, t: TrainingShape, stats: StepStats,
            lengths: ModelledLengths, db: Profile,
            progress: Callable[[int, int], None] | None = None) -> engine.StepWork:
    """Each step's rollout work and phases' bases at the database's costs."""
    from workbench.contracts.architecture import load_architecture

    engine_s, passes = engine.rollout_steps(shape, db, lengths, progress)
    params = load_architecture(shape.arch).params
    sync = (SYNC_CALLS_S + 2.0 * params / SYNC_BYTES_PER_S) / PHASE_S
    bases = step_bases(t, _grids(shape, t), stats, shape.responses, errors.timed_phases(log),
                       sync)
    tokens = (stats.mean + stats.prompt_mean) * shape.responses
    return engine.StepWork(engine_s, passes, bases, tokens)


def prepare(path: str | Path, flags: ShapeFlags, seed: int = 0,
            progress: Callable[[int, int], None] | None = None, fit_steps: int | None = None,
            limit: int | None = None, engine_profile: Profile | None = None) -> Prepared:
    """Read and work (module docstring); refuses a bad log or shape before any work. With
    `fit_steps`, only those steps' statistics are pooled into what other steps' lengths borrow;
    with `limit`, only the first `limit` timed steps are used; `engine_profile` (a profile
    measured on the run's GPU) tightens the priors it measures (workbench/runlog/priors.py)."""
    log = read_run_log(path)
    if limit is not None and limit < log.steps:
        log = replace(log, metrics=log.metrics.iloc[:limit].reset_index(drop=True))
    if fit_steps is not None:
        check_fit_steps(log, fit_steps)
    shape = run_shape(log, flags)
    eng = engine_config(log, shape.framework)
    train = on_run(log.training, shape, log.path) if log.training else training_shape(log, shape)
    priors = run_priors(shape, eng, train, "update_weights" in errors.timed_phases(log))
    stats = step_stats(log)
    grid = max(1, shape.max_response_tokens // GRID_STEPS)
    lengths = model_lengths(stats, shape.responses, shape.max_response_tokens, seed, grid,
                            fit_steps)
    db = engine.database_profile(shape)
    if engine_profile is not None:
        context = float(np.median(stats.prompt_mean) + np.median(stats.mean))
        priors = engine_profile_priors(priors, engine_profile, db, shape, eng, context)
    work = work_of(log, shape, train, stats, lengths, db, progress)
    return Prepared(log, shape, stats, lengths, db, work, errors.measured(log),
                    _digest(log.path), eng, priors, train)


def on_run(t: TrainingShape, shape: RunShape, path: str) -> TrainingShape:
    """Another framework's training shape with what its log left to the run filled from the run's
    shape (workbench/runlog/frameworks/train_config.py): the run's model, its GPUs, its caps."""
    taken = list(t.taken)
    if any(m.arch == RUN_MODEL for m in t.models):
        taken.append(TrainingTaken("models", shape.arch, "the run's model (the rollout's)"))
    if t.gpus == RUN_GPUS:
        taken.append(TrainingTaken("gpus", str(shape.gpus), "the run's GPUs (colocated)"))
    out = replace(t, models=tuple(replace(m, arch=shape.arch) if m.arch == RUN_MODEL else m
                                  for m in t.models),
                  gpus=t.gpus or shape.gpus,
                  max_response_tokens=t.max_response_tokens or shape.max_response_tokens,
                  taken=tuple(taken))
    try:
        out.check()
    except FieldError as exc:
        raise ConfigError(path, exc.field, exc.value, f"{exc.allowed} (the log's training "
                          "settings: docs/formats.md#run-logs)") from None
    return out


def check_fit_steps(log: RunLog, fit_steps: int) -> None:
    if not 1 <= fit_steps < log.steps:
        raise ConfigError(
            log.path,
            "--fit-steps",
            fit_steps,
            f"from 1 to {log.steps - 1}: the log has {log.steps} timed steps, and the steps "
            "after the fitted ones are the held-out check",
        )


def fitted_on(p: Prepared, fit_steps: int) -> str:
    s = p.steps
    return (
        f"{Path(p.log.path).name}: its first {fit_steps} timed steps (steps {s[0]}-"
        f"{s[fit_steps - 1]} of {s[0]}-{s[-1]}), sha256 {p.digest[:16]}"
    )


def fitted_steps(profile: Profile, p: Prepared) -> int | None:
    """How many of `p`'s first steps `profile` was fitted on (None: not fitted on this log)."""
    for entry in profile.fitted_on:
        m = FITTED.search(entry)
        if m and m.group(2) == p.digest[:16]:
            return int(m.group(1))
    return None
