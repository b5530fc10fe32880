"""Compare page: policies over several seeds with their spread, and the bandits' regret.

Pick a workload preset, policy presets, seeds and steps; "Run comparison"
calls `workbench.compare.policies.compare` (seeds 0..K-1, the same draws for every
policy) and shows the per-policy summary, the 4-panel figure and a download of
compare.json. The "Bandit regret" expander runs `workbench.compare.regret.bandit_regret`
on the same workload, seeds and steps for a base policy that uses speculative
decoding. Results live in st.session_state, so widgets re-render them without
simulating again.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.compare.intervals import interval_lines
from workbench.compare.policies import Comparison, compare
from workbench.contracts.cluster_check import check_workload_profile
from workbench.contracts.policy import Policy, load_policy, policy_presets
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.workload import Workload
from workbench.compare.regret import RegretReport, bandit_regret
from workbench.ui import inputs, interval_view, run_totals
from workbench.ui.why_view import show_whys
from workbench.ui.export import Report, figure_downloads, policy_export_buttons, report_button

DEFAULT_POLICIES = ("baseline", "static-sd", "tlt", "april", "rollpacker")
_STATE_RESULT = "compare_result"
# the compared Policy objects by name (uploaded ones have no preset)
_STATE_POLICIES = "compare_result_policies"
_STATE_REGRET = "compare_regret_result"
_STATE_REGRET_SUBJECT = "compare_regret_subject"
_STATE_SUBJECT = "compare_result_subject"  # inputs.subject of the result's workload and profile

_SUMMARY_HELP = {
    "What it does to RL": "lossless: trains on exactly what the baseline would; off-policy: on "
                          "samples from older "
                          "weights (docs/formats.md, rollout modes).",
    "Step (s)": "Mean RL step time over seeds ± its standard deviation.",
    "Bubble": "Idle worker-time / worker-time in the rollout.",
    "Tail": "Worker-time decoding at a batch <= 1/8 of the step's largest / worker-time in the "
            "rollout.",
    "Accepted len": "Tokens per verify pass over SD passes (1 = no SD).",
    "Speedup": "First policy's mean step time / this policy's (ratio of means).",
    "Paired range": "Smallest and largest per-seed speedup (the same draws for both policies).",
}


def summary_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as the page shows it: text, one precision per figure (speedups 2 decimals, as
    every page and `tlt compare`), the RL column first so no width cuts it off."""
    s = summary
    out = pd.DataFrame(index=s.index)
    out["What it does to RL"] = s["nature"]
    out["Step (s)"] = [f"{m:,.1f} ± {d:,.1f}" for m, d in zip(
        s["step_time_s_mean"], s["step_time_s_std"])]
    out["Rollout (s)"] = [f"{m:,.1f}" for m in s["rollout_time_s_mean"]]
    out["Bubble"] = [f"{v:.1%}" for v in s["bubble_fraction_mean"]]
    out["Tail"] = [f"{v:.1%}" for v in s["tail_fraction_mean"]]
    out["Accepted len"] = [f"{v:.2f}" for v in s["mean_accept_len_mean"]]
    out["Spot training"] = [f"{v:.1%}" for v in s["drafter_train_fraction_mean"]]
    out["Speedup"] = [f"{v:.2f}x" for v in s["speedup"]]
    out["Paired range"] = [f"{a:.2f}-{b:.2f}x" for a, b in zip(
        s["speedup_paired_min"], s["speedup_paired_max"])]
    return out


_REGRET_COLUMNS = {
    "label": st.column_config.TextColumn("Bandit"),
    "regret_s_mean": st.column_config.NumberColumn(
        "Regret (s)", format="%.2f",
        help="Worker-seconds lost vs the best fixed draft length per bucket."),
    "regret_s_std": st.column_config.NumberColumn("± std", format="%.2f"),
    "regret_pct_mean": st.column_config.NumberColumn("% of rollout", format="%.2f%%",
                                                     help="Regret / rollout worker-time."),
    "clairvoyant_regret_s_mean": st.column_config.NumberColumn(
        "Clairvoyant (s)", format="%.2f",
        help="Against the best arm per segment (>= regret)."),
    "decisions_mean": st.column_config.NumberColumn("Decisions", format="%.0f"),
    "step_time_s_mean": st.column_config.NumberColumn("Step (s)", format="%.1f"),
}


def _inputs():
    """The workload (preset or file), the policies
    (presets, then uploaded files), seeds and steps."""
    c1, c2, c3, c4 = st.columns([1.2, 2.4, 0.6, 0.6])
    with c1:
        workload, _ = inputs.workload_choice("compare", preset_key="compare_wl")
    available = policy_presets()
    names = c2.multiselect("Policies", available,
                           default=[p for p in DEFAULT_POLICIES if p in available],
                           key="compare_policies",
                           help="Speedups are relative to the first policy in this list.")
    with c2:
        uploaded = inputs.policy_uploads("compare_policy_files", "Policy files (after the presets)",
                                         set(names))
    seeds = int(c3.number_input("Seeds", min_value=1, max_value=20, value=3, step=1,
                                key="compare_seeds",
                                help="Seeds 0..K-1; each seed draws the same "
                                     "response lengths for every policy."))
    steps = int(c4.number_input("Steps", min_value=1, max_value=50, value=3, step=1,
                                key="compare_steps"))
    return workload, names, uploaded, seeds, steps


def _load(workload: Workload | None, names: list[str], uploaded: list[Policy]):
    if workload is None:
        return None
    try:
        profile = load_profile(workload.profile)
        check_workload_profile(workload, profile)
        policies = [load_policy(n) for n in names] + uploaded
    except (ConfigError, FieldError) as exc:
        st.error(f"Cannot load the inputs: {exc}")
        return None
    return workload, profile, policies


def _run_compare(workload, profile, policies, seeds: int, steps: int) -> Comparison | None:
    bar = st.progress(0.0, text="Simulating…")

    def on_progress(done, total, name, seed):
        bar.progress(done / total, text=f"{name}, seed {seed} ({done}/{total})")

    try:
        result = compare(workload, policies, profile, seeds, steps=steps, on_progress=on_progress)
    except Exception as exc:  # a simulator bug must not take the page down
        bar.empty()
        st.error(f"Comparison failed: {type(exc).__name__}: {exc}")
        return None
    bar.empty()
    return result


def _report(result: Comparison, summary) -> Report:
    """The comparison as a document to send: inputs,
    the summary table, the figure, the per-seed rows."""
    rep = Report(f"Compare: {result.workload}",
                 [f"Profile {result.profile} · {result.steps} step(s) · seeds "
                  f"{result.seeds[0]}..{result.seeds[-1]} (common random numbers: "
                  "every policy sees the same response lengths for a seed)",
                  f"Policies {', '.join(result.policies)}; speedups against {result.reference}"])
    rep.heading("Summary over seeds").table(summary_table(summary))
    for line in interval_lines(result.intervals, result.reference):
        rep.text(line.strip())
    rep.text("Bubble: idle worker-time / rollout worker-time (workers that "
             "finished, waiting for the slowest). Tail: worker-time decoding "
             "at a batch <= 1/8 of the step's largest / rollout worker-time.")
    rep.figure(result.figure(), f"compare-{result.workload}")
    rep.heading("Per seed").table(result.runs.set_index(["policy", "seed"]))
    return rep


def _show_compare(result: Comparison) -> None:
    st.subheader("Results")
    st.caption(f"Workload **{result.workload}** · profile **{result.profile}** · "
               f"{result.steps} step(s) · seeds {result.seeds[0]}..{result.seeds[-1]} (common "
               "random numbers: every policy sees the same response lengths for a seed)")
    summary = result.summary()
    st.dataframe(summary_table(summary), width="stretch", key="compare_summary",
                 column_config={k: st.column_config.TextColumn(k, help=v)
                                for k, v in _SUMMARY_HELP.items()})
    st.caption(f"Means over seeds {result.seeds[0]}..{result.seeds[-1]}. Speedup = "
               f"{result.reference}'s mean step "
               "time / the policy's; paired range = the range over seeds of the per-seed ratio.")
    interval_view.show(result.intervals, result.reference)
    _show_why(result)
    fig = result.figure()
    st.pyplot(fig, clear_figure=False)
    figure_downloads(fig, f"compare-{result.workload}", "compare_fig")
    c1, c2, _ = st.columns([1, 1, 2])
    c1.download_button("Download compare.json", result.to_json(), file_name="compare.json",
                       mime="application/json", key="compare_dl_json", on_click="ignore",
                       icon=":material/data_object:")
    with c2:
        report_button("Download report (HTML)", lambda: _report(result, summary),
                      f"compare-{result.workload}.html", "compare_dl_report")
    with st.expander("Per seed"):
        st.dataframe(result.runs, width="stretch", hide_index=True)
    ran = st.session_state.get(_STATE_POLICIES, {})
    pick = st.selectbox("Policy to export", result.policies,
                        index=result.policies.index(_export_default(result, ran)),
                        key="compare_export_pick",
                        help="First: the fastest lossless policy that speculates (an engine "
                             "setting to export); "
                             "rollout modes such as APRIL's or RollPacker's are the trainer's, not "
                             "the engine's.")
    policy_export_buttons(ran[pick] if pick in ran else load_policy(pick), "compare_export")


def _export_default(result: Comparison, ran: dict[str, Policy]) -> str:
    """The fastest lossless policy that uses SD (what an engine file carries); else the fastest."""
    summary = result.summary()
    policy = lambda n: ran[n] if n in ran else load_policy(n)  # noqa: E731
    engine = [n for n in result.policies if policy(n).uses_sd and policy(n).rollout.lossless]
    pool = summary.loc[engine] if engine else summary
    return str(pool["step_time_s_mean"].idxmin())


def _show_why(result: Comparison) -> None:
    """Why each speedup: the decomposition over seeds (means), one sentence each."""
    show_whys(result.why()[1:], "compare_why",
              f"Means over seeds {result.seeds[0]}..{result.seeds[-1]} of each seed's "
              f"decomposition against {result.reference} (docs/formats.md, 'Why a speedup').")


def _regret_panel(workload, profile, seeds: int, steps: int) -> None:
    with st.expander("Bandit regret vs the oracle schedule", expanded=False):
        st.caption("BEG-MAB, UCB1, epsilon-greedy and the fixed table, each the base "
                   "policy with only `bandit.algorithm` changed, on the same workload, "
                   "seeds and steps. Regret = decode worker-seconds lost against the "
                   "best fixed draft length per batch-size bucket in hindsight.")
        bases = []
        for name in policy_presets():
            try:
                if load_policy(name).uses_sd:
                    bases.append(name)
            except (ConfigError, FieldError):
                continue
        if not bases:
            st.info("No policy preset uses speculative decoding.")
            return
        base_name = st.selectbox("Base policy", bases,
                                 index=bases.index("tlt-cold") if "tlt-cold" in bases else 0,
                                 key="compare_regret_base")
        if st.button("Run regret analysis", key="compare_regret_run", disabled=workload is None):
            bar = st.progress(0.0, text="Simulating bandits…")

            def on_progress(done, total, alg, seed):
                bar.progress(done / total, text=f"{alg}, seed {seed} ({done}/{total})")

            try:
                report = bandit_regret(workload, load_policy(base_name), profile, seeds,
                                       steps=steps, on_progress=on_progress)
                st.session_state[_STATE_REGRET] = report
                st.session_state[_STATE_REGRET_SUBJECT] = inputs.subject(workload, profile)
            except Exception as exc:
                st.error(f"Regret analysis failed: {type(exc).__name__}: {exc}")
            bar.empty()
        report: RegretReport | None = st.session_state.get(_STATE_REGRET)
        subject = st.session_state.get(_STATE_REGRET_SUBJECT)
        if report is None or subject != inputs.subject(workload, profile):
            return  # none yet, or another workload's
        st.caption(f"{report.workload} · base policy **{report.base_policy}** · arms "
                   f"{report.arms} · {report.steps} step(s) · seeds "
                   f"{report.seeds[0]}..{report.seeds[-1]}")
        summary = report.summary()
        st.dataframe(summary[list(_REGRET_COLUMNS)], column_config=_REGRET_COLUMNS, width="stretch",
                     hide_index=True)
        regret_fig = report.figure()
        st.pyplot(regret_fig, clear_figure=False)
        figure_downloads(regret_fig, f"regret-{report.workload}", "compare_regret_fig")
        st.markdown("Oracle draft length per bucket (per bandit and seed); the base schedule is "
                    + ", ".join(f"{lo}-{hi}: {k}" for lo, hi, k in report.schedule))
        st.dataframe(report.oracle_frame(), width="stretch", hide_index=True)
        st.download_button("Download regret.json", report.to_json(), file_name="regret.json",
                           mime="application/json", key="compare_dl_regret", on_click="ignore")


def _missing(workload_ok: bool, policies_chosen: bool) -> str:
    """What the comparison waits for, in words (a workload that did not load says why above)."""
    what = [w for w, ok in (("a workload that loads (a preset, or a valid workload file)",
                             workload_ok), ("at least one policy", policies_chosen)) if not ok]
    return "To run, choose " + " and ".join(what) + "." if what else \
        "To run, fix the inputs the errors above name."


def render() -> None:
    st.title("Compare")
    st.caption("Run several scheduling policies over several seeds and see which "
               "is faster, by how much, and how sure that is; then judge the "
               "draft-length bandits against the best fixed schedule in hindsight.")
    workload, names, uploaded, seeds, steps = _inputs()
    loaded = _load(workload, names, uploaded)
    ready = loaded is not None and bool(loaded[2])
    if not ready:
        st.warning(_missing(workload is not None, bool(names or uploaded)))
    workload, profile, policies = loaded if loaded else (None, None, [])
    if st.button("Run comparison", type="primary", disabled=not ready, key="compare_run"):
        result = _run_compare(workload, profile, policies, seeds, steps)
        if result is not None:
            st.session_state[_STATE_RESULT] = result
            st.session_state[_STATE_POLICIES] = {p.name: p for p in policies}
            st.session_state[_STATE_SUBJECT] = inputs.subject(workload, profile)
    result: Comparison | None = st.session_state.get(_STATE_RESULT)
    # A result only under the workload and profile it came from (they stay in the session).
    current = inputs.subject(workload, profile) if workload is not None else None
    if result is not None and st.session_state.get(_STATE_SUBJECT) != current:
        if ready:
            st.info(f"Press **Run comparison** for **{workload.name}**: the last results were for "
                    f"{result.workload} on {result.profile}.")
        result = None
    if result is not None:
        _show_compare(result)
        run_totals.show(run_totals.mean_steps_of_comparison(result), workload, profile,
                        "compare_totals", result.intervals)
    if workload is not None:
        _regret_panel(workload, profile, seeds, steps)
