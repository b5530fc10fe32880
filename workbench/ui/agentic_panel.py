"""What-if's section for agentic workloads (multi-turn rollouts with tool calls).

Below the results, for an agentic workload only: where each policy's time goes around the tool
calls in the runs just simulated (workbench/compare/agentic.py: the trajectories' time in tools,
the engines' time waiting on them, the small-batch decoding and how much of it runs while tools
are out, a turn's latency), and the tool-latency sweep as a chart: the same workload with the
tools 0.1x to 10x as slow, each policy's speedup over the first at each
(workbench/compare/tool_sweep.py; `tlt compare --tool-latency` on the command line), on the seed
and steps of the results above, so its x1 point is their answer. The sweep runs on its own button
and keeps its result with the inputs it ran on: once they change, the chart says it is stale.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from workbench.compare.agentic import agentic_why
from workbench.compare.tool_sweep import SCALES, ToolSweep, tool_latency_sweep
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import to_mapping
from workbench.contracts.workload import Workload
from workbench.ui import inputs
from workbench.ui.charts import POLICY_COLORS

_STATE_SWEEP = "whatif_tool_sweep"  # (inputs' digest, ToolSweep)


def why_frame(runs: list, labels: list[str]) -> pd.DataFrame:
    """One row per simulated run with turns: its split around the tool calls."""
    rows = []
    for label, run in zip(labels, runs):
        if run.turns is None or run.turns.empty:
            continue
        a = agentic_why(run)
        rows.append({"policy": label, "trajectory time in tools": f"{a.tool_share:.1%}",
                     "engines waiting on tools": f"{a.tool_wait_share:.1%}",
                     "small-batch decoding": f"{a.tail_share:.1%}",
                     "of it during tool calls": f"{a.tail_in_tools:.0%}",
                     "turn p50 s": f"{a.turn_latency_s:.1f}"})
    return pd.DataFrame(rows)


def speedup_ticks(values: list[float]) -> list[float]:
    """Ticks for speedups around 1: 1 among them, a round step, the lowest at or below every value
    and the highest at or above (no line runs past the last tick)."""
    lo, hi = min([1.0, *values]), max([1.0, *values])
    raw = max(hi - lo, 0.01) / 4
    step = min(m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)
               if m * 10 ** math.floor(math.log10(raw)) >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 10) for k in range(first, last + 1)]


def sweep_figure(sw: ToolSweep) -> go.Figure:
    """Speedup over the first policy against the tools' latency scale (log axis, a tick at each
    scale swept and none between)."""
    fig = go.Figure()
    x = [p.scale for p in sw.points]
    for i, name in enumerate(sw.policies[1:], 1):
        fig.add_trace(go.Scatter(x=x, y=[p.speedup[name] for p in sw.points], mode="lines+markers",
                                 name=name, line=dict(color=POLICY_COLORS[i % len(POLICY_COLORS)])))
    fig.add_trace(go.Scatter(x=x, y=[p.tool_share for p in sw.points], mode="lines+markers",
                             name=f"{sw.policies[0]}: trajectory time in tools", yaxis="y2",
                             line=dict(color="#9D9D9D", dash="dot")))
    fig.add_hline(y=1.0, line=dict(color="#E45756", width=1))
    ticks = speedup_ticks([p.speedup[n] for p in sw.points for n in sw.policies[1:]])
    fig.update_layout(
        height=340, margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h", y=1.12),
        xaxis=dict(type="log", title="tool latency (x the workload's)", tickvals=x,
                   ticktext=[f"{s:g}x" for s in x],
                   range=[math.log10(min(x)) - 0.1, math.log10(max(x)) + 0.1]),
        yaxis=dict(title=f"speedup vs {sw.policies[0]}", tickvals=ticks,
                   ticktext=[f"{t:.2f}x" for t in ticks], range=[ticks[0], ticks[-1]]),
        yaxis2=dict(title="time in tools", overlaying="y", side="right", tickformat=".0%",
                    range=[0, 1]))
    return fig


def _digest(workload: Workload, policies: list[Policy], profile: Profile, seed: int,
            steps: int, scales: list[float]) -> str:
    key = [to_mapping(workload), [to_mapping(p) for p in policies], to_mapping(profile), seed,
           steps, scales]
    return inputs.digest(json.dumps(key, sort_keys=True, default=str).encode())


def render(workload: Workload | None, profile: Profile | None, labels: list[str],
           policies: list[Policy], seed: int, steps: int, runs: list | None) -> None:
    """The section (nothing for a single-turn workload); the sweep simulates `steps` RL steps of
    `seed`, as the results above do."""
    if workload is None or profile is None or not workload.agentic.enabled:
        return
    st.subheader("Agentic: the tool calls")
    if runs:
        frame = why_frame(runs, labels)
        if not frame.empty:
            st.dataframe(frame, hide_index=True, width="stretch")
    picked = st.multiselect("Tool latency (x the workload's)", list(SCALES), default=list(SCALES),
                            key="whatif_tool_scales")
    scales = sorted(float(s) for s in picked)
    ready = bool(scales) and len(policies) >= 2
    digest = _digest(workload, policies, profile, seed, steps, scales) if ready else ""
    if st.button("Run the tool-latency sweep", disabled=not ready, key="whatif_tool_run",
                 help="Every policy at each tool latency, on the seed and steps of the results "
                      "above (common random numbers): at x1 it is their answer."):
        bar = st.progress(0.0, text="Sweeping the tools' latency…")
        total = len(scales) * len(policies)
        done = {"n": 0}

        def progress(i, n, name, s):
            done["n"] += 1
            bar.progress(min(1.0, done["n"] / total), text=f"{name}")
        try:
            sw = tool_latency_sweep(workload, policies, profile, scales, [seed], steps,
                                    progress)
        except Exception as exc:  # a simulator error must not take the page down
            st.error(f"The sweep failed: {type(exc).__name__}: {exc}")
            sw = None
        bar.empty()
        if sw is not None:
            st.session_state[_STATE_SWEEP] = (digest, sw)
    stored = st.session_state.get(_STATE_SWEEP)
    if stored is None:
        st.caption("Pick at least two policies, then run the sweep: how each policy's speedup "
                   "moves as the tools get faster or slower.")
        return
    ran_on, sw = stored
    if ran_on != digest:
        st.warning("The sweep below ran on other inputs; run it again for these.")
    st.plotly_chart(sweep_figure(sw), key="whatif_tool_fig", width="stretch")
