"""What `tlt calibrate SWEEP_DIR` shows and writes beside the profile (P.calibration.json): every
cell measured, predicted by the base before the sweep and by the fitted profile, the split, the
errors, and the fit's parameters against the base's (docs/formats.md, "Engine sweeps")."""

from __future__ import annotations

import math
from dataclasses import asdict

from workbench.calibrate.sweeps.fit import CellRow, SweepFit, rounded
from workbench.contracts.fileio import jsonable, sig
from workbench.contracts.schema import to_mapping
from workbench.contracts.sweep import Sweep

SCHEMA = "tlt-sweep-calibration/1"
CELL_HEADERS = ["context", "batch", "K", "cell", "plain ms", "base", "fitted", "SD ms", "base",
                "fitted", "tokens/pass", "base", "fitted", "speedup", "base", "fitted"]
FIELDS = ("plain_ms", "sd_ms", "tokens_per_pass", "speedup")


def _f(x: float, digits: int = 2) -> str:
    return "-" if not math.isfinite(x) else f"{x:.{digits}f}"


def cell_rows(fit: SweepFit) -> list[list[str]]:
    out = []
    for r in fit.rows:
        m = r.measured
        row = [str(m.context), str(m.batch), str(m.k), "held out" if r.held_out else "fit"]
        for field in FIELDS:
            d = 3 if field == "speedup" else 2
            row += [_f(getattr(m, field), d), _f(getattr(r.base, field), d),
                    _f(getattr(r.fitted, field), d)]
        out.append(row)
    return out


def error_rows(fit: SweepFit) -> list[list[str]]:
    """Median |error| per quantity: the fitted profile on the held-out cells, the base on them and
    on every cell."""
    rows = []
    for field in FIELDS:
        cells = [fit.median_error("fitted", field), fit.median_error("base", field),
                 fit.median_error("base", field, None)]
        rows.append([field] + ["-" if v is None else f"{v:.1f}%" for v in cells])
    return rows


ERROR_HEADERS = ["median |error|", "fitted, held out", "base, held out", "base, every cell"]


def param_rows(fit: SweepFit) -> list[list[str]]:
    """Each cost and acceptance parameter: the fitted value, the base's, their ratio."""
    rows = []
    for p in fit.calibration.params:
        if p.part not in ("decode", "drafter", "acceptance"):
            continue
        old = getattr(getattr(fit.base, p.part), p.name)
        ratio = f"x{p.value / old:.2f}" if old and p.fitted else "-"
        se = f" ±{100 * p.rel_se:.0f}%" if p.fitted and math.isfinite(p.rel_se) else ""
        rows.append([p.key, f"{p.value:.4g}", f"{old:.4g}", ratio,
                     ("fitted" + se) if p.fitted else "base"])
    return rows


PARAM_HEADERS = ["parameter", "fitted", "base", "fitted / base", "how"]


def _cell(r: CellRow) -> dict:
    m = r.measured
    return {"context": m.context, "batch": m.batch, "k": m.k, "held_out": r.held_out,
            "measured": {"plain_ms": sig(m.plain_ms, 4), "sd_ms": sig(m.sd_ms, 4),
                         "off_ms": None if math.isnan(m.off_ms) else sig(m.off_ms, 4),
                         "context_mean": sig(m.context_mean, 4),
                         "tokens_per_pass": sig(m.tokens_per_pass, 4),
                         "accepted_per_pos": [sig(x, 4) for x in m.accepted_per_pos],
                         "speedup": sig(m.speedup, 4),
                         "speedup_rounds": [sig(x, 4) for x in m.speedup_rounds],
                         "plain_steps": m.plain_steps, "sd_steps": m.sd_steps},
            "base": rounded(r.base), "fitted": rounded(r.fitted)}


def report(fit: SweepFit, sweep: Sweep) -> dict:
    cal = fit.calibration.report(fit.base)
    cal.pop("lengths", None)  # a sweep's held batches are no rollout: no length model
    errors = {f"{who}_{scope}": {f: fit.median_error(who, f, held) for f in FIELDS}
              for who, scope, held in (("fitted", "held_out", True), ("base", "held_out", True),
                                       ("base", "every_cell", None),
                                       ("fitted", "fitted_cells", False))}
    return jsonable({
        "schema": SCHEMA, "profile": fit.profile.name, "sweep": str(sweep.path),
        "engine": to_mapping(fit.profile.engine), "plan": asdict(sweep.plan),
        "split": {"batches": list(fit.split.batches), "draft_lens": list(fit.split.draft_lens),
                  "declared": fit.split.declared, "label": fit.split.label},
        "base_profile": fit.base.name, "base_how": fit.base_how, "drafter_kind": str(fit.kind),
        "errors": errors, "cells": [_cell(r) for r in fit.rows], "calibration": cal})
