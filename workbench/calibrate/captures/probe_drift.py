"""Drift by the capture's own speed probe: a capture's clock warped by how fast the machine was,
sample by sample.

A capture (`tlt capture`, `tlt calibrate --model`) times a light reference workload before, after
and between its engine steps every 0.25 s (real/rollout/probing.py; meta["speed"]: `t_s` on the
run's clock, `times_ms`). On this project's machines the speed moves within seconds (another
process streaming memory beside the engine slows a step 1.5-2x and shows nowhere in the VM's
accounting), so one factor per capture misses a burst that hit part of it. Here each stretch of
the capture runs at the speed of the probe sample nearest it: between the midpoints of two
consecutive samples the clock runs at ref / probe_k, and every time in the trace (steps,
requests, the rollout, the timeline) is mapped through that warped clock W(t).

`tlt calibrate TRACES` brings its fit traces to the median of their mean probe times
(`normalise_by_probe`) and records it in the profile (`Profile.speed_probe_ms`); `tlt validate`
brings a held-out capture to the profile's (`warp_to_profile`) and reports the error both ways.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Sequence

import numpy as np
import pandas as pd

from workbench.calibrate.captures.drift import DRIFT_KEY, DriftFactor
from workbench.contracts.trace import Trace, TraceError


def _samples(trace: Trace) -> tuple[np.ndarray, np.ndarray] | None:
    """(sample times on the run's clock, probe times in ms), sorted; None without a probe."""
    speed = trace.meta.get("speed") or {}
    times, at = speed.get("times_ms"), speed.get("t_s")
    if times is None:
        return None
    ok = (isinstance(times, list) and times and isinstance(at, list) and len(at) == len(times)
          and all(isinstance(x, (int, float)) and x > 0 for x in times)
          and all(isinstance(x, (int, float)) for x in at))
    if not ok:
        raise TraceError(trace.path or trace.name, "meta.json",
                         "field 'speed' has no matching lists t_s and "
                         "times_ms of positive probe times",
                         "re-capture, or remove the 'speed' field")
    order = np.argsort(at, kind="stable")
    return np.asarray(at, float)[order], np.asarray(times, float)[order]


def probe_slowness_ms(trace: Trace) -> float | None:
    """The machine's mean slowness over the capture: the probe times' mean (samples come at even
    intervals, so those that caught a burst weigh as much as the burst took of the capture)."""
    s = _samples(trace)
    return None if s is None else float(np.mean(s[1]))


def probe_factors(traces: Sequence[Trace]) -> list[DriftFactor] | None:
    """Method "probe" of `tlt calibrate --model`: each capture's mean probe time against the median
    over `traces` (None when any lacks a probe). The factor is the mean one; the warp is finer."""
    slow = [probe_slowness_ms(t) for t in traces]
    if not slow or any(x is None for x in slow):
        return None
    med = float(statistics.median(slow))
    ends = [(t.meta["speed"]["times_ms"][0] / 1e3,
             t.meta["speed"]["times_ms"][-1] / 1e3) for t in traces]
    return [DriftFactor("probe", x, med, *e) for x, e in zip(slow, ends)]


class Warp:
    """The warped clock W(t), the integral from 0 to t of (ref / probe(tau)) ** exponent, probe(tau)
    the sample nearest tau: between the midpoints of consecutive samples the clock runs at one
    slope. `exponent`: how much more than the probe the engine feels a slowdown (a process
    streaming memory beside them slowed the probe 1.6x and the engine's steps 2x: 1.5)."""

    def __init__(self, at: np.ndarray, probe_ms: np.ndarray, ref_ms: float, exponent: float = 1.0):
        self.slope = (ref_ms / probe_ms) ** exponent
        # Where each sample's stretch starts (from 0 on), and W there.
        self.nodes = np.concatenate(([0.0], np.maximum((at[1:] + at[:-1]) / 2, 0.0)))
        self.at_nodes = np.concatenate(([0.0], np.cumsum(self.slope[:-1] * np.diff(self.nodes))))

    def __call__(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, float)
        k = np.clip(np.searchsorted(self.nodes, t, side="right") - 1, 0, len(self.nodes) - 1)
        return self.at_nodes[k] + self.slope[k] * (t - self.nodes[k])


def warp_trace(trace: Trace, ref_ms: float, exponent: float = 1.0) -> tuple[Trace, float]:
    """The trace's times on the clock of a machine whose probe reads `ref_ms` throughout, and the
    mean factor (warped rollout over measured). Raises TraceError without a probe."""
    s = _samples(trace)
    if s is None:
        raise TraceError(trace.path or trace.name, "meta.json", "no 'speed' probe",
                         "capture it again")
    w = Warp(s[0], s[1], ref_ms, exponent)

    def points(df: pd.DataFrame | None, starts: str, ends: str | None,
               walls: str | None) -> pd.DataFrame | None:
        if df is None:
            return None
        df = df.copy()
        t0 = df[starts].to_numpy(float)
        if walls:
            df[walls] = w(t0 + df[walls].to_numpy(float)) - w(t0)
        if ends:
            df[ends] = w(df[ends].to_numpy(float))
        df[starts] = w(t0)
        return df

    steps = points(trace.steps, "start_s", None, "wall_s")
    reqs = points(trace.requests, "start_s", "end_s", None)
    timeline = points(trace.timeline, "start_s", "end_s", None)
    rl = trace.rl_steps.copy()
    total = float(rl["rollout_s"].sum())
    factor = float(w(np.array([total]))[0] / total) if total > 0 else float(np.mean(w.slope))
    for col in ("rollout_s", "train_s", "sync_s", "drafter_train_s"):
        if col in rl.columns:
            rl[col] = rl[col].astype(float) * factor
    how = ("each stretch of the capture at its nearest probe sample's speed "
           "(workbench/calibrate/captures/probe_drift.py)")
    meta = {**trace.meta,
            DRIFT_KEY: {"factor": factor, "method": "probe warp", "reference_ms": ref_ms,
                                      "exponent": exponent, "applied": True, "how": how}}
    return replace(trace, meta=meta, steps=steps, requests=reqs, rl_steps=rl,
                   timeline=timeline), factor


def normalise_by_probe(
    traces: Sequence[Trace], exponent: float = 1.0
) -> tuple[list[Trace], float | None]:
    """Fit traces captured at different machine speeds, each warped to the median of their mean
    probe times, and that time (ms): the speed the fitted costs are for (`Profile.speed_probe_ms`).
    Unchanged with None when a trace lacks a probe or already had a drift factor applied."""
    if any((t.meta.get(DRIFT_KEY) or {}).get("applied") for t in traces):
        return list(traces), None
    slow = [probe_slowness_ms(t) for t in traces]
    if not slow or any(x is None for x in slow):
        return list(traces), None
    ref = float(statistics.median(slow))
    return [replace(warp_trace(t, ref, exponent)[0], path=t.path) for t in traces], ref


def warp_to_profile(speed_probe_ms: float | None, trace: Trace,
                    exponent: float = 1.0) -> tuple[Trace, float] | None:
    """A held-out trace brought to the speed a profile was fitted at, and its mean factor (None when
    either was not measured, or the trace's times were already scaled: `tlt calibrate --model`
    validates normalised captures)."""
    applied = (trace.meta.get(DRIFT_KEY) or {}).get("applied")
    if speed_probe_ms is None or applied or _samples(trace) is None:
        return None
    return warp_trace(trace, float(speed_probe_ms), exponent)
