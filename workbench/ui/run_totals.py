"""Run totals beside per-step figures: a whole run's days, GPU-hours, cost and energy per policy.

The pages simulate a few steps; this panel scales each policy's mean simulated step to a run of N
steps (a straight multiple: `tlt project` simulates the whole run, with lengths drifting and the
drafter learning over it). Energy needs the per-state split of a step (What-if has it; Compare keeps
only per-seed means, so it shows days, GPU-hours and cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import streamlit as st

from sim.results import PolicyRun
from workbench.compare import Comparison
from workbench.contracts.energy import SECONDS_PER_DAY, GpuPower, GpuSeconds, cost, energy_kwh, gpu_hours
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import FieldError
from workbench.contracts.workload import Workload
from workbench.project import step_usage


@dataclass(frozen=True)
class MeanStep:
    """A policy's mean simulated step."""

    label: str
    wall_s: float
    gpu: GpuSeconds | None  # GPU-seconds per power state; None where the page does not know the split


def mean_steps_of_runs(workload: Workload, labels: Sequence[str], policies: Sequence[Policy],
                       runs: Sequence[PolicyRun]) -> list[MeanStep]:
    out = []
    for label, policy, run in zip(labels, policies, runs):
        usage = [step_usage(m, workload, policy) for m in run.steps]
        gpu = GpuSeconds(0.0, 0.0, 0.0)
        for u in usage:
            gpu = gpu + u.gpu
        out.append(MeanStep(label, float(np.mean([u.wall_s for u in usage])), gpu.scaled(1.0 / len(usage))))
    return out


def mean_steps_of_comparison(result: Comparison) -> list[MeanStep]:
    return [MeanStep(p, float(result.runs.loc[result.runs["policy"] == p, "step_time_s"].mean()), None)
            for p in result.policies]


def totals_frame(steps: Sequence[MeanStep], gpus: int, run_steps: int, price: float | None,
                 power: GpuPower | None) -> pd.DataFrame:
    """One row per policy: the per-step figure and the run's days, GPU-hours, cost, energy and saving."""
    rows = []
    for s in steps:
        seconds = s.gpu.scaled(run_steps) if s.gpu is not None else GpuSeconds(s.wall_s * gpus * run_steps, 0, 0)
        hours = gpu_hours(seconds)
        rows.append({"policy": s.label, "step_min": s.wall_s / 60.0, "days": s.wall_s * run_steps / SECONDS_PER_DAY,
                     "gpu_hours": hours, "cost": cost(hours, price) if price is not None else None,
                     "energy_kwh": energy_kwh(seconds, power) if power is not None and s.gpu is not None else None})
    df = pd.DataFrame(rows).set_index("policy")
    df["saving"] = 1.0 - df["days"] / df["days"].iloc[0]
    return df


_COLUMNS = {
    "step_min": st.column_config.NumberColumn("Step (min)", format="%.1f"),
    "days": st.column_config.NumberColumn("Days", format="%.2f", help="Wall-clock days for the whole run."),
    "gpu_hours": st.column_config.NumberColumn("GPU-hours", format="%.0f", help="Allocated GPUs x wall time."),
    "cost": st.column_config.NumberColumn("Cost", format="%.0f", help="GPU-hours x the price per GPU-hour."),
    "energy_kwh": st.column_config.NumberColumn("Energy (kWh)", format="%.0f", help="GPU board power only."),
    "saving": st.column_config.NumberColumn("Saving", format="percent", help="1 - days / the first policy's days."),
}


def show(steps: Sequence[MeanStep], workload: Workload, profile: Profile | None, key: str) -> None:
    """The run-totals panel: run length, price and watts in, totals out."""
    st.subheader("Whole run")
    c1, c2, c3 = st.columns(3)
    run_steps = int(c1.number_input("RL steps in the run", min_value=1, value=max(workload.steps, 100), step=10,
                                    key=f"{key}_run_steps"))
    price = c2.number_input("Price per GPU-hour", min_value=0.0, value=None, step=0.5, placeholder="e.g. 2.50",
                            key=f"{key}_price")
    default_w = "" if profile is None or profile.power is None else \
        f"{profile.power.decode_w:g},{profile.power.idle_w:g},{profile.power.train_w:g}"
    watts = c3.text_input("GPU watts: decode, idle, train", value=default_w, placeholder="e.g. 650,120,700",
                          key=f"{key}_watts")
    power = None
    if watts.strip():
        try:
            power = GpuPower.parse(watts)
        except FieldError as exc:
            st.error(str(exc))
    table = totals_frame(steps, workload.gpus, run_steps, price, power)
    st.dataframe(table, column_config=_COLUMNS, width="stretch")
    no_split = any(s.gpu is None for s in steps)
    st.caption(f"{run_steps} x each policy's mean simulated step on {workload.gpus} GPUs. "
               + ("Energy: from What-if (it keeps each step's GPU states). " if no_split else
                  "" if power is not None else "Energy: give watts per GPU (e.g. from nvidia-smi). ")
               + "For lengths that drift and a drafter that learns over the whole run: `tlt project`.")
