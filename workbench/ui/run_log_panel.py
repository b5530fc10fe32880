"""What-if's "Run log" source: a run's log (veRL's, or slime/miles, NeMo-RL, SkyRL, OpenRLHF, AReaL
or ROLL's: the same reader, workbench/runlog/frameworks/), calibrated as `tlt calibrate --run-log`
does it, then the policies compared on that run.

The upload is read, its shape taken from its launch command and printed config (the fields they
lack, and the GPU, from the inputs here), each step's rollout and phases worked out at the measured
database's costs and the run-level factors fitted under their priors on its first steps
(workbench/runlog/). The panel
shows the shape and where each field came from, the engine's settings, each factor with its
standard error, prior, declared range and whether the log identifies it, the held-out errors and
how often the 90% intervals held (each phase veRL times, held out), measured against predicted per
step, and what is measured and
what modelled; the page then simulates its policies on 12 steps spread over the calibrated run
(their modelled lengths replayed) with the calibrated profile, each speedup with its interval.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from workbench.calibrate.database.aiconfigurator import gpu_names
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError, FieldError, save
from workbench.contracts.workload import Workload, load_workload
from workbench.runlog import calibrate as cal
from workbench.runlog.prepared import prepare
from workbench.runlog import factor_report, report
from workbench.runlog.run_workload import run_workloads
from workbench.runlog.shape import ShapeFlags
from workbench.ui import job_dirs
from workbench.workloads.build import write_workload

ID_PREFIX = "runlog:"
# the calibration of the input (its digest), in its directory (workbench/ui/job_dirs.py)
_STATE = "whatif_runlog_job"
STEPS_KEY = "whatif_steps_n"  # the What-if page's Steps input
# a TensorBoard event file has no suffix of its own: named *.tfevents it reads as one
SUFFIXES = ["log", "txt", "out", "gz", "csv", "jsonl", "json", "parquet", "tfevents"]


@dataclass(frozen=True)
class _Calibrated:
    result: cal.RunCalibration
    workload_path: str


def _shape_inputs() -> tuple[ShapeFlags, int, int]:
    gpus = gpu_names()
    cols = st.columns(3)
    gpu = cols[0].selectbox(
        "GPU of the run",
        gpus,
        index=gpus.index("h100") if "h100" in gpus else 0,
        key="whatif_runlog_gpu",
        help="A run log never names it: the measured database's costs and the decode-speed "
        "prior are this GPU's.",
    )
    fit = int(
        cols[1].number_input(
            "Fit on the first steps", min_value=1, value=100, step=10, key="whatif_runlog_fit"
        )
    )
    limit = int(
        cols[2].number_input(
            "Steps to use",
            min_value=2,
            value=1200,
            step=100,
            key="whatif_runlog_limit",
            help="The log's first steps used (each step's rollout worked out in closed form, a "
            "few ms each); the policies then run on 12 of them spread over the run, as "
            "`tlt compare` does on the calibrated workload.",
        )
    )
    with st.expander("Shape fields the log lacks (0: from the log)", expanded=False):
        c = st.columns(4)
        vals = [
            int(
                c[i % 4].number_input(
                    label, min_value=0, value=0, step=1, key=f"whatif_runlog_{key}"
                )
            )
            for i, (key, label) in enumerate(
                (
                    ("gpus", "GPUs"),
                    ("tp", "TP"),
                    ("prompts", "Prompts per step"),
                    ("group", "Group size (n)"),
                    ("cap", "Max response tokens"),
                    ("batch", "Max batch per engine"),
                )
            )
        ]
        arch = st.text_input(
            "Model (architecture preset or config.json path; empty: from the log)",
            key="whatif_runlog_arch",
        )
    opt = [v or None for v in vals]
    return ShapeFlags(arch or None, gpu, *opt), fit, limit


def _calibrate(name: str, data: bytes, flags: ShapeFlags, fit: int, limit: int,
               into: Path) -> _Calibrated:
    log = into / Path(name).name
    log.write_bytes(data)
    bar = st.progress(0.0, text="Working out each step…")
    progress = lambda done, total: bar.progress(
        done / total, text=f"Worked out {done}/{total} steps"
    )  # noqa: E731
    try:
        prepared = prepare(log, flags, 0, progress, fit, limit)
        bar.progress(1.0, text="Fitting the factors, sampling their posterior…")
        result = cal.calibrate(prepared, fit, f"{log.stem}-calibrated")
        wl, obs = run_workloads(result, "run", "calibrated.yaml")[0]  # a sample of the run
    finally:
        bar.empty()
    save(result.profile, into / "calibrated.yaml")
    write_workload(wl, obs, into / "run.yaml")
    return _Calibrated(result, str(into / "run.yaml"))


def _per_step_figure(res: cal.RunCalibration) -> go.Figure:
    p, pred, fit = res.prepared, res.predicted, res.fit_steps
    fig = go.Figure()
    for key, label in (("gen", "rollout"), ("step", "whole step")):
        fig.add_scatter(
            x=p.steps,
            y=getattr(p.measured, f"{key}_s"),
            mode="markers",
            marker={"size": 3},
            name=f"{label}: measured",
        )
        fig.add_scatter(
            x=p.steps,
            y=getattr(pred, f"{key}_s"),
            mode="lines",
            line={"width": 1},
            name=f"{label}: predicted (simulated)",
        )
    fig.add_vrect(
        x0=p.steps[0],
        x1=p.steps[fit - 1],
        fillcolor="orange",
        opacity=0.12,
        line_width=0,
        annotation_text="fitted on",
    )
    fig.update_layout(
        title="Measured against predicted, per step",
        xaxis_title="RL step",
        yaxis_title="seconds",
        height=360,
        margin={"t": 40, "b": 40},
    )
    return fig


def _errors_frame(res: cal.RunCalibration) -> pd.DataFrame:
    rows = []
    for split, errors in (("fit", res.fitted), ("held out", res.heldout)):
        named = [(label, getattr(errors, key)) for key, label in report.PHASES]
        named += [(f"timing_s/{n}", e) for n, e in errors.phases if n != "gen"]
        for label, e in named:
            rows.append(
                {
                    "steps": split,
                    "phase": label,
                    "median |error| %": round(e.median, 1),
                    "p90 |error| %": round(e.p90, 1),
                    "n": e.steps,
                }
            )
    b = res.baselines
    rows.append(
        {
            "steps": "held out",
            "phase": "baseline: first steps' median rollout",
            "median |error| %": round(b.first_median.median, 1),
            "p90 |error| %": round(b.first_median.p90, 1),
            "n": b.first_median.steps,
        }
    )
    return pd.DataFrame(rows)


def _show(c: _Calibrated) -> None:
    res = c.result
    st.caption(f"Recognised: {res.prepared.log.framework.describe()}")
    with st.expander("The run: shape and where each field came from", expanded=False):
        st.code("\n".join(report.shape_lines(res.prepared)), language=None, wrap_lines=True)
    p = res.prepared
    st.markdown("**Fitted factors** (a MAP under priors from the engine's config, on the first "
                "steps only; each with its standard error, prior and declared range)")
    st.code("\n".join(factor_report.engine_lines(p.engine)
                      + factor_report.factor_lines(res.posterior, p.priors,
                                                   res.profile.run_factors)
                      + factor_report.split_lines(res.profile.run_factors, res.splits)),
            language=None, wrap_lines=True)
    st.dataframe(_errors_frame(res), hide_index=True, width="stretch")
    for line in factor_report.coverage_line("Held out", res.coverage):
        st.caption(line)
    st.plotly_chart(_per_step_figure(res), key="whatif_runlog_steps", width="stretch")
    wl = load_workload(c.workload_path)
    for line in report.measured_vs_modelled(res.profile, wl, wl.steps, 1):
        st.caption(line)


def run_log_workload() -> tuple[Workload | None, str]:
    """The panel: upload, inputs, calibration, its report; the calibrated run and an id for the
    page."""
    upload = st.file_uploader(
        "Run log: veRL, slime/miles, NeMo-RL, SkyRL, OpenRLHF, AReaL or ROLL console output "
        "(.gz too), or its W&B/TensorBoard export",
        type=SUFFIXES,
        key="whatif_runlog_file",
    )
    flags, fit, limit = _shape_inputs()
    if upload is None:
        job_dirs.release(_STATE)
        st.info("Upload a run log: `tlt calibrate --run-log` reads the same files (the framework "
                "that wrote it is recognised).")
        return None, ""
    data = upload.getvalue()
    digest = hashlib.sha1(data + repr((upload.name, flags, fit, limit)).encode()).hexdigest()[:12]
    done: _Calibrated | None = job_dirs.result(_STATE, digest)
    if done is None:
        job_dirs.release(_STATE)  # the calibration of another input: its job is over
        if not st.button("Calibrate on this log", type="primary", key="whatif_runlog_go"):
            st.info("Press **Calibrate on this log**: each step worked out at the database's "
                    "costs, then the factors are fitted.")
            return None, ""
        try:
            done = job_dirs.run(_STATE, digest, "tlt-runlog-",
                                lambda into: _calibrate(upload.name, data, flags, fit, limit, into))
        except (ConfigError, FieldError, ValueError) as exc:
            st.error(f"Run log rejected: {exc}")
            return None, ""
        # the page's Steps: the whole sample, as `tlt compare` simulates it on this workload
        st.session_state[STEPS_KEY] = min(100, load_workload(done.workload_path).steps)
    _show(done)
    return load_workload(done.workload_path), ID_PREFIX + digest


def calibrated_profile(base_id: str) -> Profile | None:
    """The calibrated profile of a run-log input (None: the input is not a calibrated run log)."""
    if not base_id.startswith(ID_PREFIX):
        return None
    c: _Calibrated | None = job_dirs.result(_STATE, base_id[len(ID_PREFIX):])
    return c.result.profile if c is not None else None
