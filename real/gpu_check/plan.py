"""What the GPU check measures, at which shapes and within which time (`Plan`): `full_plan` for
a CUDA GPU (about 5 minutes on an H100), `quick_plan` for tiny shapes (a CPU, the test suite,
or `GPU_CHECK_QUICK=1` on a GPU). No torch here: the plan is data."""

from __future__ import annotations

from dataclasses import dataclass, field

# Shapes only (random weights): Hugging Face Qwen/Qwen2.5-0.5B and Qwen/Qwen2.5-1.5B config.json.
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}
QWEN25_15B = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}
# The quick runs' shape: tiny, but with Qwen2.5's head size (128) and one KV head per two query
# heads, which NVIDIA's measured database has rows for, so `tlt gpu-check --measured` compares
# even a CPU run with it end to end.
QUICK_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "vocab_size": 512,
    "tie_word_embeddings": False,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}
QUICK_NAME = "gpu-check-quick"
SHAPES = {"qwen2.5-0.5b": QWEN25_05B, "qwen2.5-1.5b": QWEN25_15B, QUICK_NAME: QUICK_SHAPE}


def hf_config(name: str) -> dict:
    """A config.json for one of SHAPES (a Qwen2 decoder), as `load_architecture` and the
    measured database read it."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_act": "silu",
        "torch_dtype": "bfloat16",
        "use_sliding_window": False,
        **SHAPES[name],
    }


@dataclass(frozen=True)
class GrpoShape:
    """One GRPO throughput point: a synthetic long-tailed step (lognormal response lengths,
    capped) on a random-weight model of `model`'s shape."""

    model: str  # a SHAPES key
    prompts: int
    samples: int  # per prompt
    prompt_tokens: int
    median_response: int
    cap: int
    minibatch: int
    micro_tokens: int  # the packed path's token budget per forward
    repeats: int  # timed steps of each path (after one untimed each)
    padded_micro: int = 0  # the padded path's sequences per forward (0: the whole minibatch)
    # what is timed (real/gpu_check/training.py GRPO_PATHS): packed (its attention as training
    # runs it), padded, and packed with each per-sequence attention of real/span_attention.py
    paths: tuple[str, ...] = ("packed", "padded")


@dataclass(frozen=True)
class DrafterShape:
    """Spot training at a target's hidden size: one decoder layer on a frozen random embedding
    and LM head; minibatches of `batch` long-tailed sequences of hidden states."""

    target: str  # an architecture preset or a SHAPES key (its hidden size, heads, vocabulary)
    batch: int
    median_tokens: int
    cap: int
    repeats: int
    paths: tuple[str, ...] = ("plain", "packed")  # training.py DRAFTER_PATHS


@dataclass(frozen=True)
class AttentionShape:
    """Packed attention alone (real/span_attention.py), one layer's worth: long-tailed rows of
    `sequences` sequences at a model's head layout, forward and backward, each backend."""

    label: str
    heads: int
    kv_heads: int
    head_dim: int
    sequences: int
    median_tokens: int
    cap: int
    repeats: int  # timed calls per backend, on fresh rows and on one row again


@dataclass(frozen=True)
class MoeShape:
    """One mixture-of-experts layer of a model's shape (Hugging Face config.json: n_routed_experts
    or num_local_experts, num_experts_per_tok, hidden_size, moe_intermediate_size, the shared
    expert's size), random weights, timed at each token count (real/gpu_check/moe.py)."""

    label: str
    experts: int
    top_k: int
    hidden: int
    moe_intermediate: int
    tokens: tuple[int, ...]
    repeats: int
    shared_intermediate: int = 0


@dataclass(frozen=True)
class EngineRun:
    """One `real.profiler.measure` call: `ops` of grid `grid` (with `changes` to its fields)."""

    label: str
    arch: str  # an architecture preset or a SHAPES key
    tp: int
    grid: str  # a real.profiler.grid.GRIDS name
    ops: tuple[str, ...]
    changes: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class SweepShape:
    """`tlt engine-sweep` on the shipped model and drafter (or GPU_CHECK_SWEEP_MODEL, _DRAFTER,
    _METHOD): run where vLLM imports, recorded as skipped where it does not."""

    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    draft_lens: tuple[int, ...]
    rounds: int
    block_steps: int


@dataclass(frozen=True)
class Section:
    name: str
    budget_s: float  # the most it may take; it stops at this, recording what it had
    min_start_s: float  # it is skipped ("skipped: budget") with less than this left overall
    kind: str  # correctness, attention, grpo, drafter, engine, moe, sweep
    grpo: GrpoShape | None = None
    drafter: DrafterShape | None = None
    attention: tuple[AttentionShape, ...] = ()
    engine: tuple[EngineRun, ...] = ()
    moe: tuple[MoeShape, ...] = ()
    sweep: SweepShape | None = None


@dataclass(frozen=True)
class Plan:
    quick: bool
    budget_s: float  # all sections together
    repeats: int  # the profiler's timed runs per point
    warmup: int
    check_rounds: int  # the whole-model check's interleaved rounds
    sections: tuple[Section, ...] = field(default_factory=tuple)
    # Engine points timed eagerly only: a CUDA graph capture that fails can leave the process's
    # CUDA RNG marked as capturing, and every later kernel that draws a random number then fails
    # ("Offset increment outside graph capture"; seen on an H100 with torch 2.11), so graphs are
    # tried in a process of their own (docs/gpu-check.md).
    eager_only: bool = False


def _engine_7b() -> tuple[EngineRun, ...]:
    a, g = "qwen2.5-7b", "gpu-check"
    return (
        EngineRun("7B TP1 decode and prefill", a, 1, g, ("decode", "prefill")),
        EngineRun(
            "7B TP1 verify, context 2048", a, 1, g, ("verify",), (("verify_contexts", (2048,)),)
        ),
        EngineRun(
            "7B TP1 verify, context 8192", a, 1, g, ("verify",), (("verify_contexts", (8192,)),)
        ),
        EngineRun("7B TP1 EAGLE draft step", a, 1, g, ("drafter",)),
        EngineRun("7B training passes", a, 1, g, ("train_fwd", "train_fwd_bwd", "drafter_train")),
    )


ALL_GRPO_PATHS = ("packed", "padded", "packed_per_span", "packed_sdpa_default")
ALL_DRAFTER_PATHS = ("plain", "packed", "packed_per_span", "packed_sdpa_default")


def _attention_shapes() -> tuple[AttentionShape, ...]:
    """The two packed attentions the training sections run: Qwen2.5-0.5B's layer on a GRPO row
    (prompt 256 + long-tailed response) and the 7B drafter's on a spot-training row."""
    return (
        AttentionShape("qwen2.5-0.5b GRPO row", 14, 2, 64, 8, 512, 1280, 4),
        AttentionShape("qwen2.5-7b drafter row", 28, 4, 128, 8, 256, 1024, 4),
    )


MOE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
# The verify passes the summary sets beside decode steps: batch x (drafts + 1) tokens, each a
# token count MOE_TOKENS times.
MOE_SD_BATCHES = (1, 4, 16, 64, 256)
MOE_SD_DRAFTS = (1, 3, 7)


def _moe_shapes() -> tuple[MoeShape, ...]:
    """The MoE models RL trains, one layer each, from their Hugging Face config.json (shapes
    only): Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B, mistralai/Mixtral-8x7B-v0.1,
    deepseek-ai/DeepSeek-V3 (one shared expert), openai/gpt-oss-120b (biases and its clamped
    SwiGLU left out: the weights read are the same)."""
    t, r = MOE_TOKENS, 20
    return (
        MoeShape("qwen3-30b-a3b", 128, 8, 2048, 768, t, r),
        MoeShape("qwen3-235b-a22b", 128, 8, 4096, 1536, t, r),
        MoeShape("mixtral-8x7b", 8, 2, 4096, 14336, t, r),
        MoeShape("gpt-oss-120b", 128, 4, 2880, 2880, t, r),
        MoeShape("deepseek-v3", 256, 8, 7168, 2048, t, r, shared_intermediate=2048),
    )


def full_plan(budget_s: float = 300.0) -> Plan:
    """The lent H100's plan: about 5 minutes, the sections in the order of what they are worth
    if the time runs out (the 1.5B update last: 'if time allows')."""
    g = "gpu-check"
    drafters = (
        EngineRun("7B TP4 EAGLE draft step", "qwen2.5-7b", 4, g, ("drafter",)),
        EngineRun("32B TP4 EAGLE draft step", "qwen2.5-32b", 4, g, ("drafter",)),
    )
    whole = (
        EngineRun(
            "7B TP1 whole-model check", "qwen2.5-7b", 1, g, ("whole",), (("batches", (1, 8, 64)),)
        ),
    )
    return Plan(
        quick=False,
        budget_s=budget_s,
        repeats=20,
        warmup=3,
        check_rounds=2,
        sections=(
            Section("correctness", 60, 20, "correctness"),
            Section("packed-attention", 30, 10, "attention", attention=_attention_shapes()),
            Section("engine-7b", 150, 30, "engine", engine=_engine_7b()),
            Section(
                "grpo-0.5b",
                75,
                20,
                "grpo",
                grpo=GrpoShape(
                    "qwen2.5-0.5b", 8, 4, 256, 256, 1024, 8, 16384, 4, paths=ALL_GRPO_PATHS
                ),
            ),
            Section(
                "drafter-train",
                45,
                15,
                "drafter",
                drafter=DrafterShape("qwen2.5-7b", 8, 256, 1024, 5, paths=ALL_DRAFTER_PATHS),
            ),
            Section("engine-sweep", 120, 45, "sweep",
                    sweep=SweepShape((1, 4, 16, 64, 256), (512, 1536), (1, 2, 3, 4), 3, 8)),
            Section("engine-drafters", 40, 15, "engine", engine=drafters),
            Section("engine-whole", 40, 20, "engine", engine=whole),
            Section("moe-layers", 60, 15, "moe", moe=_moe_shapes()),
            Section(
                "grpo-1.5b",
                60,
                30,
                "grpo",
                # The padded path in micro-batches of 4 (gradients accumulating, as veRL's):
                # one right-padded forward of 8 sequences up to 1,280 tokens needs more than
                # 80 GB at 1.5B (float32 logits over a 151,936-token vocabulary, 28 layers).
                grpo=GrpoShape(
                    "qwen2.5-1.5b", 8, 4, 256, 256, 1024, 8, 16384, 3, padded_micro=4
                ),
            ),
        ),
    )


def quick_plan(budget_s: float = 120.0) -> Plan:
    """Tiny shapes: the same sections and code paths in seconds (CPU, CI, a GPU smoke run)."""
    q, g = QUICK_NAME, "test"
    engine = (
        EngineRun("quick TP1 decode and prefill", q, 1, g, ("decode", "prefill")),
        EngineRun("quick TP1 verify", q, 1, g, ("verify",)),
        EngineRun("quick TP1 EAGLE draft step", q, 1, g, ("drafter",)),
        EngineRun(
            "quick training passes", q, 1, g, ("train_fwd", "train_fwd_bwd", "drafter_train")
        ),
        EngineRun("quick TP1 whole-model check", q, 1, g, ("whole",)),
    )
    return Plan(
        quick=True,
        budget_s=budget_s,
        repeats=3,
        warmup=1,
        check_rounds=1,
        sections=(
            Section("correctness", 40, 5, "correctness"),
            Section(
                "packed-attention",
                20,
                5,
                "attention",
                attention=(AttentionShape("quick row", 2, 1, 128, 4, 24, 64, 2),),
            ),
            Section("engine-quick", 40, 5, "engine", engine=engine),
            Section(
                "grpo-quick",
                20,
                5,
                "grpo",
                grpo=GrpoShape(
                    q, 4, 2, 16, 24, 64, 4, 256, 2, padded_micro=2, paths=ALL_GRPO_PATHS
                ),
            ),
            Section(
                "drafter-train",
                20,
                5,
                "drafter",
                drafter=DrafterShape(q, 4, 24, 64, 2, paths=ALL_DRAFTER_PATHS),
            ),
            Section(
                "moe-layers",
                20,
                5,
                "moe",
                moe=(MoeShape("quick moe", 8, 2, 64, 32, (1, 2, 4, 8, 16), 3),),
            ),
            Section("engine-sweep", 60, 10, "sweep",
                    sweep=SweepShape((1, 4), (128,), (1, 2), 2, 4)),
        ),
    )
