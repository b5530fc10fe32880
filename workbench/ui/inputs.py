"""Inputs several pages share: a workload (a preset or an uploaded file) and uploaded policy files.

What-if, Compare and Tune take the same files `tlt sim`, `tlt compare` and `tlt tune` do; a file is
validated as the command line validates it, and a bad one is shown with its file, field and fix.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import streamlit as st

from workbench.contracts.policy import Policy
from workbench.contracts.schema import (
    MAPPING_FILE,
    ConfigError,
    FieldError,
    Notice,
    decode_text,
    from_mapping,
    parse_mapping,
    to_mapping,
)
from workbench.contracts.workload import Workload, load_workload, workload_presets

# measured lengths (a real DAPO run), not a hand-set shape
DEFAULT_WORKLOAD = "polytrace-dapo-qwen2.5-32b"


def digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:10]


def subject(*contracts: Any) -> str:
    """What a page's result is a result of (its workload and profile, say), as a digest: a page
    shows a result only under the inputs it came from, never under the input that replaced them."""
    return digest(json.dumps([to_mapping(c) for c in contracts], sort_keys=True,
                             default=str).encode())


@contextmanager
def notices() -> Iterator[None]:
    """Show the notices the block gives (a preset or a file's field loaded by an old name, a
    study's abandoned trials) on the page, as the command line prints them on stderr; other
    warnings pass on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", Notice)
        yield
    for w in caught:
        if issubclass(w.category, Notice):
            st.info(f"notice: {w.message}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


# The uploaders take any file, so that a wrong one is answered with what it is and where it goes
# (a browser's type filter answers only "files are not allowed").
MAPPING_SUFFIXES = (".yaml", ".yml", ".json")
LENGTH_SUFFIXES = (".jsonl", ".csv", ".parquet")


def parse_upload(cls: type, upload) -> Any:
    """A contract from an uploaded YAML/JSON file; ConfigError on any problem."""
    suffix = Path(upload.name).suffix.lower()
    if suffix not in MAPPING_SUFFIXES:
        where = (" Response lengths become a workload through `tlt workload import` (What-if: "
                 "the 'Length file' source)." if suffix in LENGTH_SUFFIXES else "")
        raise ConfigError(upload.name, "<file>", f"is a {suffix or 'suffix-less'} file",
                          f"{MAPPING_FILE} of {cls.__name__} fields.{where}")
    text = decode_text(upload.getvalue(), upload.name, MAPPING_FILE)
    data = parse_mapping(text, upload.name, upload.name.lower().endswith(".json"))
    with notices():
        return from_mapping(cls, data, source=upload.name)


def workload_file(key: str) -> tuple[Workload | None, str]:
    """An uploaded workload file and an id that changes
    with its content; (None, "") until a valid one."""
    upload = st.file_uploader("Workload file (YAML/JSON)", key=key)
    if upload is None:
        st.info("Upload a workload YAML/JSON file (same fields as the presets).")
        return None, ""
    try:
        return parse_upload(Workload, upload), f"file:{upload.name}:{digest(upload.getvalue())}"
    except (ConfigError, FieldError) as exc:
        st.error(f"Workload file rejected: {exc}")
        return None, ""


def workload_preset(label: str, key: str) -> tuple[Workload | None, str]:
    presets = workload_presets()
    default = presets.index(DEFAULT_WORKLOAD) if DEFAULT_WORKLOAD in presets else 0
    name = st.selectbox(label, presets, index=default, key=key)
    try:
        return load_workload(name), f"preset:{name}"
    except (ConfigError, FieldError) as exc:
        st.error(f"Workload preset '{name}' is invalid: {exc}")
        return None, ""


def workload_choice(prefix: str, preset_key: str) -> tuple[Workload | None, str]:
    """A preset or an uploaded workload file, picked by a radio (`{prefix}_wl_source`)."""
    source = st.radio("Workload", ["Preset", "File"], horizontal=True, key=f"{prefix}_wl_source",
                      help="A named preset or a workload YAML/JSON file of your own.")
    if source == "File":
        return workload_file(f"{prefix}_wl_file")
    return workload_preset("Workload preset", preset_key)


def policy_uploads(key: str, label: str, taken: set[str]) -> list[Policy]:
    """Valid uploaded policy files, each renamed where
    its name is already taken (errors shown, skipped)."""
    uploads = st.file_uploader(label, accept_multiple_files=True, key=key)
    policies: list[Policy] = []
    names = set(taken)
    for upload in uploads or []:
        try:
            policy = parse_upload(Policy, upload)
        except (ConfigError, FieldError) as exc:
            st.error(f"Policy file rejected: {exc}")
            continue
        label = name = policy.name if policy.name not in names else f"{policy.name} ({upload.name})"
        i = 2
        while name in names:
            name, i = f"{label} ({i})", i + 1
        names.add(name)
        policies.append(policy.with_name(name))
    return policies
