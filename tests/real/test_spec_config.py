"""The Policy -> vLLM translation refuses what vLLM cannot run (pure: no vLLM needed)."""

from __future__ import annotations

import pytest

from real.rollout.spec_config import EngineConfigError, speculative_config
from workbench.contracts.policy import load_policy


def test_a_tree_strategy_is_refused_naming_the_row():
    with pytest.raises(EngineConfigError) as exc:
        speculative_config(load_policy("tlt-paper"), drafter_dir="unused")
    msg = str(exc.value)
    assert "schedule[0]" in msg and "8_4_48" in msg and "chains" in msg and "tlt sim" in msg
    # A tree-free policy still translates.
    assert speculative_config(load_policy("tlt-base"))["method"] == "ngram"
