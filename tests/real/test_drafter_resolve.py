"""Drafters as users name them (real/drafter/resolve.py, real/hub_cache.py): hub ids in and out of
the local Hugging Face cache, the public EAGLE and EAGLE-3 layouts, and a clear error naming the
field for a drafter that does not fit its target.

A hub cache is built in a temporary folder (tests/conftest.py's `hub_cache`) holding copies of the
shipped model and heads: nothing is downloaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from real.drafter.layout import VLLM_ARCHITECTURES, DrafterError
from real.drafter.resolve import check_trainable, resolve_drafter
from real.hub_cache import HubCacheError, is_hub_id, local_model

pytestmark = pytest.mark.needs_reference

EAGLE3_ID = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
REVISION = "0" * 40  # tests/conftest.py's hub_cache files snapshots under it


@pytest.fixture
def empty_cache(hub_cache):
    return hub_cache({})


def _copy(src: Path, tmp_path: Path, edit: dict | None = None) -> Path:
    out = tmp_path / src.name
    shutil.copytree(src, out)
    if edit:
        cfg = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**cfg, **edit}))
    return out


def test_a_hub_id_not_in_the_cache_is_accepted_and_said_unchecked(empty_cache):
    ref = resolve_drafter(EAGLE3_ID, "meta-llama/Llama-3.1-8B-Instruct")
    assert (ref.method, ref.model, ref.local) == ("eagle3", EAGLE3_ID, None)
    assert any("not in this machine's Hugging Face cache" in u for u in ref.unchecked)
    assert any("meta-llama/Llama-3.1-8B-Instruct" in u for u in ref.unchecked)
    assert resolve_drafter("yuhuili/EAGLE-LLaMA3-Instruct-8B").method == "eagle"
    with pytest.raises(DrafterError, match="--drafter-method"):
        resolve_drafter("someone/my-head")
    assert resolve_drafter("someone/my-head", method="eagle3").method == "eagle3"
    with pytest.raises(DrafterError, match="hf download"):
        resolve_drafter(EAGLE3_ID, need_local=True)
    with pytest.raises(HubCacheError, match="hf download"):
        local_model("Qwen/Qwen2.5-7B-Instruct")


def test_a_cached_hub_id_is_read_and_checked_against_a_cached_target(
        hub_cache, reference_model, public_drafters):
    cache = hub_cache({"me/tiny-model": reference_model,
                       "me/tiny-EAGLE3": public_drafters["eagle3"]})
    assert is_hub_id("me/tiny-model") and not is_hub_id(str(reference_model))
    assert local_model("me/tiny-model") == cache / "models--me--tiny-model/snapshots" / REVISION
    ref = resolve_drafter("me/tiny-EAGLE3", "me/tiny-model", need_local=True)
    assert ref.method == "eagle3" and ref.model == "me/tiny-EAGLE3"  # the engine gets the id
    assert ref.local == cache / "models--me--tiny-EAGLE3/snapshots" / REVISION
    assert ref.architecture == "LlamaForCausalLMEagle3" and ref.aux_layers == (1, 2, 3)
    assert ref.unchecked == () and any("match me/tiny-model" in c for c in ref.checked)


def test_the_public_layouts_are_told_apart_by_their_files(reference_model, reference_drafter,
                                                           public_drafters):
    seen = {}
    for name, path in [("tlt", reference_drafter), *public_drafters.items()]:
        ref = resolve_drafter(path, reference_model)
        seen[name] = (ref.method, ref.architecture)
        assert ref.model == str(path.resolve()) and not ref.unchecked, ref
        check_trainable(ref, 4)
    assert seen == {"tlt": ("eagle", "EagleLlamaForCausalLM"),
                    "eagle-public": ("eagle", "EagleLlamaForCausalLM"),
                    "eagle3": ("eagle3", "LlamaForCausalLMEagle3")}
    # SafeAILab's public EAGLE layout names the plain Llama class and ships a torch pickle
    public = json.loads((public_drafters["eagle-public"] / "config.json").read_text())
    assert public["architectures"] == ["LlamaForCausalLM"]
    assert (public_drafters["eagle-public"] / "pytorch_model.bin").is_file()


@pytest.mark.parametrize("edit, field", [
    ({"hidden_size": 64}, r"hidden size 64 \(config.json hidden_size\) is not the target's 128"),
    ({"vocab_size": 151936}, r"vocabulary 151936 \(config.json vocab_size\) is not the target's"),
    ({"architectures": ["Qwen2ForCausalLMEagle3"]}, r"architecture Qwen2ForCausalLMEagle3 .* "
                                                    r"no eagle3 drafter vLLM runs"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 9]}}, r"target layers \[1, 2, 9"),
])
def test_a_drafter_that_does_not_fit_its_target_names_the_field(
        tmp_path, reference_model, public_drafters, edit, field):
    bad = _copy(public_drafters["eagle3"], tmp_path, edit)
    with pytest.raises(DrafterError, match=field):
        resolve_drafter(bad, reference_model)


def test_a_method_the_files_contradict_and_an_empty_directory_are_refused(
        tmp_path, reference_model, public_drafters):
    with pytest.raises(DrafterError, match="is an eagle3 head, not eagle"):
        resolve_drafter(public_drafters["eagle3"], reference_model, method="eagle")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DrafterError, match="no config.json"):
        resolve_drafter(empty)
    (empty / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(DrafterError, match="no weights"):
        resolve_drafter(empty)
    with pytest.raises(DrafterError, match="no such directory"):
        resolve_drafter(tmp_path / "missing")


@pytest.mark.needs_torch
def test_an_eagle_head_with_an_fc_bias_is_refused_as_vllm_would(tmp_path, reference_drafter):
    import torch
    from safetensors.torch import load_file, save_file

    bad = _copy(reference_drafter, tmp_path)
    state = load_file(str(bad / "model.safetensors"))
    state["fc.bias"] = torch.zeros(state["fc.weight"].shape[0])
    save_file(state, str(bad / "model.safetensors"))
    with pytest.raises(DrafterError, match="fc.bias"):
        resolve_drafter(bad)


def test_what_the_spot_trainer_cannot_continue_is_said_before_a_run(
        tmp_path, reference_model, public_drafters):
    variant = _copy(public_drafters["eagle3"], tmp_path, {"norm_before_residual": True})
    with pytest.raises(DrafterError, match="norm_before_residual"):
        check_trainable(resolve_drafter(variant, reference_model), 4)
    last = resolve_drafter(public_drafters["eagle3"], reference_model)
    with pytest.raises(DrafterError, match="reads target layer 3"):
        check_trainable(last, 3)


@pytest.mark.needs_vllm
def test_the_architecture_table_is_the_installed_vllms():
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS as REGISTRY

    for method, archs in VLLM_ARCHITECTURES.items():
        missing = [a for a in archs if a not in REGISTRY]
        assert not missing, (method, missing)
