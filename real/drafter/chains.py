"""What a drafter is worth to the rollout, measured on hidden-state records: the chains it drafts
as vLLM's EAGLE / EAGLE-3 proposer drafts them, judged against the target's greedy tokens.

`chain_drafts` runs a head (real/drafter/eagle.py's EagleDrafter or eagle3.py's Eagle3Drafter:
both give `chain_input`, `chain_output`, `draft_tokens`) the way vLLM's proposer does: its
context is the pairs (target state at i, token at i+1) for i <= t, then it feeds back its own
output and drafted token, position after position. `chain_starts` and `chain_accepts` turn that
into the accepted draft tokens per start (SpotTrainer.estimate_accept_len).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from real.drafter.layers import rotated_qkv
from real.drafter.records import HiddenRecord


def record_inputs(drafter: Any, record: HiddenRecord) -> torch.Tensor:
    """What the head reads from the target at the context: the final hidden states (EAGLE), or
    the states of its target layers (EAGLE-3, `record.aux`)."""
    if not drafter.aux_layers:
        return record.hidden
    if record.aux is None:
        raise ValueError("an EAGLE-3 head reads target layer states this record does not hold "
                         "(records made without the head's aux layers)")
    return record.aux


@torch.no_grad()
def chain_drafts(drafter: Any, ids: torch.Tensor, inputs: torch.Tensor, starts: torch.Tensor,
                 k: int):
    """The `k` tokens the drafter proposes after each start t of one record: its context is
    (inputs[i], ids[i+1]) for i <= t, then its own output and argmax token, position after
    position. Yields one [starts] tensor of draft tokens (target ids) per draft step.

    The context's keys and values are computed once for all starts and each step computes only
    the new positions, so the cost of a chain does not grow with the context times its length."""
    attn = drafter.decoder.self_attn
    last = int(starts.max())
    x, res = drafter.chain_input(ids[1: last + 2], inputs[: last + 1].to(torch.float32))
    q, key, val = rotated_qkv(attn, x[None], torch.arange(last + 1)[None])  # [1, heads, T, hd]
    out = F.scaled_dot_product_attention(q, key, val, is_causal=True)
    g = drafter.chain_output(res[None], out)[0][starts]  # step 1: the context's own output at t
    d = drafter.draft_tokens(g)
    yield d
    span = torch.arange(last + 1)
    # context mask per start: keys at positions <= t
    ctx_mask = (span[None, :] <= starts[:, None])[:, None, None, :]  # [S, 1, 1, T]
    keys, vals = [], []
    for j in range(2, k + 1):
        xs, rs = drafter.chain_input(d, g, first=False)
        qs, ks, vs = rotated_qkv(attn, xs[:, None], (starts + j - 1)[:, None])  # [S, h, 1, hd]
        keys.append(ks)
        vals.append(vs)
        k_all = torch.cat((key.expand(len(starts), -1, -1, -1), *keys), dim=2)
        v_all = torch.cat((val.expand(len(starts), -1, -1, -1), *vals), dim=2)
        mask = torch.cat((ctx_mask, torch.ones(len(starts), 1, 1, len(keys), dtype=torch.bool)),
                         dim=-1)
        o = F.scaled_dot_product_attention(qs, k_all, v_all, attn_mask=mask)
        g = drafter.chain_output(rs[:, None], o)[:, 0]
        d = drafter.draft_tokens(g)
        yield d


@torch.no_grad()
def chain_starts(drafter: Any, records: Sequence[HiddenRecord], k: int, max_starts: int):
    """Per record long enough for a chain of `k`: its ids, the head's inputs, the target's greedy
    token after each position and up to `max_starts` evenly spaced starts."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    out = []
    for r in records:
        ids = torch.as_tensor(r.token_ids, dtype=torch.long)
        # the chain at start t is judged against the target's tokens after t+1..t+k
        last = len(ids) - 1 - k
        if last < 0:
            continue
        starts = torch.linspace(0, last, min(max_starts, last + 1)).round().long().unique()
        ref = drafter.target_tokens(r.hidden.to(torch.float32))
        out.append((ids, record_inputs(drafter, r), ref, starts))
    if not out:
        raise ValueError(f"no record has the {k + 2} tokens a chain of {k} needs")
    return out


@torch.no_grad()
def chain_accepts(drafter: Any, ids: torch.Tensor, inputs: torch.Tensor, ref: torch.Tensor,
                  starts: torch.Tensor, k: int) -> torch.Tensor:
    """Accepted draft tokens for chains starting at each of `starts` in one record."""
    alive = torch.ones(len(starts), dtype=torch.bool)
    count = torch.zeros(len(starts), dtype=torch.long)
    for j, d in enumerate(chain_drafts(drafter, ids, inputs, starts, k), start=1):
        alive &= d == ref[starts + j]
        count += alive.long()
        if j < k:
            # the next reference holds only if the record went on with d
            alive &= ids[starts + j + 1] == d
    return count
