"""Another framework's metrics as its tracker exported them: a W&B run's history (CSV or JSON/JSONL,
one row per logged step, the metrics as columns), or TensorBoard scalars (a long table of `step`,
`tag`, `value`, as TensorBoard's own scalar export and tbparse give them; or the event file itself,
workbench/runlog/frameworks/tb_events.py).

The framework is recognised by a column only it logs (each module's TRACKER_MARKER, after its
tracker prefix is taken off: NeMo-RL's `timing/train/` and `train/`, OpenRLHF's `train/`); rows of
one step (its TRACKER_STEP column, else the table's step column) are merged, a later row's value
over an earlier one's. Then the framework's own table maps the names onto veRL's and its semantics
apply as on its console log (slime's first step left out, ROLL's step total moved back a step).
A tracker export holds no launch config: the shape comes from flags.
"""

from __future__ import annotations

import math
from types import ModuleType

import pandas as pd

from workbench.runlog.frameworks import areal, nemo_rl, openrlhf, roll, skyrl, slime
from workbench.runlog.frameworks.base import Parsed, to_verl

MODULES: tuple[ModuleType, ...] = (slime, nemo_rl, skyrl, openrlhf, areal, roll)
LONG = ("tag", "value")  # a long table of scalars: one row per (step, tag)


def _strip(name: str, prefixes: tuple[str, ...]) -> str:
    for p in prefixes:
        if name.startswith(p):
            return name[len(p):]
    return name


def framework_of(columns) -> ModuleType | None:
    """The framework whose marker column the table has (None: veRL's names, or none known)."""
    names = [str(c) for c in columns]
    for m in MODULES:
        if m.TRACKER_MARKER in {_strip(c, m.TRACKER_PREFIXES) for c in names}:
            return m
    return None


def wide(df: pd.DataFrame, step_col: str) -> pd.DataFrame:
    """A long table of scalars (step, tag, value) pivoted to one row per step (a later value of a
    tag at one step wins)."""
    if not set(LONG) <= set(df.columns):
        return df
    long = df[[step_col, "tag", "value"]].dropna(subset=["tag"])
    long = long.assign(tag=long["tag"].astype(str))
    return long.pivot_table(index=step_col, columns="tag", values="value", aggfunc="last"
                            ).reset_index()


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read(module: ModuleType, df: pd.DataFrame, step_col: str, path: str, first: int
         ) -> Parsed:
    """The table's steps in veRL's names, by the framework's own table (module docstring)."""
    col = next((c for c in module.TRACKER_STEP if c in df.columns), step_col)
    merged: dict[int, dict] = {}
    where: dict[int, int] = {}
    for i, rec in enumerate(df.to_dict("records")):
        step = rec.get(col)
        if not _finite(step):
            continue
        row = merged.setdefault(int(step), {})
        row.update({_strip(str(k), module.TRACKER_PREFIXES): v for k, v in rec.items()
                    if _finite(v) or isinstance(v, str)})
        where[int(step)] = i + first
    if module is roll:
        merged = roll.shift_totals(merged)
    rows, unmapped = {}, set()
    for step in sorted(merged):
        values = module.derive(merged[step])
        mapped, un = to_verl(values, module.TABLE, module.is_timer, f"{path} (row {where[step]})")
        unmapped.update(un)
        rows[step] = {"step": float(step), "line": float(where[step]), **mapped}
    notes = module.semantics(rows)
    identity = module.identity("")
    return Parsed(rows, identity, unmapped=tuple(sorted(unmapped)),
                  notes=tuple(notes) + ("a tracker export: no launch config (the shape from "
                                        "flags, the training from the framework's defaults)",),
                  training=module.training({}, rows, path))
