"""Tune page: an Optuna study over the Policy space, scored by the simulator (`workbench.tune`).

Pick a workload and profile, the target stack the tuned policy will run on (its search space holds
only what that stack runs), the number of trials and seeds, a study name and its storage, and press
"Run study": the study runs in this process, with a progress bar fed by an Optuna callback. Then:
the tuned policy with its exports for the target, the convergence chart, the Pareto front in
multi-objective mode, and the tuned policy against the presets on the same seeds. A study in a
SQLite file (by default runs/tlt-studies.db, named on the page) survives the page (and the app):
running the same study name again resumes it, and `optuna-dashboard <storage URL>` opens it. The
study's name, and what the storage holds under it before anything runs: workbench/ui/tune_study.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import yaml

from workbench import tune
from workbench.contracts.cluster_check import check_workload_profile
from workbench.contracts.policy import Policy, load_policy
from workbench.contracts.profile import load_profile, profile_presets
from workbench.contracts.provenance import profile_choice_label
from workbench.contracts.schema import ConfigError, FieldError, to_mapping
from workbench.ui import inputs, tune_study
from workbench.ui.export import figure_downloads, policy_export_buttons

_STATE_RESULT = "tune_result"


@dataclass
class _Result:
    """One press of "Run study", with everything the page shows computed once."""

    study_name: str
    storage: str
    spec: tune.TuneSpec
    trials: int
    ran: int
    full: bool  # the study held its trials already: none ran
    best: Policy
    convergence: pd.DataFrame
    pareto: pd.DataFrame
    comparison: pd.DataFrame
    front_policies: dict[int, Policy]  # trial number -> policy, for the Pareto front's downloads


# ---------------------------------------------------------------- charts


def convergence_figure(conv: pd.DataFrame) -> go.Figure:
    """Each trial's step time and the best so far, over whole trial numbers from 0."""
    fig = go.Figure()
    presets = conv[conv["preset"] != ""]
    others = conv[conv["preset"] == ""]
    fig.add_trace(go.Scatter(x=others["trial"], y=others[tune.STEP_TIME], mode="markers",
                             name="trial", marker=dict(color="#9aa5b1", size=6),
                             hovertemplate="trial %{x}<br>%{y:.2f} s<extra></extra>"))
    if len(presets):
        fig.add_trace(go.Scatter(x=presets["trial"], y=presets[tune.STEP_TIME], mode="markers+text",
                                 name="preset", text=presets["preset"], textposition="top center",
                                 marker=dict(color="#e4a11b", size=9, symbol="diamond"),
                                 hovertemplate="preset %{text}<br>%{y:.2f} s<extra></extra>"))
    fig.add_trace(go.Scatter(x=conv["trial"], y=conv["best_so_far"], mode="lines",
                             name="best so far", line=dict(color="#1f77b4", width=3, shape="hv")))
    last = int(conv["trial"].max()) if len(conv) else 0
    fig.update_layout(xaxis_title="trial", yaxis_title="mean step time (s)", height=380,
                      margin=dict(l=10, r=10, t=30, b=10), legend=dict(
                          orientation="h", yanchor="top", y=-0.2))
    # trials are whole numbers from 0: no axis from -1, no tick at 0.5
    fig.update_xaxes(range=[-0.5, max(last, 1) + 0.5], tickformat="d",
                     dtick=1 if last < 10 else None)
    return fig


def pareto_figure(conv: pd.DataFrame, front: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=conv[tune.STEP_TIME], y=conv[tune.TRAIN_GPU_S], mode="markers",
                             name="trial", marker=dict(color="#9aa5b1", size=6), text=conv["trial"],
                             hovertemplate="trial %{text}<br>%{x:.2f} "
                                           "s<br>%{y:,.0f} GPU-s<extra></extra>"))
    fig.add_trace(go.Scatter(x=front[tune.STEP_TIME], y=front[tune.TRAIN_GPU_S],
                             mode="lines+markers", name="Pareto front",
                             line=dict(color="#d62728", shape="hv"), marker=dict(size=10),
                             text=front["trial"],
                             hovertemplate="trial %{text}<br>%{x:.2f} "
                                           "s<br>%{y:,.0f} GPU-s<extra></extra>"))
    fig.update_layout(xaxis_title="mean step time (s)",
                      yaxis_title="drafter-training GPU-s per step", height=380,
                      margin=dict(l=10, r=10, t=30, b=10), legend=dict(
                          orientation="h", yanchor="top", y=-0.2))
    return fig


# ---------------------------------------------------------------- running


def _run(spec: tune.TuneSpec, study_name: str, storage: str, store, trials: int,
         sampler_seed: int, yours: list[Policy]) -> _Result | None:
    try:
        with inputs.notices():  # trials a killed process left running, failed now
            study = tune.open_study(spec, study_name, store, sampler_seed=sampler_seed)
    except ConfigError as exc:
        st.error(str(exc))
        return None
    have = len(tune.finished_trials(study))
    full = have >= trials
    bar = st.progress(min(1.0, have / trials), text=f"{have}/{trials} trials done")
    t0 = time.perf_counter()

    def on_trial(study, trial) -> None:
        done = len(tune.finished_trials(study))
        complete = len(tune.complete_trials(study))
        if len(study.directions) == 1 and complete:
            best = f"best {study.best_value:,.2f} s"
        else:
            best = f"front {len(study.best_trials)} points" if complete else ""
        pruned = done - complete
        bar.progress(min(1.0, done / trials), text=f"{done}/{trials} trials done ({pruned} pruned "
                                                   "after a seed) · "
                                                   f"{best} · {time.perf_counter() - t0:.0f} s")

    try:
        ran = tune.run_study(study, spec, trials, [on_trial])
    except Exception as exc:  # a simulator bug must not take the page down
        bar.empty()
        st.error(f"The study stopped: {type(exc).__name__}: {exc}. "
                 "Finished trials are kept; run again to resume.")
        return None
    if not tune.complete_trials(study):
        bar.empty()
        st.error("The study has no complete trial.")
        return None
    bar.progress(1.0, text="Comparing with the presets…")
    best = tune.best_policy(study)
    front = tune.pareto_frame(study)
    front_policies = tune.front_policies(study, front, best.name)
    comparison = tune.comparison_frame(spec, best, [load_policy(n) for n in tune.PRESETS] + yours,
                                       study)
    bar.empty()
    return _Result(study_name, storage, spec, trials, ran, full, best,
                   tune.convergence_frame(study), front, comparison, front_policies)


# ---------------------------------------------------------------- page


def _policy_yaml(policy: Policy) -> str:
    return yaml.safe_dump(to_mapping(policy), sort_keys=False)


def _show(res: _Result) -> None:
    spec = res.spec
    st.divider()
    st.subheader("Results")
    st.caption(f"Study **{res.study_name}** in `{res.storage}` · {spec.workload.name} on "
               f"{spec.profile.name} · target **{tune.SPACES[spec.target].label}** · seeds "
               f"0..{spec.seeds - 1} x {spec.n_steps} steps (the same draws for every "
               f"trial) · {len(res.convergence)} complete trial"
               f"{'' if len(res.convergence) == 1 else 's'}, {res.ran} of them run now")
    if res.full:
        st.warning(f"No trial ran now: study **{res.study_name}** already held its {res.trials} "
                   "trials. Raise **Trials** above that to run more, or give a new study name.")
    table = res.comparison.set_index("policy")
    tuned = table.loc[res.best.name]
    # The best preset the target runs too (the others are marked in the table's note).
    runnable = table.drop(index=res.best.name)
    inside = ~runnable["note"].str.startswith("outside")
    runnable = runnable[inside] if inside.any() else runnable
    best_preset = runnable[tune.STEP_TIME].idxmin()
    vs_preset = table.loc[best_preset, tune.STEP_TIME] / tuned[tune.STEP_TIME]
    cols = st.columns(3)
    cols[0].metric("Tuned step time", f"{tuned[tune.STEP_TIME]:,.1f} s")
    cols[1].metric("Speedup vs baseline", f"{tuned['speedup']:.2f}x")
    cols[2].metric(f"vs best preset it runs ({best_preset})", f"{vs_preset:.2f}x")
    not_yet = not_tuned_yet(res.convergence, best_preset, vs_preset)
    if not_yet:
        st.warning(not_yet)
    _deploy(res)

    st.subheader("Convergence")
    conv_fig = convergence_figure(res.convergence)
    st.plotly_chart(conv_fig, key="tune_convergence", width="stretch")
    figure_downloads(conv_fig, f"convergence-{res.study_name}", "tune_fig_convergence")
    if spec.multi_objective:
        st.subheader("Pareto front: step time vs drafter-training compute")
        front_fig = pareto_figure(res.convergence, res.pareto)
        st.plotly_chart(front_fig, key="tune_pareto", width="stretch")
        figure_downloads(front_fig, f"pareto-{res.study_name}", "tune_fig_pareto")
        st.dataframe(res.pareto, hide_index=True, width="stretch", key="tune_pareto_table")
        st.caption("Spot training uses GPUs that would otherwise idle: it costs no step time, "
                   "but it is GPU time. Each point is a policy no other trial beats on both.")

    st.subheader("Tuned policy vs presets")
    shown = table.reset_index()
    why = {r.policy: r.note.split(": ", 1)[1] for r in shown.itertuples() if r.note.startswith(
        "outside")}
    # the reasons follow the table, in full
    shown["note"] = [n.split(": ", 1)[0] for n in shown["note"]]
    st.dataframe(shown, width="stretch", key="tune_comparison", hide_index=True,
                 column_config={"policy": st.column_config.TextColumn("Policy", width="medium"),
                                "note": st.column_config.TextColumn("Note", width="large"),
                                tune.STEP_TIME: st.column_config.NumberColumn(
                                    "Step time (s)", format="%.2f"),
                                "speedup": st.column_config.NumberColumn("Speedup", format="%.2fx"),
                                "rollout_time_s": st.column_config.NumberColumn(
                                    "Rollout (s)", format="%.2f"),
                                tune.TRAIN_GPU_S: st.column_config.NumberColumn(
                                    "Spot-train GPU-s/step",
                                     format="%.0f"),
                                "mean_accept_len": st.column_config.NumberColumn(
                                    "Accepted len", format="%.2f")})
    st.caption("Speedup = baseline's mean step time / the "
               "policy's, on the study's seeds and steps.")
    if why:
        reasons = "; ".join(f"**{k}**: {v}" for k, v in why.items())
        st.caption("Outside the search space: " + reasons + ".")



def not_tuned_yet(conv: pd.DataFrame, best_preset: str, vs_preset: float) -> str:
    """What to say when the study's answer is no tuned policy yet ("" when it is one): its best
    trial is a preset it started from, or a preset the stack runs is faster."""
    n = len(conv)
    held = f"{n} complete trial" + ("" if n == 1 else "s")
    best = conv.loc[conv[tune.STEP_TIME].idxmin()] if n else None
    said = []
    if best is not None and best["preset"]:
        said.append(f"The study's best of its {held} is the preset **{best['preset']}** it "
                    "started from: no searched policy has beaten it yet.")
    if vs_preset < 1.0:
        said.append(f"The preset **{best_preset}**, which this stack runs, is {1 / vs_preset:.2f}x "
                    f"as fast as the tuned policy: deploy it instead, or raise **Trials** and run "
                    "the study again (it resumes).")
    return " ".join(said)


def _deploy(res: _Result) -> None:
    """The tuned policy (or a point of the front) to download, and its exports for the stacks."""
    spec = res.spec
    policy = res.best
    if spec.multi_objective and len(res.front_policies) > 1:
        options = list(res.pareto["trial"])
        labels = {int(r.trial): f"trial {int(r.trial)}: {r.step_time_s:,.2f} "
                                f"s, {r.train_gpu_s:,.0f} GPU-s"
                  for r in res.pareto.itertuples()}
        pick = st.selectbox("Policy to download (a point of the front)", options, index=0,
                            format_func=lambda n: labels[int(n)], key="tune_front_pick")
        if int(pick) != int(options[0]):  # the first point is the fastest: the tuned policy itself
            policy = res.front_policies[int(pick)]
    with st.expander(f"Policy {policy.name}", expanded=False):
        st.code(_policy_yaml(policy), language="yaml")
    st.download_button("Download policy (YAML)", _policy_yaml(policy),
                       file_name=f"{policy.name}.yaml", mime="application/x-yaml",
                       key="tune_download", on_click="ignore")
    st.caption(f"Run it with `tlt sim --workload {spec.workload.name} --policy "
               f"baseline,{policy.name}.yaml --out DIR`, or resume the study with "
               f"`tlt tune --study {res.study_name} --storage {res.storage}`.")
    policy_export_buttons(policy, "tune_export", first=tune.EXPORTS.get(spec.target))


def _target(workload, profile) -> str:
    """The target stack: a radio of the stacks, the workload's engine first picked."""
    auto = tune.default_target(profile, workload)
    target = st.radio("Target stack", tune.TARGETS, index=tune.TARGETS.index(auto), horizontal=True,
                      key=f"tune_target:{workload.name}:{profile.name}",
                      format_func=lambda k: tune.SPACES[k].label,
                      help="Where the tuned policy will run: the search holds only what that stack "
                           "runs, so it "
                           "exports without refusal. vLLM / veRL: a fixed table of chains; SGLang "
                           "/ FastRL: EAGLE "
                           "trees per bucket and spot training; tlt train: this project's vLLM "
                           "backend with the "
                           "bandits; simulator only: anything the simulator runs.")
    st.caption(f"Picked first: the workload's engine ({tune.SPACES[auto].label}).")
    return target


def render() -> None:
    st.title("Tune")
    st.caption("Search the policy space (SD threshold, draft length per batch-size bucket, "
               "drafter, spot training; "
               "bandits where the stack runs them) with Optuna for the stack you deploy on, "
               "scoring each policy by "
               "its simulated step time.")

    c1, c2, c3 = st.columns(3)
    with c1:
        workload, _ = inputs.workload_choice("tune", preset_key="tune_wl")
        if workload is None:
            return
        wl_name = workload.name
        profiles = profile_presets()
        own = workload.profile if workload.profile in profiles else profiles[0]
        prof_name = st.selectbox("Profile", profiles, index=profiles.index(own),
                                 key=f"tune_profile:{wl_name}", format_func=profile_choice_label)
        try:
            profile = load_profile(prof_name)
            check_workload_profile(workload, profile)
        except (ConfigError, FieldError) as exc:
            st.error(f"Profile '{prof_name}' cannot be used: {exc}")
            return
    with c2:
        trials = int(st.number_input("Trials", min_value=1, max_value=5000, value=100, step=10,
                                     key="tune_trials",
                                     help="Trials the study should hold (hopeless ones are pruned "
                                          "after a seed); a "
                                          "resumed study runs only the rest."))
        seeds = int(st.number_input("Seeds", min_value=1, max_value=50, value=3, step=1,
                                    key="tune_seeds",
                                    help="Each policy is scored on seeds "
                                         "0..K-1, the same for every trial."))
        steps = int(st.number_input("Steps per simulation", min_value=1, max_value=100,
                                    value=workload.steps, step=1, key=f"tune_steps:{wl_name}"))
    with c3:
        multi = st.toggle("Multi-objective", value=False, key="tune_multi",
                          help="Step time vs drafter-training "
                               "compute: the Pareto front of the two.")
        name_box = st.container()  # filled once the inputs the name follows are known
        storage = tune_study.storage_input()
        with st.expander("More"):
            warm = st.checkbox("Allow warm start (simulator only and tlt train)", value=False,
                               key="tune_warm",
                               help="Let the search use a drafter trained offline before "
                                    "RL; the objective does not charge that training. On "
                                    "vLLM, SGLang and veRL an EAGLE drafter is the "
                                    "checkpoint you give: warm-started always.")
            sampler_seed = int(st.number_input("Sampler seed", min_value=0, value=0, step=1,
                                               key="tune_sampler_seed"))
    target = _target(workload, profile)
    spec = tune.TuneSpec(workload, profile, seeds=seeds, steps=steps, multi_objective=multi,
                         allow_warm_start=warm, target=target)
    store = None if tune_study.unwritten(storage) else tune_study.open_storage(storage)
    with name_box:
        readable = store is not None or tune_study.unwritten(storage)
        study_name = tune_study.name_and_status(spec, store, trials) if readable else None

    yours = inputs.policy_uploads("tune_policy_files",
                                  "Your policy files, compared with the tuned one",
                                  set(tune.PRESETS))
    if st.button("Run study", type="primary", disabled=study_name is None, key="tune_run"):
        if store is None:  # made now, at the first study
            store = tune_study.open_storage(storage)
        result = (_run(spec, study_name, storage, store, trials, sampler_seed, yours)
                  if store is not None else None)
        if result is not None:
            st.session_state[_STATE_RESULT] = result
            st.rerun()  # what the storage holds now, under the name box
    result: _Result | None = st.session_state.get(_STATE_RESULT)
    if result is None:
        return
    # A study of other inputs is another question's answer: not shown under these.
    if (result.study_name, result.spec.fingerprint()) != (study_name, spec.fingerprint()):
        st.info(f"Press **Run study** for these inputs: the last results were study "
                f"**{result.study_name}**'s ({result.spec.workload.name}, target "
                f"{tune.SPACES[result.spec.target].label}).")
        return
    _show(result)


if __name__ == "__main__":  # pragma: no cover - `streamlit run workbench/ui/tune_page.py`
    render()
