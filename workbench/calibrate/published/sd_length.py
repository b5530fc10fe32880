"""SD's speedup by draft length on measured engines: every public figure beside its prediction, and
per series and batch the best draft length published and predicted.

A longer draft raises the tokens a pass emits and costs more drafting and a wider verify. The
database prices the kernels of both; what it leaves out is the engine's work outside them, fitted
in `sd_batch.fit_constants`: each draft step's, a learned drafter's once a pass and a tree's once a
pass on top (workbench/calibrate/database/profile.py). With the work outside the kernels all paid
per draft step, as it was, a longer draft is charged twice what the engines show: the TLT paper's
own engine runs a depth-12 tree faster than a depth-8 one (3.66x against 3.47x) where that model
put depth 8 first.

The series come from three files, each read where it lives: `sd-by-draft-length.yaml`, the TLT
paper's Table C (trees of 16-64 tokens at batch 1-32) and depth x TV grid (tlt-paper.yaml, whose
depth-8 speedups are a fit: `database_check.overhead_rows`), and the series of `sd-by-batch.yaml`
measured at several draft lengths. Where a series publishes no accepted length (Table C, the grid)
the acceptance model fitted to the paper's published accepted lengths gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.acceptance import stats_for
from workbench.calibrate.published.database_check import BASE_PROFILE, fit_acceptance
from workbench.calibrate.published.microbenchmarks import Published, load_published
from workbench.calibrate.published.sd_batch import (
    EngineConstants,
    SdCheck,
    engine,
    predict_point,
)
from workbench.calibrate.published.sd_series import (
    SdPoint,
    SdSeries,
    load_sd_length_published,
    load_sd_published,
)
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError

TABLE_C_SOURCE = ("TLT paper Table C (tlt-paper.yaml): SD speedup by tokens to verify at batch "
                  "1-32, Qwen2.5-32B TP4, H100, SGLang; trees 8_4_TV; accepted lengths not "
                  "published")
GRID_SOURCE = ("TLT paper depth x TV grid (tlt-paper.yaml): batch 1, the same engine, top-k 8; "
               "its depth-8 speedups decide the draft overheads with Table D")
TLT_CONTEXT = 2048.0  # the microbenchmarks' context (not published; database_check.CONTEXT)


def tlt_series(pub: Published | None = None) -> list[SdSeries]:
    """Table C by tokens to verify (held out) and the depth x TV grid's speedups (depth 8: fit;
    depth 12: Table D's top-k 8 row again, held out) as series, each point's accepted length from
    the acceptance model fitted to the paper's published accepted lengths."""
    pub = pub or load_published()
    acc = fit_acceptance(pub, load_profile(BASE_PROFILE).acceptance)

    def pts(rows) -> tuple[SdPoint, ...]:
        return tuple(SdPoint(m.batch, m.strategy, stats_for(acc, DrafterKind.EAGLE, 1.0,
                                                            m.strategy).mean,
                             "speedup", m.value, m.tp) for m in rows)

    c = [m for m in pub.measurements if m.table == "C"]
    grid = [m for m in pub.measurements if m.table == "depth_tv" and m.kind == "speedup"]
    base = dict(framework="sglang", gpu="h100", model=c[0].model, tp=c[0].tp,
                drafter=DrafterKind.EAGLE, context=TLT_CONTEXT)
    return [SdSeries("tlt-table-c", "held_out", TABLE_C_SOURCE, points=pts(c), **base),
            SdSeries("tlt-depth-grid", "fit", GRID_SOURCE,
                     points=pts(m for m in grid if m.strategy.steps == 8), **base),
            SdSeries("tlt-depth-grid-depth12", "held_out", GRID_SOURCE,
                     points=pts(m for m in grid if m.strategy.steps != 8), **base)]


def length_series() -> list[SdSeries]:
    """Every public series measured at two or more draft lengths (and this file's one-length
    engine checks), from the three files."""
    by_batch = [s for s in load_sd_published().series if s.role != "context"
                and len({p.strategy for p in s.points if p.measure == "speedup"}) > 1]
    return list(load_sd_length_published().series) + tlt_series() + by_batch


def length_checks(series: list[SdSeries], constants: EngineConstants,
                  roles: tuple[str, ...] = ("fit", "held_out")) -> list[SdCheck]:
    """Each speedup of the series with those roles beside its prediction (a point without an
    accepted length, or an engine the database cannot price, is left out: `unpriced`)."""
    out = []
    for s in (s for s in series if s.role in roles):
        for p in (p for p in s.points if p.measure == "speedup" and p.accepted is not None):
            try:
                pred = predict_point(engine(s, constants, p.tp), s, p)
            except (ConfigError, ValueError, KeyError):
                continue
            out.append(SdCheck(s.name, s.role, p.batch, p.strategy.name, p.tp, p.measure,
                               p.value, pred))
    return out


def unpriced(series: list[SdSeries], constants: EngineConstants) -> list[tuple[str, str]]:
    """The series whose engine this workbench cannot price yet, with the reason."""
    out = []
    for s in series:
        try:
            engine(s, constants)
        except (ConfigError, ValueError, KeyError) as exc:
            out.append((s.name, str(exc).splitlines()[0][:160]))
    return out


@dataclass(frozen=True)
class BestLength:
    """At one batch of one series, the draft length with the highest speedup among those measured:
    published and predicted."""

    series: str
    role: str
    batch: int
    candidates: tuple[str, ...]
    published: str
    predicted: str

    @property
    def agrees(self) -> bool:
        return self.published == self.predicted


def best_lengths(checks: list[SdCheck]) -> list[BestLength]:
    """Per series and batch with two or more draft lengths measured, the best published and the
    best predicted among them."""
    out = []
    keys = sorted({(c.series, c.batch) for c in checks}, key=lambda k: (k[0], k[1]))
    for name, batch in keys:
        here = [c for c in checks if c.series == name and c.batch == batch and c.tp == min(
            x.tp for x in checks if x.series == name and x.batch == batch)]
        if len({c.strategy for c in here}) < 2:
            continue
        pub = max(here, key=lambda c: c.published).strategy
        pred = max(here, key=lambda c: c.predicted).strategy
        out.append(BestLength(name, here[0].role, batch, tuple(c.strategy for c in here), pub,
                              pred))
    return out


@dataclass(frozen=True)
class LengthSummary:
    held_out_points: int
    held_out_median_abs_error_pct: float
    fit_median_abs_error_pct: float
    best_agree: int  # held-out (series, batch) pairs whose best draft length is predicted
    best_total: int


def median_abs_error(checks: list[SdCheck]) -> float:
    return float(np.median([abs(c.error_pct) for c in checks])) if checks else float("nan")


def summarise(checks: list[SdCheck]) -> LengthSummary:
    held = [c for c in checks if c.role == "held_out"]
    best = [b for b in best_lengths(checks) if b.role == "held_out"]
    return LengthSummary(len(held), median_abs_error(held),
                         median_abs_error([c for c in checks if c.role == "fit"]),
                         sum(b.agrees for b in best), len(best))


def with_context(series: list[SdSeries], context: float) -> list[SdSeries]:
    """The series evaluated at another context (a sensitivity: most publish none)."""
    return [replace(s, context=context) for s in series]
