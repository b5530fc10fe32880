"""The Policy -> vLLM translation refuses what vLLM cannot run (pure: no vLLM needed)."""

from __future__ import annotations

import pytest

from real.rollout.spec_config import EngineConfigError, speculative_config
from workbench.contracts.policy import load_policy


def test_a_tree_strategy_is_refused_naming_the_row():
    with pytest.raises(EngineConfigError) as exc:
        speculative_config(load_policy("tlt"), drafter="unused")
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


def _with(policy, **parts):
    from dataclasses import replace

    out = replace(policy, **parts)
    out.check()
    return out


def test_a_suffix_drafter_is_refused_naming_the_field_and_the_fix(reference_model, tmp_path):
    """vLLM's suffix decoding needs arctic-inference, which the real backend does not ship: the
    engine translation and `tlt train` both refuse it before an engine starts."""
    from real.run.coordinator import RunConfig, TrainError
    from workbench.contracts.policy import DrafterConfig

    suffix = _with(load_policy("tlt-base"), name="suffix-sd", drafter=DrafterConfig(kind="suffix"))
    with pytest.raises(EngineConfigError) as exc:
        speculative_config(suffix)
    assert (
        "drafter.kind 'suffix'" in str(exc.value)
        and "'ngram'" in str(exc.value)
        and "tlt sim" in str(exc.value)
    )
    with pytest.raises(TrainError) as exc:
        RunConfig(model=reference_model, policy=suffix, out=tmp_path / "run").check()
    assert "--policy suffix-sd" in str(exc.value) and "drafter.kind 'suffix'" in str(exc.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "preset, field",
    [
        ("async-1", "rollout.mode 'async'"),
        ("verl-fully-async", "rollout.stream"),
        ("april", "rollout.mode 'partial'"),
    ],
)
def test_tlt_train_refuses_simulator_only_rollout_modes(reference_model, tmp_path, preset, field):
    from real.run.coordinator import RunConfig, TrainError

    pol = load_policy(preset)
    with pytest.raises(TrainError) as exc:
        RunConfig(model=reference_model, policy=pol, out=tmp_path / "run").check()
    msg = str(exc.value)
    assert f"--policy {pol.name}" in msg and field in msg and "sync" in msg and "tlt sim" in msg
    # One engine's rollout has no mode (tlt capture): only the drafting is checked there.
    assert speculative_config(pol) is None
