"""The Policy -> vLLM translation refuses what vLLM cannot run (pure: no vLLM needed)."""

from __future__ import annotations

import pytest

from real.rollout.spec_config import EngineConfigError, speculative_config
from workbench.contracts.policy import load_policy


def test_a_tree_strategy_is_refused_naming_the_row():
    with pytest.raises(EngineConfigError) as exc:
        speculative_config(load_policy("tlt"), drafter_dir="unused")
    msg = str(exc.value)
    assert "schedule[0]" in msg and "8_4_48" in msg and "chains" in msg and "tlt sim" in msg
    # A tree-free policy still translates.
    assert speculative_config(load_policy("tlt-base"))["method"] == "ngram"


def test_tlt_train_refuses_a_tree_policy_before_anything_starts(reference_model, tmp_path):
    from real.run.coordinator import RunConfig, TrainError

    cfg = RunConfig(model=reference_model, policy=load_policy("tlt"), out=tmp_path / "run",
                    drafter=reference_model.parent / "drafter")
    with pytest.raises(TrainError) as exc:
        cfg.check()
    assert "--policy tlt" in str(exc.value) and "schedule[0]" in str(exc.value)
    assert not (tmp_path / "run").exists()
