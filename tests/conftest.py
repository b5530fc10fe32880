"""Shared fixtures: presets loaded once per session (they are frozen dataclasses)."""

from __future__ import annotations

import pytest

from workbench.policy import load_policy
from workbench.profile import load_profile
from workbench.workload import load_workload


@pytest.fixture(scope="session")
def gpu_profile():
    return load_profile("h100-qwen2.5-7b-tp4")


@pytest.fixture(scope="session")
def policies():
    return {name: load_policy(name) for name in ("baseline", "static-sd", "tlt")}


@pytest.fixture(scope="session")
def paper_7b():
    return load_workload("paper-7b-8gpu")
