"""Shared fixtures: presets loaded once per session (they are frozen dataclasses)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from workbench.policy import load_policy
from workbench.profile import load_profile
from workbench.workload import load_workload


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest leaves its temporary script installed as `__main__`. vLLM spawns its
    engine process, which re-imports `__main__` from its path: a later engine test would then
    run the app script there and fail to start. Put the real `__main__` back after each test."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(scope="session")
def gpu_profile():
    return load_profile("h100-qwen2.5-7b-tp4")


@pytest.fixture(scope="session")
def policies():
    return {name: load_policy(name) for name in ("baseline", "static-sd", "tlt")}


@pytest.fixture(scope="session")
def paper_7b():
    return load_workload("paper-7b-8gpu")


@pytest.fixture(scope="module")
def random_target():
    """A random-weight tiny Qwen2 (no training): enough for shapes, names and determinism.
    Skips the test where torch/transformers are not installed."""
    if not all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers")):
        pytest.skip("torch/transformers are not installed")
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, max_position_embeddings=256, tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg).eval()
    model.requires_grad_(False)
    return model
