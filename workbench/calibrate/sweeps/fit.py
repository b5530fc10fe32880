"""A profile of the swept engine: its step costs, draft cost and per-position acceptance fitted on
the sweep's cells outside the declared split (split.py), on top of a base profile, and every
cell predicted by the fitted profile and by the base.

The fit is `tlt calibrate`'s (workbench/calibrate/captures/report.py: the simulator's cost form,
robust, acceptance alpha ** (i ** shape)) in two stages: the plain engine's steps alone, brought
to one machine speed by their probes, then every cell's steps scaled by the plain steps beside
them (paired.py) and fitted together. Each step is timed output to output (`target="wall"`: a
sweep's trace has no gap between steps) and none is taken for warm-up (each cell's priming round
is). Cells are predicted with the simulator's own functions: a step of the plain engine and of
the SD engine at draft length K (`sim/costs.py`), tokens per pass (`sim/acceptance.py`) and SD's
speedup over the plain engine (`workbench/compare/sd_curve.py`'s `speedup`, the one `tlt
sd-curve` draws).

The base is what the workbench would use for this engine without the sweep: on a GPU the measured
database's profile of the model, GPU and TP degree under vLLM
(`workbench/calibrate/database/catalog.py`); elsewhere `cpu-tiny`, the shipped CPU profile; or
`--base`. Its predictions of every cell say how far it was from this engine.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from sim.acceptance import stats_for
from sim.costs import segment_s
from workbench.calibrate.captures.probe_drift import warp_to_profile
from workbench.calibrate.captures.report import Calibration, calibrate
from workbench.calibrate.sweeps.paired import paired_cell
from workbench.calibrate.sweeps.split import Split, fit_traces
from workbench.compare.sd_curve import speedup
from workbench.contracts.cluster import Cluster
from workbench.contracts.engine_identity import EngineIdentity
from workbench.contracts.fileio import sig
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.provenance import SWEEP_PREFIX
from workbench.contracts.strategy import Strategy
from workbench.contracts.sweep import NGRAM, PLAIN, CellFigure, Sweep, SweepCell, cell_figures

CPU_BASE = "cpu-tiny"


@dataclass(frozen=True)
class CellPrediction:
    plain_ms: float
    sd_ms: float
    tokens_per_pass: float
    speedup: float


@dataclass(frozen=True)
class CellRow:
    """A cell measured, and predicted before (base) and after (fitted) the sweep."""

    measured: CellFigure
    held_out: bool
    base: CellPrediction
    fitted: CellPrediction

    @staticmethod
    def error(pred: float, meas: float) -> float:
        return 100.0 * (pred / meas - 1.0) if meas > 0 and math.isfinite(meas) else math.nan


@dataclass
class SweepFit:
    profile: Profile
    calibration: Calibration
    split: Split
    base: Profile
    base_how: str  # why this base
    kind: DrafterKind  # how the profile prices the method's drafting
    rows: list[CellRow]

    def median_error(self, which: str, field: str, held_out: bool | None = True) -> float | None:
        """Median |error| of `which` (base or fitted) on `field` (sd_ms, plain_ms, speedup) over
        the held-out cells (None: every cell)."""
        errs = [abs(CellRow.error(getattr(getattr(r, which), field), getattr(r.measured, field)))
                for r in self.rows if held_out is None or r.held_out == held_out]
        errs = [e for e in errs if math.isfinite(e)]
        return round(statistics.median(errs), 3) if errs else None


def method_kind(method: str) -> DrafterKind:
    return DrafterKind.NGRAM if method == NGRAM else DrafterKind.EAGLE


def predict_cell(prof: Profile, kind: DrafterKind, batch: int, context: float,
                 k: int) -> CellPrediction:
    """A cell as the profile sees it: plain and SD steps, tokens per pass (an aligned drafter),
    and SD's speedup over the plain engine."""
    plain = segment_s(prof.decode, prof.drafter, DrafterKind.NONE, batch, context, 0)
    sd = segment_s(prof.decode, prof.drafter, kind, batch, context, k)
    per_pass = stats_for(prof.acceptance, kind, 1.0, k).mean
    gain = speedup(prof, kind, batch, context, Strategy.parse(k), per_pass)
    return CellPrediction(1e3 * plain, 1e3 * sd, per_pass, gain)


def at_profile_speed(cell: SweepCell, prof: Profile) -> SweepCell:
    """The cell with its traces brought to the machine speed the profile's costs hold for (each
    stretch at its nearest probe sample's speed, as the fit saw its traces); as measured where
    the sweep timed no probe."""
    traces = {}
    for name, t in cell.traces.items():
        warped = warp_to_profile(prof.speed_probe_ms, t, prof.speed_probe_exponent)
        traces[name] = t if warped is None else replace(warped[0], path=t.path)
    return replace(cell, traces=traces)


def _identity(sweep: Sweep, split: Split, base: Profile) -> EngineIdentity:
    i = sweep.identity
    return EngineIdentity(
        framework=str(i.get("framework", "vllm")), version=str(i.get("version", "")),
        device=str(i.get("device", "")), tp=int(i.get("tp", 1)), dtype=str(i.get("dtype", "")),
        graphs=bool(i.get("graphs", False)), model=str(i.get("model", "")),
        method=str(i.get("method", sweep.plan.method)), drafter=str(i.get("drafter") or ""),
        max_num_seqs=int(i.get("max_num_seqs", 0)), max_model_len=int(i.get("max_model_len", 0)),
        held_out=split.label, base_profile=base.name)


def fit_sweep(sweep: Sweep, base: Profile, split: Split, name: str, base_how: str = "",
              cluster: Cluster | None = None) -> SweepFit:
    """Fit on the cells outside `split`, predict every cell; the profile records the engine and
    the held-out errors (`Profile.engine`), and `cluster` (the model x GPU x TP it holds for,
    where the base was the measured database's for this engine; None elsewhere)."""
    if not sweep.cells:
        raise ValueError(f"{sweep.path}: no finished cell (the sweep stopped before its first)")
    kind = method_kind(sweep.plan.method)
    plain = [t for t in fit_traces(sweep, split)
             if (t.meta.get("sweep") or {}).get("role") == PLAIN]
    speed = calibrate(plain, base, name=name, warmup_steps=0, target="wall").profile
    paired = replace(sweep, cells=[paired_cell(c, speed) for c in sweep.cells])
    cal = calibrate(fit_traces(paired, split), base, name=name, warmup_steps=0, target="wall")
    acc = replace(cal.profile.acceptance, eagle_position=base.acceptance.eagle_position,
                  ngram_position=base.acceptance.ngram_position)
    fitted = replace(cal.profile, acceptance=acc, speed_probe_ms=speed.speed_probe_ms,
                     speed_probe_exponent=speed.speed_probe_exponent)
    rows = []
    for cell in sweep.cells:
        for fig in cell_figures(at_profile_speed(cell, fitted)):
            ctx = fig.context_mean
            rows.append(CellRow(fig, split.holds(fig.batch, fig.k),
                                predict_cell(base, kind, fig.batch, ctx, fig.k),
                                predict_cell(fitted, kind, fig.batch, ctx, fig.k)))
    fit = SweepFit(fitted, cal, split, base, base_how, kind, rows)
    ident = replace(_identity(sweep, split, base),
                    step_error_pct=fit.median_error("fitted", "sd_ms"),
                    speedup_error_pct=fit.median_error("fitted", "speedup"),
                    base_step_error_pct=fit.median_error("base", "sd_ms"),
                    base_speedup_error_pct=fit.median_error("base", "speedup"))
    n_steps = cal.costs.steps_used
    fit.profile = replace(
        fitted, engine=ident, cluster=cluster,
        fitted_on=(f"{SWEEP_PREFIX}{Path(sweep.path).resolve()}",),
        description=f"{ident.model}: {ident.label}; fitted on an engine sweep "
                    f"({len(sweep.cells)} cells, {split.label}) over base {base.name}.",
        source=f"tlt calibrate on the engine sweep {sweep.path} ({n_steps} engine steps of the "
               f"cells not held out; {split.label}); base {base.name} ({base_how}). "
               + cal.profile.source.split(": ", 1)[-1])
    fit.profile.check()
    return fit


def rounded(p: CellPrediction) -> dict:
    return {k: sig(v, 4) for k, v in vars(p).items()}
