"""The calibrated run as a Workload: its modelled steps replayed (`tlt calibrate --run-log ...
--workload-out W`).

Two files: W holds a sample of SAMPLE_STEPS steps spread evenly over the run (the first, the last
and the ones between, in the run's order), what `tlt compare --workload W` simulates by default
and answers within seconds; W-full holds every step the simulator's work limit allows, from the
first on, for the whole run on request. Each says in its description which steps it holds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from sim.simulator import MAX_WORK
from workbench.contracts.length_data import COLUMNS, UNKNOWN, ObservedLengths, from_frame
from workbench.contracts.workload import LengthModel, Workload
from workbench.runlog import engine

SAMPLE_STEPS = 12


def full_path(out: Path) -> Path:
    """Where the whole run's workload goes beside the sample's."""
    return out.with_name(f"{out.stem}-full{out.suffix}")


def sample_rows(steps: int, k: int = SAMPLE_STEPS) -> np.ndarray:
    """`k` step indices spread evenly over `steps` (all of them when there are fewer)."""
    return np.unique(np.linspace(0, steps - 1, min(k, steps)).round().astype(int))


def _observed(p, rows: np.ndarray) -> ObservedLengths:
    n = p.shape.group_size
    frames = [pd.DataFrame({"batch": b, "group": np.arange(len(p.lengths.lengths[i])) // n,
                            "rank": UNKNOWN, "prompt_tokens": int(p.lengths.prompt_tokens[i]),
                            "length": p.lengths.lengths[i], "correct": UNKNOWN,
                            "mixed": UNKNOWN})
              for b, i in enumerate(rows)]
    return from_frame(pd.concat(frames, ignore_index=True)[list(COLUMNS)], p.log.path)


def _steps_text(steps: np.ndarray) -> str:
    if len(steps) > 1 and np.all(np.diff(steps) == 1):
        return f"steps {steps[0]}-{steps[-1]}"
    return "steps " + ", ".join(str(s) for s in steps)


def run_workloads(cal, name: str, profile_path: str) -> list[tuple[Workload, ObservedLengths]]:
    """The sample's workload and the whole run's (module docstring), each with its lengths
    table."""
    p = cal.prepared
    work_limit = MAX_WORK // (p.shape.responses + p.shape.engines)
    full = np.arange(max(1, min(p.log.steps, work_limit)))
    out = []
    for rows, label, suffix in ((sample_rows(p.log.steps), "a sample", ""),
                                (full, "the whole run", "-full")):
        steps = p.steps[rows]
        what = (f"{label}: {len(rows)} of its {p.log.steps} steps ({_steps_text(steps)})"
                if len(rows) < p.log.steps else f"all {p.log.steps} steps")
        base = engine.run_workload(p.shape, p.lengths, name + suffix, profile_path)
        wl = replace(
            base,
            steps=len(rows),
            model=cal.profile.cluster.model,
            lengths=LengthModel(kind="replay", data="lengths.parquet"),
            description=f"The veRL run of {Path(p.log.path).name}: {p.shape.engines} engines of "
            f"TP{p.shape.tp}, {p.shape.prompts_per_step} prompts x {p.shape.group_size}, cap "
            f"{p.shape.max_response_tokens}; each step's lengths modelled from its statistics; "
            f"{what}",
            source=f"tlt calibrate --run-log {p.log.path} (sha256 {p.digest[:16]})",
        )
        wl.check()
        out.append((wl, _observed(p, rows)))
    return out
