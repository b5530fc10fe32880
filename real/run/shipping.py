"""Weights and drafters to rollout workers on other machines, through Ray's object store.

On one machine a worker reads the model and drafter directories the coordinator writes. A Ray
cluster's workers may run on nodes that cannot see the coordinator's disk, so a run that joins a
cluster (`tlt train --address`) ships every directory a worker needs as its files' bytes
(`DirBundle`, `ray.put` once per directory, fetched by each node from the object store), and each
worker writes them into its own local temporary directory (`LocalDirs`): no shared filesystem is
needed. A directory is a few MB for the reference model and its drafter; a model of several GB
costs that in the object store per RL step, as it would over a shared filesystem.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


@dataclass(frozen=True)
class DirBundle:
    """A directory's files (relative paths, bytes), for the object store."""

    name: str  # the source directory's name (step-000003, drafter, ...), kept for the logs
    files: tuple[tuple[str, bytes], ...]


def bundle(path: str | Path) -> DirBundle:
    root = Path(path)
    files = tuple(
        (str(f.relative_to(root)), f.read_bytes()) for f in sorted(root.rglob("*")) if f.is_file()
    )
    if not files:
        raise FileNotFoundError(f"{root}: no files to ship to the rollout workers")
    return DirBundle(root.name, files)


class LocalDirs:
    """A worker's local copies of shipped directories, under one temporary directory of its own."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tlt-worker-"))
        self.count = 0

    def local(self, item: str | DirBundle | None) -> str | None:
        """A path for `item`: a path as given, a bundle written out (a fresh directory each
        time)."""
        if item is None or isinstance(item, str):
            return item
        self.count += 1
        out = self.root / f"{self.count:06d}-{item.name}"
        for rel, data in item.files:
            f = out / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
        return str(out)

    def prune(self, keep: Iterable[str | None]) -> None:
        """Delete the copies not in `keep` (those still loaded or waiting to be)."""
        kept = {Path(k).resolve() for k in keep if k}
        for d in self.root.iterdir():
            if d.resolve() not in kept:
                shutil.rmtree(d, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
