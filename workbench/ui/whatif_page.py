"""What-if page: simulate scheduling policies on a workload and a cluster, and see why each gains.

The page, top to bottom: the workload (a preset, your length files, a run log, or a workload
file), the cluster it runs on (engines x model x GPU x TP x framework:
workbench/ui/cluster_picker.py; a length file starts with none), the workload's key fields, the
policies, steps and seed; then "Run simulation" runs `sim.simulator.simulate` once per policy.
Results live in st.session_state, so moving a widget re-renders them without simulating again
(workbench/ui/whatif_results.py).

Parts live in modules of their own: a run log as a source (workbench/ui/run_log_panel.py: its
cluster comes calibrated on the log), SD's speedup by batch beside the cluster picker
(workbench/ui/sd_curve_panel.py), for an agentic workload the tool calls' section with the
tool-latency sweep (workbench/ui/agentic_panel.py), and for a single-turn one how far the speedups
move with the length tail's shape (workbench/ui/tail_panel.py).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import streamlit as st

from sim.results import PolicyRun
from sim.simulator import simulate
from workbench.contracts.policy import Policy, load_policy, policy_presets
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError, FieldError, from_mapping, to_mapping
from workbench.contracts.workload import Workload
from workbench.ui import (
    agentic_panel,
    cluster_picker,
    inputs,
    run_log_panel,
    sd_curve_panel,
    tail_panel,
    whatif_results,
)
from workbench.ui.length_upload import length_file_workload
from workbench.ui.whatif_results import Result

DEFAULT_POLICIES = ("baseline", "static-sd", "tlt")
DEFAULT_SEED = 0  # as `tlt sim`: the same seed, the same figures
SOURCES = ("Preset", "Length file", "Run log", "Workload file")
_CACHE_SIZE = 32  # simulated (workload, policy, profile, seed, steps) kept per session
_STATE_CACHE = "whatif_cache"
_STATE_RESULT = "whatif_result"
_STATE_ARRIVED = "whatif_arrived"  # the first visit of a session simulates the defaults

# (field, label, kind, step, format, help): the Workload fields the page lets a user edit (engines
# and TP
# are the cluster's: the picker).
_WORKLOAD_FIELDS = (
    ("prompts_per_step", "Prompts per step", int, 1, None, None),
    ("group_size", "Group size (samples per prompt)", int, 1, None, "GRPO's n."),
    ("max_response_tokens", "Max response tokens", int, 1024, None, "The response-length cap."),
    (
        "max_batch",
        "Max batch per engine",
        int,
        8,
        None,
        "Most sequences an engine decodes at once (vLLM max_num_seqs).",
    ),
)
_LENGTH_FIELDS = (
    (
        "clip_ratio",
        "Clip ratio",
        float,
        0.005,
        "%.3f",
        "Share of responses that hit the cap at step 0.",
    ),
    (
        "sigma",
        "Sigma (log-sd of lengths)",
        float,
        0.05,
        "%.2f",
        "Spread of the lognormal length body.",
    ),
    (
        "group_correlation",
        "Group correlation",
        float,
        0.05,
        "%.2f",
        "Share of log-variance shared within a prompt's group.",
    ),
    ("drift_per_step", "Drift per step", float, 0.001, "%.4f", "Log-length growth per RL step."),
)


# ---------------------------------------------------------------- inputs


def _base_workload() -> tuple[Workload | None, str, bool]:
    """The workload as its source gives it, an id that changes when it does, and whether it lacks a
    cluster."""
    source = st.radio(
        "Workload",
        SOURCES,
        horizontal=True,
        key="whatif_wl_source",
        help="A named preset, your real response lengths, a run log, or a workload YAML/JSON file.",
    )
    if source == "Length file":
        return (*length_file_workload(), True)
    if source == "Run log":
        # its cluster comes with its calibrated profile (workbench/ui/run_log_panel.py)
        return (*run_log_panel.run_log_workload(), False)
    if source == "Workload file":
        return (*inputs.workload_file("whatif_wl_file"), False)
    col, desc = st.columns([1, 2])
    with col:
        wl, wl_id = inputs.workload_preset("Workload preset", "whatif_wl_preset")
    if wl is not None and wl.description:
        desc.caption(wl.description)
    return wl, wl_id, False


def _edit_workload(base: Workload, base_id: str) -> Workload | None:
    """Number inputs over the key fields; the edited,
    fully validated Workload, or None (error shown)."""
    with st.expander(f"Workload fields: {base.name}", expanded=False):
        values: dict[str, Any] = {}
        cols = st.columns(4)
        for i, (name, label, kind, step, fmt, hlp) in enumerate(_WORKLOAD_FIELDS):
            with cols[i % 4]:
                values[name] = st.number_input(
                    label,
                    value=kind(getattr(base, name)),
                    step=kind(step),
                    format=fmt,
                    help=hlp,
                    key=f"whatif_wl:{base_id}:{name}",
                )
        length_values: dict[str, Any] = {}
        if base.lengths.kind == "lognormal":
            st.markdown("**Response-length model**")
            cols = st.columns(4)
            for i, (name, label, kind, step, fmt, hlp) in enumerate(_LENGTH_FIELDS):
                with cols[i % 4]:
                    length_values[name] = st.number_input(
                        label,
                        value=kind(getattr(base.lengths, name)),
                        step=kind(step),
                        format=fmt,
                        help=hlp,
                        key=f"whatif_wl:{base_id}:lengths.{name}",
                    )
        else:
            st.caption(
                f"Lengths: {base.lengths.kind} of measured responses (`{base.lengths.data}`)."
            )
    try:
        edited = replace(base, **values, lengths=replace(base.lengths, **length_values))
        edited.check()
        # Workload.check() covers its own fields;
        # from_mapping re-checks the nested length model too.
        edited = from_mapping(Workload, to_mapping(edited))
    except (ConfigError, FieldError) as exc:
        st.error(f"Invalid workload: {exc}")
        return None
    st.caption(
        f"{edited.workers} engines x {edited.gpus_per_worker} GPUs = {edited.gpus} GPUs; "
        f"{edited.sequences_per_step:,} sequences per step, up to {edited.max_response_tokens:,} "
        "tokens each."
    )
    return edited


def _pick_policies() -> tuple[list[str], list[Policy]]:
    """Chosen presets (in the order picked) then valid uploaded files; labels are unique."""
    presets = policy_presets()
    default = [p for p in DEFAULT_POLICIES if p in presets]
    names = st.multiselect(
        "Policies",
        presets,
        default=default,
        key="whatif_policies",
        help="Speedups are relative to the first policy in this list.",
    )
    labels: list[str] = []
    policies: list[Policy] = []
    for name in names:
        try:
            policies.append(load_policy(name))
            labels.append(name)
        except (ConfigError, FieldError) as exc:
            st.error(f"Policy preset '{name}' is invalid: {exc}")
    uploaded = inputs.policy_uploads(
        "whatif_policy_files", "Extra policy files (run after the presets)", set(labels)
    )
    return labels + [p.name for p in uploaded], policies + uploaded


# ---------------------------------------------------------------- running


def _key(workload: Workload, policy: Policy, profile: Profile, seed: int, steps: int) -> str:
    return json.dumps(
        [to_mapping(workload), to_mapping(policy), to_mapping(profile), seed, steps],
        sort_keys=True,
        default=str,
    )


def _signature(
    workload: Workload,
    labels: list[str],
    policies: list[Policy],
    profile: Profile,
    seed: int,
    steps: int,
) -> str:
    keys = [_key(workload, p, profile, seed, steps) for p in policies]
    return inputs.digest(json.dumps([labels, keys]).encode())


def _run(
    workload: Workload,
    labels: list[str],
    policies: list[Policy],
    profile: Profile,
    seed: int,
    steps: int,
) -> Result | None:
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
            bar.progress(
                min(1.0, (i + (m.rl_step + 1) / steps) / n),
                text=f"{label}: step {m.rl_step + 1}/{steps}",
            )

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
    return Result(
        _signature(workload, labels, policies, profile, seed, steps),
        workload,
        profile,
        seed,
        steps,
        labels,
        policies,
        runs,
    )


# ---------------------------------------------------------------- page


def _cluster(
    base: Workload | None, base_id: str, unplaced: bool
) -> tuple[Workload | None, Profile | None]:
    st.subheader("Cluster")
    if base is None:
        st.caption("The cluster follows the workload: pick one above.")
        return None, None
    calibrated = run_log_panel.calibrated_profile(base_id)
    if calibrated is not None:  # a run log's engines, calibrated on its own steps
        workload, profile = base, calibrated
        st.caption("The run log's cluster, its costs calibrated "
                   f"on the log: profile `{calibrated.name}`.")
    else:
        workload, profile = cluster_picker.pick(base, base_id, ask=unplaced)
        if workload is not None:
            profile = cluster_picker.other_profile(workload, profile, base_id)
    # SD's speedup by batch on this cluster (workbench/ui/sd_curve_panel.py), the page's width: its
    # four inputs, chart and table do not fit a side column.
    sd_curve_panel.render(profile, base_id)
    return workload, profile


def render() -> None:
    st.title("What-if")
    st.caption(
        "Simulate RL steps of a long-tail rollout under different speculative-decoding policies on "
        "your "
        "cluster and workload, see how much each would speed training up, and why."
    )
    base, base_id, unplaced = _base_workload()
    placed, profile = _cluster(base, base_id, unplaced)
    workload = _edit_workload(placed, base_id) if placed is not None else None
    if workload is not None and profile is not None:
        profile = cluster_picker.checked(workload, profile)

    col_pol, col_run = st.columns([2, 1])
    with col_pol:
        labels, policies = _pick_policies()
    with col_run:
        c1, c2 = st.columns(2)
        steps = int(
            c1.number_input(
                "Steps", min_value=1, max_value=100, value=3, step=1, key="whatif_steps_n"
            )
        )
        seed = int(
            c2.number_input(
                "Seed",
                min_value=0,
                value=DEFAULT_SEED,
                step=1,
                key="whatif_seed",
                help="Draws the response lengths (common to every policy); `tlt sim` uses 0.",
            )
        )

    problems = [
        what
        for what, ok in (
            ("a valid workload", workload is not None),
            ("its cluster", profile is not None),
            ("at least one policy", bool(policies)),
        )
        if not ok
    ]
    ready = not problems
    signature = _signature(workload, labels, policies, profile, seed, steps) if ready else None

    clicked = st.button("Run simulation", type="primary", disabled=not ready, key="whatif_run")
    # Results on arrival: a session's first visit simulates the defaults (a second or two for the
    # default workload) instead of showing an empty page.
    arrived = not st.session_state.get(_STATE_ARRIVED)
    st.session_state[_STATE_ARRIVED] = True
    if ready and (clicked or (arrived and _STATE_RESULT not in st.session_state)):
        result = _run(workload, labels, policies, profile, seed, steps)
        if result is not None:
            st.session_state[_STATE_RESULT] = result
    if not ready:
        st.warning("To run, choose " + " and ".join(problems) + ".")

    result: Result | None = st.session_state.get(_STATE_RESULT)
    stale = result is not None and not (ready and same_subject(result, workload, profile))
    if stale and ready:
        # Another workload or cluster: its results would read as this input's. They stay in the
        # session and come back with their inputs.
        st.info(f"Press **Run simulation** to simulate **{workload.name}** on "
                f"**{profile.name}**: the last results were for {result.workload.name} on "
                f"{result.profile.name}.")
    elif result is not None and not stale:
        whatif_results.show(result, signature)
    elif ready:
        st.info("Press **Run simulation** to compare the policies.")
    fresh = result is not None and not stale and result.signature == signature
    agentic_panel.render(workload, profile, labels, policies, seed, steps,
                         result.runs if fresh else None)
    tail_panel.render(workload, profile, policies, seed)


def same_subject(result: Result, workload: Workload | None, profile: Profile | None) -> bool:
    """Whether `result` simulated this workload on this profile (policies, steps and the seed may
    differ: the results then say the inputs changed)."""
    return (workload is not None and profile is not None
            and inputs.subject(result.workload, result.profile) == inputs.subject(workload,
                                                                                   profile))
