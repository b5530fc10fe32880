"""The check's one result document: written after every section (JSON and a Markdown summary,
each atomically), so a run stopped at any moment leaves every section it finished; and the
section runner, which gives each section its time budget and records errors instead of raising.

Document (schema SCHEMA): started_at, finished_at (null until the end), elapsed_s, quick,
device, budget_s, machine (machine.facts), machine_after (the GPU's clocks at the end), plan
(plan.Plan as data) and sections: name -> {status, kind, budget_s, seconds, start_gib (GPU
memory allocated at its start), peak_gib, error?, result fields}. Status: ok, partial (a part
failed or ran out of time), error, skipped: budget.
"""

from __future__ import annotations

import gc
import time
import traceback
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from real.gpu_check.machine import gpu_slug, nvidia_smi
from real.gpu_check.plan import Plan, Section
from real.gpu_check.summary import markdown
from workbench.contracts.fileio import write_atomic, write_json

SCHEMA = "tlt-gpu-check/1"


class BudgetExceeded(RuntimeError):
    """A section ran past its time budget (raised between two of its steps)."""


class Budget:
    """A section's time: `left()` seconds until its end; `check()` raises past it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.until = time.monotonic() + seconds

    def left(self) -> float:
        return self.until - time.monotonic()

    def check(self, grace_s: float = 0.0) -> None:
        if self.left() < -grace_s:
            raise BudgetExceeded(f"past the section's budget of {self.seconds:.0f} s")


Work = Callable[[Budget, dict, Callable[[], None]], None]


class Record:
    def __init__(
        self, out_dir: str | Path, plan: Plan, machine: dict, say: Callable[[str], None] = print
    ):
        now = datetime.now(timezone.utc)
        stem = f"gpu-check-{gpu_slug(machine)}-{now.date().isoformat()}"
        self.json_path, self.md_path = Path(out_dir) / f"{stem}.json", Path(out_dir) / f"{stem}.md"
        self.t0, self.plan, self.say = time.monotonic(), plan, say
        self.doc = {
            "schema": SCHEMA,
            "tool": "python -m real.gpu_check (make gpu-check)",
            "started_at": now.isoformat(timespec="seconds"),
            "finished_at": None,
            "elapsed_s": 0.0,
            "quick": plan.quick,
            "device": machine["device"],
            "budget_s": plan.budget_s,
            "machine": machine,
            "plan": asdict(plan),
            "sections": {},
        }

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.plan.budget_s - self.elapsed()

    def save(self) -> None:
        self.doc["elapsed_s"] = round(self.elapsed(), 1)
        write_json(self.json_path, self.doc)
        write_atomic(self.md_path, markdown(self.doc))

    def run(self, sec: Section, work: Work) -> dict:
        """`work(budget, entry, save)` fills `entry` (saving as it goes); its exceptions are
        recorded, never raised, and the memory it held is freed after."""
        entry: dict = {"status": "running", "kind": sec.kind, "budget_s": sec.budget_s}
        self.doc["sections"][sec.name] = entry
        left = self.left()
        if left < sec.min_start_s:
            entry.update(status="skipped: budget", left_s=round(left, 1))
            self.say(
                f"{sec.name}: skipped, {left:.0f} s left of the run's budget "
                f"(needs {sec.min_start_s:.0f})"
            )
            self.save()
            return entry
        self.say(f"{sec.name}: start (budget {min(sec.budget_s, left):.0f} s)")
        self.save()
        t0 = time.monotonic()
        _reset_peak()
        # What earlier sections left allocated (freed after each): a leak shows here.
        entry["start_gib"] = _allocated_gib()
        try:
            work(Budget(min(sec.budget_s, left)), entry, self.save)
            if entry["status"] == "running":
                entry["status"] = "ok"
        except BudgetExceeded as exc:
            entry.update(status="partial", error=f"stopped: budget ({exc})")
        except Exception as exc:  # noqa: BLE001 - a failed section is a result; the next may run
            entry.update(
                status="error",
                error=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(limit=6)[-3000:],
            )
        finally:
            entry["seconds"] = round(time.monotonic() - t0, 1)
            entry["peak_gib"] = _peak_gib()
            _free()
        self.say(
            f"{sec.name}: {entry['status']} in {entry['seconds']:.1f} s"
            + (f" ({entry['error']})" if entry.get("error") else "")
        )
        self.save()
        return entry

    def finish(self) -> None:
        if self.doc["device"] == "cuda":
            self.doc["machine_after"] = {"nvidia_smi": nvidia_smi()}
        self.doc["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.save()


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak_gib() -> float | None:
    import torch

    return (
        round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None
    )


def _allocated_gib() -> float | None:
    import torch

    return round(torch.cuda.memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
