"""What-if page: simulate scheduling policies on a workload and compare them.

Pick a workload (preset or file) and edit its key fields, pick policies
(presets or files), a profile, steps and a seed; "Run simulation" runs
`sim.simulator.simulate` once per policy. Results live in st.session_state,
so moving a widget re-renders them without simulating again.
"""

from __future__ import annotations

import io
import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd
import streamlit as st

from sim.results import PolicyRun
from sim.simulator import simulate
from workbench.compare import summarize_runs, summary_frame
from workbench.contracts.policy import Policy, load_policy, policy_presets
from workbench.contracts.profile import Profile, load_profile, profile_choice_label, profile_presets, provenance
from workbench.contracts.schema import ConfigError, FieldError, from_mapping, to_mapping
from workbench.contracts.timeline import TAIL_DIVISOR, rollout_split
from workbench.contracts.workload import Workload
from workbench.plots import batch_lines
from workbench.ui import cluster_picker, inputs, run_log_panel, run_totals, sd_curve_panel
from workbench.ui.charts import batch_lines_figure, gantt_figure, step_lines_figure
from workbench.ui.export import Report, figure_downloads, fixed, pct, report_button, times
from workbench.ui.length_upload import length_file_workload

DEFAULT_POLICIES = ("baseline", "static-sd", "tlt")
MAX_GANTT_WORKERS = 64
_CACHE_SIZE = 32  # simulated (workload, policy, profile, seed, steps) kept per session
_STATE_CACHE = "whatif_cache"
_STATE_RESULT = "whatif_result"
_STATE_ARRIVED = "whatif_arrived"  # the first visit of a session simulates the defaults

# (field, label, kind, step, format, help): the Workload fields the page lets a user edit.
_WORKLOAD_FIELDS = (
    ("workers", "Workers (rollout engines)", int, 1, None, "Data-parallel rollout engines."),
    ("gpus_per_worker", "GPUs per worker", int, 1, None, "Tensor parallelism of one engine."),
    ("prompts_per_step", "Prompts per step", int, 1, None, None),
    ("group_size", "Group size (samples per prompt)", int, 1, None, "GRPO's n."),
    ("max_response_tokens", "Max response tokens", int, 1024, None, "The response-length cap."),
    ("max_batch", "Max batch per engine", int, 8, None,
     "Most sequences an engine decodes at once (vLLM max_num_seqs)."),
)
_LENGTH_FIELDS = (
    ("clip_ratio", "Clip ratio", float, 0.005, "%.3f", "Share of responses that hit the cap at step 0."),
    ("sigma", "Sigma (log-sd of lengths)", float, 0.05, "%.2f", "Spread of the lognormal length body."),
    ("group_correlation", "Group correlation", float, 0.05, "%.2f",
     "Share of log-variance shared within a prompt's group."),
    ("drift_per_step", "Drift per step", float, 0.001, "%.4f", "Log-length growth per RL step."),
)

_TABLE_COLUMNS = {
    "step_time_s": st.column_config.NumberColumn("Step time (s)", format="%.1f",
                                                 help="Mean RL step: rollout + training + weight sync."),
    "rollout_time_s": st.column_config.NumberColumn("Rollout (s)", format="%.1f"),
    "bubble_fraction": st.column_config.NumberColumn("Bubble", format="percent",
                                                     help="Idle worker-time / worker-time in the rollout."),
    "tail_fraction": st.column_config.NumberColumn(
        "Tail", format="percent",
        help=f"Worker-time decoding at a running batch <= 1/{TAIL_DIVISOR} of the step's largest / worker-time in "
             "the rollout: a worker finishing its last few sequences on hardware sized for many."),
    "mean_accept_len": st.column_config.NumberColumn("Accepted len", format="%.2f",
                                                     help="Tokens per verify pass over SD passes (1 = no SD)."),
    "drafter_train_fraction": st.column_config.NumberColumn("Spot training", format="percent",
                                                            help="Rollout worker-time spent training the drafter."),
    "tokens_per_s": st.column_config.NumberColumn("Tokens/s", format="%.0f", help="Response tokens / rollout time."),
    "speedup": st.column_config.NumberColumn("Speedup", format="%.2fx",
                                             help="First policy's mean step time / this policy's."),
}


@dataclass
class _Result:
    """One press of "Run simulation"."""

    signature: str
    workload: Workload
    profile: Profile
    seed: int
    steps: int
    labels: list[str]
    policies: list[Policy]
    runs: list[PolicyRun]


# ---------------------------------------------------------------- inputs


def _base_workload() -> tuple[Workload | None, str]:
    """The chosen preset, uploaded workload or length file, and an id that changes when the choice does."""
    source = st.radio("Workload", ["Preset", "File", "Length file", "Run log"], horizontal=True,
                      key="whatif_wl_source",
                      help="A named preset, a workload YAML/JSON file of your own, your real "
                           "response lengths, or a veRL run's log (calibrated on its first steps).")
    if source == "Length file":
        return length_file_workload()
    if source == "Run log":  # run-log input (issue 32): workbench/ui/run_log_panel.py
        return run_log_panel.run_log_workload()
    if source == "File":
        return inputs.workload_file("whatif_wl_file")
    return inputs.workload_preset("Workload preset", "whatif_wl_preset")


def _edit_workload(base: Workload, base_id: str) -> Workload | None:
    """Number inputs over the key fields; the edited, fully validated Workload, or None (error shown)."""
    with st.expander(f"Workload fields: {base.name}", expanded=False):
        if base.description:
            st.caption(base.description)
        values: dict[str, Any] = {}
        cols = st.columns(3)
        for i, (name, label, kind, step, fmt, hlp) in enumerate(_WORKLOAD_FIELDS):
            with cols[i % 3]:
                values[name] = st.number_input(label, value=kind(getattr(base, name)), step=kind(step), format=fmt,
                                               help=hlp, key=f"whatif_wl:{base_id}:{name}")
        st.markdown("**Response-length model**")
        length_values: dict[str, Any] = {}
        cols = st.columns(4)
        for i, (name, label, kind, step, fmt, hlp) in enumerate(_LENGTH_FIELDS):
            with cols[i % 4]:
                length_values[name] = st.number_input(label, value=kind(getattr(base.lengths, name)), step=kind(step),
                                                      format=fmt, help=hlp, key=f"whatif_wl:{base_id}:lengths.{name}")
    try:
        edited = replace(base, **values, lengths=replace(base.lengths, **length_values))
        edited.check()
        # Workload.check() covers its own fields; from_mapping re-checks the nested length model too.
        edited = from_mapping(Workload, to_mapping(edited))
    except (ConfigError, FieldError) as exc:
        st.error(f"Invalid workload: {exc}")
        return None
    st.caption(f"{edited.workers} workers x {edited.gpus_per_worker} GPUs = {edited.gpus} GPUs; "
               f"{edited.sequences_per_step:,} sequences per step, up to {edited.max_response_tokens:,} tokens each.")
    return edited


def _pick_policies() -> tuple[list[str], list[Policy]]:
    """Chosen presets (in the order picked) then valid uploaded files; labels are unique."""
    presets = policy_presets()
    default = [p for p in DEFAULT_POLICIES if p in presets]
    names = st.multiselect("Policies", presets, default=default, key="whatif_policies",
                           help="Speedups are relative to the first policy in this list.")
    labels: list[str] = []
    policies: list[Policy] = []
    for name in names:
        try:
            policies.append(load_policy(name))
            labels.append(name)
        except (ConfigError, FieldError) as exc:
            st.error(f"Policy preset '{name}' is invalid: {exc}")
    uploaded = inputs.policy_uploads("whatif_policy_files", "Extra policy files (run after the presets)",
                                     set(labels))
    return labels + [p.name for p in uploaded], policies + uploaded


def _pick_profile(workload: Workload | None, wl_id: str) -> Profile | None:
    presets = profile_presets()
    options = list(presets)
    own = workload.profile if workload is not None else None
    if own and own not in options:
        options.insert(0, own)  # a profile file named by the workload
    index = options.index(own) if own in options else 0
    name = st.selectbox("Profile", options, index=index, key=f"whatif_profile:{wl_id}",
                        format_func=profile_choice_label,
                        help="Cost and acceptance model of one engine; defaults to the workload's own. "
                             "Measured: `tlt profile`; published: fitted to the TLT paper's microbenchmarks; "
                             "calibrated: fitted to traces of real runs.")
    try:
        profile = load_profile(name)
    except (ConfigError, FieldError) as exc:
        st.error(f"Profile '{name}' cannot be loaded: {exc}. Pick a preset profile.")
        return None
    if profile.description:
        st.caption(profile.description)
    st.caption(provenance(profile))
    return profile


# ---------------------------------------------------------------- running


def _key(workload: Workload, policy: Policy, profile: Profile, seed: int, steps: int) -> str:
    return json.dumps([to_mapping(workload), to_mapping(policy), to_mapping(profile), seed, steps],
                      sort_keys=True, default=str)


def _signature(workload: Workload, labels: list[str], policies: list[Policy], profile: Profile,
               seed: int, steps: int) -> str:
    keys = [_key(workload, p, profile, seed, steps) for p in policies]
    return inputs.digest(json.dumps([labels, keys]).encode())


def _run(workload: Workload, labels: list[str], policies: list[Policy], profile: Profile,
         seed: int, steps: int) -> _Result | None:
    cache: OrderedDict = st.session_state.setdefault(_STATE_CACHE, OrderedDict())
    bar = st.progress(0.0, text="Simulating…")
    runs: list[PolicyRun] = []
    n = len(policies)
    for i, (label, policy) in enumerate(zip(labels, policies)):
        key = _key(workload, policy, profile, seed, steps)
        if key in cache:
            cache.move_to_end(key)
            runs.append(cache[key])
            bar.progress((i + 1) / n, text=f"{label}: cached")
            continue

        def on_step(m, i=i, label=label):
            bar.progress(min(1.0, (i + (m.rl_step + 1) / steps) / n), text=f"{label}: step {m.rl_step + 1}/{steps}")

        bar.progress(i / n, text=f"Simulating {label} ({i + 1}/{n})…")
        try:
            run = simulate(workload, policy, profile, seed=seed, steps=steps, on_step=on_step)
        except Exception as exc:  # a simulator bug must not take the page down
            bar.empty()
            st.error(f"Simulating '{label}' failed: {type(exc).__name__}: {exc}")
            return None
        cache[key] = run
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
        runs.append(run)
    bar.empty()
    return _Result(_signature(workload, labels, policies, profile, seed, steps),
                   workload, profile, seed, steps, labels, policies, runs)


# ---------------------------------------------------------------- results


def _metrics_table(res: _Result) -> pd.DataFrame:
    return summary_frame(summarize_runs(res.runs, res.labels))[list(_TABLE_COLUMNS)]


def _per_step(res: _Result) -> pd.DataFrame:
    return pd.DataFrame([{"policy": label, **asdict(m)} for label, run in zip(res.labels, res.runs) for m in run.steps])


def _summary_json(res: _Result, table: pd.DataFrame) -> str:
    out = {
        "workload": to_mapping(res.workload),
        "profile": res.profile.name,
        "seed": res.seed,
        "steps": res.steps,
        "reference_policy": res.labels[0],
        "policies": [
            {"label": label, "policy": to_mapping(policy), "mean": run.summary(),
             "speedup": float(table.loc[label, "speedup"]), "steps": [asdict(m) for m in run.steps]}
            for label, policy, run in zip(res.labels, res.policies, res.runs)
        ],
    }
    return json.dumps(out, indent=2) + "\n"


def _parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _tail_limit(res: _Result) -> str:
    """The tail's batch limit in the first run's first step, in words ("batch <= 32 of 256")."""
    run = res.runs[0]
    rows = run.timeline[run.timeline["rl_step"] == run.timeline["rl_step"].min()]
    tail = rollout_split(rows)
    if not tail.full_batch:
        return f"batch <= 1/{TAIL_DIVISOR} of the full"
    return f"batch <= {tail.tail_batch} of {tail.full_batch}"


def _show_tiles(res: _Result, table: pd.DataFrame) -> None:
    first, last = res.labels[0], res.labels[-1]
    a, b = table.loc[first], table.loc[last]
    cols = st.columns(5)
    tail_help = (f"Share of rollout worker-time spent decoding at a small batch ({_tail_limit(res)}): waste inside "
                 "a worker, beside the bubble's idle workers.")
    if len(res.labels) == 1:
        cols[0].metric(f"Step time: {first}", f"{a['step_time_s']:.1f} s")
        cols[1].metric("Rollout", f"{a['rollout_time_s']:.1f} s")
        cols[2].metric("Bubble", f"{a['bubble_fraction']:.1%}")
        cols[3].metric("Tail", f"{a['tail_fraction']:.1%}", help=tail_help)
        cols[4].metric("Accepted length", f"{a['mean_accept_len']:.2f}")
        st.caption("Pick two or more policies to see speedups.")
        return
    cols[0].metric(f"Step-time speedup: {last} vs {first}", f"{b['speedup']:.2f}x",
                   help="Mean step time of the first policy / mean step time of the last.")
    rollout = a["rollout_time_s"] / b["rollout_time_s"] if b["rollout_time_s"] else float("nan")
    cols[1].metric("Rollout speedup", f"{rollout:.2f}x", help="Rollout phase only (training and sync are unchanged).")
    for col, name, label, hlp in ((cols[2], "bubble_fraction", "Bubble", "Idle worker-time / rollout worker-time."),
                                  (cols[3], "tail_fraction", "Tail", tail_help)):
        col.metric(f"{label}: {last}", f"{b[name]:.1%}", delta=f"{(b[name] - a[name]) * 100:+.1f} pts vs {first}",
                   delta_color="inverse", help=hlp)
    cols[4].metric(f"Accepted length: {last}", f"{b['mean_accept_len']:.2f}",
                   delta=f"{b['mean_accept_len'] - a['mean_accept_len']:+.2f} vs {first}")


def _show_gantts(res: _Result) -> None:
    st.subheader("Worker timelines")
    st.caption("Each bar is what a worker did. Red = idle (a bubble): the worker finished its share and waits for "
               "the slowest one. TLT fills that time with drafter spot training (orange). Below each chart, the "
               "running batch: a worker decoding a few sequences at batch 1-8 uses hardware sized for hundreds; "
               "that is where speculative decoding (coloured by strategy) pays.")
    # Step lengths per policy, to put every policy's chart on one x scale for the same step.
    spans = {(label, m.rl_step): m.step_time_s for label, run in zip(res.labels, res.runs) for m in run.steps}
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
            fig = gantt_figure(rows, max_workers=MAX_GANTT_WORKERS,
                               x_max=x_max * 1.01 if x_max else None)
            name = f"{_slug(res.workload.name)}-{_slug(label)}-step{step}"
            st.plotly_chart(fig, key=f"whatif_gantt:{label}", width="stretch")
            figure_downloads(fig, f"timeline-{name}", f"whatif_fig_gantt:{label}")
            lines = batch_lines(run.timeline, step, MAX_GANTT_WORKERS)
            batch = batch_lines_figure(lines, "Running batch per worker (the long tail; colour: speculation)",
                                       x_max * 1.01 if x_max else None)
            st.plotly_chart(batch, key=f"whatif_batch:{label}", width="stretch")
            figure_downloads(batch, f"batch-{name}", f"whatif_fig_batch:{label}")
            st.download_button(f"Download {label} timeline (parquet)", _parquet(run.timeline),
                               file_name=f"timeline-{_slug(res.workload.name)}-{_slug(label)}.parquet",
                               mime="application/vnd.apache.parquet", key=f"whatif_dl_tl:{label}",
                               on_click="ignore")


_WASTE_TEXT = ("Two wastes of rollout worker-time: the bubble, workers idle because they finished and wait for the "
               "slowest, and the tail, workers still decoding but at a small batch (at most 1/8 of the step's "
               "largest) on hardware sized for the full one.")


def _report(res: _Result, table: pd.DataFrame) -> Report:
    """The result as a document to send: inputs, the table, the per-step lines, each policy's first step."""
    rep = Report(f"What-if: {res.workload.name}",
                 [f"Profile {res.profile.name} · {res.steps} step(s) · seed {res.seed} · policies "
                  + ", ".join(res.labels) + f" (speedups against {res.labels[0]})",
                  (f"{res.workload.workers} workers x {res.workload.gpus_per_worker} GPUs, "
                   f"{res.workload.sequences_per_step:,} sequences per step, up to "
                   f"{res.workload.max_response_tokens:,} tokens each")])
    shown = table.rename(columns={k: v["label"] for k, v in _TABLE_COLUMNS.items()})
    rep.heading("Results").table(shown, {"Step time (s)": fixed(1), "Rollout (s)": fixed(1), "Bubble": pct,
                                         "Tail": pct, "Accepted len": fixed(2), "Spot training": pct,
                                         "Tokens/s": fixed(0), "Speedup": times})
    rep.text(f"Means over the simulated steps. {_WASTE_TEXT} Tail limit: {_tail_limit(res)}.")
    rep.heading("Per step").figure(step_lines_figure(_per_step(res), res.labels), "steps")
    for label, run in zip(res.labels, res.runs):
        step = int(run.timeline["rl_step"].min())
        rep.heading(f"{label}: RL step {step}")
        rep.figure(gantt_figure(run.timeline[run.timeline["rl_step"] == step], max_workers=MAX_GANTT_WORKERS),
                   f"timeline-{_slug(label)}")
        rep.figure(batch_lines_figure(batch_lines(run.timeline, step, MAX_GANTT_WORKERS), "Running batch per worker"),
                   f"batch-{_slug(label)}")
    return rep


def _show_result(res: _Result, current_signature: str | None) -> None:
    st.divider()
    st.subheader("Results")
    st.caption(f"Workload **{res.workload.name}** · profile **{res.profile.name}** · "
               f"{res.steps} step(s) · seed {res.seed}")
    if current_signature is not None and current_signature != res.signature:
        st.info("The inputs changed since this run; press **Run simulation** to update.")
    table = _metrics_table(res)
    _show_tiles(res, table)
    st.dataframe(table, column_config=_TABLE_COLUMNS, width="stretch")
    st.caption(f"Means over the simulated steps. Speedup = {res.labels[0]}'s mean step time / the policy's "
               f"(above 1: faster). {_WASTE_TEXT}")
    c1, c2, _ = st.columns([1, 1, 2])
    with c1:
        st.download_button("Download summary (JSON)", _summary_json(res, table),
                           file_name=f"whatif-{_slug(res.workload.name)}.json", mime="application/json",
                           key="whatif_dl_summary", on_click="ignore", icon=":material/data_object:")
    with c2:
        report_button("Download report (HTML)", lambda: _report(res, table),
                      f"whatif-{_slug(res.workload.name)}.html", "whatif_dl_report")

    st.subheader("Per step")
    steps_fig = step_lines_figure(_per_step(res), res.labels)
    st.plotly_chart(steps_fig, key="whatif_steps", width="stretch")
    figure_downloads(steps_fig, f"steps-{_slug(res.workload.name)}", "whatif_fig_steps")
    st.caption("A learned drafter improves over the steps as idle workers train it; lengths can drift upward.")
    run_totals.show(run_totals.mean_steps_of_runs(res.workload, res.labels, res.policies, res.runs), res.workload,
                    res.profile, "whatif_totals")
    _show_gantts(res)


# ---------------------------------------------------------------- page


def render() -> None:
    st.title("What-if")
    st.caption("Simulate RL steps of a long-tail rollout under different speculative-decoding policies, "
               "and see how much each would speed training up on your cluster and workload.")

    col_wl, col_pol, col_run = st.columns([1.2, 1.2, 1])
    with col_wl:
        base, base_id = _base_workload()
    with col_pol:
        labels, policies = _pick_policies()
    with col_run:
        # run-log input (issue 32): its own calibrated profile
        calibrated = run_log_panel.calibrated_profile(base_id)
        derive = False if calibrated else cluster_picker.derive_toggle(base_id)
        profile = calibrated or (None if derive else _pick_profile(base, base_id))
        c1, c2 = st.columns(2)
        steps = int(c1.number_input("Steps", min_value=1, max_value=100, value=3, step=1, key="whatif_steps_n"))
        seed = int(c2.number_input("Seed", min_value=0, value=1, step=1, key="whatif_seed"))

    workload = _edit_workload(base, base_id) if base is not None else None
    if workload is not None:  # the cluster: derived from model x GPU x TP x framework, or checked against the profile
        workload, profile = (cluster_picker.cluster_profile(workload, base_id) if derive
                             else (workload, cluster_picker.checked(workload, profile)))
    # Hook (issue 36): SD's speedup by batch on this cluster, in its own module beside the picker.
    sd_curve_panel.render(profile, base_id)

    problems = []
    if workload is None:
        problems.append("a valid workload")
    if profile is None:
        problems.append("a valid profile")
    if not policies:
        problems.append("at least one policy")
    ready = not problems
    signature = _signature(workload, labels, policies, profile, seed, steps) if ready else None

    clicked = st.button("Run simulation", type="primary", disabled=not ready, key="whatif_run")
    # Results on arrival: a session's first visit simulates the defaults (well under a second for the
    # default workload) instead of showing an empty page.
    arrived = not st.session_state.get(_STATE_ARRIVED)
    st.session_state[_STATE_ARRIVED] = True
    if ready and (clicked or (arrived and _STATE_RESULT not in st.session_state)):
        result = _run(workload, labels, policies, profile, seed, steps)
        if result is not None:
            st.session_state[_STATE_RESULT] = result
    if not ready:
        st.warning("To run, choose " + ", ".join(problems) + ".")

    result: _Result | None = st.session_state.get(_STATE_RESULT)
    if result is not None:
        _show_result(result, signature)
    elif ready:
        st.info("Press **Run simulation** to compare the policies.")
