"""Mixture-of-experts engines in the measured database: the expert parallelism an engine runs by
default, whether the database measured the model's experts at that split, and the dense EAGLE
head that drafts for a MoE target.

Defaults, read from the engines' own source: vLLM shards every expert over the TP GPUs unless
`enable_expert_parallel` is set (vllm/config/parallel.py, `enable_expert_parallel: bool = False`,
"Use expert parallelism instead of tensor parallelism for MoE layers"); SGLang's `--ep-size`
defaults to 1 (python/sglang/srt/server_args.py, `ep_size ... = 1`), which also keeps the experts
tensor-parallel. So by default EP = 1: each of the TP GPUs holds a 1/TP slice of every expert.
`--ep N` (N dividing TP) splits the experts over N groups of TP/N GPUs (aiconfigurator-core's
moe_ep_size and moe_tp_size).

The database measured MoE kernels per (hidden size, expert width, top-k, expert count, weight
format, moe_tp, moe_ep) under three token-to-expert distributions; the package's engine reads its
default, a power law with exponent 1.2 (a few experts take most tokens). The simulator's cost form
assumes uniform routing instead (`sim.costs.experts_touched`); a profile's `source` gives the
form's error against the database's MoE steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workbench.contracts.architecture import Architecture
from workbench.contracts.schema import ConfigError

DEFAULT_EP = {"vllm": 1, "sglang": 1}
DEFAULT_EP_SOURCE = ("vLLM and SGLang keep experts tensor-parallel unless told otherwise "
                     "(vLLM enable_expert_parallel=False; SGLang --ep-size 1)")
ROUTING = "power_law_1.2"  # the package's default distribution of tokens over experts
MOE_TABLE = "moe_perf.parquet"
# An EAGLE-3 head for a MoE target is one dense Llama layer (SpecForge's configs for Qwen3-30B-A3B,
# Qwen3-235B-A22B and DeepSeek-V3 are LlamaForCausalLMEagle3): the target's hidden size, heads
# and KV heads, its config's dense FFN width, its vocabulary. An MLA target's head uses 128-wide
# heads and 8 KV heads (SpecForge configs/deepseek-v3-671b-eagle3.json: 56 heads, 8 KV heads).
MLA_DRAFTER_HEAD_DIM, MLA_DRAFTER_KV_HEADS = 128, 8


def resolve_ep(arch: Architecture, tp: int, framework: str, ep: int | None, source: str) -> int:
    """The engine's expert-parallel degree: `ep`, or the framework's default; 1 for a dense
    model. Refuses one that does not split the TP GPUs or the experts, naming --ep."""
    if not arch.is_moe:
        if ep not in (None, 1):
            raise ConfigError("--ep", "ep", ep,
                              f"1 (or leave it out): {source} is dense, it has no experts")
        return 1
    n = DEFAULT_EP.get(framework, 1) if ep is None else ep
    if n < 1 or tp % n:
        raise ConfigError("--ep", "ep", n, f"an expert-parallel degree that divides --tp {tp}")
    if arch.experts.count % n:
        raise ConfigError("--ep", "ep", n, f"a degree that splits the model's "
                          f"{arch.experts.count} experts evenly (num_experts in {source})")
    return n


@dataclass(frozen=True)
class MoeRows:
    """The database's MoE kernel rows for one model's experts on one GPU x framework x version."""

    dtype: str
    splits: tuple[tuple[int, int], ...]  # the (moe_tp, moe_ep) pairs measured for this shape
    shapes: tuple[str, ...]  # every MoE shape measured in this weight format, for messages


def moe_rows(base: Path, arch: Architecture, dtype: str) -> MoeRows:
    """What `base` (systems/data/GPU/moe/FRAMEWORK/VERSION) measured of `arch`'s experts."""
    import pandas as pd

    path = base / MOE_TABLE
    if not path.is_file():
        return MoeRows(dtype, (), ())
    cols = ["hidden_size", "inter_size", "topk", "num_experts", "moe_dtype", "moe_tp_size",
            "moe_ep_size"]
    d = pd.read_parquet(path, columns=cols)
    d = d[d.moe_dtype == dtype]
    e = arch.experts
    mine = d[(d.hidden_size == arch.hidden) & (d.inter_size == e.intermediate)
             & (d.topk == e.per_token) & (d.num_experts == e.count)]
    splits = sorted({(int(a), int(b)) for a, b in zip(mine.moe_tp_size, mine.moe_ep_size)})
    shapes = sorted({f"{h}/{i}/top-{k}/{n}" for h, i, k, n in
                     zip(d.hidden_size, d.inter_size, d.topk, d.num_experts)})
    return MoeRows(dtype, tuple(splits), tuple(shapes))


def check_moe_rows(rows: MoeRows, arch: Architecture, tp: int, ep: int, where: str,
                   source: str) -> None:
    """Refuse a MoE engine whose experts the database never measured: naming the config fields
    when it has no rows of this shape, --tp/--ep when it has them at other splits."""
    e = arch.experts
    if not rows.splits:
        shown = ", ".join(rows.shapes[:12]) + (" ..." if len(rows.shapes) > 12 else "")
        raise ConfigError(source, "num_experts", e.count,
                          f"an expert shape the database measured in {rows.dtype} on {where}: it "
                          f"has none of hidden_size {arch.hidden}, expert width "
                          f"(moe_intermediate_size) {e.intermediate}, top-k (num_experts_per_tok) "
                          f"{e.per_token}, {e.count} experts; measured hidden/width/top-k/experts: "
                          f"{shown or 'none'}")
    if (tp // ep, ep) not in rows.splits:
        ok = ", ".join(f"TP{t * p} EP{p}" for t, p in rows.splits)
        raise ConfigError("--ep" if ep > 1 else "--tp", "ep" if ep > 1 else "tp",
                          ep if ep > 1 else tp,
                          f"a split of these experts the database measured on {where}: {ok}")


def drafter_config(data: dict, arch: Architecture) -> dict:
    """The dense EAGLE head's config for a MoE (or MLA) target: one Llama layer."""
    if arch.mla is not None:
        heads, kv, dim = arch.hidden // MLA_DRAFTER_HEAD_DIM, MLA_DRAFTER_KV_HEADS, \
            MLA_DRAFTER_HEAD_DIM
    else:
        heads, kv, dim = arch.heads, arch.kv_heads, arch.head_dim
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": arch.hidden, "intermediate_size": arch.intermediate,
            "num_hidden_layers": 1, "num_attention_heads": heads, "num_key_value_heads": kv,
            "head_dim": dim, "vocab_size": arch.vocab,
            "max_position_embeddings": int(data.get("max_position_embeddings") or 131072),
            "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def drafter_sentence(arch: Architecture) -> str:
    c = drafter_config({}, arch)
    return (f"The EAGLE-3 head is priced as what it is, one dense Llama layer ({c['hidden_size']} "
            f"hidden, {c['num_attention_heads']} heads, {c['num_key_value_heads']} KV heads, FFN "
            f"{c['intermediate_size']}: SpecForge's MoE-target heads) with the target's "
            "LM head, not a MoE layer.")



def moe_sentence(arch: Architecture, tp: int, ep: int, expert_weights_s: float, dtype: str,
                 default: bool) -> str:
    """What a MoE profile's `source` says about its experts."""
    from sim.costs import experts_touched

    e = arch.experts
    touched = ", ".join(f"B={b}: {experts_touched(b, e.per_token, e.count):.0f}"
                        for b in (1, 4, 16, 64))
    if ep > 1:
        split = f"EP{ep}: {e.count // ep} experts per group of {tp // ep} GPU(s)"
    else:
        split = f"EP1: every expert split over the {tp} TP GPUs" if tp > 1 else "one GPU"
    why = f" ({DEFAULT_EP_SOURCE})" if default else " (--ep)"
    return (f"Mixture of experts: {e.count} routed experts, top-{e.per_token}, "
            f"{e.intermediate} wide, on {e.moe_layers} of {arch.layers} layers ({dtype} "
            f"kernels); {split}{why}. The database's MoE rows route tokens by the package's "
            f"default distribution ({ROUTING.replace('_', ' ')}); the form reads the routed "
            f"experts' weights ({1e3 * expert_weights_s:.3f} ms for all of them on one GPU, "
            "fitted) in the share a pass touches under uniform routing, E(1 - (1 - k/E)^T) per "
            f"layer for T = batch x tokens per sequence (decode: {touched} of {e.count}).")
