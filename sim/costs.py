"""Cost model: pure functions over a Profile's DecodeCost, DrafterCost and PhaseCost.

A strategy is a `Strategy` or an int (a chain of that many drafted tokens; 0: no SD).
"""

from __future__ import annotations

from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import DecodeCost, DrafterCost, PhaseCost


def verify_step_s(c: DecodeCost, batch: int, context: float, strategy: Strategy | int) -> float:
    """One target forward over `batch` sequences, each verifying the strategy's tokens (a chain of
    K drafts verifies K + 1 positions, no SD one)."""
    tokens = Strategy.parse(strategy).verify_tokens
    compute = c.compute_s_per_token * batch * tokens
    return (c.overhead_s + c.per_seq_s * batch + c.kv_s_per_token * batch * context
            + max(c.weights_s, compute) + (1.0 - c.overlap) * min(c.weights_s, compute))


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
    return max(1, s.steps) * (d.eagle_step_s + d.eagle_s_per_seq * batch * s.topk) + host


def prefill_s(c: DecodeCost, prompt_tokens: int) -> float:
    return c.prefill_s_per_token * prompt_tokens


def train_phase_s(c: PhaseCost, tokens: int, gpus: int) -> float:
    """The policy update over `tokens` prompt+response tokens, spread over all GPUs."""
    return c.train_gpu_s_per_token * tokens / gpus


def segment_s(c: DecodeCost, d: DrafterCost, kind: DrafterKind, batch: int, context: float,
              strategy: Strategy | int, passes: float = 1.0) -> float:
    """`passes` verify passes at a constant batch: drafting and verifying with `strategy`
    (prefill not included)."""
    verify_s = verify_step_s(c, batch, context, strategy)
    return passes * (verify_s + draft_step_s(d, kind, batch, strategy))
