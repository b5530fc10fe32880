"""Hugging Face hub ids on this machine: a model or drafter named `owner/name` is read from the
local Hugging Face cache, never downloaded here.

`is_hub_id` tells a hub id from a path; `cached_snapshot` finds an id's files in the cache (the
`HF_HUB_CACHE` / `HF_HOME` folders, read when called); `local_model` gives the directory of a
`--model` that is a directory or a cached hub id, and says how to fetch one that is not cached.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# owner/name as the hub spells them (letters, digits, '-', '_', '.'); one slash.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


class HubCacheError(ValueError):
    """A model given as a hub id that this machine's cache does not hold (names the fix)."""


def is_hub_id(spec: str | Path) -> bool:
    """`owner/name` that is not an existing path (a local directory always wins)."""
    text = str(spec)
    return not Path(text).expanduser().exists() and bool(_HUB_ID.match(text))


def cache_dir() -> Path:
    """The hub cache folder as huggingface_hub resolves it, read from the environment now."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot directory of `repo_id` (its main revision), None when the cache holds
    none. Never touches the network."""
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id, cache_dir=str(cache_dir()), local_files_only=True)
    except Exception:  # not cached, or huggingface_hub absent: the caller says what it means
        return None
    return Path(path)


def local_model(spec: str | Path, option: str = "--model") -> Path:
    """The directory of a model given as a directory or a cached hub id, with its config.json;
    HubCacheError naming the fix otherwise."""
    path = Path(spec).expanduser()
    if not is_hub_id(spec):
        if not (path / "config.json").is_file():
            raise HubCacheError(f"{option} {spec}: no config.json (give a Hugging Face model "
                                "directory, or a hub id in this machine's Hugging Face cache)")
        return path
    snap = cached_snapshot(str(spec))
    if snap is None or not (snap / "config.json").is_file():
        raise HubCacheError(
            f"{option} {spec}: a hub id that this machine's Hugging Face cache ({cache_dir()}) "
            f"does not hold; fetch it first (`hf download {spec}`), or give its directory")
    return snap
