"""The simulator's prediction of a finished `tlt train` run, beside what the run measured.

`show_prediction(run_dir)` asks for a profile (a preset or a file, e.g. one `tlt calibrate` wrote)
and re-simulates the run with it (`workbench.validate.run_prediction.predict_run_dir`: the run's own
response lengths and policy, nothing of its measured times): per phase and per RL step, predicted
against measured. A profile fitted on this very run predicts in-sample, and the page says so.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import streamlit as st

from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.trace import TraceError
from workbench.validate.run_prediction import PHASES, RunPrediction, predict_run_dir

DEFAULT_PROFILE = "cpu-tiny"
_KEY_PROFILE = "train_predict_profile"
_KEY_RESULT = "train_prediction"
_PHASE_NAMES = {"rollout": "Rollout", "train": "Update", "sync": "Sync (with the spot stop)",
                "other": "Other", "step": "Step"}


def phase_frame(pred: RunPrediction) -> pd.DataFrame:
    """One row per phase: mean seconds per RL step predicted and measured, and the error."""
    return pd.DataFrame([{"phase": _PHASE_NAMES[p], "predicted_s": pred.predicted.get(p),
                          "measured_s": pred.measured.get(p),
                          "error_pct": pred.phase_error_pct(p)} for p in PHASES])


def step_frame(pred: RunPrediction) -> pd.DataFrame:
    """One row per RL step: step seconds predicted and measured, and the accepted length of each."""
    return pd.DataFrame([{"rl_step": s.rl_step, "predicted_s": s.predicted.step_s,
                          "measured_s": s.measured.step_s,
                          "error_pct": (100 * (s.predicted.step_s - s.measured.step_s)
                                        / s.measured.step_s
                                        if s.measured.step_s > 0 else math.nan),
                          "accept_predicted": s.accept_len_predicted,
                          "accept_measured": s.accept_len_measured}
                         for s in pred.steps])


def _resolve_profile(text: str, root: Path) -> str | Path:
    t = text.strip()
    p = Path(t).expanduser()
    if p.suffix in (".yaml", ".yml", ".json"):
        return p if p.is_absolute() else root / p
    return t


def show_prediction(run_dir: Path, root: Path) -> None:
    """The prediction section under a finished run (`root`: where relative profile paths start)."""
    st.subheader("Predicted by the simulator")
    c1, c2 = st.columns([4, 1])
    text = c1.text_input("Profile to predict with", value=DEFAULT_PROFILE, key=_KEY_PROFILE,
                         help="A profile preset or file, e.g. the one `tlt calibrate "
                              "--model` (the Calibrate page) wrote for this machine.")
    clicked = c2.button("Predict this run", key="train_predict")
    key = (str(run_dir), text.strip())
    if clicked:
        try:
            st.session_state[_KEY_RESULT] = (key, predict_run_dir(
                run_dir, load_profile(_resolve_profile(text, root))))
        except (ConfigError, TraceError, ValueError) as exc:
            st.session_state[_KEY_RESULT] = (key, str(exc))
    got = st.session_state.get(_KEY_RESULT)
    if got is None or got[0] != key:
        st.caption("Re-simulates this run with the profile: its own "
                   "response lengths and policy, none of its measured times.")
        return
    result = got[1]
    if isinstance(result, str):
        st.error(result)
        return
    label = "in-sample: the profile was fitted on this run" if result.in_sample else \
        "held out: the profile was not fitted on this run"
    st.markdown(f"Profile **{result.profile}**, policy **{result.policy}**, {len(result.steps)} "
                f"RL step(s) ({label}); mean step predicted **{result.predicted.step_s:.2f} "
                f"s**, measured **{result.measured.step_s:.2f} s** ({result.error_pct:+.1f}%).")
    fmt = {"predicted_s": st.column_config.NumberColumn("Predicted (s)", format="%.3f"),
           "measured_s": st.column_config.NumberColumn("Measured (s)", format="%.3f"),
           "error_pct": st.column_config.NumberColumn("Error", format="%+.1f%%")}
    st.dataframe(phase_frame(result), hide_index=True,
                 column_config={"phase": "Phase (mean per step)", **fmt})
    with st.expander("Per RL step"):
        st.dataframe(step_frame(result), hide_index=True,
                     column_config={"rl_step": "Step", **fmt,
                                    "accept_predicted": st.column_config.NumberColumn(
                                        "Accepted length predicted", format="%.2f"),
                                    "accept_measured": st.column_config.NumberColumn(
                                        "measured", format="%.2f")})
