"""The one set of writers: every file and directory the workbench writes goes through here.

Each writer builds its output beside the destination and renames it into place, so a crash
or a kill at any moment leaves the old file (or none), never half a file. Fitted numbers are
written at fixed precision (`sig`), so a refit on another CPU changes a file only where the fit
moved.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np


def sig(x: float, digits: int = 5) -> float:
    """Round to `digits` significant digits (fitted files are read by people too)."""
    return float(f"{float(x):.{digits - 1}e}")


def cache_dir(kind: str) -> Path:
    """Where the workbench keeps files it derived and may derive again ($XDG_CACHE_HOME/tlt/KIND,
    else ~/.cache/tlt/KIND): kept between runs, never in the system's temporary folder, which
    every job leaves as it found it."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "tlt" / kind


def write_atomic(path: str | Path, text: str) -> None:
    """Write text via a temp file and rename."""
    _write(Path(path), lambda fh: fh.write(text.encode()))


def write_json(path: str | Path, doc: Any) -> None:
    """`doc` as indented JSON, numpy values made plain and NaN/inf written as null (`jsonable`)."""
    write_atomic(path, json.dumps(jsonable(doc), indent=2) + "\n")


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> None:
    """A matplotlib Figure as PNG, atomically."""
    _write(Path(path), lambda fh: fig.savefig(fh, format="png", dpi=dpi))


def save_result(out_dir: str | Path, stem: str, json_text: str, fig: Any) -> tuple[Path, Path]:
    """A tool's result as DIR/STEM.json and DIR/STEM.png, each atomically."""
    out_dir = Path(out_dir)
    json_path, png_path = out_dir / f"{stem}.json", out_dir / f"{stem}.png"
    write_atomic(json_path, json_text)
    save_figure(fig, png_path)
    return json_path, png_path


def write_parquet(path: str | Path, frame: Any, compression: str = "snappy") -> None:
    """A pandas DataFrame as Parquet (no index), atomically."""
    _write(Path(path), lambda fh: frame.to_parquet(fh, index=False, compression=compression))


def write_dir_atomic(path: str | Path, fill: Callable[[Path], None]) -> Path:
    """Build a directory with `fill(tmp_dir)` next to `path`, then swap it in: never half a
    directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def jsonable(v: Any) -> Any:
    """Nested dicts/lists of numpy scalars -> plain JSON values (NaN and inf -> null)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(float(v)) else None
    if isinstance(v, (np.integer, np.bool_)):
        return v.item()
    return v


def _write(path: Path, write: Callable[[Any], Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
