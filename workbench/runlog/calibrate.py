"""`tlt calibrate --run-log` and `tlt validate --run-log`: a run's log in, its steps predicted.

`prepare` (workbench/runlog/prepared.py) reads the log, works out the run's shape, engine config,
training shape and factors' priors, models each step's lengths and prices the work of every step
at the measured database's costs. `calibrate` then fits the run-level factors under their priors
on the first `fit_steps` steps of each log (workbench/runlog/fit.py), prices every step and phase
with them, measures how often the intervals hold, and with several logs fits on all but one and
predicts the one left out (workbench/runlog/transfer.py); `validate` prices another log's steps
with a profile's factors over its own engine and config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.contracts.profile import Profile
from workbench.contracts.run_factors import RunFactors
from workbench.contracts.schema import ConfigError
from workbench.runlog import engine, errors, fit, predictive
from workbench.runlog.errors import PhaseErrors
from workbench.runlog.prepared import Prepared, check_fit_steps, fitted_on, fitted_steps
from workbench.runlog.priors import FACTORS
from workbench.runlog.run_profile import run_factors, run_profile, uncertainty
from workbench.runlog.sd_acceptance import LogAcceptance, log_acceptance
from workbench.runlog.sd_acceptance import apply as apply_acceptance
from workbench.runlog.transfer import leave_one_out


@dataclass(frozen=True)
class LogFit:
    """One log fitted on: its steps predicted over its own engine, the held-out intervals."""

    prepared: Prepared
    predicted: engine.Predicted
    fitted: PhaseErrors
    heldout: PhaseErrors
    coverage: predictive.Coverages | None  # the held-out steps'


@dataclass(frozen=True)
class RunCalibration:
    prepared: Prepared
    fit_steps: int
    posterior: fit.Posterior
    profile: Profile
    predicted: engine.Predicted
    fitted: PhaseErrors
    heldout: PhaseErrors
    coverage: predictive.Coverages | None
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
    coverage: predictive.Coverages | None = None  # the steps not fitted on


def forwards(p: Prepared) -> int:
    """Forward-equivalents per token of the run's update phases (informative, the profile's)."""
    t = p.training
    return sum((4 if t.model(ph.role).checkpointing else 3) * ph.epochs if ph.update else 1
               for ph in t.phases)


def profile_of(logs: list[Prepared], fit_steps: int, post: fit.Posterior, name: str,
               on: tuple[str, ...], heldout_pct: float = float("nan")
               ) -> tuple[Profile, tuple[RunFactors, RunFactors]]:
    """The first log's profile with the factors fitted on `logs` (and the two split refits)."""
    p = logs[0]
    sets = [q.fit_set(fit_steps) for q in logs]
    db = p.database.name
    f = run_factors(post.z, p.priors, forwards(p), db, "; ".join(on), post)
    splits = tuple(run_factors(fit.split_refit(sets, post, k), p.priors, forwards(p), db,
                               "; ".join(on)) for k in (True, False))
    values = engine.factor_values(f)
    fixed, per_token = engine.affine_update(engine.predict(p.work, values), p.work.tokens)
    keep = post.draws[::max(1, len(post.draws) // 100)][:100]
    mid = np.argsort(p.work.tokens)[len(p.work.tokens) // 2: len(p.work.tokens) // 2 + 1]
    base = engine.predict(p.work.rows(mid), values).update_s[0]
    scale = np.array([engine.predict(p.work.rows(mid), values * np.exp(d - post.z)).update_s[0]
                      for d in keep]) / max(base, 1e-12)
    u = uncertainty(post, p.priors, f, splits, scale, fixed)
    prof = run_profile(p.database, f, u, name, on, heldout_pct, p.log.path, (fixed, per_token),
                       p.shape.gpus)
    return prof, splits


def predicted(q: Prepared, f: RunFactors) -> tuple[RunFactors, engine.Predicted]:
    """`f` over `q`'s own config (the same multiples of its priors' medians), and every step of
    `q` priced with it."""
    g = f.transferred(tuple(q.priors.medians))
    return g, engine.predict(q.work, engine.factor_values(g))


def _log_fit(q: Prepared, prof: Profile, fit_steps: int) -> LogFit:
    f, pred = predicted(q, prof.run_factors)
    held = np.arange(fit_steps, q.log.steps)
    cov = predictive.coverage(f, q.work, q.measured, held, change=False)
    return LogFit(q, pred, PhaseErrors.of(pred, q.measured, slice(0, fit_steps)),
                  PhaseErrors.of(pred, q.measured, slice(fit_steps, None)), cov)


def calibrate(p: Prepared, fit_steps: int, name: str, also: Sequence[Prepared] = ()
              ) -> RunCalibration:
    """Fit on the first `fit_steps` timed steps (of `p` and of each log in `also`, runs of the same
    cluster), predict them all, and with several logs leave each out in turn."""
    logs = [p, *also]
    for q in logs:
        check_fit_steps(q.log, fit_steps)
    post = fit.fit_posterior([q.fit_set(fit_steps) for q in logs])
    on = tuple(fitted_on(q, fit_steps) for q in logs)
    prof, splits = profile_of(logs, fit_steps, post, name, on)
    fits = [_log_fit(q, prof, fit_steps) for q in logs]
    prof, _ = profile_of(logs, fit_steps, post, name, on, fits[0].heldout.gen.median)
    accepted = log_acceptance(p.log, p.shape, prof, fit_steps)
    prof = apply_acceptance(prof, accepted) if accepted is not None else prof
    first = fits[0]
    return RunCalibration(
        p, fit_steps, post, prof, first.predicted, first.fitted, first.heldout, first.coverage,
        errors.baselines(p.measured, p.stats.mean, fit_steps),
        errors.drift(first.predicted, p.measured, p.steps, fit_steps), splits, tuple(fits[1:]),
        leave_one_out(logs, fit_steps) if len(logs) > 1 else (), accepted)


def validate(p: Prepared, profile: Profile) -> RunValidation:
    """Every step of `p` priced with `profile`'s factors over `p`'s own engine and config."""
    if profile.run_factors is None:
        raise ConfigError(
            profile.name,
            "run_factors",
            None,
            "a profile `tlt calibrate --run-log` wrote (it records the run-level factors)",
        )
    if profile.run_factors.names != FACTORS:
        raise ConfigError(
            profile.name, "run_factors.extra", [x.name for x in profile.run_factors.extra],
            f"the factors {', '.join(FACTORS[4:])}: a profile `tlt calibrate --run-log` writes "
            "now (one written before each phase was priced apart: calibrate it again)")
    f, pred = predicted(p, profile.run_factors)
    fixed, per_token = engine.affine_update(pred, p.work.tokens)
    run = engine.apply_factors(p.database, f, fixed, per_token, p.shape.gpus, profile.name)
    own = fitted_steps(profile, p)
    held = PhaseErrors.of(pred, p.measured, slice(own, None)) if own is not None else None
    rows = np.arange(own or 0, p.log.steps)
    cov = predictive.coverage(f, p.work, p.measured, rows, change=own is None)
    return RunValidation(p, profile, run, pred, PhaseErrors.of(pred, p.measured, slice(None)),
                         own is not None, held, cov)
