"""Architecture: the shape of a decoder-only transformer, from a Hugging Face `config.json`.

Costs of a model on a GPU follow from its shape (bytes of weights and KV cache read per step,
FLOPs per token), so a profile measured or fitted for one model can be carried to another
(workbench/calibrate/published/shapes.py), and the profiler instantiates a model from the same file.
A mixture-of-experts model (`Experts`) reads only the experts its tokens route to; a model with
multi-head latent attention (`Mla`, DeepSeek-V3) caches one compressed vector per token and layer.
Presets live in `presets/architectures/` (the public configs of the models the TLT paper
trains, of the MoE models RL teams train, of dense families priced as stand-ins, plus our tiny
model); any HF `config.json` works too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workbench.contracts.schema import ConfigError, parse_mapping, preset_names, read_text

PRESET_DIR = Path(__file__).parent / "presets" / "architectures"
_CONFIG = "a Hugging Face config.json (JSON text)"
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size")
# Each config key spelling of the same fact, first match wins (Mixtral/gpt-oss, DeepSeek, Qwen).
EXPERT_COUNT_KEYS = ("num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts")
EXPERT_TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "top_k_experts", "moe_top_k")
# Bytes per weight as stored, by quantization_config.quant_method: fp8 checkpoints (DeepSeek-V3)
# store every decoder linear layer in 8 bits; MXFP4 ones (gpt-oss) only the experts, in 4 bits
# plus one 8-bit scale per 32 weights.
FP8_BYTES, MXFP4_BYTES, BF16_BYTES = 1.0, 4.25 / 8, 2.0
# Fields that make a layer something other than attention + FFN (state-space or recurrent mixers).
NOT_ATTENTION_KEYS = ("ssm_state_size", "state_size", "mamba_d_state", "attn_layer_period",
                      "layers_block_type", "block_types", "hybrid_override_pattern")


@dataclass(frozen=True)
class Experts:
    """The mixture-of-experts FFN of `moe_layers` layers (the rest have a dense FFN)."""

    count: int  # routed experts per MoE layer (E)
    per_token: int  # experts each token routes to (k)
    intermediate: int  # one routed expert's FFN width
    moe_layers: int
    shared_intermediate: int = 0  # the always-active shared experts' FFN width, all together

    def params(self, hidden: int) -> int:
        """One MoE layer's FFN: every routed expert (gated: 3 matrices), the shared ones, the
        router."""
        return 3 * hidden * (self.count * self.intermediate + self.shared_intermediate) \
            + hidden * self.count

    def active_params(self, hidden: int) -> int:
        """What one token reads of it: k routed experts, the shared ones and the router."""
        return 3 * hidden * (self.per_token * self.intermediate + self.shared_intermediate) \
            + hidden * self.count


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention: queries and keys/values through low-rank projections; the
    KV cache holds kv_rank + rope_dim numbers per token and layer, shared by every head."""

    q_rank: int
    kv_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int


@dataclass(frozen=True)
class Architecture:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # the dense FFN's width (layers without experts)
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool  # Qwen2 has biases on q, k and v
    experts: Experts | None = None  # None: a dense model
    mla: Mla | None = None
    quant: str = "bf16"  # the checkpoint's weights: bf16, fp8 or mxfp4 (experts only)
    family: str = ""  # the config's `architectures[0]` ("": not stated)

    @property
    def is_moe(self) -> bool:
        return self.experts is not None

    @property
    def dense_layers(self) -> int:
        return self.layers - (self.experts.moe_layers if self.experts else 0)

    @property
    def attention_params(self) -> int:
        """One layer's attention projections (q, k, v, o, or MLA's low-rank ones) and two norms."""
        if self.mla is not None:
            m, h = self.mla, self.heads
            q = (self.hidden * m.q_rank + m.q_rank * h * (m.nope_dim + m.rope_dim)) if m.q_rank \
                else self.hidden * h * (m.nope_dim + m.rope_dim)
            kv = self.hidden * (m.kv_rank + m.rope_dim) + m.kv_rank * h * (m.nope_dim + m.v_dim)
            return q + kv + h * m.v_dim * self.hidden + 2 * self.hidden
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return self.hidden * (q + 2 * kv) + q * self.hidden + bias + 2 * self.hidden

    @property
    def layer_params(self) -> int:
        """One decoder layer with a dense FFN: attention, the gated MLP and two norms."""
        return self.attention_params + 3 * self.hidden * self.intermediate

    def _ffn_params(self, active: bool) -> int:
        dense = self.dense_layers * 3 * self.hidden * self.intermediate
        if self.experts is None:
            return dense
        e = self.experts
        per = e.active_params(self.hidden) if active else e.params(self.hidden)
        return dense + e.moe_layers * per

    @property
    def lm_head_params(self) -> int:
        return self.hidden * self.vocab

    @property
    def params(self) -> int:
        embed = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else self.lm_head_params
        return embed + self.layers * self.attention_params + self._ffn_params(False) \
            + self.hidden + head

    @property
    def decode_params(self) -> int:
        """Weights a decode step of one sequence reads (the input embedding is a lookup, not a
        matmul; of a MoE layer, the experts its token routes to)."""
        return self.layers * self.attention_params + self._ffn_params(True) + self.lm_head_params

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (a MoE model's 'A3B'), embedding included."""
        return self.decode_params + self.vocab * self.hidden + self.hidden

    @property
    def drafter_params(self) -> int:
        """An EAGLE drafter: one dense decoder layer and fc (2H -> H) on the target's LM head."""
        return self.layer_params + 2 * self.hidden * self.hidden + self.lm_head_params

    @property
    def weight_bytes(self) -> float:
        """The weights as the checkpoint stores them (`quant`), in bytes."""
        if self.quant == "bf16":
            return BF16_BYTES * self.params
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        experts = (self.experts.moe_layers * self.experts.params(self.hidden)
                   if self.experts else 0)
        if self.quant == "mxfp4":
            return MXFP4_BYTES * experts + BF16_BYTES * (self.params - experts)
        return BF16_BYTES * embed + FP8_BYTES * (self.params - embed)

    def kv_bytes_per_token(self, dtype_bytes: int = 2, tp: int = 1) -> int:
        """KV cache per context token on one of `tp` GPUs, all layers: keys and values of the KV
        heads a rank holds (replicated past the KV-head count), or MLA's latent vector (every rank
        holds it whole)."""
        if self.mla is not None:
            return self.layers * (self.mla.kv_rank + self.mla.rope_dim) * dtype_bytes
        return self.layers * 2 * max(1, self.kv_heads // tp) * self.head_dim * dtype_bytes


def _whole(data: dict, key: str, source: str, default: int = 0) -> int:
    """A count of the config (a whole number >= 0); `default` where the config leaves it out."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            value == value and 0 <= value < 2**40 and value == int(value)):
        raise ConfigError(source, key, value, "a whole number >= 0, as a Hugging Face config.json "
                          "gives it")
    return int(value)


def _first(data: dict, keys: tuple[str, ...], source: str) -> int:
    return next((_whole(data, k, source) for k in keys if data.get(k) not in (None, 0)), 0)


def experts_from_config(data: dict, source: str = "config.json") -> Experts | None:
    """The MoE FFN a config.json describes (None: dense); its key spellings as aiconfigurator-core
    reads them."""
    count, topk = _first(data, EXPERT_COUNT_KEYS, source), _first(data, EXPERT_TOPK_KEYS, source)
    if count <= 1 or topk < 1:
        return None
    layers = _size(data, "num_hidden_layers", source)
    only = data.get("mlp_only_layers") or []
    if not isinstance(only, list):
        raise ConfigError(source, "mlp_only_layers", only, "a list of layer indices")
    dense = _whole(data, "first_k_dense_replace", source) + len(only)
    if dense > layers:
        raise ConfigError(source, "first_k_dense_replace", dense, f"at most {layers} dense layers "
                          "(num_hidden_layers)")
    step = _whole(data, "decoder_sparse_step", source) or 1
    moe_layers = (layers - dense) // step if step > 1 else layers - dense
    width = _whole(data, "moe_intermediate_size", source) or _size(data, "intermediate_size",
                                                                   source)
    shared = _whole(data, "shared_expert_intermediate_size", source) or (
        _whole(data, "n_shared_experts", source) or _whole(data, "num_shared_experts", source)
    ) * width
    return Experts(count=count, per_token=topk, intermediate=width, moe_layers=moe_layers,
                   shared_intermediate=shared)


def _mla(data: dict, source: str) -> Mla | None:
    if not _whole(data, "kv_lora_rank", source):
        return None
    return Mla(q_rank=_whole(data, "q_lora_rank", source),
               kv_rank=_size(data, "kv_lora_rank", source),
               nope_dim=_size(data, "qk_nope_head_dim", source),
               rope_dim=_size(data, "qk_rope_head_dim", source),
               v_dim=_size(data, "v_head_dim", source))


def _quant(data: dict) -> str:
    config = data.get("quantization_config")
    method = str(config.get("quant_method", "")).lower() if isinstance(config, dict) else ""
    return method if method in ("fp8", "mxfp4") else "bf16"


def family_of(data: dict, default: str = "") -> str:
    """The model class a config names first (`architectures`), or `default`."""
    named = data.get("architectures")
    return str(named[0]) if isinstance(named, list) and named else default


def language_model_config(data: dict) -> dict:
    """A multimodal config's language model (its `text_config`) over its top level; any other
    config as it is."""
    nested = data.get("text_config")
    if isinstance(nested, dict) and "hidden_size" not in data:
        return {**data, **nested, "architectures": data.get("architectures")}
    return data


def check_decoder(data: dict, source: str) -> None:
    """Refuse a config that describes no decoder-only transformer, naming the field that says so
    (an encoder-decoder; state-space or recurrent layers)."""
    family = family_of(data, "this model")
    nested = data.get("text_config")
    if data.get("is_encoder_decoder"):
        raise ConfigError(source, "is_encoder_decoder", True,
                          f"a decoder-only model: {family} is an encoder-decoder, whose costs "
                          "the decoder operators measured here cannot give")
    for key in NOT_ATTENTION_KEYS:
        if key in data or (isinstance(nested, dict) and key in nested):
            raise ConfigError(source, key, data.get(key, "<in text_config>"),
                              f"a transformer decoder: {family} has state-space or recurrent "
                              f"layers ({key}), which have no measured operators here")


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
    if data.get("hybrid_override_pattern") is None:  # NemotronH's hybrids: the package's own
        check_decoder(data, source or name)
    data = language_model_config(data)
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
                                  or bool(data.get("attention_bias", False))),
                        experts=experts_from_config(data, where), mla=_mla(data, where),
                        quant=_quant(data),
                        family=family_of(data))


def read_config(name_or_path: str | Path) -> tuple[dict, Path]:
    """A preset's or a config.json's mapping and the file it came from."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PRESET_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise ConfigError(str(name_or_path), "<name>", "is neither a preset nor a file",
                              f"an architecture preset ({', '.join(architecture_presets())}) or a "
                              "config.json path")
    data = parse_mapping(read_text(path, _CONFIG), str(path), is_json=True)
    return data, path


def load_architecture(name_or_path: str | Path) -> Architecture:
    """A preset name (`presets/architectures/NAME.json`) or a path to a `config.json`."""
    data, path = read_config(name_or_path)
    return from_hf_config(data, path.stem if path.name != "config.json" else path.parent.name,
                          str(path))


def architecture_presets() -> list[str]:
    return preset_names(PRESET_DIR, "*.json")
