"""Paper page: the TLT paper's published figures beside the simulator's (`tlt paper`).

The fit of the published microbenchmarks takes a couple of seconds and runs on arrival; Table A
(the paper's evaluation: every model under baseline, TLT-Base and TLT, on its measured-database
profile and on the paper-fitted one) runs when asked, with a bar counting its simulations. Each row
says whether the profiles were fitted to it or the simulator predicts it, and the gap is coloured.
"""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from workbench.calibrate.published.microbenchmarks import load_published
from workbench.paper import report
from workbench.paper.calibration import load_split
from workbench.paper.profiles import refit
from workbench.paper.reproduce import Reproduction, progress_messages, reproduce

_STATE = "paper_result"


@st.cache_resource(show_spinner="Fitting the GPU profiles to the published microbenchmarks ...")
def _fit():
    return refit()


def _gap_color(value: float) -> str:
    """Green within 10%, amber within 20%, red beyond."""
    a = abs(value)
    color = "#2e7d32" if a <= 10 else "#ef6c00" if a <= 20 else "#c62828"
    return f"color: {color}; font-weight: 600"


_GAPS = {"error_pct": "gap %", "lengths_error_pct": "measured lengths gap %",
         "measured_error_pct": "measured gap %", "calibrated_error_pct": "calibrated gap %"}
_VALUES = ("published", "pre-registered", "measured lengths", "measured parts", "calibrated (LOO)")
# the headline metrics: the summary's key, its label
_HEADLINES = (("pre_registered", "pre-registered"), ("measured_lengths", "measured lengths"),
              ("measured_parts", "measured parts"), ("calibrated", "calibrated, held out"))


def paper_table(rep: Reproduction):
    """Every published figure beside the simulator's, gaps coloured. Columns a run leaves empty
    (the measured-parts and calibrated ones, unless it calibrated) are not shown, and a figure
    missing in a row reads '-'."""
    df = rep.frame().rename(columns=_GAPS)
    df.insert(3, "unit", [r.unit for r in rep.rows])
    df = df.drop(columns=[c for c in df.columns if df[c].isna().all()])
    numeric = [c for c in (*_VALUES, *_GAPS.values()) if c in df.columns]
    df[numeric] = df[numeric].apply(pd.to_numeric)  # None -> NaN, which na_rep shows as '-'
    gaps = [g for g in _GAPS.values() if g in df.columns]
    return df.style.map(lambda v: "" if pd.isna(v) else _gap_color(v), subset=gaps).format(
        {**{c: "{:,.2f}" for c in _VALUES if c in df.columns}, **{g: "{:+.1f}" for g in gaps}},
        na_rep="-")


# batch bucket columns of "Where Table A's time goes", by what they hold
_SHARE, _SD_ON, _ACCEPT = "decode share, batch ", "SD on, batch ", "accepted, batch "


def explanation_table(rep: Reproduction) -> pd.DataFrame:
    """Where each Table A case's time goes, one row per case and inputs; shares as fractions,
    accepted lengths as text ('SD off' in a bucket where TLT never ran SD: no length to give)."""
    rows = []
    for e in rep.explanations:
        row = {"inputs": e.variant, "model": e.case, "baseline step": e.baseline_step_s,
               "rollout share": e.baseline_rollout_share, "TLT rollout speedup": e.rollout_speedup,
               "TLT accepted length": e.mean_accept_len}
        row.update({_SHARE + k: v for k, v in e.critical_decode_share.items()})
        row.update({_SD_ON + k: v for k, v in e.tlt_sd_on_share.items()})
        row.update({_ACCEPT + k: (f"{v:.2f}" if e.tlt_sd_on_share.get(k, 1.0) > 0 else "SD off")
                    for k, v in e.tlt_accept_by_bucket.items()})
        rows.append(row)
    return pd.DataFrame(rows).set_index(["inputs", "model"])


def explanation_columns(table: pd.DataFrame) -> dict:
    """Each column of `explanation_table` with its unit."""
    share = "The baseline's slowest engine: share of its decode time at this batch."
    sd_on = "TLT: share of its decode time at this batch with SD on."
    cols = {"baseline step": st.column_config.NumberColumn("baseline step", format="%.1f s"),
            "rollout share": st.column_config.NumberColumn(
                "rollout share", format="percent", help="The baseline's rollout / step."),
            "TLT rollout speedup": st.column_config.NumberColumn("TLT rollout speedup",
                                                                 format="%.2fx"),
            "TLT accepted length": st.column_config.NumberColumn(
                "TLT accepted length", format="%.2f", help="Tokens per verify pass.")}
    for c in table.columns:
        if c.startswith(_SHARE):
            cols[c] = st.column_config.NumberColumn(c, format="percent", help=share)
        elif c.startswith(_SD_ON):
            cols[c] = st.column_config.NumberColumn(c, format="percent", help=sd_on)
        elif c.startswith(_ACCEPT):
            cols[c] = st.column_config.TextColumn(c, help="TLT's tokens per verify pass there.")
    return cols


def render() -> None:
    st.title("The TLT paper, reproduced")
    st.caption("The simulator against the published figures of TLT (arXiv 2511.16665): "
               "GPU profiles fitted to its microbenchmarks (Tables C, E), end-to-end "
               "speedups predicted on its evaluation (Table A), and the drafter's "
               "accepted length during RL (Table G). The same as `tlt paper --out DIR`.")
    fit, _ = _fit()
    st.caption(f"The GPU profiles' microbenchmark fit (not a prediction): median |error| "
               f"{fit.median_abs_error_pct:.1f}% "
               f"over {len(fit.rows)} published numbers (Tables C, D, the depth x TV grid, E), max "
               f"{fit.max_abs_error_pct:.1f}%.")
    c1, c2, c3 = st.columns([1, 1, 2])
    steps = int(c1.number_input("Steps per case", min_value=1, max_value=40, value=20,
                                key="paper_steps"))
    seeds = int(c2.number_input("Seeds", min_value=1, max_value=5, value=1, key="paper_seeds"))
    calibrate = c3.checkbox("Calibrate (leave-one-model-out: a grid of simulations)", value=False,
                            key="paper_calibrate",
                            help="Adds the measured-parts and calibrated columns "
                                 "(traces/published/calibration-split.yaml).")
    if st.button("Run the reproduction", type="primary", key="paper_run"):
        split = load_split() if calibrate else None
        total = progress_messages(seeds, split)
        bar = st.progress(0.0, text=f"Simulating Table A: 0/{total} ...")
        done, t0 = [], time.perf_counter()

        def progress(msg: str) -> None:
            done.append(msg)
            elapsed = time.perf_counter() - t0
            left = elapsed / len(done) * (total - len(done))
            bar.progress(min(1.0, len(done) / total), text=f"{len(done)}/{total} · {msg} · "
                                                           f"{elapsed:.0f} s, "
                                                          f"about {left:.0f} s left at this pace")

        try:
            st.session_state[_STATE] = reproduce(fit, load_published(), steps=steps,
                                                 seeds=list(range(seeds)), on_progress=progress,
                                                 split=split)
        except Exception as exc:  # a simulator bug must not take the page down
            st.error(f"The reproduction failed: {type(exc).__name__}: {exc}")
        bar.empty()
    rep: Reproduction | None = st.session_state.get(_STATE)
    if rep is None:
        st.info("Press **Run the reproduction** to simulate the paper's evaluation: the bar counts "
                "the "
                f"{progress_messages(seeds)} simulations of Table A as they finish.")
        return
    s = report.summary(rep)
    shown = [(k, label) for k, label in _HEADLINES
             if s[f"table_a_{k}_median_abs_error_pct"] is not None]
    for col, (key, label) in zip(st.columns(len(shown)), shown):
        col.metric(f"Table A prediction, {label}: median |gap|",
                   f"{s[f'table_a_{key}_median_abs_error_pct']:.1f}%",
                   help="Over the end-to-end speedups the column has (TLT-Base and TLT on "
                        "four models; on measured lengths three: Llama-70B has no public "
                        "lengths); none of them is fitted in the column it heads "
                        "(calibrated: each model's pair held out of its own fit).")
    if rep.split:
        st.caption(f"Calibration split: {rep.split}.")
    else:
        st.caption("Pre-registered predictions only: tick **Calibrate** for the measured-parts "
                   "and calibrated (leave-one-model-out) columns.")
    st.dataframe(paper_table(rep), width="stretch", hide_index=True, key="paper_table")
    st.subheader("Where Table A's time goes")
    st.caption("Per case: the baseline's step and its rollout share (the paper: ~85%), TLT's "
               "rollout speedup and accepted length; by batch bucket, the share of the "
               "baseline's decode time there (its slowest engine), the share of TLT's with SD on "
               "(SD is off above 32) and TLT's tokens per verify pass there.")
    table = explanation_table(rep)
    st.dataframe(table, column_config=explanation_columns(table), width="stretch",
                 key="paper_explanations")
    st.download_button("Download paper.json", report.json_text(rep), file_name="paper.json",
                       mime="application/json", key="paper_dl", on_click="ignore")
