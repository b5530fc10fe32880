"""The declared split of an engine sweep's fit: the batch sizes and draft lengths held out of the
fit and predicted (`tlt calibrate SWEEP_DIR --hold-out batch=16 --hold-out draft=2`).

Default (stated before any fit, the same for every sweep): the interior batch size nearest the
geometric middle of the swept ones (the larger on a tie; none with fewer than three), and the
interior draft length nearest the middle (none with fewer than three). A cell is held out when
its batch or its draft length is: its steps leave the fit (a held-out batch: every engine's
trace of that cell; a held-out draft length: the SD engine's blocks at it) and the fitted
profile predicts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from workbench.contracts.schema import ConfigError
from workbench.contracts.sweep import PLAIN, Sweep, SweepPlan, labelled_steps
from workbench.contracts.trace import Trace

HELP = ("Cells held out of the fit and predicted: batch=B or draft=K (repeat); 'none': fit on "
        "every cell. Default: the interior batch size nearest the geometric middle and the "
        "interior draft length nearest the middle.")


@dataclass(frozen=True)
class Split:
    batches: tuple[int, ...]  # held out
    draft_lens: tuple[int, ...]  # held out
    declared: str  # "default" or what the user gave

    def holds(self, batch: int, k: int) -> bool:
        return batch in self.batches or k in self.draft_lens

    @property
    def label(self) -> str:
        parts = [f"batch {', '.join(map(str, self.batches))}" if self.batches else "",
                 f"draft length {', '.join(map(str, self.draft_lens))}" if self.draft_lens else ""]
        text = "; ".join(p for p in parts if p) or "nothing"
        return f"held out: {text} ({self.declared})"


def _interior(values: Sequence[int], log: bool) -> tuple[int, ...]:
    v = sorted(values)
    if len(v) < 3:
        return ()
    f = math.log if log else float
    middle = (f(v[0]) + f(v[-1])) / 2
    return (min(v[1:-1], key=lambda x: (round(abs(f(x) - middle), 9), -x)),)


def default_split(plan: SweepPlan) -> Split:
    return Split(_interior(plan.batches, True), _interior(plan.draft_lens, False), "default")


def parse_split(specs: Sequence[str] | None, plan: SweepPlan) -> Split:
    """`--hold-out` values against the sweep's plan; ConfigError names the bad one."""
    if not specs:
        return default_split(plan)
    if [s.strip() for s in specs] == ["none"]:
        return Split((), (), "declared: none")
    batches, ks = [], []
    for spec in specs:
        key, _, value = spec.partition("=")
        try:
            n = int(value)
        except ValueError:
            n = -1
        if key == "batch" and n in plan.batches:
            batches.append(n)
        elif key == "draft" and n in plan.draft_lens:
            ks.append(n)
        else:
            raise ConfigError("--hold-out", "hold-out", spec,
                              f"batch=B with B among {list(plan.batches)}, draft=K with K among "
                              f"{list(plan.draft_lens)}, or none")
    if set(batches) == set(plan.batches) or set(ks) == set(plan.draft_lens):
        raise ConfigError("--hold-out", "hold-out", ",".join(specs),
                          "leave at least one batch size and one draft length to fit on")
    return Split(tuple(sorted(set(batches))), tuple(sorted(set(ks))),
                 "declared: " + ", ".join(specs))


def fit_traces(sweep: Sweep, split: Split) -> list[Trace]:
    """The traces the fit sees: every cell's but the held-out batches', each with its decode steps
    that count for an arm (no prefill, no step that changed K), the SD engines' without those at
    held-out draft lengths.

    A sweep times decode steps: its prefills (a held batch's whole context at once, each round)
    are no rollout's, and the step that changes K verifies one draft length and proposes
    another; what the sweep does not measure (prefill) stays the base's."""
    out = []
    for cell in sweep.cells:
        if cell.batch in split.batches:
            continue
        for name, t in cell.traces.items():
            s = labelled_steps(t)
            keep = ((s["k"] >= 0) & (s["prefill_requests"] == 0)).to_numpy().copy()
            if name != PLAIN:
                keep &= ~s["k"].isin(split.draft_lens).to_numpy()
            steps = s.loc[keep, list(t.steps.columns)]
            out.append(replace(t, steps=steps.reset_index(drop=True)))
    if not out:
        raise ValueError(f"{sweep.path}: no cell left to fit on ({split.label})")
    return out
