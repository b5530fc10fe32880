"""Cost model: pure functions over a Profile's DecodeCost, DrafterCost and PhaseCost.

A strategy is a `Strategy` or an int (a chain of that many drafted tokens; 0: no SD). On a
mixture-of-experts target a pass reads the experts its tokens route to (`experts_touched`), so the
weights a pass reads grow with batch x tokens per sequence until every expert is read.
"""

from __future__ import annotations

from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import DecodeCost, DrafterCost, ExpertRouting, PhaseCost


def experts_touched(tokens: float, per_token: int, count: int) -> float:
    """Distinct experts per layer a pass of `tokens` tokens reads when each token routes to
    `per_token` of `count` experts, uniformly and independently: count * (1 - (1 - k/E) ** n).
    One token reads k; many read all E."""
    if tokens <= 0:
        return 0.0
    return count * (1.0 - (1.0 - per_token / count) ** tokens)


def expert_read_s(e: ExpertRouting | None, tokens: float) -> float:
    """Reading the routed experts a pass of `tokens` tokens touches, one rank (0: dense)."""
    if e is None:
        return 0.0
    return e.weights_s * experts_touched(tokens, e.per_token, e.count) / e.count


def verify_step_s(c: DecodeCost, batch: int, context: float, strategy: Strategy | int) -> float:
    """One target forward over `batch` sequences, each verifying the strategy's tokens (a chain of
    K drafts verifies K + 1 positions, no SD one)."""
    tokens = Strategy.parse(strategy).verify_tokens
    compute = c.compute_s_per_token * batch * tokens
    weights = c.weights_s + expert_read_s(c.experts, batch * tokens)
    return (c.overhead_s + c.per_seq_s * batch + c.kv_s_per_token * batch * context
            + max(weights, compute) + (1.0 - c.overlap) * min(weights, compute))


def draft_step_s(d: DrafterCost, kind: DrafterKind, batch: int, strategy: Strategy | int) -> float:
    """Proposing the strategy's drafts for each of `batch` sequences: the learned drafter runs one
    forward per step over batch x top-k candidates; n-gram is a lookup per sequence.

    An EAGLE engine runs its drafter's first forward in every step, SD off (K = 0) included: the
    drafter keeps a KV cache of its own, which must see every token the target emitted (vLLM's
    proposer: "the prefill forward pass above already ran to keep the drafter KV cache in sync").
    Measured on CPU: K = 0 steps of an EAGLE engine cost 1.3-1.45x a plain engine's.

    A pass that speculates also pays the engine's host work per sequence (`sd_host_s_per_seq`),
    which a plain step hides under the GPU's: it is what makes SD's gain shrink with the batch on
    SGLang and vLLM where the kernels alone keep it flat (docs/results.md, "SD's speedup by
    batch"). A learned drafter also pays its work once a pass whatever the draft's depth
    (`eagle_pass_s`; a tree's building and verifying on top, `tree_pass_s`): what makes a draft
    step's marginal cost smaller than a pass's cost per step (docs/results.md, "SD's speedup by
    draft length")."""
    s = Strategy.parse(strategy)
    if kind == DrafterKind.NONE or batch <= 0:
        return 0.0
    host = d.sd_host_s_per_seq * batch + d.sd_step_s if s.steps else 0.0
    # model-free: a CPU lookup per sequence (prompt or earlier responses)
    if kind in (DrafterKind.NGRAM, DrafterKind.SUFFIX):
        return d.ngram_s_per_seq * batch + host if s.steps else 0.0
    if s.steps:
        host += d.eagle_pass_s + (0.0 if s.is_chain else d.tree_pass_s)
    return max(1, s.steps) * draft_forward_s(d, batch, s.topk) + host


def draft_forward_s(d: DrafterCost, batch: int, topk: int) -> float:
    """One forward of the learned drafter over `batch` x `topk` candidates: its kernels and the
    engine's work per draft step, without what a pass pays once (host work, `eagle_pass_s`,
    `tree_pass_s`): what a profiler times as one draft step."""
    return d.eagle_step_s + d.eagle_s_per_seq * batch * topk


def prefill_s(c: DecodeCost, prompt_tokens: int) -> float:
    """Admitting `prompt_tokens` prompt tokens: per token, and the experts they touch."""
    return c.prefill_s_per_token * prompt_tokens + expert_read_s(c.experts, prompt_tokens)


def train_phase_s(c: PhaseCost, tokens: int, gpus: int) -> float:
    """The policy update over `tokens` prompt+response tokens, spread over all GPUs."""
    return c.train_gpu_s_per_token * tokens / gpus


def segment_s(c: DecodeCost, d: DrafterCost, kind: DrafterKind, batch: int, context: float,
              strategy: Strategy | int, passes: float = 1.0) -> float:
    """`passes` verify passes at a constant batch: drafting and verifying with `strategy`
    (prefill not included)."""
    verify_s = verify_step_s(c, batch, context, strategy)
    return passes * (verify_s + draft_step_s(d, kind, batch, strategy))
