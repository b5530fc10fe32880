"""What the Train page shows of a run directory, running or finished (`tlt train --out DIR`).

metrics.csv (a row per finished RL step, rewritten atomically after each), the run's progress
against its planned steps, the waste of each step read from the trace's worker timeline (the
bubble and the tail, `workbench.validate.waste`: the same definitions as the simulator's), the last
step's Gantt chart, and the tail of train.log, with the error a failed run ended on.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from real.run.records import METRIC_COLUMNS, OLD_METRIC_NAMES
from workbench.contracts.trace import TraceError, load_trace
from workbench.ui.charts import gantt_figure, metric_lines_figure
from workbench.ui.export import figure_downloads
from workbench.ui.run_steps_view import METRIC_LABELS, metrics_table, show_engine_story
from workbench.ui.whatif_results import MAX_GANTT_WORKERS
from workbench.validate.waste import timeline_waste, waste_frame

LOG_NAME = "train.log"
LOG_LINES = 40
_LOG_TAIL_BYTES = 64 * 1024  # enough for LOG_LINES lines; a long run's log is never read whole
_MESSAGE_CHARS = 600
_MESSAGE_LINES = 3
_ERROR_WINDOW = 30  # lines: an error this close to the end of the log is what a run stopped on
# The last line of a Python traceback names the exception ("ValueError: ...",
# "ray.exceptions.RayTaskError(ValueError): ..."); `tlt` itself says "error: ..." and exits 2.
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b"
                             r"(\([\w.]*\))?(:.*)?$")

# (title, metrics.csv columns): one line chart each.
_LINE_PANELS = (
    ("Step and rollout time (s)", ("step_s", "rollout_s")),
    ("Mean accepted length (tokens / verify pass)", ("mean_accept_len",)),
    ("Reward", ("reward",)),
)
_TILE_COLUMNS = ("rl_step", "step_s", "rollout_s", "mean_accept_len", "reward")
_WASTE_COLUMNS = {
    "rl_step": st.column_config.NumberColumn("Step"),
    "rollout_s": st.column_config.NumberColumn("Rollout (s)", format="%.2f"),
    "bubble_fraction": st.column_config.NumberColumn(
        "Bubble", format="percent",
        help="Idle worker-time of workers that finished their share, waiting for the slowest / "
             "rollout worker-time (from the trace; one worker waits for none)."),
    "wait_fraction": st.column_config.NumberColumn(
        "Waiting to start", format="percent",
        help="Idle worker-time before each worker's share began (its prompts dispatched, its "
             "engine taking the first request) / rollout worker-time: no bubble, since no worker "
             "has finished then."),
    "tail_fraction": st.column_config.NumberColumn("Tail", format="percent",
                                                   help="Worker-time decoding at a batch <= "
                                                        "the tail batch / rollout worker-time."),
    "tail_token_share": st.column_config.NumberColumn(
        "Tail tokens", format="percent",
        help="Share of the step's tokens decoded in the tail."),
    "drafter_train_fraction": st.column_config.NumberColumn(
        "Spot training", format="percent",
        help="Rollout worker-time training the drafter."),
    "full_batch": st.column_config.NumberColumn("Full batch",
                                                help="The largest running batch in the step."),
    "tail_batch": st.column_config.NumberColumn("Tail batch",
                                                help="Decoding at a batch <= this is the tail."),
}


@dataclass(frozen=True)
class Failure:
    """The error a run's log ends on."""

    message: str  # the line that names it
    detail: str  # the traceback (or the lines from the error on)


# ---------------------------------------------------------------- reading a run directory


def read_metrics(run_dir: Path) -> pd.DataFrame | None:
    """metrics.csv with METRIC_COLUMNS first (an older file's columns under their new names), or
    None before the first step finished."""
    file = run_dir / "metrics.csv"
    if not file.is_file():
        return None
    df = pd.read_csv(file).rename(columns=OLD_METRIC_NAMES)
    cols = [c for c in METRIC_COLUMNS if c in df.columns]
    return df[cols + [c for c in df.columns if c not in cols]]


def log_tail(file: Path, lines: int = LOG_LINES) -> str | None:
    if not file.is_file():
        return None
    with open(file, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
        text = f.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])  # splitlines also breaks vLLM's \r progress bars


def find_failure(text: str, window: int = _ERROR_WINDOW) -> Failure | None:
    """The error among the last `window` lines of a log, latest first; None when there is none."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, max(-1, len(lines) - 1 - window), -1):
        line = lines[i].strip().strip("│").strip()  # typer's rich tracebacks frame their lines
        if line.startswith("error: "):
            return Failure(line.removeprefix("error: "), "\n".join(lines[i:]))
        if _EXCEPTION_LINE.match(line):
            start = next((j for j in range(i, -1, -1)
                          if "Traceback (most recent call last)" in lines[j]), i)
            # A long message wraps onto the lines after it
            # (rich tracebacks wrap at the terminal width).
            message = " ".join(x.strip() for x in lines[i:i + _MESSAGE_LINES] if x.strip())
            return Failure(message[:_MESSAGE_CHARS], "\n".join(lines[start:]))
    return None


def planned_steps(log_file: Path) -> int | None:
    """`--steps N` of the command the log starts with ("$ tlt train ..."), or None."""
    try:
        with open(log_file, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    if not first.startswith("$ "):
        return None
    try:
        argv = shlex.split(first[2:])
    except ValueError:
        return None
    if "--steps" in argv[:-1]:
        value = argv[argv.index("--steps") + 1]
        return int(value) if value.isdigit() else None
    return None


def _stamp(trace_dir: Path) -> int:
    # The trace is rewritten (a fresh directory renamed
    # in) after every step: newest file time = version.
    return max((f.stat().st_mtime_ns for f in trace_dir.iterdir()), default=0)


@st.cache_data(max_entries=8, show_spinner=False)
def trace_parts(trace_dir: str, stamp: int) -> tuple[pd.DataFrame | None, dict]:
    """The trace's worker timeline (None for a trace without one) and its meta. Cached per trace
    version (`stamp`), so reruns while the run goes on do not re-read the parquet files."""
    trace = load_trace(trace_dir)
    timeline = trace.timeline
    return (None if timeline is None or timeline.empty else timeline), trace.meta


# ---------------------------------------------------------------- showing it


def show_progress(df: pd.DataFrame | None, total: int | None, last_line: str | None) -> None:
    done = 0 if df is None else len(df)
    if total:
        text = f"{done}/{total} RL steps done"
        if df is not None and len(df):
            text += f" · last step {df.iloc[-1]['step_s']:.1f} s"
        st.progress(min(1.0, done / total), text=text)
    if last_line:
        st.caption(f"Last log line: `{last_line.strip()[:200]}`")


def _show_tiles(df: pd.DataFrame, waste: pd.DataFrame | None) -> None:
    last = df.iloc[-1]
    cols = st.columns(5)
    cols[0].metric("Steps done", f"{len(df)}",
                   help=f"Last finished RL step: {int(last['rl_step'])}.")
    cols[1].metric("Last step time", f"{last['step_s']:.1f} s")
    accept = last["mean_accept_len"]
    cols[2].metric("Accepted length", "-" if math.isnan(accept) else f"{accept:.2f}")
    cols[3].metric("Reward", f"{last['reward']:.3f}")
    if waste is not None and len(waste):
        w = waste.iloc[-1]
        cols[4].metric("Tail (last step)", f"{w['tail_fraction']:.1%}",
                       help="Rollout worker-time decoding at a batch <= "
                            f"{int(w['tail_batch'])} (of {int(w['full_batch'])}); "
                            f"{w['tail_token_share']:.1%} of the step's tokens.")


def _show_metrics(df: pd.DataFrame, waste: pd.DataFrame | None, meta: dict) -> None:
    # Columns added later (style_share, sd_speedup) are only missing from older runs' files: the
    # tiles and lines need just these.
    missing = [c for c in _TILE_COLUMNS if c not in df.columns]
    if missing:
        st.warning(f"metrics.csv lacks {', '.join(missing)}: "
                   "written by another version of `tlt train`?")
    else:
        _show_tiles(df, waste)
    show_engine_story(df, meta.get("sd_probe"))
    table, columns = metrics_table(df)
    st.dataframe(table, column_config=columns, hide_index=True, width="stretch",
                 key="train_metrics")
    fig = metric_lines_figure(df, _LINE_PANELS,
                              labels={c: METRIC_LABELS.get(c, (c,))[0] for c in df.columns})
    st.plotly_chart(fig, key="train_lines", width="stretch")
    figure_downloads(fig, "train-metrics", "train_fig_lines")


def _show_trace(timeline: pd.DataFrame, waste: pd.DataFrame) -> None:
    st.subheader("Where the rollout's worker-time went")
    st.caption("Per RL step, from the trace's worker timeline: the bubble (workers "
               "idle, waiting for the slowest) and the tail (workers decoding at a "
               "batch <= 1/8 of the step's largest): the same definitions as the "
               "simulator's (docs/formats.md, \"The rollout's worker-time\").")
    st.dataframe(waste.drop(columns=["workers"]), column_config=_WASTE_COLUMNS, hide_index=True,
                 width="stretch", key="train_waste")
    step = int(timeline["rl_step"].max())
    st.subheader(f"Worker timeline: RL step {step}")
    st.caption("Each bar is what a worker did. Red = idle (a bubble): the worker finished its "
               "share and waits for the slowest one; orange = drafter spot training in that time.")
    fig = gantt_figure(timeline[timeline["rl_step"] == step].reset_index(drop=True),
                       max_workers=MAX_GANTT_WORKERS)
    st.plotly_chart(fig, key="train_gantt", width="stretch")
    figure_downloads(fig, f"train-timeline-step{step}", "train_fig_gantt")


def _trace(run_dir: Path) -> tuple[pd.DataFrame | None, dict]:
    """The run's worker timeline and trace meta (None and {} where there is none yet)."""
    trace_dir = run_dir / "trace"
    if not trace_dir.is_dir():
        return None, {}
    try:
        timeline, meta = trace_parts(str(trace_dir), _stamp(trace_dir))
    except (TraceError, OSError) as exc:  # OSError: the trace was replaced while being read
        st.warning(f"The trace cannot be read: {exc}")
        return None, {}
    if timeline is None:
        st.info("The trace has no timeline table (a `tlt capture` trace, or an older `tlt train`).")
    return timeline, meta


def show_run(run_dir: Path, total: int | None = None, running: bool = False) -> None:
    """Everything known of a run directory; `total`: the planned steps (else read from the log)."""
    log = run_dir / LOG_NAME
    try:
        df = read_metrics(run_dir)
    except (OSError, ValueError) as exc:  # pandas raises ValueError subclasses for a malformed CSV
        st.error(f"{run_dir / 'metrics.csv'} cannot be read: {exc}")
        df = None
    tail = log_tail(log)
    show_progress(df, total or planned_steps(log),
                  (tail or "").splitlines()[-1] if running and tail else None)
    if df is None or df.empty:
        st.info(f"No metrics.csv in `{run_dir}` yet: it is "
                "written when the first RL step finishes.")
    timeline, meta = _trace(run_dir)
    waste = waste_frame(timeline_waste(timeline)) if timeline is not None else None
    if df is not None and not df.empty:
        _show_metrics(df, waste, meta)
    if timeline is not None:
        _show_trace(timeline, waste)
    if tail is not None:
        st.markdown(f"**{LOG_NAME}** (last {LOG_LINES} lines)")
        st.code(tail or "(empty)", language=None)
