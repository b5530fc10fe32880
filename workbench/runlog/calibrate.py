"""`tlt calibrate --run-log` and `tlt validate --run-log`: a run's log in, its steps predicted.

`prepare` reads the log, works out the run's shape and engine config, its factors' priors, models
each step's lengths and simulates every step at the measured database's costs (the slow part: a
simulation per step). `calibrate` then fits the run-level factors under their priors on the first
`fit_steps` steps of each log (workbench/runlog/fit.py), prices every step with them, measures how
often the intervals hold, and with several logs fits on all but one and predicts the one left out
(workbench/runlog/transfer.py); `validate` prices another log's steps with a profile's factors
over its own engine and config.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.project import Mapper, serial_map
from workbench.runlog import engine, errors, fit, predictive
from workbench.runlog.engine_config import EngineConfig, engine_config
from workbench.runlog.lengths import ModelledLengths, StepStats, model_lengths, step_stats
from workbench.runlog.priors import RunPriors, engine_profile_priors, run_priors
from workbench.runlog.reader import RunLog, read_run_log
from workbench.runlog.run_profile import run_factors, run_profile, uncertainty
from workbench.runlog.sd_acceptance import LogAcceptance, log_acceptance
from workbench.runlog.sd_acceptance import apply as apply_acceptance
from workbench.runlog.shape import RunShape, ShapeFlags, run_shape
from workbench.runlog.transfer import leave_one_out

GRID_STEPS = 128  # a step's modelled lengths are multiples of cap / GRID_STEPS (its longest exact)


@dataclass(frozen=True)
class Prepared:
    """A log read, shaped, its engine and priors known, modelled and simulated at the database's
    costs."""

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

    @property
    def steps(self) -> np.ndarray:
        return self.log.metrics["step"].to_numpy().astype(int)

    def fit_set(self, fit_steps: int) -> fit.FitSet:
        return fit.FitSet(self.work, self.measured, fit_steps, self.shape.train_forwards,
                          self.priors, self.shape.gen_forwards)


@dataclass(frozen=True)
class PhaseErrors:
    gen: errors.Errors
    update: errors.Errors
    step: errors.Errors

    @classmethod
    def of(cls, pred: engine.Predicted, meas: errors.Measured, rows: slice) -> PhaseErrors:
        return cls(
            errors.Errors.of(pred.gen_s[rows], meas.gen_s[rows]),
            errors.Errors.of(pred.update_s[rows], meas.update_s[rows]),
            errors.Errors.of(pred.step_s[rows], meas.step_s[rows]),
        )


@dataclass(frozen=True)
class LogFit:
    """One log fitted on: its steps predicted over its own engine, the held-out intervals."""

    prepared: Prepared
    predicted: engine.Predicted
    fitted: PhaseErrors
    heldout: PhaseErrors
    coverage: predictive.Coverage | None  # the held-out steps'


@dataclass(frozen=True)
class RunCalibration:
    prepared: Prepared
    fit_steps: int
    posterior: fit.Posterior
    profile: Profile
    predicted: engine.Predicted
    fitted: PhaseErrors
    heldout: PhaseErrors
    coverage: predictive.Coverage | None
    baselines: errors.Baselines
    drift: list[errors.DriftRow]
    splits: tuple  # RunFactors if the unplaced cost were all per engine step / per RL step
    also: tuple[LogFit, ...] = ()  # the other logs fitted on (their first fit_steps too)
    left_out: tuple = ()  # transfer.LeftOut per log, with several logs
    acceptance: LogAcceptance | None = None  # SD's acceptance where the log measures it


@dataclass(frozen=True)
class RunValidation:
    prepared: Prepared
    profile: Profile
    run_profile: Profile  # the profile's factors over this run's engine
    predicted: engine.Predicted
    errors: PhaseErrors
    in_sample: bool  # the profile was fitted on this very log
    heldout: PhaseErrors | None = None  # in sample: the steps after the ones it was fitted on
    coverage: predictive.Coverage | None = None  # the steps not fitted on


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def prepare(path: str | Path, flags: ShapeFlags, seed: int = 0,
            progress: Callable[[int, int], None] | None = None, fit_steps: int | None = None,
            limit: int | None = None, mapper: Mapper = serial_map,
            engine_profile: Profile | None = None) -> Prepared:
    """Read and simulate (module docstring); refuses a bad log or shape before any simulation. With
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
    priors = run_priors(shape, eng)
    stats = step_stats(log)
    grid = max(1, shape.max_response_tokens // GRID_STEPS)
    lengths = model_lengths(stats, shape.responses, shape.max_response_tokens, seed, grid,
                            fit_steps)
    db = engine.database_profile(shape)
    if engine_profile is not None:
        context = float(np.median(stats.prompt_mean) + np.median(stats.mean))
        priors = engine_profile_priors(priors, engine_profile, db, shape, eng, context)
    wl = engine.run_workload(shape, lengths, Path(path).stem, db.name)
    work = engine.simulate_steps(wl, db, lengths, progress, mapper)
    return Prepared(log, shape, stats, lengths, db, work, errors.measured(log),
                    _digest(log.path), eng, priors)


def check_fit_steps(log: RunLog, fit_steps: int) -> None:
    if not 1 <= fit_steps < log.steps:
        raise ConfigError(
            log.path,
            "--fit-steps",
            fit_steps,
            f"from 1 to {log.steps - 1}: the log has {log.steps} timed steps, and the steps "
            "after the fitted ones are the held-out check",
        )


FITTED = re.compile(r"first (\d+) timed steps.*sha256 ([0-9a-f]{16})")


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


def _log_fit(q: Prepared, prof: Profile, fit_steps: int) -> LogFit:
    f = prof.run_factors.transferred(tuple(q.priors.medians))
    pred = engine.predict(q.work, f, q.shape.train_forwards, q.shape.gen_forwards)
    held = np.arange(fit_steps, q.log.steps)
    cov = predictive.coverage(prof, f, q.work, q.measured, q.shape, held)
    return LogFit(q, pred, PhaseErrors.of(pred, q.measured, slice(0, fit_steps)),
                  PhaseErrors.of(pred, q.measured, slice(fit_steps, None)), cov)


def calibrate(p: Prepared, fit_steps: int, name: str, also: Sequence[Prepared] = ()
              ) -> RunCalibration:
    """Fit on the first `fit_steps` timed steps (of `p` and of each log in `also`, runs of the same
    cluster), predict them all, and with several logs leave each out in turn."""
    logs = [p, *also]
    for q in logs:
        check_fit_steps(q.log, fit_steps)
    sets = [q.fit_set(fit_steps) for q in logs]
    post = fit.fit_posterior(sets)
    on = tuple(fitted_on(q, fit_steps) for q in logs)
    forwards, db = p.shape.train_forwards + p.shape.gen_forwards, p.database.name
    f = run_factors(post.z, p.priors, forwards, db, "; ".join(on))
    splits = tuple(run_factors(fit.split_refit(sets, post, k), p.priors, forwards, db,
                               "; ".join(on)) for k in (True, False))
    u = uncertainty(post, p.priors, f, splits)
    prof = run_profile(p.database, forwards, f, u, name, on, float("nan"), p.log.path)
    fits = [_log_fit(q, prof, fit_steps) for q in logs]
    prof = run_profile(p.database, forwards, f, u, name, on, fits[0].heldout.gen.median,
                       p.log.path)
    accepted = log_acceptance(p.log, prof, fit_steps)
    prof = apply_acceptance(prof, accepted) if accepted is not None else prof
    first = fits[0]
    return RunCalibration(
        p, fit_steps, post, prof, first.predicted, first.fitted, first.heldout, first.coverage,
        errors.baselines(p.measured, p.stats.mean, fit_steps),
        errors.drift(first.predicted, p.measured, p.steps, fit_steps), splits, tuple(fits[1:]),
        leave_one_out(logs, fit_steps, name) if len(logs) > 1 else (), accepted)


def validate(p: Prepared, profile: Profile) -> RunValidation:
    """Every step of `p` priced with `profile`'s factors over `p`'s own engine and config."""
    if profile.run_factors is None:
        raise ConfigError(
            profile.name,
            "run_factors",
            None,
            "a profile `tlt calibrate --run-log` wrote (it records the run-level factors)",
        )
    f = profile.run_factors.transferred(tuple(p.priors.medians))
    s = p.shape
    run = engine.apply_factors(p.database, f, s.train_forwards + s.gen_forwards, profile.name)
    pred = engine.predict(p.work, f, s.train_forwards, s.gen_forwards)
    own = fitted_steps(profile, p)
    held = PhaseErrors.of(pred, p.measured, slice(own, None)) if own is not None else None
    rows = np.arange(own or 0, p.log.steps)
    cov = predictive.coverage(profile, f, p.work, p.measured, p.shape, rows)
    return RunValidation(p, profile, run, pred, PhaseErrors.of(pred, p.measured, slice(None)),
                         own is not None, held, cov)
