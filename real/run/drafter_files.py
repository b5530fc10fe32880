"""The drafter checkpoints of a `tlt train` run: the one its engines start with, the merge of what
the idle workers trained, and the pruning of old step directories."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Sequence

from real.run.checkpoints import Checkpoint
from real.run.config import RunConfig
from real.run.records import WorkerSpot
from workbench.contracts.seeds import Stream, derive_seed
from workbench.contracts.policy import DrafterKind


def initial_drafter(cfg: RunConfig, ckpt: Checkpoint | None, out: Path) -> Path | None:
    """The drafter the engines start with: the checkpoint's, the warm-start one, or a fresh one
    (None: the policy has no learned drafter)."""
    pol = cfg.policy
    if pol.drafter.kind != DrafterKind.EAGLE:
        return None
    if ckpt is not None and ckpt.path("drafter").exists():
        return ckpt.path("drafter")
    if pol.drafter.warm_start:
        return Path(cfg.drafter)
    import torch

    from real.drafter.checkpoint import save_drafter
    from real.drafter.eagle import EagleDrafter, load_target

    target = load_target(cfg.model)
    torch.manual_seed(derive_seed(cfg.seed, Stream.DRAFTER_INIT))
    return save_drafter(EagleDrafter.from_target(target), out / "drafter-initial", target.config)


def merge_drafters(
    spots: Sequence[WorkerSpot], target: Any, folder: Path, step: int, like: Path | None = None
) -> Path | None:
    """The drafters the idle workers trained, averaged by the steps each did, saved under
    `folder`/step-N for vLLM (None: no worker did a drafter step). `target`: the policy's model;
    `like`: the drafter the engines run now, whose kind (EAGLE or EAGLE-3) and layout the merge
    keeps (None: a fresh EAGLE head's)."""
    from real.drafter.checkpoint import load_drafter, save_drafter
    from real.drafter.eagle import EagleDrafter
    from real.drafter.spot import average_states

    trained = [sp for sp in spots if sp.steps > 0]
    if not trained:
        return None
    state = average_states([sp.state for sp in trained], [float(sp.steps) for sp in trained])
    drafter = load_drafter(like, target) if like is not None else EagleDrafter.from_target(target)
    drafter.load_drafter_state_dict(state)
    path = save_drafter(drafter, folder / f"step-{step:06d}", target.config)
    prune(folder, keep=path)
    return path


def prune(folder: Path, keep: Path, n: int = 2) -> None:
    """Delete all but the newest `n` step directories under `folder` (never `keep`)."""
    dirs = sorted(p for p in folder.glob("step-*") if p.is_dir())
    for p in dirs[:-n]:
        if p != keep:
            shutil.rmtree(p, ignore_errors=True)
