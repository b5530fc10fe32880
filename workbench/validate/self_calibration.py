"""Self-calibration: `tlt calibrate --model DIR` captures a fit set and a held-out set on this
machine, normalises the machine's drift, fits a Profile and validates it, in one run.

Why it is built this way: the machine drifts by tens of percent within minutes, so a profile
fitted on captures taken at one moment and validated on captures taken at another mostly
measures the drift. Here

- the plan (`workbench/validate/capture_plan.py`'s `plan_captures`) interleaves the drafter
  kinds (no SD, n-gram, EAGLE) in rounds, each round in another kind order, and repeats every
  fit shape in every round, so no kind or shape is measured only while the machine ran fast or slow;
- the machine's speed is measured for every capture, and each capture's times are scaled to
  the run's median speed (`workbench/calibrate/captures/drift.py`): method "probe" (the default
  where
  captures carry it), a light reference workload timed between the capture's engine steps
  (real/rollout/probing.py), so it samples the machine while it decodes; method "reference", a
  fixed reference (`Machine.reference_s`, real/rollout/probing.py's `ReferenceForward`) timed
  before and after every capture; method "cpu", that reference's CPU time over the capture's CPU
  share. Profiles are fitted under each (and raw), the held-out errors of each reported; the
  written profile is `method`'s, and under "probe" it records the speed it is for
  (`Profile.speed_probe_ms`), so `tlt validate` can correct later captures too;
- held-out captures (another prompt mix, group size, batch cap and seeds than any fit capture)
  sit among the fit captures, and are validated with `workbench.validate.capture.validate` after
  normalisation and raw (a profile fitted on the raw fit captures against the raw held-out one:
  what not normalising gives).

What runs the captures is injected (`capture_plan.Machine`): `VllmMachine` on the real engine, a
synthetic one in the tests. `run_self_calibration` returns a `SelfCalibration`;
`write_self_calibration` writes the profile, the report, the workload and the raw captures, each
atomically.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from workbench.validate.capture_plan import CaptureSpec, Machine
from workbench.calibrate.captures.drift import (
    DriftFactor,
    cpu_drift_factors,
    drift_factors,
    scale_trace,
    with_factor,
)
from workbench.calibrate.captures.probe_drift import probe_factors, warp_to_profile
from workbench.calibrate.captures.report import Calibration, calibrate, trace_workload_spec
from workbench.calibrate.captures.trace_view import WARMUP_STEPS
from workbench.contracts.fileio import jsonable, write_dir_atomic, write_json
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.schema import save
from workbench.contracts.trace import Trace, write_trace
from workbench.validate.capture import step_cost_rollout, validate
from workbench.validate.step_buckets import BucketRow, bucket_table


@dataclass(frozen=True)
class Progress:
    """A progress report: `done` of `total` captures, and what happens now."""

    done: int
    total: int
    elapsed_s: float
    eta_s: float | None
    message: str

    def line(self) -> str:
        eta = "?" if self.eta_s is None else f"{self.eta_s:.0f}s"
        left = self.total - self.done
        return (f"  [{self.done}/{self.total}] {self.message} "
                f"({self.elapsed_s:.0f}s elapsed, {left} left, ETA {eta})")


@dataclass(frozen=True)
class ReferencePoint:
    t_s: float  # seconds since the run started
    reference_s: float
    where: str  # e.g. "after fit-r0-none-1"
    cpu_s: float | None = None  # CPU seconds of the measurement (None: the machine does not say)


@dataclass
class CaptureRecord:
    spec: CaptureSpec
    trace: Trace  # raw times, the drift factor in its meta
    drift: DriftFactor  # the method the profile uses
    factors: dict[str, float]  # every method's factor
    start_s: float  # seconds since the run started
    wall_s: float


@dataclass(frozen=True)
class HeldoutResult:
    trace: str
    kind: DrafterKind
    error_pct: float  # normalised profile vs normalised capture
    # profile fitted on the raw fit captures vs the raw capture (no normalisation)
    raw_error_pct: float
    # each normalisation method's profile vs the capture normalised so
    errors_by_method: dict[str, float]
    predicted_rollout_s: float
    measured_rollout_s: float  # normalised
    raw_measured_rollout_s: float
    drift_factor: float


@dataclass(frozen=True)
class Tracking:
    """Does the reference follow the engine? Per capture, the reference around it over the run's
    median, and the engine's raw step time over the profile's prediction; and their correlation."""

    reference_ratio: list[float]  # the method's slowness around each capture / the run's median
    engine_ratio: list[float]
    correlation: float
    correlation_by_method: dict[str, float]


@dataclass
class SelfCalibration:
    calibration: Calibration  # fitted on the normalised fit captures
    raw_calibration: Calibration | None  # fitted on the raw ones (for raw_error_pct)
    captures: list[CaptureRecord]
    references: list[ReferencePoint]
    heldout: list[HeldoutResult]
    buckets: list[BucketRow]
    tracking: Tracking
    wall_s: float
    method: str  # the drift normalisation the profile uses
    window: int  # references on each side of a capture whose median is its slowness
    engine_starts_s: list[float] = field(default_factory=list)

    @property
    def profile(self) -> Profile:
        return self.calibration.profile

    @property
    def heldout_max_abs_error_pct(self) -> float:
        return max((abs(h.error_pct) for h in self.heldout), default=math.nan)

    def summary(self, profile_path: str | Path) -> dict:
        """The last stdout line of `tlt calibrate --model`."""
        factors = [c.drift.factor for c in self.captures]
        return jsonable({
            "profile": str(profile_path), "fit_error_pct": self.profile.fit_error_pct,
            "drift_method": self.method, "drift_window": self.window,
            "heldout": [{"trace": h.trace, "error_pct": round(h.error_pct, 3),
                         "raw_error_pct": round(h.raw_error_pct, 3),
                         "error_pct_by_method": {m: round(e, 3)
                                                 for m, e in h.errors_by_method.items()}}
                        for h in self.heldout],
            "heldout_max_abs_error_pct": round(self.heldout_max_abs_error_pct, 3),
            "heldout_max_abs_raw_error_pct": round(
                max((abs(h.raw_error_pct) for h in self.heldout), default=math.nan), 3),
            "heldout_max_abs_error_pct_by_method": {
                m: round(max(abs(h.errors_by_method[m]) for h in self.heldout), 3) for m in
                (self.heldout[0].errors_by_method if self.heldout else {})},
            "drift_factor_range": [round(min(factors), 4), round(max(factors), 4)],
            "tracking_correlation_by_method": {
                m: round(c, 3) for m, c in self.tracking.correlation_by_method.items()},
            "captures": len(self.captures), "wall_s": round(self.wall_s, 1)})

    def report_section(self) -> dict:
        """The `self_calibration` section of PROFILE.calibration.json."""
        return jsonable({
            "plan": [{**asdict(c.spec), "start_s": c.start_s, "wall_s": c.wall_s,
                      "drift_factor": c.drift.factor}
                     for c in self.captures],
            "references": [asdict(r) for r in self.references],
            "drift": {"factors": [c.drift.factor for c in self.captures],
                      "method": self.method, "window": self.window,
                      "by_method": [c.factors for c in self.captures],
                      "how": "times * median slowness / the capture's slowness "
                             "(workbench/calibrate/captures/drift.py)"},
            "tracking": asdict(self.tracking),
            "heldout": [asdict(h) for h in self.heldout],
            "heldout_max_abs_error_pct": self.heldout_max_abs_error_pct,
            "raw_fit_error_pct": (self.raw_calibration.profile.fit_error_pct
                                  if self.raw_calibration else None),
            "buckets": [asdict(b) for b in self.buckets],
            "engine_starts_s": self.engine_starts_s, "wall_s": self.wall_s})


def _reference(machine: Machine, t_s: float, where: str) -> ReferencePoint:
    wall = machine.reference_s()
    cpu = getattr(machine, "reference_cpu_s", None)
    return ReferencePoint(t_s, wall, where, None if cpu is None else float(cpu()))


def _factors(done: Sequence[tuple[CaptureSpec, Trace, float, float]],
             refs: Sequence[ReferencePoint], window: int) -> dict[str, list[DriftFactor]]:
    """Every method's drift factors the run can give (method "cpu" needs CPU times and shares); each
    capture's slowness from the `window` references nearest it on each side."""
    if window < 1:
        raise ValueError(f"drift window {window}: must be >= 1")
    at = {r.where: i for i, r in enumerate(refs)}
    wins = []
    for spec, *_ in done:
        i = at[f"after {spec.name}"]  # refs[i - 1] was measured just before the capture
        # As many references on each side, so the capture stays in the middle (fewer at the run's
        # ends).
        k = min(window, i, len(refs) - i)
        wins.append(refs[i - k:i + k])
    around = [[r.reference_s for r in w] for w in wins]
    out = {"reference": drift_factors(around, [r.reference_s for r in refs])}
    probed = probe_factors([t for _, t, _, _ in done])
    if probed is not None:
        out["probe"] = probed
    shares = [((t.meta.get("summary") or {}).get("cpu_share")) for _, t, _, _ in done]
    numeric = all(isinstance(x, (int, float)) and x > 0 for x in shares)
    if all(r.cpu_s for w in wins for r in w) and numeric:
        out["cpu"] = cpu_drift_factors([[r.cpu_s for r in w] for w in wins], shares, around)
    return out


def _run_plan(machine: Machine, plan: Sequence[CaptureSpec],
              progress: Callable[[Progress],
                                 None]) -> tuple[list[tuple[CaptureSpec, Trace, float, float]],
                                                             list[ReferencePoint], list[float]]:
    """Run every capture, the reference before and after each; engines restart when the kind
    changes."""
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0  # noqa: E731
    done: list[tuple[CaptureSpec, Trace, float, float]] = []
    refs: list[ReferencePoint] = []
    starts: list[float] = []
    kind = None

    def report(msg: str) -> None:
        el = clock()
        eta = el / len(done) * (len(plan) - len(done)) if done else None
        progress(Progress(len(done), len(plan), el, eta, msg))

    for spec in plan:
        if spec.kind != kind:
            report(f"starting the {spec.kind} engine")
            starts.append(machine.start(spec.kind))
            kind = spec.kind
            refs.append(_reference(machine, clock(), f"engine {kind} started"))
        report(f"capturing {spec.name} ({spec.prompts}x{spec.samples}, cap {spec.cap}, "
               f"max {spec.max_tokens} tokens, schedule "
               f"{list(map(list, spec.schedule)) or 'no SD'})")
        start = clock()
        trace = machine.capture(spec)
        wall = clock() - start
        refs.append(_reference(machine, clock(), f"after {spec.name}"))
        done.append((spec, trace, start, wall))
        report(f"captured {spec.name} in {wall:.1f}s; reference {1e3 * refs[-1].reference_s:.1f} "
               f"ms (before {1e3 * refs[-2].reference_s:.1f} ms)")
    return done, refs, starts


def run_self_calibration(machine: Machine, plan: Sequence[CaptureSpec], base: Profile, name: str,
                         captures_dir: str | Path,
                         progress: Callable[[Progress], None] = lambda p: None,
                         warmup_steps: int = WARMUP_STEPS, compare_raw: bool = True,
                         method: str = "auto", window: int = 2) -> SelfCalibration:
    """Capture `plan` on `machine`, normalise drift, fit on the fit captures, validate on the
    held-out ones.

    `captures_dir`: where the captures will be written (their trace names and paths; nothing is
    written here: `write_self_calibration` does). The machine is closed at the end, also on error.
    `method`: the drift normalisation of the profile ("reference", "cpu"; "auto": cpu where the
    machine gives CPU times, else reference); the held-out errors of every available one are kept.
    `window`: each capture's slowness is the median of the references nearest it, this many on
    each side (workbench/calibrate/captures/drift.py).
    """
    if not any(s.role == "fit" for s in plan):
        raise ValueError("the plan has no fit capture")
    t0 = time.perf_counter()
    try:
        done, refs, starts = _run_plan(machine, plan, progress)
    finally:
        machine.close()
    by_method = _factors(done, refs, window)
    if method == "auto":  # the measure taken during each capture where there is one
        method = next(m for m in ("probe", "cpu", "reference") if m in by_method)
    if method not in by_method:
        raise ValueError(f"drift method {method!r}: this run supports {', '.join(by_method)}")
    records = []
    for i, (spec, trace, start, wall) in enumerate(done):
        f = by_method[method][i]
        t = with_factor(trace, f)
        t.path = Path(captures_dir) / spec.name
        records.append(CaptureRecord(spec, t, f, {m: fs[i].factor for m, fs in by_method.items()},
                                     start, wall))
    progress(Progress(len(done), len(plan), time.perf_counter() - t0, 0.0,
                      "fitting the profile on the fit captures (normalised: "
                      f"{', '.join(by_method)}; and raw)"))
    fit = [c for c in records if c.spec.role == "fit"]
    norm, cals = {}, {}
    for m in by_method:
        # calibrate() warps the fit captures by their probes, validate() the held-out ones
        if m == "probe":
            norm[m] = {c.spec.name: c.trace for c in records}
        else:
            norm[m] = {c.spec.name: replace(scale_trace(c.trace, c.factors[m]),
                                            path=c.trace.path) for c in records}
        cals[m] = calibrate([norm[m][c.spec.name] for c in fit], base, name=name,
                            warmup_steps=warmup_steps)
    raw_cal = calibrate([c.trace for c in fit], base, name=f"{name}-raw", warmup_steps=warmup_steps,
                        by_probe=False) if compare_raw else None
    progress(Progress(len(done), len(plan), time.perf_counter() - t0, 0.0,
                      "validating on the held-out captures"))
    heldout = [_heldout(c, {m: (cals[m].profile, norm[m][c.spec.name]) for m in cals}, method,
                        raw_cal.profile if raw_cal else cals[method].profile)
               for c in records if c.spec.role == "heldout"]
    cal = cals[method]
    at_speed = list(norm[method].values())
    if method == "probe":
        at_speed = [(warp_to_profile(cal.profile.speed_probe_ms, t,
                                     cal.profile.speed_probe_exponent) or (t,))[0]
                    for t in at_speed]
    buckets = bucket_table(cal.profile, at_speed, warmup_steps=warmup_steps)
    tracking = reference_tracking(cal.profile, records)
    return SelfCalibration(cal, raw_cal, records, refs, heldout, buckets, tracking,
                           time.perf_counter() - t0, method, window, starts)


def _heldout(c: CaptureRecord, fitted: dict[str, tuple[Profile, Trace]], method: str,
             raw_profile: Profile) -> HeldoutResult:
    """The held-out capture under each method's profile (normalised the same way), and raw."""
    vs = {m: validate(prof, t) for m, (prof, t) in fitted.items()}
    v, raw = vs[method], validate(raw_profile, c.trace)
    return HeldoutResult(c.spec.name, c.spec.kind, float(v.error_pct), float(raw.error_pct),
                         {m: float(x.error_pct) for m, x in vs.items()},
                         float(v.predicted_rollout_s),
                         float(v.measured_rollout_s), float(raw.measured_rollout_s), c.drift.factor)


def reference_tracking(profile: Profile, records: Sequence[CaptureRecord]) -> Tracking:
    """Does the drift measure follow the engine? Per capture: its slowness over the run's median
    (1 / factor), and the raw measured step time over the profile's prediction; their correlation,
    for the profile's method and for every method."""
    eng, idx = [], []
    for i, c in enumerate(records):
        pred, _ = step_cost_rollout(profile, c.trace)
        measured = float(c.trace.rl_steps["rollout_s"].sum())
        if pred > 0 and measured > 0:
            eng.append(measured / pred)
            idx.append(i)

    def corr(x: list[float]) -> float:
        ok = len(x) > 2 and np.std(x) > 0 and np.std(eng) > 0
        return float(np.corrcoef(x, eng)[0, 1]) if ok else math.nan

    methods = list(records[0].factors) if records else []
    by = {m: corr([1.0 / records[i].factors[m] for i in idx]) for m in methods}
    ref = [1.0 / records[i].drift.factor for i in idx]
    return Tracking(ref, eng, corr(ref), by)


def write_self_calibration(result: SelfCalibration, out: str | Path, base: Profile,
                           captures_dir: str | Path, workload_out: str | Path | None) -> list[Path]:
    """Write the raw captures (one directory, swapped in whole), the profile, the report (the fit's
    plus `self_calibration`) and the workload; returns the paths written."""
    out, captures_dir = Path(out), Path(captures_dir)
    report = result.calibration.report(base)
    report["self_calibration"] = result.report_section()
    wl = None
    if workload_out is not None:
        lengths = result.calibration.lengths
        if lengths is None:
            raise ValueError("--lengths-out: the fit captures did not support a length model")
        # The workload takes the largest fit shape (longest cap, then largest batch cap).
        big = max((c for c in result.captures if c.spec.role == "fit"),
                  key=lambda c: (c.spec.max_tokens, c.spec.cap))
        wl = trace_workload_spec(big.trace, lengths, out, workload_out, result.profile.name)

    def fill(tmp: Path) -> None:
        for c in result.captures:
            write_trace(replace(c.trace), tmp / c.spec.name)

    write_dir_atomic(captures_dir, fill)
    save(result.profile, out)
    rep = out.with_name(out.stem + ".calibration.json")
    write_json(rep, report)
    paths = [captures_dir, out, rep]
    if wl is not None:
        save(wl, workload_out)
        paths.append(Path(workload_out))
    return paths
