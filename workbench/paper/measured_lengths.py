"""Table A on measured lengths: each row's workload with the closest public measured response
lengths by model family and recipe, as `traces/published/table-a-lengths.yaml` declared them before
any result on them (each names a preset replaying the lengths on the pre-registered row's cluster
and batch, or none, with the reason). Simulated like the pre-registered rows, same seeds and steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import load_workload, workload_presets
from workbench.paper.calibration import CaseRuns, simulate_case

DECLARATION = Path(__file__).resolve().parents[2] / "traces" / "published" / "table-a-lengths.yaml"
VARIANT = "measured lengths"


@dataclass(frozen=True)
class RowLengths:
    """One Table A model's declared length source."""

    model: str
    workload: str | None  # the preset replaying them (None: no public lengths found)
    lengths: str  # where the lengths come from
    why: str  # why this source is the closest
    gaps: str  # how it differs from the paper's run


def load_declaration(path: str | Path = DECLARATION) -> list[RowLengths]:
    """The declared sources; a malformed file or an unknown workload preset is refused."""
    path = Path(path)
    try:
        rows = yaml.safe_load(path.read_text(encoding="utf-8"))["rows"]
        out = [RowLengths(str(m), None if r["workload"] is None else str(r["workload"]),
                          str(r["lengths"]), " ".join(str(r["why"]).split()),
                          " ".join(str(r.get("gaps") or "").split()))
               for m, r in rows.items()]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError,
            AttributeError) as exc:
        raise ConfigError(str(path), "rows", "unreadable",
                          f"the layout of traces/published/table-a-lengths.yaml ({exc})") from None
    for r in out:
        if r.workload is not None and r.workload not in workload_presets():
            raise ConfigError(str(path), f"rows.{r.model}.workload", r.workload,
                              "a workload preset (workbench/contracts/presets/workloads/)")
    return out


def simulate_rows(models: list[str], systems: dict[str, str], baseline: str, steps: int,
                  seeds: list[int], on_progress: Callable[[str], None] | None = None
                  ) -> dict[str, CaseRuns]:
    """Each model with a declared measured-lengths workload, simulated under the baseline and the
    systems (common random numbers); `on_progress` hears of each simulation."""
    runs = {}
    for r in declared(models):
        wl = load_workload(r.workload)

        def tick(done: int, total: int, name: str, seed: int, m: str = r.model) -> None:
            on_progress(f"{m} ({VARIANT}): {name}, seed {seed} ({done}/{total})")

        runs[r.model] = simulate_case(r.model, wl, load_profile(wl.profile), systems, baseline,
                                      steps, seeds, tick if on_progress else None)
    return runs


def declared(models: list[str]) -> list[RowLengths]:
    """The declared rows of `models` that have a measured-lengths workload."""
    return [r for r in load_declaration() if r.model in models and r.workload is not None]


def sources_text(rows: list[RowLengths]) -> str:
    """One line per Table A model: its measured lengths, or why it has none."""
    return "\n".join(f"  {r.model}: {r.workload or 'none'} ({r.lengths}; {r.why}"
                     + (f"; gaps: {r.gaps}" if r.gaps else "") + ")" for r in rows)
