"""Fixtures the real-backend tests share (tests/conftest.py has the markers and the reference
model)."""

from __future__ import annotations

from typing import Callable

import pytest

from real.tiny.task import make_problems


@pytest.fixture(scope="session")
def task_prompts() -> Callable[[int, int], list[str]]:
    """`task_prompts(n, seed)`: the prompts of n task problems (default mix) drawn for `seed`."""

    def prompts(n: int, seed: int) -> list[str]:
        return [p.prompt for p in make_problems(n, seed)]

    return prompts
