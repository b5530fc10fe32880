"""What one engine step gave back, as our rows: vLLM's request outputs added to the requests
`RolloutEngine.run_steps` tracks (`Tracked`, `take_outputs`), and its scheduler stats as an
`EngineStepRow` (`step_row`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from real.rollout.requests import EngineStepRow, RolloutRequest, Sample
from workbench.contracts.trace import RequestRow


@dataclass
class Tracked:
    """A request `run_steps` is driving: what it has generated so far."""

    request: RolloutRequest
    prompt_tokens: int
    start_s: float
    generated: int = 0
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    end_s: float = math.nan
    spec_passes_by_len: list[int] = field(default_factory=list)  # see RequestRow
    spec_accepted: float = math.nan

    def row(self, rl_step: int, worker: int) -> RequestRow:
        r = self.request
        return RequestRow(
            rl_step=rl_step,
            worker=worker,
            request_id=r.request_id,
            prompt_id=r.prompt_id,
            sample=r.sample,
            prompt_tokens=self.prompt_tokens,
            response_tokens=self.generated,
            finish_reason=self.finish_reason or "abort",
            start_s=self.start_s,
            end_s=self.end_s,
            reward=math.nan,
            spec_passes_by_len=list(self.spec_passes_by_len),
            spec_accepted=self.spec_accepted,
        )

    def take_spec_metrics(self, metrics: Any) -> None:
        """vLLM's per-request speculative metrics (`RequestSpecDecodeMetrics`, level "detailed"):
        how many verify passes carried each draft length, and the drafts accepted. Per request,
        not per step, because requests of one batch accept at their own rates: which ones are
        left in the tail decides how fast the tail decodes."""
        drafted = list(getattr(metrics, "per_step_drafted", []) or [])
        accepted = list(getattr(metrics, "per_step_accepted", []) or [])
        if not drafted:
            return
        by_len = [0] * (max(drafted) + 1)
        for k in drafted:
            by_len[k] += 1
        self.spec_passes_by_len = by_len
        self.spec_accepted = float(sum(accepted))

    def sample(self) -> Sample:
        return Sample(self.tokens, "".join(self.text), self.finish_reason or "abort")



def take_outputs(
    outs: Sequence[Any],
    tracked: dict[str, Tracked],
    alias: dict[str, str],
    live: set[str],
    t_now: float,
) -> int:
    """Add one step's (delta) outputs to the tracked requests; finished ones leave `live`.
    Returns the response tokens the step emitted."""
    new_tokens = 0
    for o in outs:
        key = alias.get(o.request_id, o.request_id)
        s = tracked.get(key)
        if s is None:
            continue
        for c in o.outputs[:1]:
            s.tokens.extend(c.token_ids)
            s.text.append(c.text)
            s.generated += len(c.token_ids)
            new_tokens += len(c.token_ids)
            if o.finished:
                s.finish_reason = str(c.finish_reason)
                if getattr(c, "spec_decode_metrics", None) is not None:
                    s.take_spec_metrics(c.spec_decode_metrics)
        if o.finished:
            s.end_s = t_now
            live.discard(key)
    return new_tokens


def step_row(
    ss: Any, ctx: list[int], n_decoding: int, new_tokens: int, **where: Any
) -> EngineStepRow:
    """The row of one engine step from vLLM's scheduler stats `ss`; `where`: rl_step, worker,
    engine_step, start_s, wall_s and finished."""
    d = getattr(ss, "iteration_details", None)
    sd = getattr(ss, "spec_decoding_stats", None)
    if d is not None:
        prefill_req, prefill_tok = int(d.num_ctx_requests), int(d.num_ctx_tokens)
        decode_req, decode_tok = int(d.num_generation_requests), int(d.num_generation_tokens)
    else:  # no details (should not happen with log stats on): fall back to the tracked requests
        prefill_req = prefill_tok = 0
        decode_req, decode_tok = n_decoding, n_decoding
    draft_len = num_drafts = num_draft_tokens = num_accepted = 0
    per_pos: list[int] = []
    if sd is not None and sd.num_drafts > 0:
        num_drafts, num_draft_tokens = int(sd.num_drafts), int(sd.num_draft_tokens)
        num_accepted = int(sd.num_accepted_tokens)
        drafted = list(getattr(sd, "num_draft_tokens_per_pos", []) or [])
        # The step's K: the last position that got a draft (= num_draft_tokens / num_drafts
        # when every request got a full-length draft; n-gram can propose fewer).
        draft_len = max((i + 1 for i, v in enumerate(drafted) if v > 0),
                        default=round(num_draft_tokens / num_drafts))
        per_pos = [int(v) for v in list(sd.num_accepted_tokens_per_pos)[:draft_len]]
        per_pos += [0] * (draft_len - len(per_pos))
    return EngineStepRow(
        **where,
        batch_size=prefill_req + decode_req,
        num_waiting=int(getattr(ss, "num_waiting_reqs", 0) or 0),
        prefill_requests=prefill_req,
        prefill_tokens=prefill_tok,
        decode_requests=decode_req,
        scheduled_tokens=prefill_tok + decode_tok,
        context_mean=float(sum(ctx) / len(ctx)) if ctx else 0.0,
        context_max=int(max(ctx)) if ctx else 0,
        draft_len=int(draft_len),
        num_drafts=num_drafts,
        num_draft_tokens=num_draft_tokens,
        num_accepted_tokens=num_accepted,
        accepted_per_pos=per_pos,
        new_tokens=int(new_tokens),
        exec_s=float(d.elapsed_ms) / 1e3 if d is not None else math.nan,
    )
