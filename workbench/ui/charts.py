"""Plotly figures for the Streamlit pages: worker Gantt charts, running batch, per-step lines.

The simulator's timeline has one row per constant-batch segment (tens of
thousands for a large cluster); `merge_intervals` joins back-to-back rows of
the same worker and state first, so a chart draws hundreds of bars, not
thousands, and stays responsive.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.contracts.trace import STATES
from workbench.report.plots import NO_SD_LABEL, BatchLine, strategies

# One colour per state; idle (the bubbles) in red so the waste stands out.
STATE_COLORS = {
    "decode": "#4C78A8",  # blue
    "decode_sd": "#54A24B",  # green
    "idle": "#E45756",  # red: the bubble
    "drafter_train": "#F58518",  # orange
    "train": "#9D9D9D",  # grey
    "sync": "#3B3B3B",  # near-black
    "tool_wait": "#B279A2",  # purple: every trajectory of the engine out on a tool call
}
STATE_LABELS = {
    "decode": "decode",
    "decode_sd": "decode (SD)",
    "idle": "idle (bubble)",
    "drafter_train": "drafter spot training",
    "train": "policy training",
    "sync": "weight sync",
    "tool_wait": "waiting on tools",
}
POLICY_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2", "#EECA3B",
                 "#9D755D")

_TOL = 1e-9  # seconds: rows closer than this are back to back


def merge_intervals(timeline: pd.DataFrame) -> pd.DataFrame:
    """Join back-to-back rows of the same RL step, worker and state into one interval.

    Returns one row per merged interval with columns rl_step, worker, state,
    start_s, end_s, tokens, passes (sums), batch_min, batch_max,
    draft_min, draft_max and segments (rows merged).
    """
    cols = ["rl_step", "worker", "state", "start_s", "end_s", "tokens", "passes",
            "batch_min", "batch_max", "draft_min", "draft_max", "segments"]
    if timeline.empty:
        return pd.DataFrame(columns=cols)
    df = timeline.sort_values(["rl_step", "worker", "start_s"],
                              kind="stable").reset_index(drop=True)
    state = df["state"].astype(str).to_numpy()
    worker = df["worker"].to_numpy()
    rl_step = df["rl_step"].to_numpy()
    start = df["start_s"].to_numpy(dtype=float)
    end = df["end_s"].to_numpy(dtype=float)
    new_run = np.ones(len(df), dtype=bool)
    new_run[1:] = ((state[1:] != state[:-1]) | (worker[1:] != worker[:-1])
                   | (rl_step[1:] != rl_step[:-1]) | (start[1:] > end[:-1] + _TOL))
    run = np.cumsum(new_run)
    out = df.assign(state=state, _run=run).groupby("_run", sort=True).agg(
        rl_step=("rl_step", "first"),
        worker=("worker", "first"),
        state=("state", "first"),
        start_s=("start_s", "min"),
        end_s=("end_s", "max"),
        tokens=("tokens", "sum"),
        passes=("passes", "sum"),
        batch_min=("batch", "min"),
        batch_max=("batch", "max"),
        draft_min=("draft_len", "min"),
        draft_max=("draft_len", "max"),
        segments=("state", "size"),
    )
    return out.reset_index(drop=True)[cols]


def _span(lo: np.ndarray, hi: np.ndarray) -> list[str]:
    return [str(int(a)) if a == b else f"{int(a)}–{int(b)}" for a, b in zip(lo, hi)]


def gantt_figure(timeline: pd.DataFrame, title: str = "", max_workers: int | None = None,
                 relative: bool = True, x_max: float | None = None,
                 height: int | None = None) -> go.Figure:
    """Worker-by-time Gantt chart of a timeline (usually one RL step's rows).

    timeline: the simulator's columns (rl_step, worker, start_s, end_s, state,
    batch, draft_len, tokens, passes). max_workers keeps workers 0..n-1 only.
    relative: the x axis counts seconds from the first interval's start.
    x_max: fix the x axis' right end (to line up several charts).
    """
    df = timeline
    if max_workers is not None:
        df = df[df["worker"] < max_workers]
    iv = merge_intervals(df)
    t0 = float(iv["start_s"].min()) if relative and not iv.empty else 0.0
    workers = sorted(int(w) for w in iv["worker"].unique()) if not iv.empty else []
    labels = {w: f"worker {w}" for w in workers}
    fig = go.Figure()
    present = set(iv["state"]) if not iv.empty else set()
    for state in STATES:
        if state not in present:
            continue
        s = iv[iv["state"] == state]
        start = s["start_s"].to_numpy(dtype=float) - t0
        dur = s["end_s"].to_numpy(dtype=float) - s["start_s"].to_numpy(dtype=float)
        is_decode = state in ("decode", "decode_sd")
        custom = np.empty((len(s), 7), dtype=object)
        custom[:, 0] = start
        custom[:, 1] = start + dur
        custom[:, 2] = dur
        custom[:, 3] = _span(s["batch_min"].to_numpy(), s["batch_max"].to_numpy())
        custom[:, 4] = _span(s["draft_min"].to_numpy(), s["draft_max"].to_numpy())
        custom[:, 5] = s["tokens"].round().astype(int).to_numpy()
        custom[:, 6] = s["segments"].to_numpy()
        hover = ("<b>%{y}</b> · " + STATE_LABELS[state]
                 + "<br>%{customdata[0]:.2f}–%{customdata[1]:.2f} s (%{customdata[2]:.2f} s)")
        if is_decode:
            hover += ("<br>batch %{customdata[3]} · draft length %{customdata[4]}"
                      "<br>%{customdata[5]:,} tokens in %{customdata[6]} segments")
        fig.add_trace(go.Bar(
            name=STATE_LABELS[state],
            orientation="h",
            y=[labels[int(w)] for w in s["worker"]],
            x=dur,
            base=start,
            marker=dict(color=STATE_COLORS[state], line=dict(width=0)),
            customdata=custom,
            hovertemplate=hover + "<extra></extra>",
        ))
    n = len(workers)
    fig.update_layout(
        title=dict(text=title, y=0.99, yanchor="top") if title else None,
        barmode="overlay",
        bargap=0.15,
        height=height or int(min(900, max(240, 110 + 22 * n))),
        margin=dict(l=10, r=10, t=75 if title else 45, b=10),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0,
                    traceorder="normal"),
        xaxis=dict(title="seconds" + (" from step start" if relative else ""), rangemode="tozero"),
        yaxis=dict(title="worker", type="category", categoryorder="array",
                   categoryarray=[labels[w] for w in workers], autorange="reversed"),
    )
    if x_max is not None:
        fig.update_xaxes(range=[0, x_max])
    return fig


def step_lines_figure(per_step: pd.DataFrame, policies: Sequence[str] | None = None) -> go.Figure:
    """Step time and mean accepted length per RL step, one line per policy.

    per_step: columns policy, rl_step, step_time_s, mean_accept_len.
    """
    policies = list(policies) if policies is not None else list(dict.fromkeys(per_step["policy"]))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Step time (s)",
                                                        "Mean accepted length "
                                                        "(tokens / verify pass)"))
    for i, name in enumerate(policies):
        d = per_step[per_step["policy"] == name].sort_values("rl_step")
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        for col, metric in ((1, "step_time_s"), (2, "mean_accept_len")):
            fig.add_trace(go.Scatter(
                x=d["rl_step"], y=d[metric], mode="lines+markers", name=name, legendgroup=name,
                showlegend=col == 1, line=dict(color=color),
                hovertemplate=f"{name}<br>step %{{x}}: %{{y:.3g}}<extra></extra>",
            ), row=1, col=col)
    fig.update_xaxes(title_text="RL step", dtick=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=40, b=10),
                      legend=dict(title_text="policy"))
    return fig


def metric_lines_figure(df: pd.DataFrame, panels: Sequence[tuple[str, Sequence[str]]],
                        x: str = "rl_step", height: int = 320,
                        labels: Mapping[str, str] | None = None) -> go.Figure:
    """One subplot per panel, one line per column of the panel, over `x` (e.g. a run's metrics.csv).

    panels: (title, columns) pairs; a column absent
    from df is skipped, so an older file still draws. `labels`: each column in words (the legend's,
    the hover's and the x axis's), else its name.
    """
    word = (lambda c: (labels or {}).get(c, c))  # noqa: E731
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[title for title, _ in panels])
    d = df.sort_values(x)
    drawn = 0  # colours run on across panels: one colour per metric in the shared legend
    for col, (_, metrics) in enumerate(panels, start=1):
        for metric in (m for m in metrics if m in d.columns):
            color = POLICY_COLORS[drawn % len(POLICY_COLORS)]
            drawn += 1
            fig.add_trace(go.Scatter(
                x=d[x], y=d[metric], mode="lines+markers", name=word(metric),
                line=dict(color=color),
                hovertemplate=f"{word(metric)}<br>{word(x)} %{{x}}: %{{y:.3g}}<extra></extra>",
            ), row=1, col=col)
    fig.update_xaxes(title_text=word(x), dtick=1 if len(d) <= 20 else None)
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def strategy_label(name: str) -> str:
    """A speculation strategy in words: 'no SD', 'chain of 4' or 'tree 8_4_16: 8 steps, top-4, 16
    verified'."""
    if name == NO_SD_LABEL:
        return name
    parts = name.split("_")
    if len(parts) == 3:
        steps, topk, tokens = parts
        return f"tree {name}: {steps} steps, top-{topk}, {tokens} verified"
    return f"chain of {name}"


def batch_lines_figure(lines: Sequence[BatchLine], title: str = "",
                       x_max: float | None = None) -> go.Figure:
    """Running batch per worker over one step (log scale), one colour per speculation strategy; the
    title above the plot, the legend (each strategy in words) below it, ticks at powers of two."""
    fig = go.Figure()
    names = strategies(list(lines))
    colors = {s: ("#4C78A8" if s == NO_SD_LABEL else POLICY_COLORS[(i + 1) % len(POLICY_COLORS)])
              for i, s in enumerate(names)}
    shown: set[str] = set()
    for ln in lines:
        label = strategy_label(ln.strategy)
        fig.add_trace(go.Scatter(
            x=ln.x, y=ln.y, mode="lines", name=label, legendgroup=ln.strategy,
            showlegend=ln.strategy not in shown, line=dict(color=colors[ln.strategy], width=1.5),
            hovertemplate=f"worker {ln.worker} · {label}<br>batch %{{y:.0f}} at %{{x:.2f}} "
                          "s<extra></extra>"))
        shown.add(ln.strategy)
    top = max((float(np.nanmax(ln.y)) for ln in lines if len(ln.y) and np.isfinite(ln.y).any()),
              default=1.0)
    ticks = [2**i for i in range(int(np.log2(max(top, 1))) + 2)]
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top") if title else None, height=400,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      legend=dict(title="speculation", orientation="h", yanchor="top", y=-0.18,
                                  x=0),
                      xaxis=dict(title="seconds from step start", rangemode="tozero"),
                      yaxis=dict(title="running batch", type="log", tickvals=ticks,
                                 ticktext=[str(v) for v in ticks], minor=dict(showgrid=False)))
    if x_max is not None:
        fig.update_xaxes(range=[0, x_max])
    return fig
