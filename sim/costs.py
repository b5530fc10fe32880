"""Cost model: pure functions over a Profile's DecodeCost, DrafterCost and PhaseCost.

A strategy is a `Strategy` or an int (a chain of that many drafted tokens; 0: no SD). On a
mixture-of-experts target a pass reads the experts its tokens route to (`experts_touched`), so the
weights a pass reads grow with batch x tokens per sequence until every expert is read.

A profile that knows its engine release (`EngineMechanisms`, passed as `m`) also pays what that
release does to each pass: a pass larger than the release captures CUDA graphs for runs eager, and
an eager forward takes the longer of its kernels and the host's launching of them
(`eager_extra_s`); the host handles every proposed token of every sequence (B x K a pass); batch
expansion re-reads the KV cache per verified token; a drafter with a smaller vocabulary than the
target reads less of the LM head. Without `m` none of these is priced.
"""

from __future__ import annotations

from workbench.contracts.engine_mechanisms import EngineMechanisms
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


def eager_extra_s(kernels_s: float, launch_s: float) -> float:
    """What running a forward eager adds to its kernels: the host enqueues each kernel while the
    GPU runs the ones before, so the forward takes the longer of the two."""
    return max(0.0, launch_s - kernels_s)


def verify_step_s(c: DecodeCost, batch: int, context: float, strategy: Strategy | int,
                  m: EngineMechanisms | None = None) -> float:
    """One target forward over `batch` sequences, each verifying the strategy's tokens (a chain of
    K drafts verifies K + 1 positions, no SD one); eager above the release's capture limit."""
    tokens = Strategy.parse(strategy).verify_tokens
    compute = c.compute_s_per_token * batch * tokens
    weights = c.weights_s + expert_read_s(c.experts, batch * tokens)
    kv_reads = tokens if m is not None and m.kv_read_per_token else 1
    t = (c.overhead_s + c.per_seq_s * batch + c.kv_s_per_token * batch * context * kv_reads
         + max(weights, compute) + (1.0 - c.overlap) * min(weights, compute))
    if m is not None and batch > 0:
        limit = m.plain_graph_max if tokens == 1 else m.verify_graph_max
        if m.graph_size(batch, tokens) > limit:
            t += eager_extra_s(t - c.overhead_s, m.target_launch_s)
    return t


def draft_step_s(d: DrafterCost, kind: DrafterKind, batch: int, strategy: Strategy | int,
                 m: EngineMechanisms | None = None) -> float:
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
    draft length"). With the engine's release (`m`), the host's work per sequence and draft step,
    and the drafter's forwards (its extend over the accepted tokens included) eager where the
    release captures no graph for them."""
    s = Strategy.parse(strategy)
    if kind == DrafterKind.NONE or batch <= 0:
        return 0.0
    host = d.sd_host_s_per_seq * batch + d.sd_step_s if s.steps else 0.0
    if m is not None and s.steps:
        host += m.host_s_per_seq_step * batch * s.steps
    # model-free: a CPU lookup per sequence (prompt or earlier responses)
    if kind in (DrafterKind.NGRAM, DrafterKind.SUFFIX):
        return d.ngram_s_per_seq * batch + host if s.steps else 0.0
    if s.steps:
        host += d.eagle_pass_s + (0.0 if s.is_chain else d.tree_pass_s)
        host += extend_eager_s(d, batch, s, m)
    return max(1, s.steps) * draft_forward_s(d, batch, s.topk, m) + host


def draft_forward_s(d: DrafterCost, batch: int, topk: int,
                    m: EngineMechanisms | None = None) -> float:
    """One forward of the learned drafter over `batch` x `topk` candidates: its kernels and the
    engine's work per draft step, without what a pass pays once (host work, `eagle_pass_s`,
    `tree_pass_s`): what a profiler times as one draft step. With the release (`m`): the part of
    the LM head the drafter's own vocabulary does not span left out, and eager above its graphs."""
    t = d.eagle_step_s + d.eagle_s_per_seq * batch * topk
    if m is None:
        return t
    t -= (1.0 - m.draft_vocab_share) * m.draft_head_s
    if m.graph_size(batch, topk) > m.draft_graph_max:
        t += eager_extra_s(t, m.draft_launch_s)
    return t


def extend_eager_s(d: DrafterCost, batch: int, s: Strategy, m: EngineMechanisms | None) -> float:
    """The drafter's forward over the tokens the target accepted (SGLang's draft extend, vLLM's
    first drafter forward of a pass) run eager where the release captures no graph for it: its
    work is in `eagle_pass_s`, the launching beyond it here (up to B x T tokens a pass)."""
    if m is None or m.graph_size(batch, s.verify_tokens) <= m.extend_graph_max:
        return 0.0
    kernels = d.eagle_step_s + d.eagle_s_per_seq * batch * s.verify_tokens
    return eager_extra_s(kernels, m.draft_launch_s)


def prefill_s(c: DecodeCost, prompt_tokens: int) -> float:
    """Admitting `prompt_tokens` prompt tokens: per token, and the experts they touch."""
    return c.prefill_s_per_token * prompt_tokens + expert_read_s(c.experts, prompt_tokens)


def train_phase_s(c: PhaseCost, tokens: int, gpus: int) -> float:
    """The policy update over `tokens` prompt+response tokens, spread over all GPUs."""
    return c.train_gpu_s_per_token * tokens / gpus


def segment_s(c: DecodeCost, d: DrafterCost, kind: DrafterKind, batch: int, context: float,
              strategy: Strategy | int, passes: float = 1.0,
              m: EngineMechanisms | None = None) -> float:
    """`passes` verify passes at a constant batch: drafting and verifying with `strategy`
    (prefill not included), with the engine release's mechanisms where `m` is given."""
    verify_s = verify_step_s(c, batch, context, strategy, m)
    return passes * (verify_s + draft_step_s(d, kind, batch, strategy, m))
