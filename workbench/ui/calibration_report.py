"""A calibration report (`PROFILE.calibration.json`, written by `tlt calibrate`) drawn for the app.

Every report has the fit (held-out step-latency error, each parameter with its base value and
whether the traces identified it). A self-calibration (`tlt calibrate --model`) adds what the
Calibrate page is for: the held-out captures predicted against measured (after drift
normalisation, and raw), step latency measured against predicted per drafter and batch bucket,
and the reference measurement through the run (the machine's drift).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

_PCT = st.column_config.NumberColumn(format="%+.1f%%")


def read_report(path: Path) -> dict[str, Any]:
    """The report's JSON; ValueError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a calibration report ({exc}); "
                         "give a .calibration.json `tlt calibrate` wrote")
    if not isinstance(data, dict) or "parameters" not in data:
        raise ValueError(f"{path}: not a calibration report (no 'parameters'); "
                         "give a .calibration.json `tlt calibrate` wrote")
    return data


def heldout_frame(section: dict[str, Any]) -> pd.DataFrame:
    """One row per held-out capture: predicted and measured rollout, normalised and raw."""
    return pd.DataFrame([{"capture": h.get("trace"), "drafter": h.get("kind"),
                          "predicted_s": h.get("predicted_rollout_s"),
                          "measured_s": h.get("measured_rollout_s"),
                          "error_pct": h.get("error_pct"),
                          "raw_measured_s": h.get("raw_measured_rollout_s"),
                          "raw_error_pct": h.get("raw_error_pct"),
                          "drift_factor": h.get("drift_factor")}
                         for h in section.get("heldout", [])])


def bucket_frame(section: dict[str, Any]) -> pd.DataFrame:
    """Step latency per drafter and batch bucket, measured (normalised) against the profile's."""
    rows = []
    for b in section.get("buckets", []):
        lo, hi = b.get("min_batch"), b.get("max_batch")
        rows.append({"drafter": b.get("kind"), "batch": str(lo) if lo == hi else f"{lo}-{hi}",
                     "steps": b.get("steps"), "measured_ms": b.get("measured_ms"),
                     "predicted_ms": b.get("predicted_ms"), "error_pct": b.get("error_pct")})
    return pd.DataFrame(rows)


def parameter_frame(report: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame([{"parameter": k, "value": v.get("value"), "base": v.get("base"),
                          "fitted": bool(v.get("fitted")), "why not": v.get("why_not_fitted") or ""}
                         for k, v in report.get("parameters", {}).items()])


def bucket_figure(df: pd.DataFrame) -> go.Figure:
    """Measured bars and predicted diamonds per batch bucket, grouped by drafter on a two-level axis
    (the drafter's whole name under its group, the bucket's batches under each bar, the axis
    title saying they are batches: labels short enough that no two meet)."""
    fig = go.Figure()
    for kind, g in df.groupby("drafter", sort=False):
        x = [[str(kind)] * len(g), [str(b) for b in g["batch"]]]
        fig.add_bar(x=x, y=g["measured_ms"], name=f"{kind} measured")
        fig.add_scatter(x=x, y=g["predicted_ms"], mode="markers", marker_symbol="diamond",
                        marker_size=10, name=f"{kind} predicted")
    fig.update_layout(title="Step latency by batch bucket", yaxis_title="ms per engine step",
                      height=400, margin=dict(t=40, b=10), legend=dict(
                          orientation="h", yanchor="top", y=-0.25))
    fig.update_xaxes(tickangle=0, automargin=True, tickfont=dict(size=11),
                     title_text="running batch (sequences), by drafter")
    return fig


def drift_figure(section: dict[str, Any]) -> go.Figure:
    refs = section.get("references", [])
    fig = go.Figure(go.Scatter(x=[r["t_s"] for r in refs], y=[1e3 * r["reference_s"] for r in refs],
                               mode="lines+markers", name="reference"))
    fig.update_layout(title="The reference measurement through the run (the machine's drift)",
                      xaxis_title="seconds into the run", yaxis_title="ms", height=300,
                      margin=dict(t=40, b=10))
    return fig


def _tiles(report: dict[str, Any], section: dict[str, Any]) -> None:
    cols = st.columns(4)
    cols[0].metric("Profile", str(report.get("profile", "?")))
    fit = report.get("fit_error_pct")
    cols[1].metric("Step latency, held-out steps",
                   f"{fit:.1f}%" if isinstance(fit, (int, float)) else "n/a",
                   help="Median |error| of the fitted step latency "
                        "on steps the fit left out (5-fold).")
    worst = section.get("heldout_max_abs_error_pct")
    if isinstance(worst, (int, float)) and math.isfinite(worst):
        cols[2].metric("Held-out captures, worst |error|", f"{worst:.1f}%",
                       help="Rollout time of captures the fit never saw (another mix, group size, "
                            "cap and seed), taken in the same run, after drift normalisation.")
    wall = section.get("wall_s")
    if isinstance(wall, (int, float)):
        cols[3].metric("Calibration took", f"{wall / 60:.1f} min")


def show_report(path: Path) -> None:
    """Draw the report at `path` (an info line when there is none yet)."""
    if not path.is_file():
        st.info(f"No calibration report at `{path}` yet.")
        return
    try:
        report = read_report(path)
    except ValueError as exc:
        st.error(str(exc))
        return
    section = report.get("self_calibration") or {}
    _tiles(report, section)
    st.caption(f"Fitted on: {', '.join(map(str, report.get('fitted_on', []))) or 'n/a'}")
    if section:
        held = heldout_frame(section)
        st.markdown("**Held-out captures**: predicted against measured rollout "
                    "time (measured after drift normalisation; raw beside it)")
        st.dataframe(held, hide_index=True, column_config={
            "predicted_s": st.column_config.NumberColumn("Predicted (s)", format="%.2f"),
            "measured_s": st.column_config.NumberColumn("Measured (s)", format="%.2f"),
            "error_pct": st.column_config.NumberColumn("Error", format="%+.1f%%"),
            "raw_measured_s": st.column_config.NumberColumn("Raw measured (s)", format="%.2f"),
            "raw_error_pct": st.column_config.NumberColumn("Raw error", format="%+.1f%%"),
            "drift_factor": st.column_config.NumberColumn("Drift factor", format="%.3f")})
        buckets = bucket_frame(section)
        if not buckets.empty:
            st.plotly_chart(bucket_figure(buckets), key="calibrate_buckets", width="stretch")
            st.dataframe(buckets, hide_index=True, column_config={
                "measured_ms": st.column_config.NumberColumn("Measured (ms)", format="%.2f"),
                "predicted_ms": st.column_config.NumberColumn("Predicted (ms)", format="%.2f"),
                "error_pct": _PCT})
        if section.get("references"):
            st.plotly_chart(drift_figure(section), key="calibrate_drift")
    with st.expander("Every parameter"):
        st.dataframe(parameter_frame(report), hide_index=True)
    for note in report.get("notes", []):
        st.caption(f"note: {note}")
