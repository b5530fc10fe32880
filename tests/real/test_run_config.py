"""`tlt train`'s settings: which warm-start drafter a run gets when none is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from real.run.config import default_drafter
from workbench.contracts.policy import load_policy

pytestmark = pytest.mark.needs_reference


def test_each_shipped_model_warm_starts_from_its_own_drafter(
    reference_model, reference_drafter, tmp_path
):
    warm, cold = load_policy("tlt-vllm"), load_policy("tlt-cold")
    styles = reference_model.parent / "styles" / "model"
    assert default_drafter(reference_model, warm) == reference_drafter.resolve()
    assert default_drafter(styles, warm) == (styles.parent / "drafter").resolve()
    assert default_drafter(str(styles), cold) is None  # a cold start trains its own
    # a model we did not ship: --drafter is needed
    assert default_drafter(tmp_path / "model", warm) is None
    assert default_drafter(styles, warm, Path("mine")) == Path("mine")
