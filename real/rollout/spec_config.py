"""Policy -> vLLM `speculative_config`: the one translation, pure (no vLLM needed).

- `drafter.kind` none (or `sd_threshold` 0): no speculative decoding;
- ngram: `method: ngram`, `prompt_lookup_max` 4, `prompt_lookup_min` 2;
- eagle: the drafter's own method, `eagle` or `eagle3` (an EAGLE or EAGLE-3 head, as
  real/drafter/resolve.py's `resolve_drafter` finds it), with its directory or hub id (required);
- `num_speculative_tokens` is the largest draft length in the schedule, and the schedule
  becomes vLLM's Dynamic SD table `num_speculative_tokens_per_batch_size`: rows above
  `sd_threshold` are cut to draft length 0, and a final `(threshold+1, max_num_seqs, 0)` row
  turns SD off for every larger batch (vLLM otherwise carries the last row's K forward).
  A schedule with one draft length for every batch size is passed as plain static SD.
- a tree strategy in the schedule (top-k > 1) is refused, naming the row: vLLM drafts chains;
- what this backend cannot run is refused before anything starts, naming the field and the fix
  (`refuse_undraftable`): `drafter.kind: suffix` (vLLM's suffix decoding needs the
  arctic-inference package, which this backend does not install); `tlt train` also refuses
  every rollout mode but `sync` (`refuse_unrunnable`: `async`, `stream`, `partial`, ...);
- `adaptive` (draft lengths that change while the engine runs, real/rollout/adaptive.py):
  `num_speculative_tokens` is the largest arm the policy's bandit may pick
  (`adaptive_draft_cap`) and the table is always given.

`bucket_ranges` is the cut of the schedule's buckets on an engine, shared by the table and by
the BanditController that rewrites it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from real.drafter.layout import DrafterError
from real.drafter.resolve import DrafterRef, resolve_drafter
from workbench.contracts.policy import DrafterKind, Policy

NGRAM_LOOKUP_MAX = 4
NGRAM_LOOKUP_MIN = 2


class EngineConfigError(ValueError):
    """A policy / drafter / engine setting combination the engine cannot run."""


def bucket_ranges(policy: Policy, max_num_seqs: int) -> dict[int, tuple[int, int]]:
    """Schedule bucket index -> its batch sizes `(min_batch, max_batch)` on an engine of
    `max_num_seqs`: cut at `sd_threshold` and at `max_num_seqs`; buckets left empty are absent."""
    top = min(policy.sd_threshold, max_num_seqs)
    return {i: (row.min_batch, min(row.max_batch, top)) for i, row in enumerate(policy.schedule)
            if row.min_batch <= min(row.max_batch, top)}


def close_table(rows: list[tuple[int, int, int]], max_num_seqs: int) -> list[tuple[int, int, int]]:
    """`rows` plus a final `(last+1, max_num_seqs, 0)` row when they stop below `max_num_seqs`."""
    if rows and rows[-1][1] < max_num_seqs:
        return rows + [(rows[-1][1] + 1, max_num_seqs, 0)]
    return rows


def dynamic_schedule(policy: Policy, max_num_seqs: int) -> list[tuple[int, int, int]]:
    """The policy's schedule as vLLM's `num_speculative_tokens_per_batch_size` rows.

    Rows are cut at `sd_threshold` (draft length 0 above it) and at `max_num_seqs`; a final
    `(threshold+1, max_num_seqs, 0)` row is added when the schedule stops below `max_num_seqs`.
    Empty when the policy does not use SD.
    """
    if not policy.uses_sd:
        return []
    rows = [
        (lo, hi, policy.schedule[i].draft_len)
        for i, (lo, hi) in sorted(bucket_ranges(policy, max_num_seqs).items())
    ]
    return close_table(rows, max_num_seqs)


def adaptive_draft_cap(policy: Policy) -> int:
    """The largest draft length an adaptive engine may be asked for: the largest arm the policy's
    bandit may pick (a `fixed` bandit picks none: the schedule's), at least the schedule's
    largest."""
    k = max((row.draft_len for row in policy.schedule), default=0)
    if policy.bandit.algorithm != "fixed":
        k = max(k, *policy.bandit.arms)
    return k


def refuse_trees(policy: Policy) -> None:
    """vLLM drafts chains: a tree strategy (top-k > 1, SGLang/FastRL's EAGLE trees) is
    simulator-only."""
    for i, row in enumerate(policy.schedule):
        if not row.strategy.is_chain:
            raise EngineConfigError(
                f"policy '{policy.name}': schedule[{i}] is the tree strategy {row.strategy.name} "
                f"(top-k {row.topk}); vLLM drafts chains: give a draft length there (e.g. "
                f"[{row.min_batch}, {row.max_batch}, {row.strategy.depth}]) or simulate the policy "
                "with `tlt sim` instead"
            )


def refuse_undraftable(policy: Policy) -> None:
    """What no vLLM engine of this backend can draft, refused naming the field and the fix: tree
    strategies (`refuse_trees`) and suffix drafters."""
    refuse_trees(policy)
    if policy.drafter.kind == DrafterKind.SUFFIX:
        raise EngineConfigError(
            f"policy '{policy.name}': drafter.kind 'suffix' is simulator-only here (vLLM's suffix "
            "decoding needs the arctic-inference package, which the real backend does not ship): "
            "set drafter.kind to 'ngram' (model-free, the nearest) or 'eagle', or simulate the "
            "policy with `tlt sim`"
        )


def refuse_unrunnable(policy: Policy) -> None:
    """Everything in `policy` that `tlt train` cannot run (the simulator runs all of it), refused
    naming the field and the fix: `refuse_undraftable`, and rollout modes other than sync (the
    real backend rolls out every response of a step to the end, then trains on it). A single
    engine's rollout (`tlt capture`) has no mode, so `speculative_config` checks only the
    drafting."""
    refuse_undraftable(policy)
    rollout = policy.rollout
    if rollout.stream:
        raise EngineConfigError(
            f"policy '{policy.name}': rollout.stream is simulator-only (the real backend rolls "
            "out, then trains): set rollout.stream: false and rollout.mode: sync, or simulate the "
            "policy with `tlt sim`"
        )
    if rollout.mode != "sync":
        raise EngineConfigError(
            f"policy '{policy.name}': rollout.mode '{rollout.mode}' is simulator-only (the real "
            "backend runs every response of a step to the end, then trains on it): set "
            "rollout.mode: sync, or simulate the policy with `tlt sim`"
        )


def eagle_drafter(policy: Policy, drafter: str | Path | DrafterRef | None,
                  target: str | Path | None = None) -> DrafterRef:
    """The EAGLE or EAGLE-3 drafter an eagle policy needs, resolved and checked against `target`
    when given (the engine and `tlt export` alike)."""
    if drafter is None:
        raise EngineConfigError(
            f"policy '{policy.name}' uses an EAGLE drafter: give its checkpoint directory or hub "
            f"id with --drafter (train one with `tlt drafter train`)")
    if isinstance(drafter, DrafterRef):
        return drafter
    try:
        return resolve_drafter(drafter, target)
    except DrafterError as exc:
        raise EngineConfigError(f"--{exc}") from None


def speculative_config(policy: Policy, drafter: str | Path | DrafterRef | None = None,
                       max_num_seqs: int = 64, adaptive: bool = False) -> dict[str, Any] | None:
    """vLLM's `speculative_config` for a policy; None for no speculative decoding. `drafter`: an
    eagle policy's drafter (a directory, a hub id, or resolved already).

    `adaptive`: room for draft lengths to change while the engine runs: `num_speculative_tokens`
    is `adaptive_draft_cap(policy)` and the Dynamic SD table is always given (vLLM builds the
    scheduler's lookup only from one), even for a uniform schedule or one of draft length 0.
    """
    refuse_undraftable(policy)
    if not policy.uses_sd:
        return None
    rows = dynamic_schedule(policy, max_num_seqs)
    k_max = adaptive_draft_cap(policy) if adaptive else max((k for _, _, k in rows), default=0)
    if k_max == 0:
        return None
    kind = policy.drafter.kind
    if kind == DrafterKind.NGRAM:
        spec: dict[str, Any] = {
            "method": "ngram",
            "num_speculative_tokens": k_max,
            "prompt_lookup_max": NGRAM_LOOKUP_MAX,
            "prompt_lookup_min": NGRAM_LOOKUP_MIN,
        }
    elif kind == DrafterKind.EAGLE:
        ref = eagle_drafter(policy, drafter)
        spec = {"method": ref.method, "model": ref.model, "num_speculative_tokens": k_max}
    else:  # pragma: no cover - refuse_undraftable() leaves only none/ngram/eagle
        raise EngineConfigError(
            f"drafter.kind {kind!r}: the real backend runs none, ngram or eagle"
        )
    if adaptive or len({k for _, _, k in rows}) > 1:
        spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in rows]
    return spec
