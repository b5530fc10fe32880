"""The long tail, drawn: each worker's running batch over one RL step.

A Gantt chart shows a worker at batch 1 as busy as one at batch 256; the running batch shows
where the tail is (a few sequences decoding alone while the others wait) and where speculative
decoding is on, with which strategy. `batch_lines` turns a timeline into plottable lines (the
app draws them with plotly, workbench/ui/charts.py); `batch_figure` draws them with matplotlib
for `tlt sim`'s `batch.png`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

NO_SD_LABEL = "no SD"


@dataclass(frozen=True)
class BatchLine:
    """One worker's decode segments under one strategy: x and y with NaN breaks between segments."""

    worker: int
    strategy: str  # "no SD", a chain's length ("4") or a tree ("8_4_48")
    x: np.ndarray  # seconds from the step's start
    y: np.ndarray  # running batch


def batch_lines(timeline: pd.DataFrame, rl_step: int,
                max_workers: int | None = None) -> list[BatchLine]:
    decoding = timeline["state"].astype(str).isin(["decode", "decode_sd"])
    rows = timeline[(timeline["rl_step"] == rl_step) & decoding]
    if max_workers is not None:
        rows = rows[rows["worker"] < max_workers]
    if rows.empty:
        return []
    t0 = float(timeline.loc[timeline["rl_step"] == rl_step, "start_s"].min())
    if "strategy" in rows:
        label = rows["strategy"].astype(str).replace("", NO_SD_LABEL)
    else:
        label = NO_SD_LABEL
    rows = rows.assign(label=label)
    out = []
    by_line = rows.sort_values("start_s").groupby(["worker", "label"], sort=True)
    for (worker, strategy), g in by_line:
        n = len(g)
        x = np.full(3 * n, np.nan)
        y = np.full(3 * n, np.nan)
        x[0::3], x[1::3] = g["start_s"].to_numpy(float) - t0, g["end_s"].to_numpy(float) - t0
        y[0::3] = y[1::3] = g["batch"].to_numpy(float)
        out.append(BatchLine(int(worker), str(strategy), x, y))
    return out


def strategies(lines: list[BatchLine]) -> list[str]:
    """The strategies present, no SD first, then by name."""
    names = {ln.strategy for ln in lines}
    return ([NO_SD_LABEL] if NO_SD_LABEL in names else []) + sorted(names - {NO_SD_LABEL})


def batch_figure(timeline: pd.DataFrame, step: int, title: str = "",
                 max_workers: int | None = 64) -> Figure:
    """Running batch per worker over one step (log scale), coloured by speculation strategy."""
    lines = batch_lines(timeline, step, max_workers)
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax = fig.subplots()
    colors = {s: ("#4C78A8" if s == NO_SD_LABEL else f"C{i + 1}")
              for i, s in enumerate(strategies(lines))}
    seen: set[str] = set()
    for ln in lines:
        ax.plot(ln.x, ln.y, color=colors[ln.strategy], lw=1.2, alpha=0.8,
                label=ln.strategy if ln.strategy not in seen else None)
        seen.add(ln.strategy)
    ax.set_yscale("log")
    ax.set_xlabel("seconds from the step's start")
    ax.set_ylabel("running batch (sequences)")
    ax.grid(alpha=0.3, which="both")
    if lines:
        ax.legend(title="speculation", fontsize=8, loc="upper right")
    ax.set_title(title or f"Running batch per worker, RL step {step}", fontsize=10)
    return fig
