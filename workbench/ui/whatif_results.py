"""What-if's results: the tiles, the table, why each speedup, the per-step lines, the whole run, the
worker timelines and the downloads (the page itself, its inputs and the run:
workbench/ui/whatif_page.py).

"Why this speedup" is `workbench.contracts.speedup.explain` on each policy's run against the
first (`workbench.compare.policies.why_runs`): the same decomposition `tlt sim` prints, with its
sentence.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass

import pandas as pd
import streamlit as st

from sim.results import PolicyRun
from workbench.compare.intervals import (interval_json, interval_lines, policy_intervals,
                                        run_work)
from workbench.compare.policies import summarize_runs, summary_frame, why_runs
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import to_mapping
from workbench.contracts.speedup import why_frame, why_json
from workbench.contracts.timeline import TAIL_DIVISOR, rollout_split
from workbench.contracts.workload import Workload
from workbench.report.plots import batch_lines
from workbench.ui import interval_view, run_totals
from workbench.ui.why_view import show_whys
from workbench.ui.charts import batch_lines_figure, gantt_figure, step_lines_figure
from workbench.ui.export import Report, figure_downloads, fixed, pct, report_button, times

MAX_GANTT_WORKERS = 64

_TABLE_COLUMNS = {
    "step_time_s": st.column_config.NumberColumn(
        "Step time (s)", format="%.1f", help="Mean RL step: rollout + training + weight sync."
    ),
    "rollout_time_s": st.column_config.NumberColumn("Rollout (s)", format="%.1f"),
    "bubble_fraction": st.column_config.NumberColumn(
        "Bubble", format="percent", help="Idle worker-time / worker-time in the rollout."
    ),
    "tail_fraction": st.column_config.NumberColumn(
        "Tail",
        format="percent",
        help=f"Worker-time decoding at a running batch <= 1/{TAIL_DIVISOR} of the step's largest / "
             "worker-time in "
        "the rollout: a worker finishing its last few sequences on hardware sized for many.",
    ),
    "mean_accept_len": st.column_config.NumberColumn(
        "Accepted len", format="%.2f", help="Tokens per verify pass over SD passes (1 = no SD)."
    ),
    "drafter_train_fraction": st.column_config.NumberColumn(
        "Spot training", format="percent", help="Rollout worker-time spent training the drafter."
    ),
    "tokens_per_s": st.column_config.NumberColumn(
        "Tokens/s", format="%.0f", help="Response tokens / rollout time."
    ),
    "speedup": st.column_config.NumberColumn(
        "Speedup", format="%.2fx", help="First policy's mean step time / this policy's."
    ),
}


@dataclass
class Result:
    """One press of "Run simulation"."""

    signature: str
    workload: Workload
    profile: Profile
    seed: int
    steps: int
    labels: list[str]
    policies: list[Policy]
    runs: list[PolicyRun]

    def whys(self):
        """Each run's decomposition against the first (computed once: the page re-renders often)."""
        if not hasattr(self, "_whys"):
            self._whys = why_runs(self.runs, self.labels)
        return self._whys

    def intervals(self):
        """Each run's step time and speedup with its interval (workbench/compare/intervals.py;
        None: nothing to draw from; computed once)."""
        if not hasattr(self, "_intervals"):
            works = [(label, [run_work(run, self.profile, self.workload.workers)])
                     for label, run in zip(self.labels, self.runs)]
            self._intervals = policy_intervals(works, self.profile, self.seed)
        return self._intervals


# ---------------------------------------------------------------- results


def _metrics_table(res: Result) -> pd.DataFrame:
    return summary_frame(summarize_runs(res.runs, res.labels))[list(_TABLE_COLUMNS)]


def _per_step(res: Result) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"policy": label, **asdict(m)}
            for label, run in zip(res.labels, res.runs)
            for m in run.steps
        ]
    )


def _summary_json(res: Result, table: pd.DataFrame) -> str:
    out = {
        "workload": to_mapping(res.workload),
        "profile": res.profile.name,
        "seed": res.seed,
        "steps": res.steps,
        "reference_policy": res.labels[0],
        "policies": [
            {
                "label": label,
                "policy": to_mapping(policy),
                "mean": run.summary(),
                "speedup": float(table.loc[label, "speedup"]),
                "why": why_json(why),
                "steps": [asdict(m) for m in run.steps],
            }
            for label, policy, run, why in zip(res.labels, res.policies, res.runs, res.whys())
        ],
    }
    for entry, pi in zip(out["policies"], res.intervals() or []):
        entry["interval"] = interval_json(pi)
    return json.dumps(out, indent=2) + "\n"


def _parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _tail_limit(res: Result) -> str:
    """The tail's batch limit in the first run's first step, in words ("batch <= 32 of 256")."""
    run = res.runs[0]
    rows = run.timeline[run.timeline["rl_step"] == run.timeline["rl_step"].min()]
    tail = rollout_split(rows)
    if not tail.full_batch:
        return f"batch <= 1/{TAIL_DIVISOR} of the full"
    return f"batch <= {tail.tail_batch} of {tail.full_batch}"


def _show_tiles(res: Result, table: pd.DataFrame) -> None:
    first, last = res.labels[0], res.labels[-1]
    a, b = table.loc[first], table.loc[last]
    cols = st.columns(5)
    tail_help = (
        f"Share of rollout worker-time spent decoding at a small batch ({_tail_limit(res)}): waste "
        "inside "
        "a worker, beside the bubble's idle workers."
    )
    if len(res.labels) == 1:
        cols[0].metric(f"Step time: {first}", f"{a['step_time_s']:.1f} s",
                       **interval_view.tile_delta(res.intervals(), first, "step"))
        cols[1].metric("Rollout", f"{a['rollout_time_s']:.1f} s")
        cols[2].metric("Bubble", f"{a['bubble_fraction']:.1%}")
        cols[3].metric("Tail", f"{a['tail_fraction']:.1%}", help=tail_help)
        cols[4].metric("Accepted length", f"{a['mean_accept_len']:.2f}")
        st.caption("Pick two or more policies to see speedups.")
        return
    cols[0].metric(
        f"Speedup: {last}",
        f"{b['speedup']:.2f}x",
        help=f"Step-time speedup vs {first}: {first}'s mean step time / {last}'s; under it, its "
             "90% interval (How sure, below).",
        **interval_view.tile_delta(res.intervals(), last),
    )
    rollout = a["rollout_time_s"] / b["rollout_time_s"] if b["rollout_time_s"] else float("nan")
    cols[1].metric(
        "Rollout speedup",
        f"{rollout:.2f}x",
        help="Rollout phase only (training and sync are unchanged).",
    )
    for col, name, label, hlp in (
        (cols[2], "bubble_fraction", "Bubble", "Idle worker-time / rollout worker-time."),
        (cols[3], "tail_fraction", "Tail", tail_help),
    ):
        col.metric(
            f"{label}: {last}",
            f"{b[name]:.1%}",
            delta=f"{(b[name] - a[name]) * 100:+.1f} pts vs {first}",
            delta_color="inverse",
            help=hlp,
        )
    cols[4].metric(
        f"Accepted length: {last}",
        f"{b['mean_accept_len']:.2f}",
        delta=f"{b['mean_accept_len'] - a['mean_accept_len']:+.2f} vs {first}",
    )


def _show_gantts(res: Result) -> None:
    st.subheader("Worker timelines")
    st.caption(
        "Each bar is what a worker did. Red = idle (a bubble): the worker finished its share and "
        "waits for "
        "the slowest one. TLT fills that time with drafter spot training (orange). Below each "
        "chart, the "
        "running batch: a worker decoding a few sequences at batch 1-8 uses hardware sized for "
        "hundreds; "
        "that is where speculative decoding (coloured by strategy) pays."
    )
    # Step lengths per policy, to put every policy's chart on one x scale for the same step.
    spans = {
        (label, m.rl_step): m.step_time_s
        for label, run in zip(res.labels, res.runs)
        for m in run.steps
    }
    tabs = st.tabs(res.labels)
    for tab, label, run in zip(tabs, res.labels, res.runs):
        with tab:
            steps = sorted(int(s) for s in run.timeline["rl_step"].unique())
            c1, c2 = st.columns([1, 3])
            step = c1.selectbox("RL step", steps, index=0, key=f"whatif_gantt_step:{label}")
            x_max = max(spans.get((other, step), 0.0) for other in res.labels) or None
            rows = run.timeline[run.timeline["rl_step"] == step]
            workers = res.workload.workers
            if workers > MAX_GANTT_WORKERS:
                c2.info(f"Showing the first {MAX_GANTT_WORKERS} of {workers} workers.")
            fig = gantt_figure(
                rows, max_workers=MAX_GANTT_WORKERS, x_max=x_max * 1.01 if x_max else None
            )
            name = f"{_slug(res.workload.name)}-{_slug(label)}-step{step}"
            st.plotly_chart(fig, key=f"whatif_gantt:{label}", width="stretch")
            figure_downloads(fig, f"timeline-{name}", f"whatif_fig_gantt:{label}")
            lines = batch_lines(run.timeline, step, MAX_GANTT_WORKERS)
            batch = batch_lines_figure(
                lines,
                "Running batch per worker (the long tail; colour: speculation)",
                x_max * 1.01 if x_max else None,
            )
            st.plotly_chart(batch, key=f"whatif_batch:{label}", width="stretch")
            figure_downloads(batch, f"batch-{name}", f"whatif_fig_batch:{label}")
            st.download_button(
                f"Download {label} timeline (parquet)",
                _parquet(run.timeline),
                file_name=f"timeline-{_slug(res.workload.name)}-{_slug(label)}.parquet",
                mime="application/vnd.apache.parquet",
                key=f"whatif_dl_tl:{label}",
                on_click="ignore",
            )


_WASTE_TEXT = (
    "Two wastes of rollout worker-time: the bubble, workers idle because they finished and wait "
    "for the "
    "slowest, and the tail, workers still decoding but at a small batch (at most 1/8 of the step's "
    "largest) on hardware sized for the full one."
)


def _report(res: Result, table: pd.DataFrame) -> Report:
    """The result as a document to send: inputs, the table, the per-step lines, each policy's first
    step."""
    rep = Report(
        f"What-if: {res.workload.name}",
        [
            f"Profile {res.profile.name} · {res.steps} step(s) · seed {res.seed} · policies "
            + ", ".join(res.labels)
            + f" (speedups against {res.labels[0]})",
            (
                f"{res.workload.workers} workers x {res.workload.gpus_per_worker} GPUs, "
                f"{res.workload.sequences_per_step:,} sequences per step, up to "
                f"{res.workload.max_response_tokens:,} tokens each"
            ),
        ],
    )
    shown = table.rename(columns={k: v["label"] for k, v in _TABLE_COLUMNS.items()})
    rep.heading("Results").table(
        shown,
        {
            "Step time (s)": fixed(1),
            "Rollout (s)": fixed(1),
            "Bubble": pct,
            "Tail": pct,
            "Accepted len": fixed(2),
            "Spot training": pct,
            "Tokens/s": fixed(0),
            "Speedup": times,
        },
    )
    rep.text(f"Means over the simulated steps. {_WASTE_TEXT} Tail limit: {_tail_limit(res)}.")
    for line in interval_lines(res.intervals(), res.labels[0]):
        rep.text(line.strip())
    if len(res.labels) > 1:
        rep.heading("Why this speedup").table(why_frame(res.whys()[1:]).drop(columns=["why"]))
        for w in res.whys()[1:]:
            rep.text(w.sentence)
    rep.heading("Per step").figure(step_lines_figure(_per_step(res), res.labels), "steps")
    for label, run in zip(res.labels, res.runs):
        step = int(run.timeline["rl_step"].min())
        rep.heading(f"{label}: RL step {step}")
        rep.figure(
            gantt_figure(
                run.timeline[run.timeline["rl_step"] == step], max_workers=MAX_GANTT_WORKERS
            ),
            f"timeline-{_slug(label)}",
        )
        rep.figure(
            batch_lines_figure(
                batch_lines(run.timeline, step, MAX_GANTT_WORKERS), "Running batch per worker"
            ),
            f"batch-{_slug(label)}",
        )
    return rep


def show_intervals(res: Result) -> None:
    """Each speedup and step time with its interval; the same lines `tlt sim` prints."""
    interval_view.show(res.intervals(), res.labels[0])


def show_why(res: Result) -> None:
    """Why this speedup: the decomposition per policy (against the first) and one sentence each."""
    show_whys(res.whys()[1:], "whatif_why",
              f"Against {res.labels[0]}, seed {res.seed}: where {res.labels[0]}'s decode "
              "engine-time lies by running batch, what SD does there, and the step if that "
              "decoding were free (docs/formats.md, 'Why a speedup').")


def show(res: Result, current_signature: str | None) -> None:
    """The results of one press of Run simulation (or of the first visit)."""
    st.divider()
    st.subheader("Results")
    st.caption(
        f"Workload **{res.workload.name}** · profile **{res.profile.name}** · "
        f"{res.steps} step(s) · **seed {res.seed}** (another seed draws other response lengths; "
        "Compare runs several)"
    )
    if current_signature is not None and current_signature != res.signature:
        st.info("The inputs changed since this run; press **Run simulation** to update.")
    table = _metrics_table(res)
    _show_tiles(res, table)
    show_intervals(res)
    st.dataframe(table, column_config=_TABLE_COLUMNS, width="stretch", key="whatif_table")
    st.caption(
        f"Means over the simulated steps, seed {res.seed}. Speedup = {res.labels[0]}'s mean step "
        "time / the "
        f"policy's (above 1: faster). {_WASTE_TEXT}"
    )
    show_why(res)
    c1, c2, _ = st.columns([1, 1, 2])
    with c1:
        st.download_button(
            "Download summary (JSON)",
            _summary_json(res, table),
            file_name=f"whatif-{_slug(res.workload.name)}.json",
            mime="application/json",
            key="whatif_dl_summary",
            on_click="ignore",
            icon=":material/data_object:",
        )
    with c2:
        report_button(
            "Download report (HTML)",
            lambda: _report(res, table),
            f"whatif-{_slug(res.workload.name)}.html",
            "whatif_dl_report",
        )

    st.subheader("Per step")
    steps_fig = step_lines_figure(_per_step(res), res.labels)
    st.plotly_chart(steps_fig, key="whatif_steps", width="stretch")
    figure_downloads(steps_fig, f"steps-{_slug(res.workload.name)}", "whatif_fig_steps")
    st.caption(
        "A learned drafter improves over the steps as idle workers train it; lengths can drift "
        "upward."
    )
    run_totals.show(
        run_totals.mean_steps_of_runs(res.workload, res.labels, res.policies, res.runs),
        res.workload,
        res.profile,
        "whatif_totals",
        res.intervals(),
    )
    _show_gantts(res)
