"""`tlt paper`'s outputs: the side-by-side table, `paper.json`, and the check that the shipped
profile presets are what a fresh fit of the published tables gives."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from workbench.calibrate.published.microbenchmarks import Published
from workbench.contracts.fileio import jsonable, write_json
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import differences, to_mapping
from workbench.paper.ceiling import ceiling
from workbench.paper.peers import PeerExplanation
from workbench.paper.reproduce import PaperRow, Reproduction
from workbench.report.tables import format_table

SCHEMA = "tlt-paper/2"


def _median_max(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return round(float(np.median(values)), 2), round(float(max(values)), 2)


def summary(rep: Reproduction) -> dict:
    """The last line's JSON: errors over every row, over the predicted rows, and per column over
    Table A."""
    errs = [abs(r.error_pct) for r in rep.rows]
    pred = [abs(r.error_pct) for r in rep.rows if r.basis == "predicted"]
    out = {"median_abs_error_pct": round(float(np.median(errs)), 2),
           "max_abs_error_pct": round(float(max(errs)), 2),
           "rows": len(rep.rows),
           "predicted_median_abs_error_pct": round(float(np.median(pred)), 2),
           "predicted_max_abs_error_pct": round(float(max(pred)), 2)}
    a = [r for r in rep.rows if r.table == "A" and r.basis == "predicted"]
    for key, get in (("pre_registered", lambda r: r.predicted),
                     ("measured_lengths", lambda r: r.measured_lengths),
                     ("measured_parts", lambda r: r.measured_parts),
                     ("calibrated", lambda r: r.calibrated)):
        vals = [abs(100 * (get(r) / r.published - 1)) for r in a if get(r) is not None]
        median, worst = _median_max(vals)
        out[f"table_a_{key}_median_abs_error_pct"] = median
        out[f"table_a_{key}_max_abs_error_pct"] = worst
    return out


def _row(r: PaperRow) -> dict:
    return {"table": r.table, "case": r.case, "published": r.published, "predicted": r.predicted,
            "error_pct": r.error_pct, "basis": r.basis, "unit": r.unit,
            "pre_registered": r.predicted, "measured_lengths": r.measured_lengths,
            "measured_parts": r.measured_parts, "calibrated": r.calibrated}


def document(rep: Reproduction) -> dict:
    return {"schema": SCHEMA, "steps": rep.steps, "seeds": rep.seeds, "split": rep.split,
            "calib_steps": rep.calib_steps, "rounds": [to_mapping(r) for r in rep.rounds],
            "rows": [_row(r) for r in rep.rows],
            "table_g_counts": [to_mapping(c) for c in rep.accept_counts],
            "explanations": [to_mapping(e) for e in rep.explanations], "summary": summary(rep)}


def json_text(rep: Reproduction) -> str:
    return json.dumps(jsonable(document(rep)), indent=2) + "\n"


def write(rep: Reproduction, out: str | Path) -> Path:
    path = Path(out) / "paper.json"
    write_json(path, document(rep))
    return path


def _cell(value: float | None, published: float) -> str:
    return "-" if value is None else f"{value:,.2f} ({100 * (value / published - 1):+.1f}%)"


def rows_text(rep: Reproduction) -> str:
    """One line per published figure: pre-registered, on measured lengths, measured parts and
    calibrated (leave-one-out) side by side."""
    rows = [[r.table, r.case, f"{r.published:,.2f}", _cell(r.predicted, r.published),
             _cell(r.measured_lengths, r.published), _cell(r.measured_parts, r.published),
             _cell(r.calibrated, r.published), r.basis]
            for r in rep.rows]
    return format_table(rows, ["table", "case", "published", "pre-registered", "measured lengths",
                               "measured parts", "calibrated (LOO)", "basis"])


def accept_counts_text(rep: Reproduction, published: tuple[float, float]) -> str:
    """Table G's accepted length (pre-registered `tlt` run) counted each way, against the
    paper's."""
    rows = [[c.how, _cell(c.first, published[0]), _cell(c.later, published[1])]
            for c in rep.accept_counts]
    return format_table(rows, ["counted", f"first step (published {published[0]})",
                               f"later steps (published {published[1]})"])


def rounds_text(rep: Reproduction) -> str:
    rows = [[r.held_out, ", ".join(r.fit_models),
             ", ".join(f"{k} {v:g}" for k, v in r.params.items()),
             f"{r.fit_loss:.4f}"] for r in rep.rounds]
    return format_table(rows,
                        ["held out", "fitted on", "parameters", "fit loss (sum sq. log error)"])


def explanations_text(rep: Reproduction) -> str:
    buckets = list(rep.explanations[0].critical_decode_share) if rep.explanations else []
    rows = [[e.variant, e.case, f"{e.baseline_step_s:,.0f}",
             f"{100 * e.baseline_rollout_share:.0f}%",
             f"{e.rollout_speedup:.2f}x", f"{e.mean_accept_len:.2f}"]
            + [f"{100 * e.critical_decode_share[b]:.0f}%/{100 * e.tlt_sd_on_share.get(b, 0):.0f}%/"
               f"{e.tlt_accept_by_bucket.get(b, 0):.1f}" for b in buckets]
            for e in rep.explanations]
    return format_table(rows,
                        ["inputs", "model", "baseline step s", "rollout share", "tlt rollout",
                         "tlt accept"]
                        + [f"batch {b}" for b in buckets])


def ceilings_text(rep: Reproduction, pub: Published) -> str:
    """Each model's TLT row at the paper's own SD speedups over its simulated batch buckets
    (workbench/paper/ceiling.py), for every set of inputs simulated."""
    published = {e.model: e.speedup for e in pub.table_a if e.system == "tlt"}
    rows = []
    for e in rep.explanations:
        c = ceiling(e.case, published[e.case], e.baseline_rollout_share, e.critical_decode_share,
                    pub)
        above = sum(v for k, v in e.critical_decode_share.items() if k in ("33-64", ">64"))
        rows.append([e.variant, c.model, f"{100 * c.rollout_share:.0f}%",
                     f"{c.rollout_ceiling:.2f}x",
                     f"{c.needed_rollout:.2f}x", f"{c.step_ceiling:.2f}", f"{c.published:.2f}",
                     "reachable" if c.reachable else "out of reach",
                     f"{100 * above:.0f}%", f"{100 * c.max_off_share:.0f}%"])
    return format_table(rows, ["inputs", "model", "rollout share", "rollout at Table C's speedups",
                               "rollout needed", "step ceiling", "published", "",
                               "decoding above 32", "most that allows it"])


# A refit on another CPU moves a fitted number in its last digits (BLAS, instruction sets); the
# presets carry five significant digits, so anything within this is the same fit.
REFIT_REL_TOL = 1e-3
_NUMBER = re.compile(r"-?\d+\.?\d*(?:e-?\d+)?")


def _same_text(a: str, b: str) -> bool:
    """A profile's `source` quotes fitted numbers rounded for reading: the same words, numbers
    within rounding."""
    na, nb = _NUMBER.findall(a), _NUMBER.findall(b)
    return _NUMBER.sub("#", a) == _NUMBER.sub("#", b) and len(na) == len(nb) and all(
        math.isclose(float(x), float(y), rel_tol=0.02, abs_tol=0.11) for x, y in zip(na, nb))


def _differs(shipped: Profile, refit: Profile) -> bool:
    return any(not (isinstance(shipped.source, str) and path == "source"
                    and _same_text(shipped.source, refit.source))
               for path in differences(shipped, refit, REFIT_REL_TOL))


def stale_presets(refitted: list[Profile]) -> list[str]:
    """Profile presets that differ from a fresh fit beyond REFIT_REL_TOL (the shipped files were not
    regenerated)."""
    return [p.name for p in refitted if _differs(load_profile(p.name), p)]


def profiles_to_write(refitted: list[Profile]) -> list[Profile]:
    """What `--write-profiles` writes: the shipped preset where the refit agrees with it within
    REFIT_REL_TOL (so a refit on another machine writes the same files), the refit where it does
    not."""
    stale = set(stale_presets(refitted))
    return [p if p.name in stale else load_profile(p.name) for p in refitted]


def peers_document(rows: list[PaperRow], expl: list[PeerExplanation], steps: int,
                   seeds: list[int]) -> dict:
    pred = [abs(r.error_pct) for r in rows]
    return {"schema": SCHEMA, "steps": steps, "seeds": seeds,
            "rows": [_row(r) for r in rows],
            "explanations": [to_mapping(e) for e in expl],
            "summary": {"median_abs_error_pct": round(float(np.median(pred)), 2),
                        "max_abs_error_pct": round(float(max(pred)), 2), "rows": len(rows)}}


def peers_text(expl: list[PeerExplanation]) -> str:
    rows = [[e.peer, e.steps_counted, f"{100 * e.baseline_rollout_share:.0f}%",
             f"{100 * e.baseline_bubble:.0f}%",
             "streamed" if e.policy_rollout_share is None
             else f"{100 * e.policy_rollout_share:.0f}%",
             f"{100 * e.policy_train_share:.0f}%", f"{e.policy_lag:.2f}", f"{e.groups_left:.1f}",
             f"{e.accept_len:.2f}"]
            for e in expl]
    return format_table(rows, ["peer", "steps", "baseline rollout share", "baseline bubble",
                               "policy rollout share", "policy train share", "policy lag",
                               "groups left", "accept len"])

