"""Leave one run out: with several logs, fit on the others' first steps and predict every step of
the one left out; the calibration's fidelity under a change of run (another cap, batch, n, TP,
algorithm, model size), the headline figure above its own held-out steps. `predict_with` prices
one pair of the transfer table (workbench/runlog/transfer_table.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.runlog import engine, fit, predictive
from workbench.runlog.errors import Errors, PhaseErrors
from workbench.runlog.prepared import Prepared
from workbench.contracts.run_factors import RunFactors
from workbench.runlog.run_profile import run_factors


@dataclass(frozen=True)
class LeftOut:
    log: str  # the log predicted (its file name)
    fitted_on: tuple[str, ...]  # the logs fitted on
    errors: PhaseErrors  # every step of the log predicted
    gen_bias_pct: float  # median signed error of the rollout
    step_bias_pct: float
    coverage: predictive.Coverages | None
    gen_log_bias: float  # median log(predicted / measured): what MODEL_ERROR is estimated from
    step_log_bias: float

    @property
    def gen(self) -> Errors:
        return self.errors.gen

    @property
    def step(self) -> Errors:
        return self.errors.step


def _bias(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    """(median signed error %, median log-ratio) over the steps measured."""
    ok = np.isfinite(meas) & (meas > 0)
    if not ok.any():
        return float("nan"), float("nan")
    return (float(np.median((pred[ok] - meas[ok]) / meas[ok]) * 100),
            float(np.median(np.log(pred[ok] / meas[ok]))))


def factors_from(fitted: list[Prepared], fit_steps: int) -> RunFactors:
    """The factors (and their posterior) fitted on the first `fit_steps` steps of `fitted`."""
    post = fit.fit_posterior([q.fit_set(min(fit_steps, q.log.steps - 1)) for q in fitted])
    first = fitted[0]
    return run_factors(post.z, first.priors, 1, first.database.name, "", post)


def predict_with(f: RunFactors, fitted_on: tuple[str, ...], left: Prepared,
                 model_error: float | None = None) -> LeftOut:
    """Every step of `left` priced with `f` over its own config (`model_error`: the interval's
    log-sd for a change of run; None: the declared one)."""
    g = f.transferred(tuple(left.priors.medians))
    pred = engine.predict(left.work, engine.factor_values(g))
    rows = np.arange(left.log.steps)
    cov = predictive.coverage(g, left.work, left.measured, rows, change=True,
                              model_error=model_error)
    gen, step = _bias(pred.gen_s, left.measured.gen_s), _bias(pred.step_s, left.measured.step_s)
    return LeftOut(Path(left.log.path).name, fitted_on,
                   PhaseErrors.of(pred, left.measured, slice(None)), gen[0], step[0], cov,
                   gen[1], step[1])


def leave_one_out(logs: list[Prepared], fit_steps: int) -> tuple[LeftOut, ...]:
    """Each log predicted from the others' first `fit_steps` steps alone."""
    out = []
    for k, left in enumerate(logs):
        others = [q for i, q in enumerate(logs) if i != k]
        names = tuple(Path(q.log.path).name for q in others)
        out.append(predict_with(factors_from(others, fit_steps), names, left))
    return tuple(out)
