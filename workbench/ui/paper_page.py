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


_GAPS = {"error_pct": "gap %", "measured_error_pct": "measured gap %",
         "calibrated_error_pct": "calibrated gap %"}


def _styled(rep: Reproduction):
    df = rep.frame().rename(columns=_GAPS)
    gaps = list(_GAPS.values())
    return df.style.map(lambda v: "" if v is None or pd.isna(v) else _gap_color(v),
                        subset=gaps).format(
        {"published": "{:,.2f}", "pre-registered": "{:,.2f}", "measured parts": "{:,.2f}",
         "calibrated (LOO)": "{:,.2f}", **{g: "{:+.1f}" for g in gaps}}, na_rep="-")


def _explanations(rep: Reproduction) -> pd.DataFrame:
    rows = []
    for e in rep.explanations:
        row = {"model": e.case, "baseline step (s)": e.baseline_step_s,
               "rollout share": e.baseline_rollout_share, "tlt rollout speedup": e.rollout_speedup,
               "tlt accepted length": e.mean_accept_len}
        row.update({f"batch {k}": v for k, v in e.critical_decode_share.items()})
        row.update({f"SD on, batch {k}": v for k, v in e.tlt_sd_on_share.items()})
        row.update({f"accept, batch {k}": v for k, v in e.tlt_accept_by_bucket.items()})
        row["inputs"] = e.variant
        rows.append(row)
    return pd.DataFrame(rows).set_index(["inputs", "model"])


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
    c1, c2, c3, _ = st.columns([1, 1, 1, 1])
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
    cols = st.columns(3)
    for col, key, label in zip(cols, ("pre_registered", "measured_parts", "calibrated"),
                               ("pre-registered", "measured parts", "calibrated, held out")):
        value = s[f"table_a_{key}_median_abs_error_pct"]
        col.metric(f"Table A prediction, {label}: median |gap|",
                   "-" if value is None else f"{value:.1f}%",
                   help="Over the 8 end-to-end speedups (TLT-Base and TLT on four "
                        "models); none of them is fitted in the column it heads "
                        "(calibrated: each model's pair held out of its own fit).")
    if rep.split:
        st.caption(f"Calibration split: {rep.split}.")
    st.dataframe(_styled(rep), width="stretch", hide_index=True)
    st.subheader("Where Table A's time goes")
    st.caption("The baseline's slowest engine: share of its decode time per batch "
               "bucket (SD is off above 32), the baseline's rollout share of the step "
               "(the paper: ~85%), and TLT's rollout speedup and accepted length.")
    st.dataframe(_explanations(rep), width="stretch")
    st.download_button("Download paper.json", report.json_text(rep), file_name="paper.json",
                       mime="application/json", key="paper_dl", on_click="ignore")
