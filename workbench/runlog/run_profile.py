"""A run-log calibration as a Profile: the factors at the MAP over the first log's database
profile, and their uncertainty in the form every simulator-facing tool reads
(`Profile.uncertainty`, workbench/contracts/uncertainty.py).

The four cost components are the factors relative to the profile's own values: `kernel_scale` and
`train_scale` are decode_speed and train_speed over the MAP's, `step_overhead_s` and `rl_step_s`
the per-step and per-RL-step costs themselves; their log-covariance is the posterior's (the fit's
log-scales shift them by the same amounts), their ranges the priors' declared ranges. The two
splits are the refits that put the cost the data cannot place all per engine step or all per RL
step (workbench/runlog/fit.py: `split_refit`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from workbench.contracts.fileio import sig
from workbench.contracts.profile import Profile, RunFactors
from workbench.contracts.provenance import RUNLOG_PREFIX
from workbench.contracts.uncertainty import CostSplit, CostUncertainty
from workbench.runlog import engine
from workbench.runlog.fit import Posterior
from workbench.runlog.priors import RANGE_SDS, RunPriors

SAMPLES = 100  # posterior draws the profile keeps
SPLIT_NAMES = ("all per engine step", "all per RL step")
METHOD = ("Laplace approximation at the MAP of the run-level factors under their declared priors "
          "(workbench/runlog/fit.py), the fit steps' autocorrelation counted")


def run_factors(z: np.ndarray, priors: RunPriors, forwards: int, database: str,
                fitted_on: str) -> RunFactors:
    """The factors of the run with these priors at log-scales `z` (rounded as the file holds
    them)."""
    v = priors.medians * np.exp(z)
    m = priors.medians
    return RunFactors(
        decode_speed=sig(v[0]), step_overhead_s=sig(v[1]), rl_step_s=sig(v[2]),
        train_speed=sig(v[3]), train_forwards=forwards, database_profile=database,
        fitted_on=fitted_on, decode_speed_prior=sig(m[0]), step_overhead_prior_s=sig(m[1]),
        rl_step_prior_s=sig(m[2]), train_speed_prior=sig(m[3]))


def uncertainty(post: Posterior, priors: RunPriors, f: RunFactors,
                splits: tuple[RunFactors, RunFactors]) -> CostUncertainty:
    """The profile's cost uncertainty (module docstring)."""
    own = np.array([f.decode_speed, f.step_overhead_s, f.rl_step_s, f.train_speed])
    relative = np.array([True, False, False, True])
    center = np.where(relative, 0.0, np.log(own)) + (post.mean - post.z)
    lower = priors.medians * np.exp(-RANGE_SDS * priors.log_sds)
    upper = priors.medians * np.exp(RANGE_SDS * priors.log_sds)
    lower = np.where(relative, lower / own, lower)
    upper = np.where(relative, upper / own, upper)
    cov = tuple(tuple(sig(x, 6) for x in row) for row in post.covariance)
    lo_q, hi_q = post.residual_q  # of log(predicted / measured): the scatter is their negatives
    # the draws as the components (the scales relative to the MAP, the costs themselves), thinned
    comp = np.exp(post.draws[::max(1, len(post.draws) // SAMPLES)][:SAMPLES] - post.z)
    comp[:, ~relative] *= own[~relative]
    comp = np.clip(comp, lower, upper)
    named = tuple(CostSplit(name, sig(s.decode_speed / f.decode_speed), s.step_overhead_s,
                            s.rl_step_s, 1.0) for name, s in zip(SPLIT_NAMES, splits))
    return CostUncertainty(
        method=METHOD, log_center=tuple(sig(x, 6) for x in center), log_covariance=cov,
        lower=tuple(sig(x) for x in lower), upper=tuple(sig(x) for x in upper),
        step_scatter=(sig(-hi_q, 4), sig(-lo_q, 4)), run_scatter=sig(post.drift_sd, 4),
        splits=named,
        samples=tuple(tuple(sig(x, 5) for x in row) for row in comp))


def run_profile(database: Profile, shape_forwards: int, f: RunFactors, u: CostUncertainty,
                name: str, fitted_on: tuple[str, ...], heldout_pct: float,
                log_name: str) -> Profile:
    """The first log's database profile with the factors and their uncertainty, saying in `source`
    what was fitted on what."""
    prof = engine.apply_factors(database, f, shape_forwards, name)
    c = prof.cluster
    on = "; ".join(fitted_on)
    source = (
        f"calibrated by tlt calibrate --run-log on {on}: run-level factors, a MAP under priors "
        f"from the run's engine config (workbench/runlog/priors.py), over the measured-database "
        f"profile {database.name} (decode {f.decode_speed:.3g}x the database's per-token time, "
        f"+{1e3 * f.step_overhead_s:.3g} ms per engine step, {f.rl_step_s:.3g} s per RL step "
        f"inside veRL's rollout timer, update {f.train_speed:.3g}x the database's cost per token "
        f"and forward at {shape_forwards} forwards per token); each step's lengths modelled from "
        f"its own statistics (workbench/runlog/lengths.py); held-out median |error| of "
        f"timing_s/gen {heldout_pct:.1f}%. Modelled, not measured by the log: SD acceptance and "
        f"the drafter's learning ({database.name}'s, from its base), the drafter's cost (the "
        f"database's x the decode factor). The database profile: {database.source}"
    )
    return replace(
        prof,
        fitted_on=tuple(RUNLOG_PREFIX + x for x in fitted_on),
        fit_error_pct=sig(heldout_pct, 4) if math.isfinite(heldout_pct) else None,
        source=source,
        description=f"{c.label if c else name}, calibrated on a veRL run log "
                    f"({Path(log_name).name})",
        uncertainty=u,
    )
