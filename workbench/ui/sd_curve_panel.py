"""What-if's panel on SD's speedup by batch for the cluster picked (`tlt sd-curve` on the page).

Under the cluster picker: on the profile the page will simulate with, SD's predicted speedup
over plain decoding at each batch size for a drafter, a strategy and an acceptance, and one answer:
the batch where SD stops paying (over every candidate draft length), the engine mechanism that
ends its gain there, the sd_threshold that implies, and per bucket the strategy to run; the
strategy asked about's own crossover beside it, said as such (workbench/compare/sd_curve.py).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import Profile
from workbench.compare.sd_curve import Acceptance, SdCurve, sd_curve, tokens_per_pass

BATCHES = tuple(range(1, 513))


def curve_figure(c: SdCurve) -> go.Figure:
    """Speedup over plain decoding (and over the drafter's engine with SD off) against the batch."""
    b = [p.batch for p in c.points]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=b,
            y=[p.speedup for p in c.points],
            mode="lines",
            name=f"{c.strategy} over plain decoding",
            line=dict(color="#54A24B"),
        )
    )
    if c.best:
        fig.add_trace(go.Scatter(x=b, y=list(c.best), mode="lines",
                                 name="best draft length per batch (the policy)",
                                 line=dict(color="#F58518", width=3)))
    fig.add_trace(
        go.Scatter(
            x=b,
            y=[p.speedup_over_off for p in c.points],
            mode="lines",
            name="over the SD-off arm (drafter still runs)",
            line=dict(color="#4C78A8", dash="dot"),
        )
    )
    fig.add_hline(y=1.0, line=dict(color="#E45756", width=1))
    if c.crossover_batch:
        # On a log axis a shape takes the batch itself but an annotation takes its log10 (Plotly's
        # rule): the batch given as an annotation's x stretched the axis to 10^batch.
        fig.add_vline(x=c.crossover_batch, line=dict(color="#E45756", dash="dash", width=1))
        fig.add_annotation(x=math.log10(c.crossover_batch), xref="x", y=1, yref="y domain",
                           text=f"SD stops paying at {c.crossover_batch}", showarrow=False,
                           xanchor="left", yanchor="top")
    ticks = [t for t in (2 ** i for i in range(16)) if min(b) <= t <= max(b)]
    fig.update_xaxes(type="log", range=[math.log10(min(b)), math.log10(max(b))], tickvals=ticks,
                     title_text="batch (sequences decoding together)")
    fig.update_yaxes(title_text="SD speedup", rangemode="tozero")
    # bottom left: under the curves, which start high at small batch
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(x=0.01, y=0.02, yanchor="bottom"))
    return fig


def _inputs(profile: Profile, key: str) -> tuple[str, Strategy, Acceptance, float] | None:
    c1, c2, c3, c4 = st.columns(4)
    kind = c1.selectbox("Drafter", [DrafterKind.EAGLE, DrafterKind.NGRAM],
                        key=f"sdcurve_kind:{key}")
    default = (
        "8_4_16" if profile.cluster is not None and profile.cluster.framework == "sglang" else "3"
    )
    text = c2.text_input(
        "Strategy",
        value=default,
        key=f"sdcurve_strategy:{key}",
        help="A chain of K drafts (3) or an EAGLE tree steps_topk_tokens (8_4_16).",
    )
    try:
        strategy = Strategy.parse(text.strip().removeprefix("chain:"))
    except ValueError as exc:
        st.error(f"Strategy: {exc}")
        return None
    # Empty until the user gives one: the box then shows the profile's own figure, the one the
    # sentence below reports, rather than a 0 that is no acceptance at all.
    model = tokens_per_pass(profile, kind, Acceptance(), strategy, strategy)
    accepted = c3.number_input(
        "Tokens per pass",
        min_value=1.0,
        max_value=65.0,
        value=None,
        step=0.1,
        placeholder=f"{model:.2f} (model)",
        key=f"sdcurve_accept:{key}",
        help="Accepted length E[L] at this strategy; empty: the profile's acceptance model.",
    )
    context = c4.number_input(
        "Context",
        min_value=0,
        max_value=131072,
        value=2048,
        step=512,
        key=f"sdcurve_context:{key}",
        help="Tokens per sequence.",
    )
    return kind, strategy, Acceptance(tokens_per_pass=accepted), float(context)


def render(profile: Profile | None, key: str) -> None:
    """The panel, folded, for the profile the page simulates with (nothing without one)."""
    if profile is None:
        return
    with st.expander("Where SD stops paying on this cluster (speedup by batch)", expanded=False):
        got = _inputs(profile, key)
        if got is None:
            return
        kind, strategy, acc, context = got
        try:
            c = sd_curve(profile, kind, strategy, acc, context, BATCHES)
        except ValueError as exc:
            st.error(str(exc))
            return
        st.markdown(c.answer(profile.mechanisms), help=engine_help(profile))
        chart, table = st.columns([2, 1])
        chart.plotly_chart(curve_figure(c), key=f"sdcurve_fig:{key}", width="stretch")
        # A static table: the page's result tables stay its only dataframes.
        table.table(
            pd.DataFrame(
                [
                    {
                        "batch": f"{p.min_batch}-{p.max_batch}",
                        "strategy": p.strategy if p.strategy != "0" else "off",
                        "mean speedup": f"{p.speedup:.2f}",
                    }
                    for p in c.buckets
                ]
            ).set_index("batch")
        )
        st.caption(
            f"{profile.name}: {engine_help(profile)} `tlt sd-curve` prints the same; `tlt "
            "gpu-check` the public measurements it was checked on."
        )


def engine_help(profile: Profile) -> str:
    """The engine release the curve prices, in one line."""
    m = profile.mechanisms
    if m is None:
        return ("This profile records no engine release: no CUDA-graph limits or per-step host "
                "work are priced, only its costs.")
    return (f"Priced for {m.label}: CUDA graphs for SD passes up to {m.verify_graph_max} "
            f"{'tokens' if m.graphs_by_tokens else 'sequences'} (plain decoding "
            f"{m.plain_graph_max}), eager above; the SD pass's host work "
            f"{1e3 * profile.drafter.sd_host_s_per_seq:.3f} ms a sequence and "
            f"{1e3 * m.host_s_per_seq_step:.3f} ms a sequence per draft step.")
