"""A `tlt train` run directory as the fits and the predictions read it: metrics.csv (one row per
finished RL step) beside trace/ (with its per-worker timeline), and the policy its meta records."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from real.run.records import OLD_METRIC_NAMES
from workbench.contracts.file_kind import text_problem
from workbench.contracts.policy import Policy
from workbench.contracts.schema import ConfigError, from_mapping
from workbench.contracts.trace import Trace, TraceError, load_trace

METRICS_FILE = "metrics.csv"
TRACE_DIR = "trace"
METRIC_COLUMNS = ("rl_step", "step_s", "rollout_s", "train_s", "sync_s", "drafter_steps")


@dataclass(frozen=True)
class Run:
    """One `tlt train` run directory as the fits read it."""

    label: str  # the run directory's name
    path: Path
    trace: Trace
    metrics: pd.DataFrame  # metrics.csv, one row per finished RL step


def is_run_dir(path: str | Path) -> bool:
    """A `tlt train --out` directory: metrics.csv beside a trace/ directory."""
    p = Path(path)
    return (p / METRICS_FILE).is_file() and (p / TRACE_DIR).is_dir()


def run_label(trace: Trace) -> str:
    """A run's trace lives in RUN/trace: the run is named by RUN, not by 'trace'."""
    if trace.path is not None and trace.path.name == TRACE_DIR:
        return trace.path.parent.name
    return trace.name


def read_metrics(path: Path) -> pd.DataFrame:
    """metrics.csv, checked for the columns the fits and the prediction use."""
    fix = "give the metrics.csv `tlt train` wrote (docs/formats.md, Real runs)"
    raw = path.read_bytes()
    problem = text_problem(raw)
    if problem is None:
        try:
            # A file from before the columns' rename reads alike.
            m = pd.read_csv(io.StringIO(raw.decode("utf-8"))).rename(columns=OLD_METRIC_NAMES)
        except ValueError as exc:  # pandas' parser errors are ValueErrors
            problem = f"is not a CSV table ({type(exc).__name__}: {str(exc)[:80]})"
    if problem is not None:
        raise TraceError(path, "<file>", problem, fix)
    missing = [c for c in METRIC_COLUMNS if c not in m.columns]
    if missing:
        raise TraceError(path, f"column '{missing[0]}'", "missing", fix)
    return m.sort_values("rl_step").reset_index(drop=True)


def trace_metrics(trace: Trace) -> pd.DataFrame | None:
    """The metrics.csv beside a run's trace directory, if the trace is one."""
    if trace.path is None or trace.path.name != TRACE_DIR:
        return None
    if not (trace.path.parent / METRICS_FILE).is_file():
        return None
    return read_metrics(trace.path.parent / METRICS_FILE)


def load_run(path: str | Path) -> Run:
    p = Path(path)
    if not is_run_dir(p):
        raise TraceError(p, "<directory>", "is not a run directory (it needs metrics.csv and "
                         "trace/)",
                         "give a directory `tlt train --out` wrote")
    trace = load_trace(p / TRACE_DIR)
    if trace.timeline is None:
        raise TraceError(p / TRACE_DIR, "timeline.parquet", "missing",
                         "a run's trace has a per-worker timeline; rerun `tlt train`")
    return Run(p.name, p, trace, read_metrics(p / METRICS_FILE))


def run_policy(trace: Trace) -> Policy:
    """The policy the run's meta records."""
    mapping = dict(trace.meta.get("policy") or {})
    mapping.setdefault("name", run_label(trace))
    try:
        return from_mapping(Policy, mapping, f"{trace.path or trace.name}/meta.json", "policy")
    except ConfigError as exc:
        raise TraceError(trace.path or trace.name, "meta.json", f"policy: {exc}",
                         "the run's policy must be a valid Policy") from None
