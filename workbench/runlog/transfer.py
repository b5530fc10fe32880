"""Leave one run out: with several logs of one cluster, fit on the others' first steps and predict
every step of the one left out; the calibration's fidelity under a change of run (another cap,
batch, TP, algorithm), the headline figure above its own held-out steps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from workbench.runlog import engine, fit, predictive
from workbench.runlog.errors import Errors
from workbench.runlog.run_profile import run_factors, run_profile, uncertainty

if TYPE_CHECKING:
    from workbench.runlog.calibrate import Prepared


@dataclass(frozen=True)
class LeftOut:
    log: str  # the log predicted (its file name)
    fitted_on: tuple[str, ...]  # the logs fitted on
    gen: Errors  # every step's rollout
    step: Errors
    gen_bias_pct: float  # median signed error of the rollout
    coverage: predictive.Coverage | None


def _bias(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(meas) & (meas > 0)
    return float(np.median((pred[ok] - meas[ok]) / meas[ok]) * 100) if ok.any() else float("nan")


def leave_one_out(logs: list[Prepared], fit_steps: int, name: str) -> tuple[LeftOut, ...]:
    """Each log predicted from the others' first `fit_steps` steps alone."""
    out = []
    for k, left in enumerate(logs):
        others = [q for i, q in enumerate(logs) if i != k]
        sets = [q.fit_set(fit_steps) for q in others]
        post = fit.fit_posterior(sets)
        first = others[0]
        forwards, db = first.shape.train_forwards + first.shape.gen_forwards, first.database.name
        f = run_factors(post.z, first.priors, forwards, db, "")
        splits = tuple(run_factors(fit.split_refit(sets, post, s), first.priors, forwards, db, "")
                       for s in (True, False))
        prof = run_profile(first.database, forwards, f, uncertainty(post, first.priors, f, splits),
                           name, (), float("nan"), first.log.path)
        g = f.transferred(tuple(left.priors.medians))
        pred = engine.predict(left.work, g, left.shape.train_forwards, left.shape.gen_forwards)
        rows = np.arange(left.log.steps)
        cov = predictive.coverage(prof, g, left.work, left.measured, left.shape, rows)
        out.append(LeftOut(Path(left.log.path).name,
                           tuple(Path(q.log.path).name for q in others),
                           Errors.of(pred.gen_s, left.measured.gen_s),
                           Errors.of(pred.step_s, left.measured.step_s),
                           _bias(pred.gen_s, left.measured.gen_s), cov))
    return tuple(out)
