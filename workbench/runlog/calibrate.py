"""`tlt calibrate --run-log` and `tlt validate --run-log`: a run's log in, its steps predicted.

`prepare` reads the log, works out the run's shape, models each step's lengths and simulates every
step at the measured database's costs (the slow part: a simulation per step). `calibrate` then fits
the run-level factors on the first `fit_steps` steps (workbench/runlog/fit.py) and prices every step
with them; `validate` prices a second log's steps with a profile's factors over its own engine.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from workbench.contracts.fileio import sig
from sim.simulator import MAX_WORK
from workbench.contracts.length_data import COLUMNS, UNKNOWN, ObservedLengths, from_frame
from workbench.contracts.profile import RUNLOG_PREFIX, Profile, RunFactors
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import LengthModel, Workload
from workbench.project import Mapper, serial_map
from workbench.runlog import engine, fit
from workbench.runlog.lengths import ModelledLengths, StepStats, model_lengths, step_stats
from workbench.runlog.reader import RunLog, read_run_log
from workbench.runlog.shape import RunShape, ShapeFlags, run_shape

GRID_STEPS = (
    128  # a step's modelled lengths are multiples of cap / GRID_STEPS tokens (its longest exact)
)


@dataclass(frozen=True)
class Prepared:
    """A log read, shaped, modelled and simulated at the database's costs."""

    log: RunLog
    shape: RunShape
    stats: StepStats
    lengths: ModelledLengths
    database: Profile
    work: engine.StepWork
    measured: fit.Measured
    digest: str  # sha256 of the log file

    @property
    def steps(self) -> np.ndarray:
        return self.log.metrics["step"].to_numpy().astype(int)


@dataclass(frozen=True)
class PhaseErrors:
    gen: fit.Errors
    update: fit.Errors
    step: fit.Errors

    @classmethod
    def of(cls, pred: engine.Predicted, meas: fit.Measured, rows: slice) -> PhaseErrors:
        return cls(
            fit.Errors.of(pred.gen_s[rows], meas.gen_s[rows]),
            fit.Errors.of(pred.update_s[rows], meas.update_s[rows]),
            fit.Errors.of(pred.step_s[rows], meas.step_s[rows]),
        )


@dataclass(frozen=True)
class LogFit:
    """Another log of the same cluster fitted alongside: its steps predicted over its own engine."""

    prepared: Prepared
    predicted: engine.Predicted
    fitted: PhaseErrors
    heldout: PhaseErrors


@dataclass(frozen=True)
class RunCalibration:
    prepared: Prepared
    fit_steps: int
    factors: fit.FactorFit
    profile: Profile
    predicted: engine.Predicted
    fitted: PhaseErrors
    heldout: PhaseErrors
    baselines: fit.Baselines
    drift: list[fit.DriftRow]
    also: tuple[LogFit, ...] = ()  # the other logs fitted on (their first fit_steps too)


@dataclass(frozen=True)
class RunValidation:
    prepared: Prepared
    profile: Profile
    run_profile: Profile  # the profile's factors over this run's engine
    predicted: engine.Predicted
    errors: PhaseErrors
    in_sample: bool  # the profile was fitted on this very log
    heldout: PhaseErrors | None = None  # in sample: the steps after the ones it was fitted on


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def prepare(
    path: str | Path,
    flags: ShapeFlags,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    fit_steps: int | None = None,
    limit: int | None = None,
    mapper: Mapper = serial_map,
) -> Prepared:
    """Read and simulate (module docstring); refuses a bad log or shape before any simulation. With
    `fit_steps`, only those steps' statistics are pooled into what other steps' lengths borrow;
    with `limit`, only the first `limit` timed steps are used."""
    log = read_run_log(path)
    if limit is not None and limit < log.steps:
        log = replace(log, metrics=log.metrics.iloc[:limit].reset_index(drop=True))
    if fit_steps is not None:
        check_fit_steps(log, fit_steps)
    shape = run_shape(log, flags)
    stats = step_stats(log)
    grid = max(1, shape.max_response_tokens // GRID_STEPS)
    lengths = model_lengths(
        stats, shape.responses, shape.max_response_tokens, seed, grid, fit_steps
    )
    db = engine.database_profile(shape)
    wl = engine.run_workload(shape, lengths, Path(path).stem, db.name)
    work = engine.simulate_steps(wl, db, lengths, progress, mapper)
    return Prepared(log, shape, stats, lengths, db, work, fit.measured(log), _digest(log.path))


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


def calibrate(
    p: Prepared, fit_steps: int, name: str, also: Sequence[Prepared] = ()
) -> RunCalibration:
    """Fit on the first `fit_steps` timed steps (of `p` and of each log in `also`, runs of the same
    cluster), predict them all."""
    logs = [p, *also]
    for q in logs:
        check_fit_steps(q.log, fit_steps)
    sets = [fit.FitSet(q.work, q.measured, fit_steps, q.shape.train_forwards) for q in logs]
    on = "; ".join(fitted_on(q, fit_steps) for q in logs)
    ff = fit.fit_factors(sets, on, p.database.name)
    ff = replace(ff, factors=_rounded(ff.factors))  # what the profile file holds is what predicts
    preds = [engine.predict(q.work, ff.factors, q.shape.train_forwards) for q in logs]
    fits = [
        LogFit(
            q,
            pr,
            PhaseErrors.of(pr, q.measured, slice(0, fit_steps)),
            PhaseErrors.of(pr, q.measured, slice(fit_steps, None)),
        )
        for q, pr in zip(logs, preds)
    ]
    prof = run_profile(logs, ff.factors, name, fit_steps, fits[0].heldout.gen.median)
    return RunCalibration(
        p,
        fit_steps,
        ff,
        prof,
        preds[0],
        fits[0].fitted,
        fits[0].heldout,
        fit.baselines(p.measured, p.stats.mean, fit_steps),
        fit.drift(preds[0], p.measured, p.steps, fit_steps),
        tuple(fits[1:]),
    )


def _rounded(f: RunFactors) -> RunFactors:
    return replace(
        f,
        decode_speed=sig(f.decode_speed),
        step_overhead_s=sig(f.step_overhead_s) if f.step_overhead_s > 1e-9 else 0.0,
        rl_step_s=sig(f.rl_step_s) if f.rl_step_s > 1e-6 else 0.0,
        train_speed=sig(f.train_speed),
    )


def run_profile(
    logs: list[Prepared], f: RunFactors, name: str, fit_steps: int, heldout_pct: float
) -> Profile:
    """The first log's database profile with the factors, saying in `source` what was fitted on
    what."""
    p = logs[0]
    prof = engine.apply_factors(p.database, f, p.shape.train_forwards, name)
    c = prof.cluster
    on = "; ".join(fitted_on(q, fit_steps) for q in logs)
    source = (
        f"calibrated by tlt calibrate --run-log on {on}: run-level factors over the measured-"
        f"database profile {p.database.name} (decode {f.decode_speed:.3g}x the database's step, "
        f"+{1e3 * f.step_overhead_s:.3g} ms per engine step, {f.rl_step_s:.3g} s per RL step "
        f"inside veRL's rollout timer, update {f.train_speed:.3g}x the database's cost per token "
        f"and forward at {p.shape.train_forwards} forwards per token); each step's lengths "
        f"modelled from its own statistics (workbench/runlog/lengths.py); held-out median "
        f"|error| of timing_s/gen {heldout_pct:.1f}%. Modelled, not measured by the log: SD "
        f"acceptance and the drafter's learning ({p.database.name}'s, from its base), the "
        f"drafter's cost (the database's x the decode factor). The database profile: "
        f"{p.database.source}"
    )
    return replace(
        prof,
        fitted_on=tuple(RUNLOG_PREFIX + fitted_on(q, fit_steps) for q in logs),
        fit_error_pct=sig(heldout_pct, 4),
        source=source,
        description=f"{c.label if c else name}, calibrated on a veRL run log "
        f"({Path(p.log.path).name})",
    )


def validate(p: Prepared, profile: Profile) -> RunValidation:
    """Every step of `p` priced with `profile`'s factors over `p`'s own engine."""
    f = profile.run_factors
    if f is None:
        raise ConfigError(
            profile.name,
            "run_factors",
            None,
            "a profile `tlt calibrate --run-log` wrote (it records the run-level factors)",
        )
    run = engine.apply_factors(p.database, f, p.shape.train_forwards, profile.name)
    pred = engine.predict(p.work, f, p.shape.train_forwards)
    own = fitted_steps(profile, p)
    held = PhaseErrors.of(pred, p.measured, slice(own, None)) if own is not None else None
    return RunValidation(
        p, profile, run, pred, PhaseErrors.of(pred, p.measured, slice(None)), own is not None, held
    )


def run_workload(
    cal: RunCalibration, name: str, profile_path: str
) -> tuple[Workload, ObservedLengths]:
    """The calibrated run as a Workload over its modelled lengths (replayed: step s is the log's
    s-th timed step, seed 0), and the lengths table to write beside it (`write_workload`)."""
    import pandas as pd

    p = cal.prepared
    n = p.shape.group_size
    frames = [
        pd.DataFrame(
            {
                "batch": b,
                "group": np.arange(len(x)) // n,
                "rank": UNKNOWN,
                "prompt_tokens": int(p.lengths.prompt_tokens[b]),
                "length": x,
                "correct": UNKNOWN,
                "mixed": UNKNOWN,
            }
        )
        for b, x in enumerate(p.lengths.lengths)
    ]
    obs = from_frame(pd.concat(frames, ignore_index=True)[list(COLUMNS)], p.log.path)
    base = engine.run_workload(p.shape, p.lengths, name, profile_path)
    work_limit = MAX_WORK // (p.shape.responses + p.shape.engines)
    wl = replace(
        base,
        steps=max(1, min(p.log.steps, work_limit)),
        model=cal.profile.cluster.model,
        lengths=LengthModel(kind="replay", data="lengths.parquet"),
        description=f"The veRL run of {Path(p.log.path).name}: {p.shape.engines} engines of "
        f"TP{p.shape.tp}, {p.shape.prompts_per_step} prompts x {p.shape.group_size}, cap "
        f"{p.shape.max_response_tokens}; each step's lengths modelled from its statistics",
        source=f"tlt calibrate --run-log {p.log.path} (sha256 {p.digest[:16]})",
    )
    wl.check()
    return wl, obs
