"""What an EAGLE or EAGLE-3 drafter checkpoint holds, read without loading it (no torch for
safetensors files), and which speculative method vLLM runs it with.

The public layouts (read from their writers' and vLLM's sources):

- EAGLE (vLLM method "eagle"): the heads of the cnets1.py module of SafeAILab/EAGLE
  (yuhuili/EAGLE-*): config.json a one-layer `LlamaConfig` with `architectures:
  ["LlamaForCausalLM"]` (vLLM renames it EagleLlamaForCausalLM), `pytorch_model.bin` or
  `model.safetensors` with `fc.weight` [H, 2H] (older heads: also `fc.bias`, which vLLM's
  EagleLlamaForCausalLM has no place for),
  `layers.0.*` without `input_layernorm`, and optionally `embed_tokens.weight` (vLLM then uses the
  head's own embedding instead of the target's). `tlt drafter train` writes the same tensors with
  `architectures: ["EagleLlamaForCausalLM"]`.
- EAGLE-3 (vLLM method "eagle3"): SafeAILab/EAGLE's `traineagle3` and SpecForge heads
  (yuhuili/EAGLE3-*, lmsys/sglang-EAGLE3-*): `architectures: ["LlamaForCausalLMEagle3"]`,
  `fc.weight` [H, 3 H_target] over three target layers' hidden states, `midlayer.*` (one layer
  whose attention reads 2H: the normed embedding and hidden state), `norm.weight`,
  `lm_head.weight` [draft vocabulary, H], `d2t` (draft id -> target id offset) and `t2d`; which
  target layers it reads: `eagle_config.eagle_aux_hidden_state_layer_ids` (vLLM's default
  (2, L // 2, L - 3) for an L-layer target).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EAGLE, EAGLE3 = "eagle", "eagle3"  # vLLM's method names
METHODS = (EAGLE, EAGLE3)
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
# The drafter architectures vLLM 0.32's model registry runs for each method, named as vLLM names
# them after renaming a head's own (`vllm_architecture`); tests/real/test_drafter_resolve.py holds
# this table against the installed vLLM's registry.
VLLM_ARCHITECTURES = {
    EAGLE: ("EagleLlamaForCausalLM", "EagleLlama4ForCausalLM", "EagleMiniCPMForCausalLM",
            "EagleCohereForCausalLM", "EagleMistralForCausalLM", "EagleMistralLarge3ForCausalLM",
            "EagleDeepSeekMTPModel"),
    EAGLE3: ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3MiniMaxM2ForCausalLM",
             "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM", "Eagle3Qwen3ForCausalLM",
             "Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"),
}
# EAGLE-3 config flags of variants vLLM's llama_eagle3.py runs and this project's head does not.
EAGLE3_VARIANTS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
# What this project's torch heads (real/drafter/eagle.py, eagle3.py) run and train.
TRAINABLE = {EAGLE: ("EagleLlamaForCausalLM",),
             EAGLE3: ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3")}


class DrafterError(ValueError):
    """A drafter that cannot run as given: names the drafter, the field and the fix."""


@dataclass(frozen=True)
class HeadFiles:
    """A drafter checkpoint directory as read from disk: its config.json, weight files and the
    names and shapes of its tensors."""

    path: Path
    config: dict[str, Any]
    weights: tuple[Path, ...]
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def architectures(self) -> list[str]:
        return [str(a) for a in self.config.get("architectures") or []]


def read_head(path: Path, who: str) -> HeadFiles:
    """The config and weights of a checkpoint directory; `who` names it in errors."""
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise DrafterError(f"{who}: no config.json in {path} (an EAGLE or EAGLE-3 checkpoint "
                           "directory has one)")
    try:
        config = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as exc:
        raise DrafterError(f"{who}: {cfg_file} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise DrafterError(f"{who}: {cfg_file} holds no JSON object")
    weights = tuple(sorted({p for g in WEIGHT_GLOBS for p in path.glob(g)}))
    tensors: dict[str, tuple[int, ...]] = {}
    for w in weights:
        tensors.update(tensor_shapes(w, who))
    return HeadFiles(path, config, weights, tensors)


def tensor_shapes(file: Path, who: str) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of one weight file: a safetensors header (no torch), or a torch
    pickle opened memory-mapped with weights only."""
    try:
        if file.suffix == ".safetensors":
            with file.open("rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}
        import torch

        state = torch.load(str(file), map_location="cpu", mmap=True, weights_only=True)
        return {k: tuple(v.shape) for k, v in state.items()}
    except Exception as exc:  # a truncated or foreign file: say which
        raise DrafterError(f"{who}: {file} is not a readable weight file ({exc})") from None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """A model config's language part (multimodal configs nest it as text_config)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def detect_method(head: HeadFiles) -> str | None:
    """vLLM's method for a head from its config and tensors; None when they do not say."""
    spec_type = head.config.get("speculators_model_type")
    if spec_type in METHODS:
        return str(spec_type)
    archs = head.architectures
    if any("eagle3" in a.lower() for a in archs):
        return EAGLE3
    if any(a.startswith("Eagle") for a in archs):
        return EAGLE
    if any(n.startswith("midlayer.") or n in ("d2t", "t2d") for n in head.tensors):
        return EAGLE3
    fc, h = head.tensors.get("fc.weight"), head.config.get("hidden_size")
    if fc is not None and len(fc) == 2 and h:
        return EAGLE if fc[1] == 2 * int(h) else EAGLE3
    return EAGLE3 if "draft_vocab_size" in head.config else None


def method_from_name(name: str) -> str | None:
    """The method vLLM infers from a drafter's name (its own rule: 'eagle-' then 'eagle3')."""
    low = name.lower()
    if "eagle-" in low:
        return EAGLE
    return EAGLE3 if "eagle3" in low else None


def vllm_architecture(arch: str, method: str) -> str:
    """The architecture vLLM runs a head of `arch` as, for `method` (vLLM's EAGLEConfig rule)."""
    if method == EAGLE:
        return arch if arch.startswith("Eagle") else f"Eagle{arch}"
    return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"


def aux_layer_ids(config: dict[str, Any]) -> tuple[int, ...] | None:
    """The target layers an EAGLE-3 head reads, as its config names them (None: vLLM's
    default)."""
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    inner = config.get("eagle_config")
    if not ids and isinstance(inner, dict):
        ids = inner.get("eagle_aux_hidden_state_layer_ids")
    return tuple(int(i) for i in ids) if ids else None


def default_aux_layers(target_layers: int) -> tuple[int, ...]:
    """vLLM's default EAGLE-3 layers for an L-layer target (SupportsEagle3): (2, L // 2, L - 3)."""
    return (2, target_layers // 2, target_layers - 3)
