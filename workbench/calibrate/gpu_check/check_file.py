"""A GPU check's file (`python -m real.gpu_check`) as the comparison with the simulator reads it:
the check (`load_check`), the database's key for its GPU (`gpu_key`) and its measured engine
points per (model, TP) (`engine_measurements`). gpu_measured.py compares them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from real.gpu_check.plan import SHAPES, hf_config
from real.gpu_check.record import SCHEMA
from real.profiler.table import COLUMNS, Measurements, bad_cell
from workbench.contracts.architecture import architecture_presets
from workbench.contracts.fileio import cache_dir, write_json
from workbench.contracts.schema import ConfigError, kind_of, read_text

# The measured GPU's name -> the database's GPU key; the first match wins (PCIe before SXM).
GPU_NAMES = (
    ("h100 pcie", "h100-pcie"),
    ("h100", "h100"),
    ("h200", "h200"),
    ("gb200", "gb200"),
    ("gb300", "gb300"),
    ("b200", "b200"),
    ("b300", "b300"),
    ("a100 pcie", "a100-pcie"),
    ("a100", "a100"),
    ("l40s", "l40s"),
    ("rtx pro 6000", "rtx-pro-6000"),
    ("l4", "l4"),
    ("a30", "a30"),
)
FIX = "a file written by `python -m real.gpu_check` (make gpu-check)"


@dataclass(frozen=True)
class MeasuredCheck:
    path: Path
    doc: dict

    @property
    def machine(self) -> dict:
        return self.doc["machine"]

    @property
    def sections(self) -> dict:
        return self.doc["sections"]


def load_check(path: str | Path) -> MeasuredCheck:
    """The check's JSON; a missing, garbled or foreign file is refused, naming the field and fix."""
    path = Path(path)
    text = read_text(path, FIX)
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        why = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else exc
        raise ConfigError(str(path), "<file>", f"is not JSON ({why})", FIX) from None
    if not isinstance(doc, dict):
        raise ConfigError(str(path), "<top level>", f"holds {kind_of(doc)} at the top level",
                          f"a JSON mapping: {FIX}")
    if doc.get("schema") != SCHEMA:
        raise ConfigError(str(path), "schema", doc.get("schema"), f"{SCHEMA}: {FIX}")
    for key in ("machine", "sections"):
        if not isinstance(doc.get(key), dict):
            raise ConfigError(str(path), key, doc.get(key), f"a mapping, as {FIX} holds")
    if doc["machine"].get("device") not in ("cpu", "cuda"):
        raise ConfigError(str(path), "machine.device", doc["machine"].get("device"), "cpu or cuda")
    return MeasuredCheck(path, doc)


def gpu_key(machine: dict) -> str | None:
    """The database's key for the measured GPU (None: a CPU run, or a GPU the database lacks)."""
    name = str(machine.get("gpu") or "").lower()
    return next((key for pat, key in GPU_NAMES if pat in name), None) if name else None


def arch_spec(name: str, where: str, path: Path) -> str:
    """What the database reads for a measured shape: a preset's name, or a config.json written
    for one of the check's own shapes (real/gpu_check/plan.py)."""
    if name in architecture_presets():
        return name
    if name not in SHAPES:
        raise ConfigError(
            str(path), where, name, "an architecture preset or a shape of real/gpu_check/plan.py"
        )
    f = cache_dir("gpu-check-shapes") / f"{name}.json"
    if not f.is_file() or json.loads(f.read_text(encoding="utf-8")) != hf_config(name):
        write_json(f, hf_config(name))
    return str(f)


def engine_measurements(check: MeasuredCheck) -> dict[tuple[str, int], Measurements]:
    """The engine runs that finished, their rows joined per (architecture, TP)."""
    out: dict[tuple[str, int], list] = {}
    for name, sec in check.sections.items():
        if not isinstance(sec, dict) or sec.get("kind") != "engine":
            continue
        runs = sec.get("runs") or []
        if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
            raise ConfigError(str(check.path), f"sections.{name}.runs", "<not a list of runs>",
                              f"a list of mappings, as {FIX} holds")
        for i, run in enumerate(runs):
            if run.get("status") != "ok":
                continue
            where = f"sections.{name}.runs[{i}]"
            raw = run.get("rows") or []
            if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
                raise ConfigError(str(check.path), f"{where}.rows", "<not a list of rows>",
                                  f"the profiler's rows, a list of mappings: {FIX}")
            rows = pd.DataFrame(raw)
            missing = [c for c in COLUMNS if c not in rows.columns]
            if missing or not isinstance(run.get("meta"), dict):
                field_ = f"{where}.rows.{missing[0]}" if missing else f"{where}.meta"
                raise ConfigError(
                    str(check.path), field_, "<missing>", f"the profiler's rows and meta: {FIX}"
                )
            rows = rows[list(COLUMNS)].copy()
            for c in COLUMNS:
                if c not in ("op", "mode"):  # JSON null is NaN here (a non-"whole" row's whole_s)
                    try:
                        rows[c] = pd.to_numeric(rows[c].astype(object).where(rows[c].notna()))
                    except (TypeError, ValueError):
                        raise ConfigError(
                            str(check.path), f"{where}.rows.{c}", "not a number", f"numbers: {FIX}"
                        ) from None
            bad = bad_cell(rows)
            if bad is not None:
                col, row, value, allowed = bad
                raise ConfigError(str(check.path), f"{where}.rows[{row}].{col}", value,
                                  f"{allowed}: {FIX}")
            tp = run.get("tp", 1)
            if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
                raise ConfigError(str(check.path), f"{where}.tp", tp, "a whole number >= 1")
            key = (str(run.get("arch")), tp)
            out.setdefault(key, []).append((rows, run["meta"]))
    return {
        k: Measurements(pd.concat([r for r, _ in v], ignore_index=True), v[0][1])
        for k, v in out.items()
    }
