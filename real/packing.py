"""Padding-free forward passes of a `transformers` causal LM, for the GRPO update (real/grpo.py).

The sequences of an RL step are long-tailed (on the reference model: response tokens p50 83, max
1024), so a right-padded batch of them is mostly padding: every sequence costs what the longest
costs, in the linear layers and quadratically in attention. veRL's answer on GPU is
remove-padding (the sequences of a micro-batch concatenated into one row, with FlashAttention's
variable-length kernel) plus dynamic batch sizes (micro-batches cut by a token budget, not by a
sequence count). This module is that on CPU:

- `pack(sequences, prompt_lens)`: the sequences concatenated into one row, `position_ids`
  restarting at 0 for each, their spans, and the positions whose next token is a response token.
- `packed_forward(model, ...)`: one forward of such a row. Rotary embeddings see each
  sequence's own positions; attention stays within each sequence (`varlen_attention`,
  registered with transformers' AttentionInterface as "tlt_varlen", runs
  real/span_attention.py: PyTorch's varlen FlashAttention kernel over the row on a GPU, causal
  scaled-dot-product attention per sequence on the CPU), so no token attends across a
  boundary and attention costs the sum of the squared lengths, not the squared total. The LM
  head runs only where a response token is predicted.
- `token_chunks(lengths, budget)`: consecutive groups of sequences of at most `budget` tokens
  (a longer sequence alone): the micro-batches.

Why not transformers' own packing (`position_ids` restarting, no attention mask, attention
"sdpa"): in transformers 5.19 that builds a dense block-diagonal [T, T] mask over the whole
row and runs attention over all T^2 pairs, the squared total instead of the sum of squares.

Log-probabilities equal a padded forward's up to float rounding (other kernels sum in another
order; `tlt bench grpo` reports the largest loss and gradient differences). The attention
ignores dropout: the trainer runs the model in eval mode (real/grpo.py says why).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from real.drafter.records import drafter_states
from real.span_attention import attend, packed_spans

VARLEN = "tlt_varlen"


def varlen_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract ([1, heads, T, head_dim] in, [1, T, heads,
    head_dim] out) over a packed row: causal attention within each of `kwargs["tlt_spans"]`
    (a real.span_attention.Spans)."""
    row = kwargs.get("tlt_spans")
    if row is None:
        raise ValueError(
            f"attention '{VARLEN}' runs only inside real.packing.packed_forward (it needs the "
            "spans)"
        )
    if kwargs.get("sliding_window") is not None:
        raise ValueError(
            f"attention '{VARLEN}': sliding-window layers are not supported; use a full-attention "
            "model"
        )
    if query.shape[0] != 1:
        raise ValueError(
            f"attention '{VARLEN}': one packed row expected, got a batch of {query.shape[0]}"
        )
    return attend(query, key, value, row, scaling), None


def _register() -> None:
    from transformers import AttentionInterface

    if VARLEN not in AttentionInterface():
        AttentionInterface.register(VARLEN, varlen_attention)


@contextmanager
def attention(model, implementation: str):
    """The model's attention set to `implementation` for the block (its config is shared by all
    layers)."""
    old = model.config._attn_implementation
    model.config._attn_implementation = implementation
    try:
        yield model
    finally:
        model.config._attn_implementation = old


@dataclass
class PackedRow:
    """Sequences concatenated into one row."""

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T], restarting at 0 for each sequence
    spans: list[tuple[int, int]]  # [start, end) of each sequence in the row
    # [R]: positions whose next token is a response token, sequence by sequence
    predict_at: torch.Tensor
    targets: torch.Tensor  # [R]: those response tokens
    response_lens: list[int]  # per sequence; they sum to R


def pack(sequences: Sequence[Sequence[int]], prompt_lens: Sequence[int]) -> PackedRow:
    if len(sequences) != len(prompt_lens) or not sequences:
        raise ValueError(f"{len(sequences)} sequences and {len(prompt_lens)} prompt lengths: "
                         "need as many, at least one")
    for s, p in zip(sequences, prompt_lens):
        if not 1 <= p <= len(s):
            raise ValueError(
                f"prompt length {p} of a {len(s)}-token sequence: the first response token "
                "needs a prompt token before it"
            )
    ids = torch.as_tensor([int(t) for s in sequences for t in s], dtype=torch.long)
    spans, start = [], 0
    for s in sequences:
        spans.append((start, start + len(s)))
        start += len(s)
    positions = torch.cat([torch.arange(e - s) for s, e in spans])
    predict_at = torch.cat(
        [torch.arange(s + p - 1, e - 1) for (s, e), p in zip(spans, prompt_lens)]
    )
    return PackedRow(ids[None], positions[None], spans, predict_at, ids[predict_at + 1],
                     [len(s) - p for s, p in zip(sequences, prompt_lens)])


def packed_forward(
    model, sequences: Sequence[Sequence[int]], prompt_lens: Sequence[int], hidden: bool = False,
    layers: Sequence[int] = (),
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per sequence, the log-probs of its response tokens and (with `hidden`) its final-norm hidden
    states over all its positions (a detached float32 CPU copy), followed on the last axis by the
    states entering `layers` (an EAGLE-3 head's: real/drafter/records.py's `drafter_states`); one
    forward of the packed row. Differentiable unless called under no_grad. `model`: a
    Qwen2/Llama-style causal LM (`.model` the decoder, `.lm_head` its head)."""
    _register()
    row = pack(sequences, prompt_lens)
    device = next(model.parameters()).device
    with attention(model, VARLEN):
        row_spans = packed_spans(row.spans, device)  # the offsets built once for every layer
        out = model.model(
            input_ids=row.input_ids.to(device),
            position_ids=row.position_ids.to(device),
            use_cache=False,
            tlt_spans=row_spans,
            output_hidden_states=bool(layers),
        )
    h = out.last_hidden_state[0]
    logits = model.lm_head(h[row.predict_at.to(device)]).float()
    targets = row.targets.to(device)
    # log_softmax gathered without materialising a second [R, V] tensor (vocabularies are large).
    tok_lp = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    lps = list(tok_lp.split(row.response_lens))
    if not hidden:
        return lps, None
    states = drafter_states(out.hidden_states, layers)[0] if layers else h
    # clone: a slice would keep the whole row alive for as long as the record lives.
    return lps, [states[s:e].detach().float().cpu().clone() for s, e in row.spans]


def token_chunks(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices 0..n-1 in order, cut into consecutive groups of at most `budget` tokens (a
    sequence longer than `budget` forms a group alone)."""
    if budget < 1:
        raise ValueError(f"token budget {budget}: must be >= 1")
    groups: list[list[int]] = []
    used = 0
    for i, n in enumerate(lengths):
        if groups and used + n <= budget:
            groups[-1].append(i)
            used += n
        else:
            groups.append([i])
            used = n
    return groups
