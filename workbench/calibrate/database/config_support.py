"""What the measured database can price of a model's `config.json`, and how.

aiconfigurator-core builds an engine only for the architectures it lists (`architectures[0]` in its
ARCHITECTURE_TO_MODEL_FAMILY). Costs follow from the shape alone (hidden size, layers, heads, KV
heads, head size, FFN width, vocabulary; for a mixture of experts the expert count, top-k and
expert width), so a decoder it does not list is priced as the nearest shape it does: a dense one
as `LlamaForCausalLM`, a mixture of experts as `Qwen3MoeForCausalLM`, with the same dimensions.
`PricedAs.ignored` names what that stand-in leaves out (sliding windows, soft-capping, parallel
blocks, extra norms), for the profile's `source`. A model no transformer decoder stands in for
(an encoder-decoder, a state-space model) is refused, naming the config field that decides it.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.contracts.architecture import (
    EXPERT_COUNT_KEYS,
    EXPERT_TOPK_KEYS,
    check_decoder,
    experts_from_config,
    language_model_config,
)
from workbench.contracts.schema import ConfigError

DENSE_STAND_IN = "LlamaForCausalLM"
MOE_STAND_IN = "Qwen3MoeForCausalLM"
# Model types whose MLP is two matrices (up, down) rather than a gated three.
_UNGATED = ("gpt2", "gptj", "gpt_neox", "phi", "falcon", "starcoder2", "bloom", "opt",
            "gpt_bigcode", "stablelm")
# Model types whose attention and MLP read the same input (parallel blocks).
_PARALLEL = ("phi", "gptj", "cohere", "cohere2", "falcon", "gpt_neox")
_POST_NORMS = ("gemma2", "gemma3", "gemma3_text", "olmo2")
_QK_NORM = ("gemma3", "gemma3_text", "olmo2")
# What the package's config reader needs beyond the shape (a stand-in carries the shape only).
_SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
               "tie_word_embeddings", "torch_dtype")


@dataclass(frozen=True)
class PricedAs:
    """How the database is asked to price one config.json."""

    config: dict  # the config the package reads
    family: str  # the config's own architectures[0]
    stand_in: str = ""  # the architecture priced in its place ("": the database lists it)
    ignored: tuple[str, ...] = ()  # what the stand-in leaves out, each a short clause

    @property
    def sentence(self) -> str:
        """For a profile's `source` ("" when the database prices the config as it is)."""
        if not self.stand_in:
            return ""
        left = "; ".join(self.ignored) if self.ignored else "nothing the shape does not hold"
        shape = (f"priced as {self.stand_in} of the same shape (hidden size, layers, heads, KV "
                 "heads, head size, FFN width, vocabulary; experts and top-k for a mixture of "
                 "experts) but for what follows")
        if self.family in listed_architectures():
            return f"{self.family} {shape}. Approximated: {left}."
        return f"The database lists no {self.family}: {shape}. Not priced or approximated: {left}."


def listed_architectures() -> dict[str, str]:
    from aiconfigurator_core.sdk.common import ARCHITECTURE_TO_MODEL_FAMILY

    return dict(ARCHITECTURE_TO_MODEL_FAMILY)


def priced_as(data: dict, source: str) -> PricedAs:
    """The config the database reads for `data` (read from `source`), or a refusal naming the field
    that decides it."""
    archs = data.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ConfigError(source, "architectures", archs,
                          "a list naming the model class, e.g. [\"LlamaForCausalLM\"]")
    family = archs[0]
    if family in listed_architectures():
        return PricedAs({k: v for k, v in data.items() if not k.startswith("_")}, family)
    _refuse_unpriceable(data, family, source)
    flat = language_model_config(data)
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size", "vocab_size") if k not in flat]
    if missing:
        where = "text_config." if "text_config" in data else ""
        raise ConfigError(source, where + missing[0], "<missing>",
                          f"a decoder config that states {missing[0]} (the database prices "
                          f"{family} only as a stand-in of the same shape, and needs it)")
    experts = experts_from_config(flat)
    stand_in = MOE_STAND_IN if experts else DENSE_STAND_IN
    config = {k: flat[k] for k in _SHAPE_KEYS if flat.get(k) is not None}
    config.setdefault("max_position_embeddings", 131072)
    config["architectures"] = [stand_in]
    config["model_type"] = "qwen3_moe" if experts else "llama"
    ignored = list(_ignored(flat, data))
    if experts:
        config.update(num_experts=experts.count, num_experts_per_tok=experts.per_token,
                      moe_intermediate_size=experts.intermediate)
        if experts.shared_intermediate:
            ignored.append(f"shared experts ({experts.shared_intermediate} wide)")
    elif flat.get("model_type") in _UNGATED:
        width = int(flat["intermediate_size"])
        config["intermediate_size"] = 2 * width // 3
        ignored.append(f"an ungated MLP ({width} wide, 2 matrices) priced as a gated one "
                       f"{2 * width // 3} wide (3 matrices, the same weights and FLOPs)")
    return PricedAs(config, family, stand_in, tuple(ignored))


def _refuse_unpriceable(data: dict, family: str, source: str) -> None:
    check_decoder(data, source)
    experts = next((k for k in EXPERT_COUNT_KEYS if (data.get(k) or 0) > 1), "")
    if experts and not any(data.get(k) for k in EXPERT_TOPK_KEYS):
        raise ConfigError(source, "num_experts_per_tok", "<missing>",
                          f"the experts each token routes to ({family} states {experts} but no "
                          "top-k)")


def _ignored(flat: dict, data: dict) -> list[str]:
    """What a stand-in of the same shape leaves out, from the config's own fields."""
    out = []
    window = flat.get("sliding_window")
    if window and flat.get("use_sliding_window", True) is not False:
        out.append(f"sliding-window attention ({window} tokens{_window_layers(flat)}; priced as "
                   "full attention, so past that context a step reads less KV cache than "
                   "priced)")
    caps = [f"{k} {flat[k]:g}" for k in ("attn_logit_softcapping", "final_logit_softcapping")
            if flat.get(k)]
    if caps:
        out.append(f"logit soft-capping ({', '.join(caps)}; elementwise)")
    model_type = str(flat.get("model_type", ""))
    parallel = (flat.get("parallel_attn") or flat.get("use_parallel_residual")
                or model_type in _PARALLEL)
    if parallel:
        out.append("parallel attention and MLP blocks (priced one after the other: the same "
                   "weights and FLOPs)")
    if model_type in _POST_NORMS:
        out.append("the extra RMSNorms after attention and MLP (elementwise)")
    if model_type in _QK_NORM:
        out.append("QK-norm (elementwise)")
    if "vision_config" in data:
        out.append("the vision tower (vision_config: text tokens only)")
    return out


def _window_layers(flat: dict) -> str:
    kinds = flat.get("layer_types")
    if isinstance(kinds, list) and kinds:
        n = sum(1 for k in kinds if "sliding" in str(k))
        return f" on {n} of {len(kinds)} layers"
    pattern = flat.get("sliding_window_pattern")
    if pattern:
        return f" on {int(pattern) - 1} of every {int(pattern)} layers"
    if flat.get("model_type") == "gemma2":
        return " on every other layer"
    return ""


def respace_heads(priced: PricedAs, measured: tuple[int, ...]) -> PricedAs:
    """Where the database measured attention for other head sizes than the model's, the same
    query and KV widths in heads of the nearest measured size (the same weights, KV bytes and
    FLOPs; the kernels' efficiency at the other head size is what is approximated)."""
    c = priced.config
    flat = language_model_config(c)
    heads = int(flat["num_attention_heads"])
    kv = int(flat.get("num_key_value_heads") or heads)
    size = int(flat.get("head_dim") or int(flat["hidden_size"]) // heads)
    if not measured or size in measured or flat.get("kv_lora_rank"):
        return priced
    fits = [d for d in measured if (heads * size) % d == 0 and (kv * size) % d == 0]
    if not fits:
        return priced
    d = min(fits, key=lambda m: (abs(m - size), -m))
    config = {k: v for k, v in flat.items() if k != "text_config"}
    config.update(num_attention_heads=heads * size // d, num_key_value_heads=kv * size // d,
                  head_dim=d)
    if not priced.stand_in:
        config["architectures"] = [MOE_STAND_IN if experts_from_config(flat) else DENSE_STAND_IN]
    clause = (f"head size {size} (the database measured attention for head sizes "
              f"{', '.join(map(str, measured))}): priced as {heads * size // d} heads and "
              f"{kv * size // d} KV heads of {d} (the same query and KV widths)")
    stand_in = priced.stand_in or config["architectures"][0]
    return PricedAs(config, priced.family, stand_in, priced.ignored + (clause,))
