"""Plan page: the cluster shape (TP x engines x max batch x policy) for a GPU budget or a deadline
(`workbench.plan`, as `tlt plan`).

Pick the job (a workload), the GPU type, a budget (at most N GPUs) or a deadline, the price of a
GPU-hour and its currency, the stack you run (only the policies it runs are searched, so the chosen
one exports) and what to search, and press "Plan": an NSGA-II search projects each shape's whole
run (days, cost, energy) on profiles derived from NVIDIA's measured database. Then: the chosen
shape with its exports, the Pareto front of run time vs cost, the shapes that cannot run and why,
and the chosen workload, policy and profile to download. The chosen shape's days and cost carry
the 90% interval of its mean step (workbench/compare/intervals.py: its profile's fit error, the
acceptance, the lengths' sampling), from a few steps of it simulated again
(workbench/compare/run_interval.py).
"""

from __future__ import annotations

import json
import time

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from workbench import plan as planning
from workbench.compare.intervals import PolicyInterval, interval_lines
from workbench.compare.run_interval import carried, chosen_interval, covers_line
from workbench.calibrate.database.aiconfigurator import FRAMEWORKS, gpu_names
from workbench.contracts.policy import load_policy, policy_presets
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.workload import load_workload, workload_presets
from workbench.tune import EXPORTS, SPACES, TARGETS, refusal
from workbench.ui.export import figure_downloads, policy_export_buttons

_STATE_RESULT = "plan_result"
_STATE_INTERVAL = "plan_chosen_interval"  # the chosen shape's PolicyInterval (None: none)
_TP_CHOICES = (1, 2, 4, 8)
_BATCH_CHOICES = (32, 64, 128, 256, 512)


def front_figure(result: planning.Plan, currency: str = "") -> go.Figure:
    """Every shape that ran (days vs cost), the front, the chosen one, the deadline."""
    ran = [t for t in result.trials if t.days is not None]
    hover = "%{text}<br>%{x:.2f} days<br>%{y:,.0f}<extra></extra>"
    fig = go.Figure()
    for name, rows, marker in (("shape", [t for t in ran if t.feasible],
                                dict(color="#9aa5b1", size=7)),
                               ("deadline missed", [t for t in ran if not t.feasible],
                                dict(color="#c0c0c0", size=7, symbol="x"))):
        if rows:
            fig.add_trace(go.Scatter(x=[t.days for t in rows], y=[t.cost for t in rows],
                                     mode="markers", name=name, marker=marker,
                                     text=[t.shape.label for t in rows], hovertemplate=hover))
    front = result.front
    fig.add_trace(go.Scatter(x=[t.days for t in front], y=[t.cost for t in front],
                             mode="lines+markers", name="Pareto front",
                             line=dict(color="#d62728", shape="hv"), marker=dict(size=10),
                             text=[t.shape.label for t in front], hovertemplate=hover))
    c = result.chosen
    if c is not None:
        fig.add_trace(go.Scatter(x=[c.days], y=[c.cost], mode="markers", name="chosen",
                                 text=[c.shape.label], marker=dict(
                                     color="#e4a11b", size=18, symbol="star"), hovertemplate=hover))
    if result.spec.deadline_days is not None:
        fig.add_vline(x=result.spec.deadline_days, line_dash="dash", annotation_text="deadline")
    money = f"{currency} " if currency else ""
    fig.update_layout(xaxis_title="whole run (days)", yaxis_title=f"cost, {money or ''}at {money}"
                      f"{result.spec.price_per_gpu_hour:g} per GPU-hour", height=420,
                      margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h", y=1.08))
    return fig


def trials_frame(trials: list[planning.PlanTrial], sequence_tokens: int,
                 currency: str = "") -> pd.DataFrame:
    headers = [f"cost ({currency})" if h == "cost" and currency else h
               for h in planning.ROW_HEADERS]
    return pd.DataFrame(planning.shape_rows(trials, sequence_tokens), columns=headers)


def _run(spec: planning.PlanSpec) -> planning.Plan | None:
    total = min(spec.trials, spec.space_size)
    bar = st.progress(0.0, text=f"0/{total} shapes")
    seen: set[planning.Shape] = set()
    t0 = time.perf_counter()

    def on_trial(t: planning.PlanTrial) -> None:
        seen.add(t.shape)
        bar.progress(min(1.0, len(seen) / total), text=f"{len(seen)}/{total} shapes · last: "
                                                       f"{t.shape.label} · "
                                                        f"{time.perf_counter() - t0:.0f} s")

    try:
        result = planning.run_plan(spec, on_trial)
    except (ConfigError, FieldError) as exc:
        bar.empty()
        st.error(str(exc))
        return None
    bar.empty()
    return result


def _sure(iv: PolicyInterval | None, value: float, unit: str, fmt: str) -> dict:
    """A tile's 90% interval under its value, as a share of the mean step's."""
    if iv is None:
        return {}
    c = carried(iv.step_s, value)
    return {"delta": f"{c.level:.0%}: {c.low:{fmt}}-{c.high:{fmt}}{unit}", "delta_color": "off",
            "delta_arrow": "off"}


def _show_chosen(result: planning.Plan, currency: str, target: str) -> None:
    c, spec = result.chosen, result.spec
    if c is None:
        st.warning("No shape qualifies: " + (
            "none can run on this budget." if spec.goal == "budget" else
            "none meets the deadline (the front shows the fastest ones)."))
        return
    rule = "fastest within the budget" if spec.goal == "budget" else "cheapest meeting the deadline"
    st.subheader(f"Chosen shape ({rule})")
    iv = st.session_state.get(_STATE_INTERVAL)
    cols = st.columns(4)
    cols[0].metric("Run time", f"{c.days:,.2f} days", **_sure(iv, c.days, " days", ",.2f"))
    cols[1].metric(f"Cost ({currency})" if currency else "Cost",
                   f"{c.cost:,.0f} {currency}".strip(), **_sure(iv, c.cost, "", ",.0f"))
    cols[2].metric("Energy", "unknown" if c.energy_kwh is None else f"{c.energy_kwh:,.0f} kWh")
    cols[3].metric("GPU-hours", f"{c.gpu_hours:,.0f}")
    st.caption(f"{iv.step_s.level:.0%}: {covers_line(iv.covers)}." if iv is not None else
               interval_lines(None, "")[0].capitalize() + ".")
    st.markdown(f"**{c.shape.label}** on {spec.gpu} ({spec.framework}); profile `{c.profile}`; "
                f"mean RL step {c.mean_step_min:,.1f} min; KV cache per engine {c.kv_tokens:,} "
                f"tokens (a full batch at the mean length needs {c.kv_demand_tokens:,}).")
    files = result.chosen_files()
    cols = st.columns(len(files) + 1)
    for col, (name, text) in zip(cols, files.items()):
        col.download_button(f"Download {name}", text, file_name=name, mime="application/x-yaml",
                            key=f"plan_download_{name}", on_click="ignore")
    cols[-1].download_button("Download plan.json", json.dumps(result.to_dict(), indent=2) + "\n",
                             file_name="plan.json", mime="application/json",
                             key="plan_download_json", on_click="ignore")
    st.caption("Put the three YAML files in one directory: `tlt sim "
               "--workload workload.yaml --policy policy.yaml --out DIR` runs "
               "the chosen shape (the workload names profile.yaml beside it).")
    policy_export_buttons(result.chosen_policy(), "plan_export", first=EXPORTS.get(target))


def _show(result: planning.Plan, currency: str, target: str) -> None:
    spec = result.spec
    st.divider()
    st.caption(f"{spec.workload.name} on {spec.gpu}: "
               f"{len({t.shape for t in result.trials})} shapes in {len(result.trials)} "
               f"proposals, {result.seconds:.1f} s. {result.method}.")
    _show_chosen(result, currency, target)
    st.subheader("Pareto front: run time vs cost")
    fig = front_figure(result, currency)
    st.plotly_chart(fig, key="plan_front", width="stretch")
    figure_downloads(fig, f"plan-{spec.workload.name}-{spec.gpu}", "plan_fig_front")
    st.dataframe(trials_frame(result.front, spec.sequence_tokens, currency), hide_index=True,
                 width="stretch", key="plan_front_table")
    bad = result.screened + [t for t in result.trials if t.status == "infeasible"]
    if bad:
        with st.expander(f"Shapes that cannot run ({len({t.shape for t in bad})})"):
            st.dataframe(trials_frame(bad, spec.sequence_tokens, currency), hide_index=True,
                         width="stretch", key="plan_infeasible_table")
    st.caption("Energy: GPU board power only. Each point is one shape's whole run, projected by "
               "the simulator; the front holds the shapes no other beats on both days and cost.")


def _policies(target: str) -> list[str]:
    """The policy presets the target runs (the only ones the plan may choose: they export
    unchanged)."""
    runs, not_runs = [], []
    for name in policy_presets():
        try:
            (runs if refusal(load_policy(name), target) is None else not_runs).append(name)
        except (ConfigError, FieldError):
            continue
    if not_runs:
        st.caption(f"Not run by {SPACES[target].label}: " + ", ".join(not_runs) + ".")
    return runs


def _inputs() -> tuple[planning.PlanSpec | None, str, str]:
    c1, c2, c3 = st.columns(3)
    with c1:
        presets = workload_presets()
        wl_name = st.selectbox(
            "Workload (the job)", presets, key="plan_wl",
            index=presets.index("tlt-eval-qwen2.5-32b") if "tlt-eval-qwen2.5-32b" in presets else 0)
        gpus = gpu_names()
        gpu = st.selectbox("GPU", gpus, index=gpus.index("h100") if "h100" in gpus else 0,
                           key="plan_gpu")
        framework = st.selectbox("Framework", FRAMEWORKS, index=FRAMEWORKS.index("sglang"),
                                 key="plan_framework")
        target = st.selectbox("Target stack", TARGETS, key=f"plan_target:{framework}",
                              index=TARGETS.index("vllm" if framework == "vllm" else "sglang"),
                              format_func=lambda k: SPACES[k].label,
                              help="Only the policies this stack runs are searched, so the chosen "
                                   "one exports.")
    with c2:
        goal = st.radio("Goal", ("GPU budget", "Deadline"), horizontal=True, key="plan_goal")
        if goal == "GPU budget":
            budget = int(st.number_input("GPUs (at most)", min_value=1, value=64, step=8,
                                         key="plan_gpus"))
            deadline, max_gpus = None, 512
        else:
            deadline = float(st.number_input("Deadline (days)", min_value=0.001, value=7.0,
                                             key="plan_deadline"))
            max_gpus = int(st.number_input("Most GPUs searched", min_value=1, value=512, step=8,
                                           key="plan_max_gpus"))
            budget = None
        p1, p2 = st.columns([2, 1])
        price = float(p1.number_input("Price per GPU-hour", min_value=0.0, value=2.5, step=0.1,
                                      key="plan_price"))
        currency = p2.text_input("Currency", value="USD", key="plan_currency").strip()
    with c3:
        offered = _policies(target)
        default = [p for p in ("baseline", "tlt-base", "tlt", "static-sd") if p in offered]
        pols = st.multiselect("Policies", offered, default=default, key=f"plan_policies:{target}")
        tps = st.multiselect("TP", _TP_CHOICES, default=list(_TP_CHOICES), key="plan_tp")
        batches = st.multiselect("Max batch per engine", _BATCH_CHOICES, default=[64, 128, 256],
                                 key="plan_batch")
        with st.expander("Search"):
            trials = int(st.number_input("Shapes", min_value=1, value=40, key="plan_trials"))
            steps = int(st.number_input("RL steps of the run", min_value=1, value=20,
                                        key="plan_steps"))
            seeds = int(st.number_input("Seeds", min_value=1, value=1, key="plan_seeds"))
            seed = int(st.number_input("Sampler seed", min_value=0, value=0, key="plan_seed"))
    try:
        spec = planning.PlanSpec(load_workload(wl_name), tuple(load_policy(p) for p in pols), gpu,
                                 price, framework, "", tuple(sorted(tps)), tuple(sorted(batches)),
                                 budget, deadline, max_gpus, trials, steps,
                                 planning.DEFAULT_SAMPLE_STEPS, seeds, seed)
        spec.check()
    except (ConfigError, FieldError) as exc:
        st.error(str(exc))
        return None, currency, target
    return spec, currency, target


def render() -> None:
    st.title("Plan")
    st.caption("Which cluster shape (TP, engines, max batch, policy) runs your RL job "
               "fastest on a GPU budget, or cheapest by a deadline, with a policy your "
               "stack runs: the Pareto front of run time vs cost, from profiles of "
               "NVIDIA's measured operator database (`tlt plan` on the command line).")
    spec, currency, target = _inputs()
    if st.button("Plan", type="primary", disabled=spec is None,
                 key="plan_run") and spec is not None:
        result = _run(spec)
        if result is not None:
            st.session_state[_STATE_RESULT] = result
            with st.spinner("How sure the chosen shape is: simulating it again…"):
                st.session_state[_STATE_INTERVAL] = chosen_interval(result.chosen_run())
    result = st.session_state.get(_STATE_RESULT)
    if result is not None:
        _show(result, currency, target)


if __name__ == "__main__":  # pragma: no cover - `streamlit run workbench/ui/plan_page.py`
    render()
