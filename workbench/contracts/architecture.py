"""Architecture: the shape of a decoder-only transformer, from a Hugging Face `config.json`.

Costs of a model on a GPU follow from its shape (bytes of weights and KV cache read per step,
FLOPs per token), so a profile measured or fitted for one model can be carried to another
(workbench/calibrate/published/shapes.py), and the profiler instantiates a model from the same file.
Presets live in `presets/architectures/` (the public configs of the models the TLT paper
trains, plus our tiny model); any HF `config.json` works too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from workbench.contracts.schema import ConfigError, preset_names

PRESET_DIR = Path(__file__).parent / "presets" / "architectures"
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size")


@dataclass(frozen=True)
class Architecture:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool  # Qwen2 has biases on q, k and v

    @property
    def layer_params(self) -> int:
        """One decoder layer: attention (q, k, v, o), the gated MLP and two norms."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = self.hidden * (q + 2 * kv) + q * self.hidden + ((q + 2 * kv) if self.qkv_bias else 0)
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def lm_head_params(self) -> int:
        return self.hidden * self.vocab

    @property
    def params(self) -> int:
        embed = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else self.lm_head_params
        return embed + self.layers * self.layer_params + self.hidden + head

    @property
    def decode_params(self) -> int:
        """Weights a decode step reads (the input embedding is a lookup, not a matmul)."""
        return self.layers * self.layer_params + self.lm_head_params

    @property
    def drafter_params(self) -> int:
        """An EAGLE drafter: one decoder layer and fc (2H -> H) on the target's LM head."""
        return self.layer_params + 2 * self.hidden * self.hidden + self.lm_head_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache per context token, all layers (keys and values)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes


def from_hf_config(data: dict, name: str, source: str = "") -> Architecture:
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ConfigError(source or name, missing[0], "<missing>",
                          "a Hugging Face decoder config.json with " + ", ".join(_REQUIRED))
    heads = int(data["num_attention_heads"])
    hidden = int(data["hidden_size"])
    return Architecture(name=name, hidden=hidden, layers=int(data["num_hidden_layers"]),
                        heads=heads, kv_heads=int(data.get("num_key_value_heads") or heads),
                        head_dim=int(data.get("head_dim") or hidden // heads),
                        intermediate=int(data["intermediate_size"]), vocab=int(data["vocab_size"]),
                        tied_embeddings=bool(data.get("tie_word_embeddings", False)),
                        qkv_bias=(data.get("model_type") == "qwen2"
                                  or bool(data.get("attention_bias", False))))


def load_architecture(name_or_path: str | Path) -> Architecture:
    """A preset name (`presets/architectures/NAME.json`) or a path to a `config.json`."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PRESET_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise ConfigError(str(name_or_path), "<name>", str(name_or_path),
                              f"an architecture preset ({', '.join(architecture_presets())}) or a "
                              "config.json path")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(str(path), "<file>", "unparseable",
                          f"a JSON config.json ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "<top level>", type(data).__name__, "a JSON mapping")
    return from_hf_config(data, path.stem if path.name != "config.json" else path.parent.name,
                          str(path))


def architecture_presets() -> list[str]:
    return preset_names(PRESET_DIR, "*.json")
