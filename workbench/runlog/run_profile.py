"""A run-log calibration as a Profile: the factors at the MAP over the first log's database
profile, their posterior draws and what they leave unexplained (`RunFactors`), and their
uncertainty in the form every simulator-facing tool reads (`Profile.uncertainty`,
workbench/contracts/uncertainty.py).

The simulator has one training phase, linear in a step's tokens, and a fixed sync per RL step:
the run's update (every phase outside the rollout, workbench/runlog/phases.py) is held as its
least-squares fixed part (added to the sync, after the rollout's own fixed cost) and its part per
token over the run's steps (`engine.affine_update`). The four cost components: `kernel_scale` the
decode speed over the MAP's; `step_overhead_s` the per-step cost; `rl_step_s` the sync per RL step
(the rollout's fixed cost and the update's fixed part); `train_scale` the update's time over the
MAP's at the run's median step. Their draws are the posterior's, their ranges the priors'
declared ranges (the update's: train_speed's). The two splits are the refits that put the cost the
rollout's data cannot place all per engine step or all per RL step (fit.py: `split_refit`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from workbench.contracts.fileio import sig
from workbench.contracts.profile import Profile
from workbench.contracts.run_factors import RunFactor, RunFactors
from workbench.contracts.provenance import RUNLOG_PREFIX
from workbench.contracts.uncertainty import CostSplit, CostUncertainty
from workbench.runlog import engine
from workbench.runlog.fit import Posterior
from workbench.runlog.predictive import MODEL_ERROR
from workbench.runlog.priors import FACTORS, RANGE_SDS, RunPriors

SAMPLES = 100  # posterior draws the profile keeps
SPLIT_NAMES = ("all per engine step", "all per RL step")
METHOD = ("Metropolis draws of the run-level factors under their declared priors about the MAP "
          "(workbench/runlog/fit.py), the fit steps' autocorrelation counted")


def run_factors(z: np.ndarray, priors: RunPriors, forwards: int, database: str,
                fitted_on: str, post: Posterior | None = None) -> RunFactors:
    """The factors of the run with these priors at log-scales `z` (rounded as the file holds
    them), with the posterior's draws and scatter where given."""
    v = priors.medians * np.exp(z)
    m = priors.medians
    extra = tuple(RunFactor(n, sig(v[j]), sig(m[j])) for j, n in enumerate(FACTORS[4:], start=4))
    draws, scatter = (), ()
    if post is not None:
        rows = post.draws[::max(1, len(post.draws) // SAMPLES)][:SAMPLES] - post.z
        draws = tuple(tuple(round(float(x), 5) for x in r) for r in rows)
        scatter = post.scatter
    return RunFactors(
        decode_speed=sig(v[0]), step_overhead_s=sig(v[1]), rl_step_s=sig(v[2]),
        train_speed=sig(v[3]), train_forwards=max(1, forwards), database_profile=database,
        fitted_on=fitted_on, decode_speed_prior=sig(m[0]), step_overhead_prior_s=sig(m[1]),
        rl_step_prior_s=sig(m[2]), train_speed_prior=sig(m[3]), extra=extra, draws=draws,
        scatter=scatter, model_error=MODEL_ERROR)


def uncertainty(post: Posterior, priors: RunPriors, f: RunFactors,
                splits: tuple[RunFactors, RunFactors], update_scale: np.ndarray,
                fixed_s: float) -> CostUncertainty:
    """The profile's cost uncertainty (module docstring); `update_scale` per kept draw, the
    update's time over the MAP's; `fixed_s` the update's fixed part at the MAP."""
    keep = post.draws[::max(1, len(post.draws) // SAMPLES)][:SAMPLES]
    rel = np.exp(keep[:, :3] - post.z[:3])
    comp = np.column_stack([rel[:, 0], f.step_overhead_s * rel[:, 1],
                            f.rl_step_s * rel[:, 2] + fixed_s * update_scale, update_scale])
    lo3 = priors.medians[:3] * np.exp(-RANGE_SDS * priors.log_sds[:3])
    hi3 = priors.medians[:3] * np.exp(RANGE_SDS * priors.log_sds[:3])
    train_sd = priors.log_sds[3]
    lower = np.array([lo3[0] / f.decode_speed, lo3[1], lo3[2] + fixed_s * math.exp(
        -RANGE_SDS * train_sd), math.exp(-RANGE_SDS * train_sd)])
    upper = np.array([hi3[0] / f.decode_speed, hi3[1], hi3[2] + fixed_s * math.exp(
        RANGE_SDS * train_sd), math.exp(RANGE_SDS * train_sd)])
    comp = np.clip(comp, lower, upper)
    logc = np.log(comp)
    cov = np.cov(logc.T) if len(logc) > 1 else np.zeros((4, 4))
    gen = post.group("gen")
    named = tuple(CostSplit(name, sig(s.decode_speed / f.decode_speed), s.step_overhead_s,
                            sig(s.rl_step_s + fixed_s), 1.0)
                  for name, s in zip(SPLIT_NAMES, splits))
    return CostUncertainty(
        method=METHOD, log_center=tuple(sig(x, 6) for x in logc.mean(axis=0)),
        log_covariance=tuple(tuple(sig(x, 6) for x in row) for row in (cov + cov.T) / 2),
        lower=tuple(sig(x) for x in lower), upper=tuple(sig(x) for x in upper),
        step_scatter=(gen.low, gen.high), run_scatter=sig(max(gen.drift_sd, 0.0), 4) or 0.0,
        splits=named, samples=tuple(tuple(sig(x, 5) for x in row) for row in comp))


def run_profile(database: Profile, f: RunFactors, u: CostUncertainty, name: str,
                fitted_on: tuple[str, ...], heldout_pct: float, log_name: str,
                update: tuple[float, float], gpus: int) -> Profile:
    """The first log's database profile with the factors and their uncertainty, saying in `source`
    what was fitted on what; `update` the update's (fixed s, s per token) at the MAP."""
    fixed_s, per_token_s = update
    prof = engine.apply_factors(database, f, fixed_s, per_token_s, gpus, name)
    c = prof.cluster
    on = "; ".join(fitted_on)
    extra = ", ".join(f"{t.name} {t.value:.3g}" for t in f.extra)
    source = (
        f"calibrated by tlt calibrate --run-log on {on}: run-level factors, a MAP under priors "
        f"from the run's config (workbench/runlog/priors.py), over the measured-database "
        f"profile {database.name} (decode {f.decode_speed:.3g}x the database's per-token time, "
        f"+{1e3 * f.step_overhead_s:.3g} ms per engine step, {f.rl_step_s:.3g} s per RL step "
        f"inside veRL's rollout timer; each phase outside the rollout priced from what runs it "
        f"(workbench/runlog/phases.py): kernels {f.train_speed:.3g}x the database's, {extra}; "
        f"held here as {fixed_s:.3g} s per RL step in phases.weight_sync_s beside the rollout's "
        f"and {per_token_s * 1e6:.3g} us per token of the step); each step's lengths modelled "
        f"from its own statistics (workbench/runlog/lengths.py); held-out median |error| of "
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
