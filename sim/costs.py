"""Cost model: pure functions over a Profile's DecodeCost, DrafterCost and PhaseCost."""

from __future__ import annotations

from workbench.contracts.profile import DecodeCost, DrafterCost, PhaseCost


def verify_step_s(c: DecodeCost, batch: int, context: float, draft_len: int) -> float:
    """One target forward over `batch` sequences, each with `draft_len` drafted tokens to verify."""
    return (c.overhead_s + c.per_seq_s * batch + c.kv_s_per_token * batch * context
            + max(c.weights_s, c.compute_s_per_token * batch * (draft_len + 1)))


def draft_step_s(c: DrafterCost, kind: str, batch: int, draft_len: int) -> float:
    """Proposing `draft_len` tokens for each of `batch` sequences."""
    if draft_len == 0 or kind == "none":
        return 0.0
    if kind == "ngram":
        return c.ngram_s_per_seq * batch
    return draft_len * (c.eagle_step_s + c.eagle_s_per_seq * batch)


def prefill_s(c: DecodeCost, prompt_tokens: int) -> float:
    return c.prefill_s_per_token * prompt_tokens


def train_phase_s(c: PhaseCost, tokens: int, gpus: int) -> float:
    """The policy update over `tokens` prompt+response tokens, spread over all GPUs."""
    return c.train_gpu_s_per_token * tokens / gpus


def segment_s(c: DecodeCost, d: DrafterCost, kind: str, batch: int, context: float, draft_len: int,
              passes: float = 1.0) -> float:
    """`passes` verify passes at a constant batch: each drafts `draft_len` tokens per sequence
    with drafter `kind` and verifies them in one target forward (prefill not included)."""
    return passes * (verify_step_s(c, batch, context, draft_len) + draft_step_s(d, kind, batch, draft_len))
