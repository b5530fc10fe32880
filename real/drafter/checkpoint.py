"""EAGLE drafter checkpoints: a directory vLLM loads as the drafter, and `load_drafter` to train it
further.

The checkpoint (`save_drafter`) is a directory with `config.json` (a `LlamaConfig`,
`architectures: ["EagleLlamaForCausalLM"]`, one layer, the target's sizes), `model.safetensors`
with exactly `fc.weight`, `layers.0.self_attn.{q,k,v,o}_proj.weight`,
`layers.0.mlp.{gate,up,down}_proj.weight` and `layers.0.post_attention_layernorm.weight` (no
`input_layernorm`: vLLM refuses it; no embedding or LM head: vLLM shares the target's), and
`tlt_drafter.json` (how it was trained). It is written atomically (temp dir + rename).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch.nn as nn

from real.drafter.eagle import EagleDrafter
from workbench.contracts.fileio import write_dir_atomic

EXTRA_FILE = "tlt_drafter.json"


def save_drafter(drafter: EagleDrafter, out_dir: str | Path, target_config: Any = None,
                 extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint vLLM loads as EagleLlamaForCausalLM; atomically (temp dir + rename)."""
    from safetensors.torch import save_file

    out = Path(out_dir)

    def fill(tmp: Path) -> None:
        drafter.config.to_llama_config(target_config).save_pretrained(str(tmp))
        save_file(
            drafter.drafter_state_dict(), str(tmp / "model.safetensors"), metadata={"format": "pt"}
        )
        info: dict[str, Any] = {"drafter_config": asdict(drafter.config)}
        cfg = getattr(drafter, "train_config", None)
        if cfg is not None:
            info["train_config"] = asdict(cfg)
            log = getattr(drafter, "train_log", [])
            if log:
                tail = log[-min(50, len(log)):]
                info["final"] = {
                    k: sum(h[k] for h in tail) / len(tail) for k in ("loss", "reg", "ce", "top1")
                }
            info["train_sequences"] = getattr(drafter, "train_sequences", None)
        info.update(extra or {})
        (tmp / EXTRA_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")

    write_dir_atomic(out, fill)
    return out


def load_drafter(drafter_dir: str | Path, target_model: nn.Module) -> EagleDrafter:
    """A saved drafter on top of the target's embedding and LM head (to train it further)."""
    from safetensors.torch import load_file

    drafter = EagleDrafter.from_target(target_model)
    state = load_file(str(Path(drafter_dir) / "model.safetensors"))
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    missing = [k for k in missing if k.split(".")[0] not in EagleDrafter.SHARED]
    if missing or unexpected:
        raise ValueError(
            f"{drafter_dir}: not a drafter of this target (missing {missing}, unexpected "
            f"{unexpected})"
        )
    return drafter
