"""Drafter checkpoints: directories vLLM loads as the drafter (`save_drafter`), and `load_drafter`
to train one further, whichever public layout it is in (real/drafter/layout.py).

`save_drafter` writes, atomically (temp dir + rename):

- an EAGLE head (real/drafter/eagle.py), layout "tlt": `config.json` (a `LlamaConfig`,
  `architectures: ["EagleLlamaForCausalLM"]`, one layer, the target's sizes) and
  `model.safetensors` with exactly `fc.weight`, `layers.0.self_attn.{q,k,v,o}_proj.weight`,
  `layers.0.mlp.{gate,up,down}_proj.weight` and `layers.0.post_attention_layernorm.weight` (no
  `input_layernorm`: vLLM refuses it; no embedding or LM head: vLLM shares the target's);
  layout "public": the same tensors as SafeAILab's EAGLE writes them, `pytorch_model.bin` and
  `architectures: ["LlamaForCausalLM"]` with `bias: false` (vLLM's method "eagle" renames it);
- an EAGLE-3 head (eagle3.py): the public EAGLE-3 layout of SafeAILab's traineagle3 and SpecForge,
  `architectures: ["LlamaForCausalLMEagle3"]`, `model.safetensors` with `fc.weight`, `midlayer.*`,
  `norm.weight`, `lm_head.weight`, `d2t` and `t2d`;

each with `tlt_drafter.json` (how it was trained; vLLM ignores it). A head that ships its own
embedding keeps it (`embed_tokens.weight`).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn as nn

from real.drafter.eagle import EagleConfig, EagleDrafter, check_same_sizes
from real.drafter.eagle3 import Eagle3Config, Eagle3Drafter
from real.drafter.layout import (
    EAGLE,
    TRAINABLE,
    aux_layer_ids,
    default_aux_layers,
    detect_method,
    read_head,
    vllm_architecture,
)
from workbench.contracts.fileio import write_dir_atomic

EXTRA_FILE = "tlt_drafter.json"
LAYOUTS = ("tlt", "public")
PUBLIC_EAGLE_ARCHITECTURE = "LlamaForCausalLM"


def save_drafter(drafter: EagleDrafter | Eagle3Drafter, out_dir: str | Path,
                 target_config: Any = None, extra: dict[str, Any] | None = None,
                 layout: str = "tlt") -> Path:
    """Write a checkpoint vLLM loads (an EAGLE head in `layout` "tlt" or "public"; an EAGLE-3 head
    in its public layout); atomically (temp dir + rename)."""
    from safetensors.torch import save_file

    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: give one of {', '.join(LAYOUTS)}")
    out = Path(out_dir)

    def fill(tmp: Path) -> None:
        state = drafter.drafter_state_dict()
        if isinstance(drafter, Eagle3Drafter):
            text = json.dumps(drafter.config.to_config_dict(target_config), indent=2)
            (tmp / "config.json").write_text(text + "\n")
            save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        elif layout == "public":
            cfg = drafter.config.to_llama_config(target_config, PUBLIC_EAGLE_ARCHITECTURE)
            cfg.save_pretrained(str(tmp))
            torch.save(state, str(tmp / "pytorch_model.bin"))
        else:
            drafter.config.to_llama_config(target_config).save_pretrained(str(tmp))
            save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / EXTRA_FILE).write_text(json.dumps(_training_info(drafter, extra), indent=2,
                                                 default=str) + "\n")

    write_dir_atomic(out, fill)
    return out


def _training_info(drafter: nn.Module, extra: dict[str, Any] | None) -> dict[str, Any]:
    info: dict[str, Any] = {"method": drafter.method, "drafter_config": asdict(drafter.config)}
    cfg = getattr(drafter, "train_config", None)
    if cfg is not None:
        info["train_config"] = asdict(cfg)
        log = getattr(drafter, "train_log", [])
        if log:
            tail = log[-min(50, len(log)):]
            info["final"] = {k: sum(h[k] for h in tail) / len(tail) for k in tail[0]
                             if k != "step"}
        info["train_sequences"] = getattr(drafter, "train_sequences", None)
    info.update(extra or {})
    return info


def load_weights(drafter_dir: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint directory (*.safetensors, or pytorch_model*.bin read with
    weights only), floating ones as float32."""
    from safetensors.torch import load_file

    path, state = Path(drafter_dir), {}
    for file in sorted(path.glob("*.safetensors")):
        state.update(load_file(str(file)))
    if not state:
        for file in sorted(path.glob("pytorch_model*.bin")):
            state.update(torch.load(str(file), map_location="cpu", weights_only=True))
    if not state:
        raise ValueError(f"{path}: no weights (*.safetensors or pytorch_model*.bin)")
    return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def load_drafter(drafter_dir: str | Path, target_model: nn.Module) -> EagleDrafter | Eagle3Drafter:
    """A saved EAGLE or EAGLE-3 head (either layout) on top of the target's embedding (unless it
    ships its own) and LM head, to train it further. ValueError names what does not fit."""
    path = Path(drafter_dir)
    head = read_head(path, f"drafter {path}")
    method = detect_method(head)
    archs = head.architectures
    arch = vllm_architecture(archs[0], method) if archs and method else None
    if method is None or arch not in TRAINABLE[method]:
        raise ValueError(f"drafter {path}: architecture {archs} (vLLM: {arch}): this project "
                         "trains Llama-layer heads only: " + ", ".join(
                             f"{m}: {'/'.join(a)}" for m, a in TRAINABLE.items()))
    state = load_weights(path)
    own = "embed_tokens.weight" in state
    embed = (nn.Embedding.from_pretrained(state["embed_tokens.weight"], freeze=True) if own
             else target_model.get_input_embeddings())
    if method == EAGLE:
        cfg = EagleConfig.from_target_config(SimpleNamespace(**head.config))
        drafter: EagleDrafter | Eagle3Drafter = EagleDrafter(
            cfg, embed, target_model.get_output_embeddings(), own)
        sizes = (cfg.hidden_size, cfg.vocab_size)
    else:
        tcfg = target_model.config
        layers = int((getattr(tcfg, "text_config", None) or tcfg).num_hidden_layers)
        aux = aux_layer_ids(head.config) or default_aux_layers(layers)
        if max(aux) >= layers:
            raise ValueError(f"drafter {path}: reads target layer {max(aux)} of {layers} (the "
                             "last layer's output before the final norm, which transformers does "
                             "not return): this project cannot train it")
        cfg3 = Eagle3Config.from_head_config(head.config, aux)
        drafter = Eagle3Drafter(cfg3, embed, target_model.get_output_embeddings(), own)
        sizes = (cfg3.target_hidden_size, cfg3.vocab_size)
    try:
        check_same_sizes(target_model, *sizes)
        drafter.load_drafter_state_dict(state)
    except (ValueError, RuntimeError) as exc:
        raise ValueError(f"drafter {path}: not a drafter of this target ({exc})") from None
    return drafter
