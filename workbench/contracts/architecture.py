"""Architecture: the shape of a decoder-only transformer, from a Hugging Face `config.json`.

Costs of a model on a GPU follow from its shape (bytes of weights and KV cache read per step,
FLOPs per token), so a profile measured or fitted for one model can be carried to another
(workbench/calibrate/shapes.py), and the profiler instantiates a model from the same file.
Presets live in `presets/architectures/` (the public configs of the models the TLT paper
trains, plus our tiny model); any HF `config.json` works too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workbench.contracts.schema import ConfigError, parse_mapping, preset_names, read_text

PRESET_DIR = Path(__file__).parent / "presets" / "architectures"
_CONFIG = "a Hugging Face config.json (JSON text)"
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


def _size(data: dict, key: str, source: str, default: int | None = None) -> int:
    """A size of the config (a whole number >= 1); `default` where the config leaves it out."""
    value = data.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            value == value and 1 <= value < 2**40 and value == int(value)):
        raise ConfigError(source, key, value, "a whole number >= 1, as a Hugging Face config.json "
                          "gives it")
    return int(value)


def from_hf_config(data: dict, name: str, source: str = "") -> Architecture:
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ConfigError(source or name, missing[0], "<missing>",
                          "a Hugging Face decoder config.json with " + ", ".join(_REQUIRED))
    where = source or name
    heads = _size(data, "num_attention_heads", where)
    hidden = _size(data, "hidden_size", where)
    return Architecture(name=name, hidden=hidden, layers=_size(data, "num_hidden_layers", where),
                        heads=heads,
                        kv_heads=_size(data, "num_key_value_heads", where, heads),
                        head_dim=_size(data, "head_dim", where, max(1, hidden // heads)),
                        intermediate=_size(data, "intermediate_size", where),
                        vocab=_size(data, "vocab_size", where),
                        tied_embeddings=bool(data.get("tie_word_embeddings", False)),
                        qkv_bias=(data.get("model_type") == "qwen2"
                                  or bool(data.get("attention_bias", False))))


def load_architecture(name_or_path: str | Path) -> Architecture:
    """A preset name (`presets/architectures/NAME.json`) or a path to a `config.json`."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PRESET_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise ConfigError(str(name_or_path), "<name>", "is neither a preset nor a file",
                              f"an architecture preset ({', '.join(architecture_presets())}) or a "
                              "config.json path")
    data = parse_mapping(read_text(path, _CONFIG), str(path), is_json=True)
    return from_hf_config(data, path.stem if path.name != "config.json" else path.parent.name,
                          str(path))


def architecture_presets() -> list[str]:
    return preset_names(PRESET_DIR, "*.json")
