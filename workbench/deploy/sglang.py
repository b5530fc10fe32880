"""A policy for SGLang: FastRL's SGLang fork and trainer (`tlt export --to sglang`), and upstream
SGLang's arguments for veRL's `engine_kwargs.sglang` (workbench/deploy/export.py's veRL file).

FastRL's fork (mit-han-lab/fastrl third-party/sglang) holds EAGLE trees per batch bucket, the MAB
and the SD threshold; its trainer (`python3 -m verl.trainer.main_fastrl`) reads the same policy as
`speculative.*` overrides. An EAGLE-3 drafter runs as SGLang's algorithm EAGLE3.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from real.drafter.layout import EAGLE
from real.drafter.resolve import DrafterRef
from real.rollout.spec_config import EngineConfigError, eagle_drafter
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.strategy import Strategy
from workbench.deploy.exported import Export, ExportError, trainer_notes
from workbench.deploy.file_text import header, shell_array

FASTRL_WARMUP_CHECKS = 10  # FastRL's eagle_worker.py hard-codes adaptive_spec_warmup_checks = 10
FASTRL_THRESHOLD_ARG = "--apdative-speculative-batch_size-threshold"  # FastRL's spelling
Args = list[tuple[str, str]]  # SGLang server arguments: (flag, value), in order


@dataclass(frozen=True)
class Bucket:
    """Batch sizes `min_batch..max_batch` drafting with `strategy` (SD on)."""

    min_batch: int
    max_batch: int
    strategy: Strategy


def sd_buckets(policy: Policy, target: str) -> list[Bucket]:
    """The schedule up to `sd_threshold` as buckets with SD on: equal neighbours merged, draft
    length 0 rows at the end cut (SD off there is the threshold's job). A draft length 0 row
    between buckets with SD is refused: SGLang/FastRL turn SD off only above one threshold."""
    rows = [Bucket(r.min_batch, min(r.max_batch, policy.sd_threshold), r.strategy)
            for r in policy.schedule
            if r.min_batch <= policy.sd_threshold] if policy.uses_sd else []
    while rows and rows[-1].strategy.steps == 0:
        rows.pop()
    for i, b in enumerate(rows):
        if b.strategy.steps == 0:
            raise ExportError(
                f"{target}: policy '{policy.name}': schedule row [{b.min_batch}, {b.max_batch}, 0] "
                f"turns SD off between batch sizes that draft; {target} turns SD off only above "
                "one batch size (bs_threshold): give that row a draft length, or export to vllm "
                "(its table has 0 rows)")
    merged: list[Bucket] = []
    for b in rows:
        if merged and merged[-1].strategy == b.strategy:
            merged[-1] = Bucket(merged[-1].min_batch, b.max_batch, b.strategy)
        else:
            merged.append(b)
    return merged


def fastrl_buckets(policy: Policy, buckets: list[Bucket]) -> None:
    """FastRL's BEG/PREDEFINED MAB gives the i-th batch bucket the strategy with the i-th largest
    `num_draft_tokens`: verified tokens must fall strictly from bucket to bucket."""
    for a, b in pairwise(buckets):
        if b.strategy.verify_tokens >= a.strategy.verify_tokens:
            raise ExportError(
                f"sglang: policy '{policy.name}': batch {b.min_batch}-{b.max_batch} verifies "
                f"{b.strategy.verify_tokens} tokens ({b.strategy.name}), batch "
                f"{a.min_batch}-{a.max_batch} {a.strategy.verify_tokens} ({a.strategy.name}); "
                "FastRL's MAB (speculative_mab_bs_threshold) gives larger batches strictly fewer "
                "verified tokens: make the schedule's verified tokens fall with the batch size")


def sglang_name(s: Strategy) -> str:
    """SGLang/FastRL's `steps_topk_tokens` form, chains included (4 -> 4_1_5)."""
    return f"{s.steps}_{s.topk}_{s.verify_tokens}"


def sglang_strategy_args(s: Strategy) -> Args:
    return [("--speculative-num-steps", str(s.steps)), ("--speculative-eagle-topk", str(s.topk)),
            ("--speculative-num-draft-tokens", str(s.verify_tokens))]


def fastrl_eagle(policy: Policy, ref: DrafterRef, buckets: list[Bucket]) -> tuple[Args, list[str]]:
    """FastRL's SGLang server arguments and trainer overrides for an EAGLE policy (its drafter an
    EAGLE or EAGLE-3 head: SGLang's algorithm EAGLE or EAGLE3)."""
    fastrl_buckets(policy, buckets)
    first, rest = buckets[0].strategy, [sglang_name(b.strategy) for b in buckets[1:]]
    threshold = buckets[-1].max_batch
    ddir = ref.model
    args = [("--speculative-algorithm", ref.method.upper()),
            ("--speculative-draft-model-path", ddir),
            *sglang_strategy_args(first), (FASTRL_THRESHOLD_ARG, str(threshold))]
    if rest:
        args += [("--speculative-eagle-mab-algorithm", "BEG"),
                 ("--speculative-eagle-mab-configs", ",".join(rest)),
                 ("--speculative-mab-bs-threshold", ",".join(str(b.min_batch) for b in buckets))]
    t = policy.spot_training
    overrides = [
        "speculative.enable=true", f"speculative.spec_strategy={ref.method}",
        f"speculative.bs_threshold={threshold}",
        f"speculative.eagle.spec_model_path={ddir}", f"speculative.eagle.spec_steps={first.steps}",
        f"speculative.eagle.spec_topk={first.topk}",
        f"speculative.eagle.spec_verify_tokens={first.verify_tokens}",
        "speculative.eagle.tune_algorithm=BEG",
        # Quoted: Hydra reads 8_4_32 as the integer 8432.
        f"speculative.eagle.mab_configs={json.dumps(rest, separators=(',', ':'))}",
        f"speculative.eagle.mab_bs_threshold=[{','.join(str(b.min_batch) for b in buckets)}]",
        f"speculative.train.enable_drafter_training={str(spot_trains(policy, ref)).lower()}"]
    if spot_trains(policy, ref):
        overrides += [f"speculative.train.training_interval_steps={t.interval_steps}",
                      f"speculative.train.min_workers_for_training={t.min_idle_workers}",
                      f"speculative.train.optim.lr={t.lr:g}"]
    return args, overrides


def spot_trains(policy: Policy, ref: DrafterRef) -> bool:
    """Whether FastRL's trainer spot-trains the drafter: its drafter trainer builds EAGLE heads
    only (verl/workers/fsdp_workers.py: LlamaForCausalLMEagle, Qwen2ForCausalLMEagle)."""
    return policy.spot_training.enabled and ref.method == EAGLE


def fastrl_notes(policy: Policy, buckets: list[Bucket], ref: DrafterRef) -> list[str]:
    notes = trainer_notes(policy, "sglang")
    if policy.spot_training.enabled and not spot_trains(policy, ref):
        notes.append(f"dropped: spot_training: FastRL's drafter trainer builds EAGLE heads only "
                     f"(verl/workers/fsdp_workers.py), not this {ref.method} head: "
                     "speculative.train.enable_drafter_training=false (tlt train continues "
                     "EAGLE-3 heads)")
    if policy.sd_warmup_steps != FASTRL_WARMUP_CHECKS:
        notes.append(f"approximated: sd_warmup_steps {policy.sd_warmup_steps}: FastRL hard-codes "
                     f"adaptive_spec_warmup_checks = {FASTRL_WARMUP_CHECKS} (third-party/sglang "
                     "eagle_worker.py)")
    if buckets and buckets[-1].max_batch < policy.sd_threshold:
        notes.append(f"exact: bs_threshold is {buckets[-1].max_batch}, not sd_threshold "
                     f"{policy.sd_threshold}: the schedule drafts 0 tokens above batch "
                     f"{buckets[-1].max_batch}")
    if spot_trains(policy, ref):
        t = policy.spot_training
        notes.append(f"dropped: spot_training.steps {t.steps} and spot_training.buffer {t.buffer}: "
                     f"FastRL bounds a session by speculative.train.max_epochs and keeps its own "
                     f"buffer (its defaults stay)")
    return notes


def ngram_args(policy: Policy, buckets: list[Bucket]) -> tuple[Args, list[str]]:
    """SGLang's NGRAM worker: one chain for every batch size (no threshold, no buckets there)."""
    last = buckets[-1]
    note = ("approximated: SGLang's NGRAM worker drafts one length at every batch size (FastRL's "
            f"bs_threshold and MAB are EAGLE-only): draft length {last.strategy.steps}, the "
            f"largest batches' ({last.min_batch}-{last.max_batch}), where a longer draft costs "
            f"most; SD stays on above sd_threshold {policy.sd_threshold}")
    args = [("--speculative-algorithm", "NGRAM"),
            ("--speculative-num-draft-tokens", str(last.strategy.verify_tokens)),
            ("--speculative-ngram-min-bfs-breadth", "1"),
            ("--speculative-ngram-max-bfs-breadth", "1")]
    return args, [note]


def sglang_parts(policy: Policy,
                 drafter: DrafterRef | None) -> tuple[Args, list[str], list[str]]:
    """(SGLang server arguments, FastRL trainer overrides, notes); empty arguments: no SD."""
    if policy.drafter.kind == DrafterKind.SUFFIX:
        raise ExportError(f"sglang: policy '{policy.name}': drafter.kind 'suffix': SGLang has no "
                          "suffix drafter; set drafter.kind to 'ngram' (the nearest) or 'eagle'")
    buckets = sd_buckets(policy, "sglang")
    if not buckets:
        return [], ["speculative.enable=false"], trainer_notes(policy, "sglang") + [
            "the policy does not use speculative decoding: plain decoding"]
    if policy.drafter.kind == DrafterKind.NGRAM:
        args, notes = ngram_args(policy, buckets)
        notes = trainer_notes(policy, "sglang") + notes + [
            "FastRL's trainer drafts with EAGLE only: no speculative.* overrides for an n-gram "
            "policy"]
        return args, [], notes
    try:
        ref = eagle_drafter(policy, drafter)
    except EngineConfigError as exc:
        raise ExportError(f"sglang: {exc}") from None
    args, overrides = fastrl_eagle(policy, ref, buckets)
    return args, overrides, ref.notes() + fastrl_notes(policy, buckets, ref)


def sglang_export(policy: Policy, drafter: DrafterRef | None, max_num_seqs: int) -> Export:
    args, overrides, notes = sglang_parts(policy, drafter)
    usage = ["bash: source THIS_FILE, then",
             'serve:  python -m sglang.launch_server --model-path MODEL "${SGLANG_ARGS[@]}"',
             'train:  python3 -m verl.trainer.main_fastrl "${FASTRL_OVERRIDES[@]}" <data, model, '
             'trainer overrides>',
             "Argument names are FastRL's SGLang fork's (mit-han-lab/fastrl third-party/sglang); "
             "upstream SGLang",
             f"lacks {FASTRL_THRESHOLD_ARG} and --speculative-eagle-mab-* (FastRL's adaptive SD "
             "and MAB).",
             f"max_num_seqs {max_num_seqs}: set it as --max-running-requests (FastRL's trainer "
             "sets 512)."]
    flat = [f"{k} {shlex.quote(v)}" for k, v in args]
    text = (header(policy, "SGLang / FastRL", usage, notes) + shell_array("SGLANG_ARGS", flat)
            + shell_array("FASTRL_OVERRIDES", [shlex.quote(o) for o in overrides]))
    return Export("sglang", policy.name, text, tuple(notes), "sh")



def upstream_sglang_kwargs(policy: Policy, drafter: DrafterRef | None
                           ) -> tuple[dict[str, Any], list[str], list[str]]:
    """veRL's engine_kwargs.sglang (upstream SGLang's ServerArgs names) for a tree policy: one
    strategy. Returns them, what was checked of the drafter, and the one-strategy note."""
    buckets = sd_buckets(policy, "verl")
    try:
        ref = eagle_drafter(policy, drafter)
    except EngineConfigError as exc:
        raise ExportError(f"verl: {exc}") from None
    last = buckets[-1]
    kwargs = {"speculative_algorithm": ref.method.upper(),
              "speculative_draft_model_path": ref.model,
              "speculative_num_steps": last.strategy.steps,
              "speculative_eagle_topk": last.strategy.topk,
              "speculative_num_draft_tokens": last.strategy.verify_tokens}
    note = ("approximated: upstream SGLang (veRL's engine_kwargs.sglang) runs one strategy at "
            f"every batch size: {last.strategy.name}, the largest batches' "
            f"({last.min_batch}-{last.max_batch}), where a larger tree costs most; per-bucket "
            f"trees and SD off above sd_threshold {policy.sd_threshold} need FastRL (tlt export "
            "--to sglang)")
    return kwargs, ref.notes(), [note]
