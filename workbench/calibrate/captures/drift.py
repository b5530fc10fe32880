"""Drift normalisation: a trace's times rescaled to the machine's typical speed.

The machine a calibration runs on changes speed within minutes, so captures taken at different
moments disagree by tens of percent about the same step. `tlt calibrate --model` measures a
fixed reference (real/rollout/probing.py's `ReferenceForward`) before and after every capture; a
capture taken while the reference ran slow is scaled down by as much:

    factor = median(every reference of the run) / median(the references nearest the capture)

(the `window` nearest on each side: 1 takes the one just before and the one just after; 2, the
default of `tlt calibrate --model`, two on each side, which damps one measurement that hit or
missed a burst of another process: single measurements scatter between neighbours, while the
drift the normalisation is for moves over minutes)

and every time in the trace (steps, requests, RL steps, timeline) is multiplied by it.
`cpu_drift_factors` measures the slowness another way: the reference's CPU time over the
capture's CPU share. The trace on disk keeps its raw times and records the factor in
`meta["drift"]`; `apply_recorded` scales a loaded trace by it once (meta["drift"]["applied"]
says it was), so `tlt calibrate PROFILE.captures/fit-*` fits what the self-calibration fitted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Sequence

import pandas as pd

from workbench.contracts.trace import Trace, TraceError

DRIFT_KEY = "drift"
# Columns holding seconds, per table: all of them scale with the machine's speed.
TIME_COLUMNS = {"steps": ("start_s", "wall_s"), "requests": ("start_s", "end_s"),
                "rl_steps": ("rollout_s", "train_s", "sync_s", "drafter_train_s"),
                "timeline": ("start_s", "end_s")}


METHODS = ("probe", "reference", "cpu")


@dataclass(frozen=True)
class DriftFactor:
    """One capture's normalisation: how slow the machine was around it against the run's median.

    method "reference": slowness = median of the reference's wall times nearest the capture
    (`window` on each side), against the median of every reference of the run. method "cpu":
    slowness = the reference's CPU time around the capture (the core's own speed; same window)
    divided by the capture's CPU share (its process's CPU time over its wall time: below 1 when
    other processes held the cores), against the median over the run's captures; it sees contention
    over the whole capture, where two short reference measurements can each hit or miss a burst.
    """

    method: str
    slowness: float
    median_slowness: float
    reference_before_s: float
    reference_after_s: float
    cpu_share: float | None = None

    @property
    def factor(self) -> float:
        """Multiply the capture's times by this to get them at the run's median speed."""
        return self.median_slowness / self.slowness

    def to_meta(self) -> dict:
        return {"factor": float(self.factor), "method": self.method, "slowness": self.slowness,
                "median_slowness": self.median_slowness,
                "reference_before_s": self.reference_before_s,
                "reference_after_s": self.reference_after_s, "cpu_share": self.cpu_share,
                "applied": False, "how": "times * factor = times at the run's median speed "
                       "(workbench/calibrate/captures/drift.py)"}


def drift_factors(around: Sequence[Sequence[float]],
                  references: Sequence[float]) -> list[DriftFactor]:
    """Method "reference": per capture the reference wall times nearest it, in time order (the
    middle two: just before and just after it); `references`: all of the run's."""
    if not references or any(r <= 0 for r in references):
        raise ValueError("drift normalisation needs positive reference times")
    med = float(statistics.median(references))
    return [DriftFactor("reference", float(statistics.median(w)), med,
                        *_adjacent(w)) for w in around]


def _adjacent(window: Sequence[float]) -> tuple[float, float]:
    """The references just before and just after the capture: the middle two of its window."""
    mid = len(window) // 2
    return float(window[mid - 1]), float(window[mid])


def cpu_drift_factors(around_cpu: Sequence[Sequence[float]], shares: Sequence[float],
                      around: Sequence[Sequence[float]]) -> list[DriftFactor]:
    """Method "cpu": per capture the reference's CPU seconds nearest it (as `drift_factors`), the
    capture's CPU share and (for the record) the reference's wall times."""
    if any(not x > 0 for x in shares) or any(not c > 0 for w in around_cpu for c in w):
        raise ValueError("cpu drift normalisation needs positive CPU shares and reference CPU "
                         "times")
    slow = [float(statistics.median(w)) / sh for w, sh in zip(around_cpu, shares)]
    med = float(statistics.median(slow))
    return [DriftFactor("cpu", x, med, *_adjacent(w), float(sh))
            for x, sh, w in zip(slow, shares, around)]


def scale_trace(trace: Trace, factor: float) -> Trace:
    """A copy of `trace` with every time multiplied by `factor` (meta["drift"]["applied"] set)."""
    if not factor > 0:
        raise ValueError(f"drift factor {factor}: must be > 0")

    def scaled(df: pd.DataFrame | None, table: str) -> pd.DataFrame | None:
        if df is None:
            return None
        df = df.copy()
        for col in TIME_COLUMNS[table]:
            if col in df.columns:
                df[col] = df[col].astype(float) * factor
        return df

    meta = dict(trace.meta)
    meta[DRIFT_KEY] = {**(meta.get(DRIFT_KEY) or {"factor": factor}), "applied": True}
    return replace(trace, meta=meta, steps=scaled(trace.steps, "steps"),
                   requests=scaled(trace.requests, "requests"),
                   rl_steps=scaled(trace.rl_steps, "rl_steps"),
                   timeline=scaled(trace.timeline, "timeline"))


def recorded_factor(trace: Trace) -> float | None:
    """The drift factor a trace's meta records and that is not applied yet (None: nothing to
    apply)."""
    d = trace.meta.get(DRIFT_KEY)
    if not d or d.get("applied") or d.get("method") == "probe":
        # a probe's capture is warped from its own samples
        # (workbench/calibrate/captures/probe_drift.py)
        return None
    f = d.get("factor")
    if not isinstance(f, (int, float)) or not f > 0:
        raise TraceError(trace.path or trace.name, "meta.json", f"field 'drift.factor' is {f!r}",
                         "a positive number (or remove the 'drift' field to fit the raw times)")
    return float(f)


def apply_recorded(trace: Trace) -> tuple[Trace, float | None]:
    """(the trace scaled by its recorded drift factor, the factor); unchanged with None if it has
    none."""
    f = recorded_factor(trace)
    return (trace, None) if f is None else (scale_trace(trace, f), f)


def with_factor(trace: Trace, drift: DriftFactor) -> Trace:
    """The raw trace with `drift` recorded in its meta (times untouched)."""
    return replace(trace, meta={**trace.meta, DRIFT_KEY: drift.to_meta()})

