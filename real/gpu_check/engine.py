"""Engine costs on the device: the operator profiler (real/profiler, what `tlt profile --backend
torch` runs) over the check's grid, one `measure` call per `EngineRun`, each run's rows and
metadata kept in the result as it finishes. On CUDA every decode, verify and drafter point is
timed replayed from a CUDA graph and eagerly; a run whose graph capture fails is measured again
eagerly, the failure recorded."""

from __future__ import annotations

import dataclasses
import gc
import time
from typing import Callable

import torch

from real.gpu_check.plan import EngineRun, Plan, Section
from real.gpu_check.training import architecture
from real.profiler.grid import GRIDS
from real.profiler.settings import Settings
from real.profiler.shard import shard

Save = Callable[[], None]


def settings(run: EngineRun, plan: Plan, device: str) -> Settings:
    a = architecture(run.arch)
    shard(a, run.tp)  # a TP degree the heads do not split into fails here, naming it
    cuda = device == "cuda"
    return Settings(
        arch=a,
        tp=run.tp,
        device=device,
        dtype="bfloat16" if cuda else "float32",
        grid=run.grid,
        repeats=plan.repeats,
        warmup=plan.warmup,
        seed=0,
        threads=None if cuda else 1,
        check_rounds=plan.check_rounds,
        passes=1,
    )


def _measure(
    run: EngineRun, st: Settings, budget, say: Callable[[str], None], modes: tuple[str, ...] | None
):
    from real.profiler.measure import measure

    grid = dataclasses.replace(GRIDS[run.grid], **dict(run.changes))

    def progress(i: int, n: int, line: str) -> None:
        say(f"  [{i}/{n}] {line}")
        budget.check(grace_s=10.0)  # a point past the section's end stops the run

    return measure(st, grid, progress, ops=run.ops, modes=modes)


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure_run(
    run: EngineRun, plan: Plan, device: str, budget, say: Callable[[str], None]
) -> dict:
    """One run's result: status, rows (real.profiler.table's columns) and the profiler's meta."""
    from real.gpu_check.record import BudgetExceeded

    out: dict = {
        "label": run.label,
        "arch": run.arch,
        "tp": run.tp,
        "grid": run.grid,
        "ops": list(run.ops),
        "changes": {k: v for k, v in run.changes},
    }
    t0 = time.monotonic()
    st = settings(run, plan, device)
    try:
        m = _measure(run, st, budget, say, ("eager",) if plan.eager_only else None)
    except BudgetExceeded:
        raise
    except Exception as exc:  # noqa: BLE001 - graphs may fail to capture; eager timing still tells
        if device != "cuda" or isinstance(exc, torch.cuda.OutOfMemoryError):
            raise
        out["graph_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        say(f"  graph capture failed ({out['graph_error'][:200]}); measuring eagerly")
        _free()
        m = _measure(run, st, budget, say, ("eager",))
    out.update(
        status="ok",
        seconds=round(time.monotonic() - t0, 1),
        meta=m.meta,
        rows=m.rows.to_dict(orient="records"),
    )
    return out


def run_section(
    sec: Section,
    plan: Plan,
    device: str,
    budget,
    entry: dict,
    save: Save,
    say: Callable[[str], None],
) -> None:
    from real.gpu_check.record import BudgetExceeded

    entry["runs"] = []
    for run in sec.engine:
        if budget.left() < 3:
            entry["runs"].append({"label": run.label, "status": "skipped: budget"})
            continue
        say(f" {run.label}")
        try:
            entry["runs"].append(measure_run(run, plan, device, budget, say))
        except BudgetExceeded as exc:
            entry["runs"].append(
                {"label": run.label, "status": "stopped: budget", "error": str(exc)}
            )
        except Exception as exc:  # noqa: BLE001 - recorded; the next run may still work
            entry["runs"].append(
                {"label": run.label, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
            )
        _free()
        save()
    if any(r["status"] != "ok" for r in entry["runs"]):
        entry["status"] = "partial"
