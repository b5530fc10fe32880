"""What-if's section on the length tail: how much of each policy's speedup rests on the tail's
shape.

Below the results: whether the workload's lengths are measured (replayed or drawn from real logs:
nothing assumed) or assumed (a length model), and for assumed lengths, on its own button, the
speedups again with the length model at the ends of its declared range
(workbench/paper/tail_sensitivity.py; `tlt compare` prints the same). The result is kept with the
inputs it ran on: once they change, the table says it is stale.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import to_mapping
from workbench.contracts.workload import Workload
from workbench.paper.tail_sensitivity import STEPS, TailSensitivity, assumed, tail_sensitivity
from workbench.ui import inputs

_STATE = "whatif_tail_range"  # (inputs' digest, TailSensitivity)


def frame(ts: TailSensitivity) -> pd.DataFrame:
    """One row per length model: its shape and each policy's speedup over the first."""
    return pd.DataFrame([{"length model": p.label, "log-sd": p.sigma,
                          "wrong answers x longer": p.wrong_factor,
                          "at the cap": f"{p.clip_ratio:.2%}",
                          **{name: f"{p.speedup[name]:.2f}x" for name in ts.policies[1:]}}
                         for p in ts.points])


def spans(ts: TailSensitivity) -> str:
    return "; ".join(f"{n} {ts.span(n)[0]:.2f}x to {ts.span(n)[1]:.2f}x" for n in ts.policies[1:])


def _digest(workload: Workload, policies: list[Policy], profile: Profile, seed: int) -> str:
    key = [to_mapping(workload), [to_mapping(p) for p in policies], to_mapping(profile), seed]
    return inputs.digest(json.dumps(key, sort_keys=True, default=str).encode())


def render(workload: Workload | None, profile: Profile | None, policies: list[Policy],
           seed: int) -> None:
    """The section (nothing for an agentic workload: its turns have their own section)."""
    if workload is None or profile is None or workload.agentic.enabled:
        return
    st.subheader("How much rests on the tail's shape")
    why = assumed(workload)
    if why:
        st.caption(f"This workload's lengths are {why.split(': ')[-1]}: the tail is the real "
                   "one, with nothing assumed to vary.")
        return
    st.caption("This workload's lengths are assumed (a length model). The speedups again with "
               "the model's body spread and its tail's reach to the cap at the ends of their "
               "declared range (traces/published/calibration-split.yaml), the median answer kept: "
               f"{STEPS} steps, seed {seed}.")
    ready = len(policies) >= 2
    digest = _digest(workload, policies, profile, seed) if ready else ""
    if st.button("Vary the tail", disabled=not ready, key="whatif_tail_run",
                 help="Every policy on each end of the length model's declared range."):
        with st.spinner("Simulating the tail's range…"):
            try:
                st.session_state[_STATE] = (digest, tail_sensitivity(workload, policies, profile,
                                                                     [seed], STEPS))
            except Exception as exc:  # a simulator error must not take the page down
                st.error(f"Varying the tail failed: {type(exc).__name__}: {exc}")
    stored = st.session_state.get(_STATE)
    if stored is None:
        return
    ran_on, ts = stored
    if ran_on != digest:
        st.warning("The table below ran on other inputs; vary the tail again for these.")
    st.dataframe(frame(ts), hide_index=True, width="stretch", key="whatif_tail_table")
    st.caption(f"Over the range: {spans(ts)}.")
