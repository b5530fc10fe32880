"""`tlt tail`'s work: the Search-R1 trace's steps and the simulable evidence items drained, measured
beside simulated (tail_trace.py, tail_evidence.py), as tables, a document and a figure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workbench.contracts.drain import completion_curve
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.report.tables import format_table
from workbench.report.tail_plot import GRID, Curve, Panel
from workbench.validate import tail_evidence, tail_trace
from workbench.validate.tail_evidence import CaseResult, Item

TRACE = "polytrace-search-r1-qwen2.5-7b"
STEPS = [0, 1, 2, 3, 4]
GOAL = 0.10  # the largest gap in the share done the issue accepts


@dataclass(frozen=True)
class TraceVariant:
    context_share: float  # of the engine's cost per sequence, moved onto its context
    steps: list[tail_trace.StepDrain]


@dataclass(frozen=True)
class TailRun:
    trace: str
    reference_context: float
    variants: list[TraceVariant]  # the first: the shipped engine
    evidence: list[tuple[Item, list[CaseResult]]]


def run_tail(seeds: tuple[int, ...] = tail_evidence.SEEDS,
             progress: Callable[[str], None] | None = None) -> TailRun:
    wl = load_workload(TRACE)
    profile = load_profile(wl.profile)
    ctx = tail_trace.reference_context(wl, profile)
    variants = []
    for share in tail_trace.CONTEXT_SHARES:
        if progress:
            progress(f"{TRACE}: steps {STEPS}, {share:.0%} of the per-sequence cost on context")
        engine = tail_trace.context_engine(profile, share, ctx) if share else profile
        variants.append(TraceVariant(share, tail_trace.check(wl, engine, STEPS)))
    evidence = [(it, tail_evidence.check_item(it, seeds, progress) if it.simulated else [])
                for it in tail_evidence.load_evidence()]
    return TailRun(TRACE, ctx, variants, evidence)


def _pct(x: float) -> str:
    return "-" if np.isnan(x) else f"{100 * x:.0f}%"


def trace_text(run: TailRun) -> str:
    base = run.variants[0].steps
    rows = [[str(s.step), f"{s.trajectories:,}", f"{100 * s.gap:.1f}", f"{s.measured_s:.0f}",
             f"{s.simulated_s:.0f}"]
            + [f"{_pct(m)} / {_pct(v)}" for m, v in zip(s.measured_shares, s.simulated_shares)]
            for s in base]
    heads = ["step", "trajectories", "largest gap (points)", "rollout s measured", "simulated"]
    heads += [f"engine-time at {lo}-{hi} meas/sim" if hi else "engine-time idle meas/sim"
              for lo, hi in tail_trace.BUCKETS]
    lines = [format_table(rows, heads), "",
             "the engine's unknown: the share of its cost per sequence that grows with the "
             f"context (kept at {run.reference_context:.0f} tokens, the fit step's mean):"]
    rows = [[f"{v.context_share:.0%}" + (" (shipped)" if not v.context_share else "")]
            + [f"{100 * s.gap:.1f} ({s.simulated_s / s.measured_s - 1:+.0%})" for s in v.steps]
            for v in run.variants]
    lines.append(format_table(rows, ["on context"] + [f"step {s} gap (rollout error)"
                                                      for s in STEPS]))
    return "\n".join(lines)


def _measured_speed(it: Item, i: int) -> str:
    if it.speeds[i].tokens_per_s is None:
        return "-"
    lo, hi = it.speeds[i].tokens_per_s
    return f"{lo:,.0f}-{hi:,.0f}"


def item_text(it: Item, results: list[CaseResult]) -> str:
    if not it.simulated:
        return f"{it.id}: not simulated. {it.reason}"
    pts = ", ".join(f"{100 * f:.0f}% done at {100 * t:.0f}%" for t, f in it.curve)
    rows = [[r.label, f"{100 * r.gap:.0f} ({100 * r.gap_range[0]:.0f}-{100 * r.gap_range[1]:.0f})",
             f"{r.rollout_s:.0f}", f"{r.accept_len:.2f}"]
            + [_pct(v) for v in r.shares] + ["-" if np.isnan(v) else f"{v:,.0f}" for v in r.speeds]
            for r in results]
    heads = ["case (unknowns)", "largest gap, points (seeds)", "rollout s", "accept len"]
    heads += [f"time at {s.label} (meas {_pct(s.share)})" for s in it.shares]
    heads += [f"tok/s at {s.label} (meas {_measured_speed(it, i)})"
              for i, s in enumerate(it.speeds)]
    return "\n".join([f"{it.id}: {it.title}", f"  source: {it.source}", f"  measured: {pts}",
                      format_table(rows, heads)])


def summary(run: TailRun) -> dict:
    base = [s.gap for s in run.variants[0].steps]
    out = {"trace_largest_gap_max": round(max(base), 4),
           "trace_steps_within_goal": sum(g <= GOAL for g in base),
           "trace_largest_gap_by_context_share": {
               f"{v.context_share:g}": round(max(s.gap for s in v.steps), 4)
               for v in run.variants}}
    for it, res in run.evidence:
        if res:
            out[f"{it.id}_gap_range"] = [round(min(r.gap for r in res), 4),
                                         round(max(r.gap for r in res), 4)]
    out["not_simulated"] = [it.id for it, _ in run.evidence if not it.simulated]
    return out


def document(run: TailRun) -> dict:
    trace = [{"context_share": v.context_share,
              "steps": [{"step": s.step, "gap": s.gap, "measured_s": s.measured_s,
                         "simulated_s": s.simulated_s, "measured_shares": s.measured_shares,
                         "simulated_shares": s.simulated_shares} for s in v.steps]}
             for v in run.variants]
    items = [{"id": it.id, "simulated": it.simulated, "reason": it.reason,
              "measured_curve": it.curve,
              "cases": [{"label": r.label, "gap": r.gap, "gap_range": r.gap_range,
                         "shares": r.shares, "speeds": r.speeds, "rollout_s": r.rollout_s,
                         "accept_len": r.accept_len} for r in res]}
             for it, res in run.evidence]
    return {"schema": "tlt-tail/1", "trace": run.trace, "reference_context": run.reference_context,
            "trace_variants": trace, "evidence": items, "summary": summary(run)}


def panels(run: TailRun) -> list[Panel]:
    base = run.variants[0].steps
    out = [Panel(f"{run.trace}: steps {STEPS[0]}-{STEPS[-1]} (shipped engine)",
                 [Curve(f"step {s.step}", completion_curve(s.measured, GRID)) for s in base],
                 simulated=[Curve(f"simulated step {s.step}", completion_curve(s.simulated, GRID))
                            for s in base])]
    for it, res in run.evidence:
        if res:
            out.append(Panel(it.title.split(" (")[0] + f" ({it.id})", points=it.curve,
                             simulated=[Curve(r.label, completion_curve(r.drains[0], GRID))
                                        for r in res]))
    return out
