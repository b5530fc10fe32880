"""The check's engine sweep (`tlt engine-sweep`, real/sweep/): the shipped model and its EAGLE
drafter on the installed vLLM, SD off and on at held batch sizes, written beside the check's
files as a sweep directory `tlt calibrate` fits a profile to. Without vLLM (a bare GPU machine)
the section says so and the check runs the rest."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from real.gpu_check.plan import SweepShape

ROOT = Path(__file__).resolve().parents[2]
DRAFTER = ROOT / "traces" / "reference" / "drafter"


def run(shape: SweepShape, device: str, budget, entry: dict, save: Callable[[], None],
        say: Callable[[str], None], model: Path, out: Path) -> None:
    """Fill `entry`: the sweep's identity, its summary rows and where it is; or why it was
    skipped."""
    try:
        import vllm
    except Exception as exc:  # absent, or a build that does not load here
        entry.update(status="skipped: vLLM not importable",
                     error=f"{type(exc).__name__}: {exc}",
                     note="`tlt engine-sweep` needs vLLM; install it (the project's 'gpu' extra) "
                          "to measure this GPU's engine; the other sections ran without it")
        return
    from real.sweep.run import SweepSettings, run_sweep
    from workbench.contracts.sweep import cell_figures, load_sweep

    env = os.environ.get
    method = env("GPU_CHECK_SWEEP_METHOD") or "eagle"
    settings = SweepSettings(
        model=env("GPU_CHECK_SWEEP_MODEL") or str(model), method=method,
        drafter=env("GPU_CHECK_SWEEP_DRAFTER") or (str(DRAFTER) if method == "eagle" else None),
        batches=shape.batches, contexts=shape.contexts, draft_lens=shape.draft_lens,
        rounds=shape.rounds, block_steps=shape.block_steps,
        dtype="bfloat16" if device == "cuda" and not env("GPU_CHECK_SWEEP_MODEL") else "auto",
        gpu_memory_utilization=0.6)
    entry.update(vllm=vllm.__version__, sweep_dir=str(out), settings=asdict(settings))
    save()

    def progress(line: str) -> None:
        say(line)
        budget.check()  # between two rounds: a sweep stopped keeps its finished cells

    run_sweep(settings, out, say=progress)
    sweep = load_sweep(out)
    entry.update(identity=sweep.identity, cells=len(sweep.cells),
                 rows=[asdict(f) for c in sweep.cells for f in cell_figures(c)])
