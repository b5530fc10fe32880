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
from workbench.validate.engine_factors import drawn_engines
from workbench.validate.tail_evidence import CaseResult, Item

TRACE = "polytrace-search-r1-qwen2.5-7b"
STEPS = [0, 1, 2, 3, 4]
GOAL = 0.10  # the largest gap in the share done the issue accepts


DRAWS = 8  # engines drawn from the trace fit's uncertainty
DRAW_SEED = 0


@dataclass(frozen=True)
class TraceVariant:
    label: str  # "fitted", or "draw K"
    steps: list[tail_trace.StepDrain]


@dataclass(frozen=True)
class TailRun:
    trace: str
    engine: str  # the profile replayed
    fit_steps: tuple[int, ...]  # its fit's steps (empty: not fitted on the trace)
    variants: list[TraceVariant]  # the first: the engine itself; then its draws
    evidence: list[tuple[Item, list[CaseResult]]]


def run_tail(seeds: tuple[int, ...] = tail_evidence.SEEDS, profile: str | None = None,
             draws: int = DRAWS, progress: Callable[[str], None] | None = None) -> TailRun:
    """The trace's steps on `profile` (default: the workload's) and on `draws` engines drawn from
    its trace fit, then the evidence items on `seeds`."""
    wl = load_workload(TRACE)
    engine = load_profile(profile or wl.profile)
    engines = [("fitted", engine)] + [(f"draw {k}", e) for k, e in
                                      enumerate(drawn_engines(engine, draws, DRAW_SEED))]
    variants = []
    for label, e in engines:
        if progress:
            progress(f"{TRACE}: steps {STEPS} on {engine.name} ({label})")
        variants.append(TraceVariant(label, tail_trace.check(wl, e, STEPS)))
    evidence = [(it, tail_evidence.check_item(it, seeds, progress) if it.simulated else [])
                for it in tail_evidence.load_evidence()]
    fit_steps = engine.trace_fit.fit_steps if engine.trace_fit else ()
    return TailRun(TRACE, engine.name, fit_steps, variants, evidence)


def _pct(x: float) -> str:
    return "-" if np.isnan(x) else f"{100 * x:.0f}%"


def _step(run: TailRun, step: int) -> str:
    if not run.fit_steps:  # an engine with no trace fit recorded: nothing to mark
        return str(step)
    return f"{step} (fit)" if step in run.fit_steps else f"{step} (held out)"


def _spread(run: TailRun, i: int, value: Callable[[tail_trace.StepDrain], float],
            form: str = ".1f") -> str:
    drawn = [value(v.steps[i]) for v in run.variants[1:]]
    return f"{min(drawn):{form}} to {max(drawn):{form}}" if drawn else "-"


def trace_text(run: TailRun) -> str:
    base = run.variants[0].steps
    rows = [[_step(run, s.step), f"{s.trajectories:,}", f"{100 * s.gap:.1f}",
             _spread(run, i, lambda d: 100 * d.gap), f"{100 * s.clock_gap:.1f}",
             f"{s.measured_s:.0f}", f"{s.simulated_s:.0f}",
             f"{s.simulated_s / s.measured_s - 1:+.1%}",
             _spread(run, i, lambda d: 100 * (d.simulated_s / d.measured_s - 1), "+.1f")]
            + [f"{_pct(m)} / {_pct(v)}" for m, v in zip(s.measured_shares, s.simulated_shares)]
            for i, s in enumerate(base)]
    heads = ["step", "trajectories", "largest gap (points)",
             f"over {len(run.variants) - 1} drawn engines", "on the measured clock",
             "rollout s measured", "simulated", "error", "drawn (%)"]
    heads += [f"engine-time at {lo}-{hi} meas/sim" if hi else "engine-time idle meas/sim"
              for lo, hi in tail_trace.BUCKETS]
    if len(run.variants) == 1:  # no drawn engines: their two columns say nothing
        rows, heads = [r[:3] + r[4:8] + r[9:] for r in rows], heads[:3] + heads[4:8] + heads[9:]
    return f"engine: {run.engine}\n" + format_table(rows, heads)


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
    base = run.variants[0].steps
    held = [s.gap for s in base if s.step not in run.fit_steps]
    out = {"engine": run.engine, "fit_steps": list(run.fit_steps),
           "trace_largest_gap_by_step": [round(s.gap, 4) for s in base],
           "trace_largest_gap_max": round(max(s.gap for s in base), 4),
           "trace_held_out_gap_max": round(max(held), 4) if held else None,
           "trace_steps_within_goal": sum(s.gap <= GOAL for s in base)}
    if len(run.variants) > 1:
        out["trace_largest_gap_max_over_draws"] = round(
            max(s.gap for v in run.variants[1:] for s in v.steps), 4)
    for it, res in run.evidence:
        if res:
            out[f"{it.id}_gap_range"] = [round(min(r.gap for r in res), 4),
                                         round(max(r.gap for r in res), 4)]
    out["not_simulated"] = [it.id for it, _ in run.evidence if not it.simulated]
    return out


def document(run: TailRun) -> dict:
    trace = [{"engine": v.label,
              "steps": [{"step": s.step, "gap": s.gap, "clock_gap": s.clock_gap,
                         "measured_s": s.measured_s,
                         "simulated_s": s.simulated_s, "measured_shares": s.measured_shares,
                         "simulated_shares": s.simulated_shares} for s in v.steps]}
             for v in run.variants]
    items = [{"id": it.id, "simulated": it.simulated, "reason": it.reason,
              "measured_curve": it.curve,
              "cases": [{"label": r.label, "gap": r.gap, "gap_range": r.gap_range,
                         "shares": r.shares, "speeds": r.speeds, "rollout_s": r.rollout_s,
                         "accept_len": r.accept_len} for r in res]}
             for it, res in run.evidence]
    return {"schema": "tlt-tail/2", "trace": run.trace, "engine": run.engine,
            "fit_steps": list(run.fit_steps), "trace_variants": trace, "evidence": items,
            "summary": summary(run)}


def panels(run: TailRun) -> list[Panel]:
    base = run.variants[0].steps
    out = [Panel(f"{run.trace}: steps {STEPS[0]}-{STEPS[-1]} ({run.engine})",
                 [Curve(f"step {s.step}", completion_curve(s.measured, GRID)) for s in base],
                 simulated=[Curve(f"simulated step {s.step}", completion_curve(s.simulated, GRID))
                            for s in base])]
    for it, res in run.evidence:
        if res:
            out.append(Panel(it.title.split(" (")[0] + f" ({it.id})", points=it.curve,
                             simulated=[Curve(r.label, completion_curve(r.drains[0], GRID))
                                        for r in res]))
    return out
