"""The machine's drift taken out of a sweep by its own pairing: the plain engine steps beside the SD
engine, so within each round the plain steps say how fast the machine ran while the SD arm did.

Two stages. First the plain engine's costs alone (its steps brought to one machine speed by the
speed probe, `tlt calibrate`'s fit): the plain step the profile expects at each cell's batch and
context. Then every step of a cell's round (plain and SD alike) is scaled by that expected plain
step over the median of the plain steps measured beside the arm (`with_k`), so the plain steps
of every round sit at the plain model and each SD step keeps its measured ratio to the plain
steps taken with it. A ratio measured side by side is what a busy, drifting machine still gets
right (a light probe every 0.25 s misses bursts shorter than that); the fit of the drafter's costs
then rests on the ratios, and the absolute level on the plain fit.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np
import pandas as pd

from sim.costs import verify_step_s
from workbench.calibrate.captures.drift import DRIFT_KEY
from workbench.contracts.profile import Profile
from workbench.contracts.sweep import PLAIN, SweepCell, labelled_steps
from workbench.contracts.trace import Trace


def _group_factors(plain: pd.DataFrame, prof: Profile, batch: int) -> dict[tuple[int, int], float]:
    """(round, with_k) -> expected plain step / measured median plain step beside that arm."""
    out = {}
    clean = plain[plain["clean"]]
    for (rnd, with_k), g in clean.groupby(["round", "with_k"]):
        expected = verify_step_s(prof.decode, batch, float(g["context_mean"].mean()), 0)
        measured = float(g["wall_s"].median())
        if measured > 0:
            out[(int(rnd), int(with_k))] = expected / measured
    return out


def _scaled(t: Trace, labelled: pd.DataFrame, factor: np.ndarray, how: str) -> Trace:
    steps = labelled[list(t.steps.columns)].copy()
    steps["wall_s"] = steps["wall_s"].to_numpy(float) * factor
    steps["start_s"] = np.concatenate(([0.0], np.cumsum(steps["wall_s"].to_numpy())[:-1]))
    meta = {k: v for k, v in t.meta.items() if k != "speed"}
    meta[DRIFT_KEY] = {"factor": float(np.mean(factor)), "method": "paired plain steps",
                       "applied": True, "how": how}
    # A request's end no longer falls on the step that ended it: no per-finish cost to fit (a
    # sweep's requests end by being aborted at the end of their round anyway).
    requests = t.requests.assign(end_s=np.nan)
    return replace(t, meta=meta, steps=steps, requests=requests)


def paired_cell(cell: SweepCell, plain_profile: Profile) -> SweepCell:
    """The cell's traces with every round's steps scaled by its plain steps (module doc); a step
    outside every arm (a prefill, a change of K) takes its round's median factor, one outside every
    round the cell's."""
    plain = labelled_steps(cell.traces[PLAIN])
    groups = _group_factors(plain, plain_profile, cell.batch)
    if not groups:
        return cell
    cell_factor = statistics.median(groups.values())
    by_round: dict[int, list[float]] = {}
    for (rnd, _), f in groups.items():
        by_round.setdefault(rnd, []).append(f)
    round_factor = {r: statistics.median(v) for r, v in by_round.items()}
    how = ("each round's steps scaled by the plain engine's expected step over its measured "
           "steps beside the same arm (workbench/calibrate/sweeps/paired.py)")
    traces = {}
    for name, t in cell.traces.items():
        s = labelled_steps(t)
        key_k = s["with_k"] if name == PLAIN else s["k"]
        f = [groups.get((int(r), int(k)), groups.get((int(r), -1),
                                                      round_factor.get(int(r), cell_factor)))
             for r, k in zip(s["round"], key_k)]
        traces[name] = _scaled(t, s, np.asarray(f, float), how)
    return replace(cell, traces=traces)
