"""What-if's "Length file" source: upload real response
lengths, see them beside the model, simulate them.

The upload goes through `tlt workload import` (workbench.workloads.build.import_workload) into a
temporary directory held while the upload is the session's (workbench/ui/job_dirs.py), so the page
simulates exactly the Workload the command would write. The lengths carry no cluster: the
import's base is a neutral one (`UNPLACED`), and the page asks for the cluster they ran on
(workbench/ui/cluster_picker.py) before it simulates.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from sim.lengths import sample_step
from workbench.contracts.length_data import ObservedLengths, read_observed
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.workload import Workload, load_workload
from workbench.runlog.length_summary import run_log_summaries
from workbench.ui import job_dirs
from workbench.workloads.build import MODES, UNPLACED, import_workload

_STATE_JOB = "whatif_length_job"  # the upload's import, in its directory (workbench/ui/job_dirs.py)


@dataclass(frozen=True)
class Uploaded:
    workload: Workload
    observed: ObservedLengths | None
    lines: list[str]


def import_upload(files: list[tuple[str, bytes]], base: str | Workload, mode: str, cap: int | None,
                  into: Path) -> Uploaded:
    """Write the uploaded files into `into` and import them as `tlt workload import` would (`base`:
    a workload preset, file or Workload whose cluster the lengths get; `UNPLACED`: none yet)."""
    into.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in files:
        path = into / Path(name).name
        path.write_bytes(data)
        paths.append(path)
    out = into / "uploaded.yaml"
    names = ", ".join(n for n, _ in files)
    try:
        wl = base if isinstance(base, Workload) else load_workload(base)
        paths, summaries = run_log_summaries(paths, into / "run-logs")  # any framework's run log
        if summaries and summaries[0].shape is not None and wl == UNPLACED:
            p, n, top = summaries[0].shape  # the batch shape from the log's config
            wl = replace(wl, prompts_per_step=p, group_size=n, max_response_tokens=top)
        res = import_workload(paths, out, wl, mode, cap, "uploaded-lengths",
                              source=f"uploaded: {names}",
                              description=f"Your measured lengths ({names}); cluster: as picked "
                                          "on the What-if page.")
    except (ConfigError, FieldError) as exc:
        raise as_uploaded(exc, into) from None
    wl = load_workload(out)
    lines = [line.replace(f"{into}{os.sep}", "") for line in res.lines]
    return Uploaded(wl, read_observed(wl.lengths.data) if res.data is not None else None, lines)


def as_uploaded(exc: ConfigError | FieldError, into: Path) -> ConfigError | FieldError:
    """The error as the user knows the file: by the name they uploaded it under, not the app's
    temporary copy in `into`."""
    def named(v):
        return v.replace(f"{into}{os.sep}", "") if isinstance(v, str) else v

    if isinstance(exc, ConfigError):
        return ConfigError(named(exc.source), exc.field, named(exc.value), named(exc.allowed))
    return FieldError(exc.field, named(exc.value), named(exc.allowed))


def model_draw(obs: ObservedLengths, wl: Workload, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The workload's length model (its lognormal fit) drawn with the observed batches' shape: all
    lengths and each batch's index."""
    rng = np.random.default_rng(seed)
    out, batch = [], []
    for b, ids in enumerate(obs.batch_groups):
        x = sample_step(wl.lengths, wl.max_response_tokens, len(ids), wl.group_size, b, rng).lengths
        out.append(x)
        batch.append(np.full(len(x), b))
    return np.concatenate(out), np.concatenate(batch)


def histogram_figure(obs: ObservedLengths, drawn: np.ndarray, cap: int) -> go.Figure:
    """Observed vs model lengths on log-spaced bins (the tail is what matters)."""
    top = max(int(obs.length.max()), int(drawn.max()), 2)
    bins = np.unique(np.geomspace(1, min(cap, top) + 1, 60).astype(int))
    fig = go.Figure()
    for name, x in (("observed", np.minimum(obs.length, cap)), ("model (lognormal fit)", drawn)):
        counts, edges = np.histogram(x, bins=bins)
        fig.add_bar(x=edges[:-1], y=counts / max(1, len(x)), width=np.diff(edges), name=name,
                    opacity=0.6)
    fig.update_layout(barmode="overlay", xaxis_type="log", xaxis_title="response tokens",
                      yaxis_title="share", title="Response lengths", height=320,
                      margin={"t": 40, "b": 40})
    return fig


def tail_figure(obs: ObservedLengths, drawn: np.ndarray, drawn_batch: np.ndarray) -> go.Figure:
    """Per step: the longest response over the median, observed vs model."""
    steps = np.arange(obs.batches)
    ratio = lambda x: float(x.max() / max(1.0, np.median(x)))
    fig = go.Figure()
    fig.add_scatter(x=steps, y=[ratio(obs.length[obs.batch == b]) for b in steps],
                    mode="lines+markers", name="observed")
    fig.add_scatter(x=steps, y=[ratio(drawn[drawn_batch == b]) for b in steps],
                    mode="lines+markers", name="model (lognormal fit)")
    fig.update_layout(xaxis_title="observed step", yaxis_title="longest / median",
                      title="Per-step tail", height=320, margin={"t": 40, "b": 40})
    return fig


def _tail_ratio(x: np.ndarray) -> float:
    return float(x.max() / max(1.0, float(np.median(x))))


def length_file_workload() -> tuple[Workload | None, str]:
    """The panel, across the page's width: upload, options, the import's report and charts; the
    imported Workload (no cluster yet: the page asks for it) and an id for the page."""
    uploads = st.file_uploader("Length files (PolyTrace packed_lengths JSONL with "
                               "dapo_filter_indices.jsonl, a CSV/JSONL/Parquet table of "
                               "step, prompt, length, veRL's response_length/* per step, or "
                               "any framework's run log: veRL, slime/miles, NeMo-RL, SkyRL, "
                               "OpenRLHF, AReaL, ROLL)",
                               type=["jsonl", "csv", "parquet", "log", "txt", "out", "gz", "json",
                                     "tfevents"], accept_multiple_files=True,
                               key="whatif_len_files")
    cols = st.columns([2, 1, 3])
    mode = cols[0].radio("Length model", MODES, horizontal=True, key="whatif_len_mode",
                         help="replay: the observed steps as they were; fit: the lognormal mixture "
                              "fitted to them; empirical: whole observed groups drawn at random.")
    cap = cols[1].number_input("Cap (0: infer)", min_value=0, value=0, step=1024,
                               key="whatif_len_cap")
    if not uploads:
        job_dirs.release(_STATE_JOB)
        st.info("Upload response lengths: `tlt workload import` reads the same files. Then say "
                "which cluster they "
                "ran on (model x GPU x TP x framework).")
        return None, ""
    files = [(u.name, u.getvalue()) for u in uploads]
    digest = hashlib.sha1(b"".join(hashlib.sha1(n.encode() + d).digest() for n, d in files)
                          + f"{mode}:{cap}".encode()).hexdigest()[:12]
    try:
        up = job_dirs.run(_STATE_JOB, digest, "tlt-lengths-",
                          lambda into: import_upload(files, UNPLACED, mode, int(cap) or None,
                                                     into))
    except (ConfigError, FieldError) as exc:
        st.error(f"Length file rejected: {exc}")
        return None, ""
    with st.expander("What the files hold (the import's report)", expanded=True):
        st.code("\n".join(up.lines), language=None, wrap_lines=True)
    if up.observed is not None:
        drawn, batch = model_draw(up.observed, up.workload)
        left, right = st.columns(2)
        left.plotly_chart(histogram_figure(up.observed, drawn, up.workload.max_response_tokens),
                          width="stretch", key="whatif_len_hist")
        right.plotly_chart(tail_figure(up.observed, drawn, batch), width="stretch",
                           key="whatif_len_tail")
    return up.workload, f"lengths:{digest}"
