"""Run totals beside per-step figures: a whole run's days, GPU-hours, cost and energy per policy.

The pages simulate a few steps; this panel scales each policy's mean simulated step to a run of N
steps (a straight multiple: `tlt project` simulates the whole run, with lengths drifting and the
drafter learning over it). Energy is each step's GPU-seconds per power state (What-if's runs,
Compare's per-seed means) at the profile's watts; money is in the currency the user names, "-"
without a price.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import streamlit as st

from sim.results import PolicyRun
from workbench.compare.intervals import PolicyInterval, interval_lines
from workbench.compare.policies import GPU_STATES, Comparison
from workbench.contracts.energy import (SECONDS_PER_DAY, GpuPower, GpuSeconds, cost, energy_kwh,
                                        gpu_hours)
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
    # GPU-seconds per power state; None where the page does not know the split
    gpu: GpuSeconds | None


def mean_steps_of_runs(workload: Workload, labels: Sequence[str], policies: Sequence[Policy],
                       runs: Sequence[PolicyRun]) -> list[MeanStep]:
    out = []
    for label, policy, run in zip(labels, policies, runs):
        usage = [step_usage(m, workload, policy) for m in run.steps]
        gpu = GpuSeconds(0.0, 0.0, 0.0)
        for u in usage:
            gpu = gpu + u.gpu
        out.append(MeanStep(label, float(np.mean([u.wall_s for u in usage])),
                            gpu.scaled(1.0 / len(usage))))
    return out


def mean_steps_of_comparison(result: Comparison) -> list[MeanStep]:
    """Each policy's mean step over the seeds, with its GPU-seconds per power state."""
    out = []
    for p in result.policies:
        rows = result.runs[result.runs["policy"] == p]
        gpu = (GpuSeconds(*(float(rows[c].mean()) for c in GPU_STATES))
               if set(GPU_STATES) <= set(rows.columns) else None)
        out.append(MeanStep(p, float(rows["step_time_s"].mean()), gpu))
    return out


def totals_frame(steps: Sequence[MeanStep], gpus: int, run_steps: int, price: float | None,
                 power: GpuPower | None,
                 intervals: Sequence[PolicyInterval] | None = None) -> pd.DataFrame:
    """One row per policy: the per-step figure and the run's days, GPU-hours, cost, energy and
    saving; with `intervals`, the days' and the cost's 90% interval (the mean step's, the run
    being its steps: `low`/`high` as shares of the figure)."""
    rows = []
    by = {pi.policy: pi.step_s for pi in intervals or []}
    for s in steps:
        seconds = (s.gpu.scaled(run_steps) if s.gpu is not None
                   else GpuSeconds(s.wall_s * gpus * run_steps, 0, 0))
        hours = gpu_hours(seconds)
        rows.append({"policy": s.label, "step_min": s.wall_s / 60.0,
                     "days": s.wall_s * run_steps / SECONDS_PER_DAY, "gpu_hours": hours,
                     "cost": cost(hours, price) if price is not None else None,
                     "energy_kwh": (energy_kwh(seconds, power)
                                    if power is not None and s.gpu is not None else None),
                     "low": by[s.label].low / by[s.label].center if s.label in by else None,
                     "high": by[s.label].high / by[s.label].center if s.label in by else None})
    df = pd.DataFrame(rows).set_index("policy")
    df["saving"] = 1.0 - df["days"] / df["days"].iloc[0]
    return df


def _amount(v: float | None) -> str:
    """Whole units from 100 up, three significant digits below ('-' when unknown)."""
    if v is None or pd.isna(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def shown_totals(df: pd.DataFrame, currency: str) -> pd.DataFrame:
    """The totals as the page shows them: one precision per column, money with its currency, and
    "-" (never "None") where a figure needs an input the page does not have."""
    first = str(df.index[0])
    money = f"Cost ({currency})" if currency else "Cost"
    out = pd.DataFrame(index=df.index)
    out["Step (min)"] = [f"{v:,.1f}" for v in df["step_min"]]
    out["Days"] = [f"{v:,.2f}" for v in df["days"]]
    out["GPU-hours"] = [f"{v:,.0f}" for v in df["gpu_hours"]]
    out[money] = [_amount(v) for v in df["cost"]]
    if df["low"].notna().all():
        out.insert(2, "Days, 90%", [f"{d * lo:,.2f}-{d * hi:,.2f}" for d, lo, hi in
                                    zip(df["days"], df["low"], df["high"])])
        out[f"{money}, 90%"] = [f"{_amount(c * lo)}-{_amount(c * hi)}" if c is not None and
                                not pd.isna(c) else "-"
                                for c, lo, hi in zip(df["cost"], df["low"], df["high"])]
    out["Energy (kWh)"] = [_amount(v) for v in df["energy_kwh"]]
    out[f"Run time saved vs {first}"] = [f"{v:.0%}" for v in df["saving"]]
    return out


def show(steps: Sequence[MeanStep], workload: Workload, profile: Profile | None, key: str,
         intervals: Sequence[PolicyInterval] | None = None) -> None:
    """The run-totals panel: run length, price and watts in, totals out; the days and the cost
    with the 90% interval of each policy's mean step (`intervals`), or why there is none."""
    st.subheader("Whole run")
    c1, c2, c3, c4 = st.columns([1, 1, 0.6, 1.4])
    run_steps = int(c1.number_input("RL steps in the run", min_value=1,
                                    value=max(workload.steps, 100), step=10,
                                    key=f"{key}_run_steps"))
    price = c2.number_input("Price per GPU-hour", min_value=0.0, value=None, step=0.5,
                            placeholder="e.g. 2.50", key=f"{key}_price",
                            help="Leave empty and the cost column shows '-'.")
    currency = c3.text_input("Currency", value="USD", key=f"{key}_currency").strip()
    default_w = "" if profile is None or profile.power is None else \
        f"{profile.power.decode_w:g},{profile.power.idle_w:g},{profile.power.train_w:g}"
    watts = c4.text_input("GPU watts: decode, idle, train", value=default_w,
                          placeholder="e.g. 650,120,700", key=f"{key}_watts",
                          help="Filled from the profile's power model (measured-database profiles "
                               "have one).")
    power = None
    if watts.strip():
        try:
            power = GpuPower.parse(watts)
        except FieldError as exc:
            st.error(str(exc))
    table = totals_frame(steps, workload.gpus, run_steps, price, power, intervals)
    st.dataframe(shown_totals(table, currency), width="stretch", key=f"{key}_table")
    how = (f"90%: the mean step's interval ({intervals[0].covers}), the run being its steps."
           if intervals else interval_lines(None, "")[0].capitalize() + ".")
    hints = []
    if price is None:
        hints.append("Cost: give a price per GPU-hour.")
    if power is None:
        hints.append("Energy: give watts per GPU (this profile has no power model; e.g. from "
                     "nvidia-smi).")
    st.caption(f"{run_steps} x each policy's mean simulated step on {workload.gpus} GPUs; energy "
               "is GPU board "
               "power only. " + " ".join(hints)
               + " For lengths that drift and a drafter that learns over the whole run: `tlt "
                 f"project`. {how}")
