"""A tuned policy for a real team's stack: vLLM, SGLang / FastRL and veRL (`tlt export`).

Each target gets the file its users already write, with what the target cannot express named
at the top (as comments) and in `Export.notes`, each note saying whether it was *approximated*
(the file runs something close, and says what) or *dropped* (left out: the target has no such
setting). What would run something else is refused with an `ExportError` naming the field.

- vllm: a `vllm serve MODEL --config FILE` YAML: `max-num-seqs` and `speculative-config`, the
  dict the real engine builds (real/rollout/spec_config.py's `speculative_config`, one
  translation for both), with the schedule as vLLM's `num_speculative_tokens_per_batch_size`.
- sglang: a shell file setting `SGLANG_ARGS` (for `python -m sglang.launch_server`) in the
  argument names of FastRL's SGLang fork (mit-han-lab/fastrl third-party/sglang), where EAGLE
  trees per batch bucket, the MAB and the SD threshold live, and `FASTRL_OVERRIDES`, the same
  policy as FastRL's trainer (`python3 -m verl.trainer.main_fastrl`) reads it (`speculative.*`).
- verl: a veRL rollout config fragment under `actor_rollout_ref.rollout`: `max_num_seqs`, and
  `engine_kwargs.vllm.speculative_config` (veRL forwards it to vLLM verbatim) or, for trees,
  `engine_kwargs.sglang` (upstream SGLang's arguments: one strategy).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from real.rollout.spec_config import EngineConfigError, eagle_checkpoint, speculative_config
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.strategy import Strategy
from workbench.deploy.file_text import dump_yaml, header, shell_array

TARGETS = ("vllm", "sglang", "verl")
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default engine batch (the table is closed there)
FASTRL_WARMUP_CHECKS = 10  # FastRL's eagle_worker.py hard-codes adaptive_spec_warmup_checks = 10
FASTRL_THRESHOLD_ARG = "--apdative-speculative-batch_size-threshold"  # FastRL's spelling
Args = list[tuple[str, str]]  # SGLang server arguments: (flag, value), in order


class ExportError(ValueError):
    """The policy cannot be expressed for the target: names the field and the fix."""


@dataclass(frozen=True)
class Export:
    """One exported file: its text (notes included as comments) and the notes on their own."""

    target: str
    policy: str
    text: str
    notes: tuple[str, ...]
    suffix: str  # the file type the target reads: "yaml" or "sh"

    @property
    def file_name(self) -> str:
        return f"{self.policy}.{self.target}.{self.suffix}"


@dataclass(frozen=True)
class Bucket:
    """Batch sizes `min_batch..max_batch` drafting with `strategy` (SD on)."""

    min_batch: int
    max_batch: int
    strategy: Strategy


def export_policy(policy: Policy, target: str, drafter_dir: str | Path | None = None,
                  max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> Export:
    """The policy as `target` ('vllm', 'sglang' or 'verl') runs it; ExportError where it cannot."""
    if target not in TARGETS:
        raise ExportError(f"--to {target!r}: give one of {', '.join(TARGETS)}")
    if max_num_seqs < 1:
        raise ExportError(f"--max-num-seqs {max_num_seqs}: give the engine's batch limit (an "
                          "integer >= 1)")
    build = {"vllm": vllm_export, "sglang": sglang_export, "verl": verl_export}[target]
    return build(policy, drafter_dir, max_num_seqs)


def check_out(target: str, out: str | Path) -> None:
    """vLLM's `--config` and Hydra read only .yaml/.yml files: refuse another name before
    writing."""
    if target in ("vllm", "verl") and Path(out).suffix not in (".yaml", ".yml"):
        raise ExportError(f"--out {out}: {target} reads a .yaml or .yml file "
                          f"(e.g. --out {Path(out).stem}.{target}.yaml)")


# ---------------------------------------------------------------- what no serving config carries


def trainer_notes(policy: Policy, target: str) -> list[str]:
    """What `tlt train` does around the engine that `target`'s engine settings do not carry."""
    notes = []
    b = policy.bandit
    if policy.uses_sd and b.algorithm != "fixed":
        notes.append(f"approximated: bandit.algorithm '{b.algorithm}' picks draft lengths among "
                     f"{list(b.arms)} while the engine runs (tlt train, real/rollout/adaptive.py); "
                     f"{target} gets the schedule's rows as a fixed table (the bandit's starting "
                     "point)")
    if policy.drafter.ngram_fallback:
        notes.append("dropped: drafter.ngram_fallback (tlt train switches between the learned and "
                     f"the n-gram drafter between RL steps); {target} runs the learned drafter "
                     "throughout")
    if policy.rollout.mode != "sync" or policy.rollout.stream:
        notes.append("dropped: rollout.mode "
                     f"'{policy.rollout.mode}'{' (stream)' if policy.rollout.stream else ''} is "
                     "the trainer's, not the engine's; this file sets the engine only")
    return notes


def spot_training_note(policy: Policy, target: str) -> list[str]:
    if not policy.spot_training.enabled:
        return []
    note = (f"dropped: spot_training (spot training of the drafter on idle workers): {target} "
            f"has no such setting (FastRL's trainer has: tlt export --to sglang writes it as "
            f"speculative.train.*)")
    return [note]


def _vllm_refusal(policy: Policy, exc: EngineConfigError, target: str) -> ExportError:
    trees = any(not r.strategy.is_chain for r in policy.schedule)
    hint = " (tree strategies: tlt export --to sglang)" if trees else ""
    return ExportError(f"{target}: {exc}{hint}")


def vllm_spec(policy: Policy, drafter_dir: str | Path | None, max_num_seqs: int,
              target: str = "vllm") -> dict[str, Any] | None:
    """vLLM's speculative_config, by the real engine's own translation (a static table)."""
    ddir = Path(drafter_dir).resolve() if drafter_dir is not None else None
    try:
        return speculative_config(policy, ddir, max_num_seqs, adaptive=False)
    except EngineConfigError as exc:
        raise _vllm_refusal(policy, exc, target) from None


def vllm_notes(policy: Policy, target: str = "vllm") -> list[str]:
    notes = trainer_notes(policy, target) + spot_training_note(policy, target)
    if policy.uses_sd and policy.sd_warmup_steps > 0:
        notes.append(f"dropped: sd_warmup_steps {policy.sd_warmup_steps} (FastRL's "
                     "adaptive_spec_warmup_checks): vLLM's table turns SD back on at once when the "
                     "batch falls to sd_threshold")
    return notes


# ---------------------------------------------------------------- vLLM


def vllm_export(policy: Policy, drafter_dir: str | Path | None, max_num_seqs: int) -> Export:
    spec = vllm_spec(policy, drafter_dir, max_num_seqs)
    notes = vllm_notes(policy)
    body: dict[str, Any] = {"max-num-seqs": max_num_seqs}
    if spec is None:
        notes.append("the policy does not use speculative decoding: plain decoding, no "
                     "speculative-config")
    else:
        body["speculative-config"] = spec
    usage = ["Run: vllm serve MODEL --config THIS_FILE (Python: LLM(model, max_num_seqs=..., "
             "speculative_config=...)).",
             "num_speculative_tokens_per_batch_size rows are (min_batch, max_batch, draft length); "
             "0: SD off."]
    return Export("vllm", policy.name, header(policy, "vLLM", usage, notes) + dump_yaml(body),
                  tuple(notes), "yaml")


# ---------------------------------------------------------------- SGLang / FastRL


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


def fastrl_eagle(policy: Policy, ddir: Path, buckets: list[Bucket]) -> tuple[Args, list[str]]:
    """FastRL's SGLang server arguments and trainer overrides for an EAGLE policy."""
    fastrl_buckets(policy, buckets)
    first, rest = buckets[0].strategy, [sglang_name(b.strategy) for b in buckets[1:]]
    threshold = buckets[-1].max_batch
    args = [("--speculative-algorithm", "EAGLE"), ("--speculative-draft-model-path", str(ddir)),
            *sglang_strategy_args(first), (FASTRL_THRESHOLD_ARG, str(threshold))]
    if rest:
        args += [("--speculative-eagle-mab-algorithm", "BEG"),
                 ("--speculative-eagle-mab-configs", ",".join(rest)),
                 ("--speculative-mab-bs-threshold", ",".join(str(b.min_batch) for b in buckets))]
    t = policy.spot_training
    overrides = [
        "speculative.enable=true", "speculative.spec_strategy=eagle",
        f"speculative.bs_threshold={threshold}",
        f"speculative.eagle.spec_model_path={ddir}", f"speculative.eagle.spec_steps={first.steps}",
        f"speculative.eagle.spec_topk={first.topk}",
        f"speculative.eagle.spec_verify_tokens={first.verify_tokens}",
        "speculative.eagle.tune_algorithm=BEG",
        # Quoted: Hydra reads 8_4_32 as the integer 8432.
        f"speculative.eagle.mab_configs={json.dumps(rest, separators=(',', ':'))}",
        f"speculative.eagle.mab_bs_threshold=[{','.join(str(b.min_batch) for b in buckets)}]",
        f"speculative.train.enable_drafter_training={str(t.enabled).lower()}"]
    if t.enabled:
        overrides += [f"speculative.train.training_interval_steps={t.interval_steps}",
                      f"speculative.train.min_workers_for_training={t.min_idle_workers}",
                      f"speculative.train.optim.lr={t.lr:g}"]
    return args, overrides


def fastrl_notes(policy: Policy, buckets: list[Bucket]) -> list[str]:
    notes = trainer_notes(policy, "sglang")
    if policy.sd_warmup_steps != FASTRL_WARMUP_CHECKS:
        notes.append(f"approximated: sd_warmup_steps {policy.sd_warmup_steps}: FastRL hard-codes "
                     f"adaptive_spec_warmup_checks = {FASTRL_WARMUP_CHECKS} (third-party/sglang "
                     "eagle_worker.py)")
    if buckets and buckets[-1].max_batch < policy.sd_threshold:
        notes.append(f"exact: bs_threshold is {buckets[-1].max_batch}, not sd_threshold "
                     f"{policy.sd_threshold}: the schedule drafts 0 tokens above batch "
                     f"{buckets[-1].max_batch}")
    if policy.spot_training.enabled:
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
                 drafter_dir: str | Path | None) -> tuple[Args, list[str], list[str]]:
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
        ddir = eagle_checkpoint(policy,
                                Path(drafter_dir).resolve() if drafter_dir is not None else None)
    except EngineConfigError as exc:
        raise ExportError(f"sglang: {exc}") from None
    args, overrides = fastrl_eagle(policy, ddir, buckets)
    return args, overrides, fastrl_notes(policy, buckets)


def sglang_export(policy: Policy, drafter_dir: str | Path | None, max_num_seqs: int) -> Export:
    args, overrides, notes = sglang_parts(policy, drafter_dir)
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


# ---------------------------------------------------------------- veRL


def upstream_sglang_kwargs(policy: Policy,
                           drafter_dir: str | Path | None) -> tuple[dict[str, Any], list[str]]:
    """veRL's engine_kwargs.sglang (upstream SGLang's ServerArgs names) for a tree policy: one
    strategy."""
    buckets = sd_buckets(policy, "verl")
    try:
        ddir = eagle_checkpoint(policy,
                                Path(drafter_dir).resolve() if drafter_dir is not None else None)
    except EngineConfigError as exc:
        raise ExportError(f"verl: {exc}") from None
    last = buckets[-1]
    kwargs = {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": str(ddir),
              "speculative_num_steps": last.strategy.steps,
              "speculative_eagle_topk": last.strategy.topk,
              "speculative_num_draft_tokens": last.strategy.verify_tokens}
    note = ("approximated: upstream SGLang (veRL's engine_kwargs.sglang) runs one strategy at "
            f"every batch size: {last.strategy.name}, the largest batches' "
            f"({last.min_batch}-{last.max_batch}), where a larger tree costs most; per-bucket "
            f"trees and SD off above sd_threshold {policy.sd_threshold} need FastRL (tlt export "
            "--to sglang)")
    return kwargs, [note]


def verl_export(policy: Policy, drafter_dir: str | Path | None, max_num_seqs: int) -> Export:
    trees = any(not r.strategy.is_chain for r in policy.schedule) and policy.uses_sd
    rollout: dict[str, Any] = {"name": "sglang" if trees else "vllm", "max_num_seqs": max_num_seqs}
    if trees:
        if policy.drafter.kind != DrafterKind.EAGLE:
            raise ExportError(f"verl: policy '{policy.name}': tree strategies need drafter.kind "
                              "'eagle'")
        kwargs, notes = upstream_sglang_kwargs(policy, drafter_dir)
        notes = trainer_notes(policy, "verl") + spot_training_note(policy, "verl") + notes
        rollout["engine_kwargs"] = {"sglang": kwargs}
    else:
        spec = vllm_spec(policy, drafter_dir, max_num_seqs, "verl")
        notes = vllm_notes(policy, "verl")
        if spec is None:
            notes.append("the policy does not use speculative decoding: plain decoding")
        else:
            rollout["engine_kwargs"] = {"vllm": {"speculative_config": spec}}
    usage = ["Merge into your veRL trainer config, or give each leaf as a Hydra override (e.g.",
             f"actor_rollout_ref.rollout.name={rollout['name']}; keys under engine_kwargs, empty "
             "in veRL's defaults,",
             "with a leading +). veRL passes engine_kwargs.vllm to vLLM verbatim and "
             "engine_kwargs.sglang to",
             "SGLang's ServerArgs."]
    body = {"actor_rollout_ref": {"rollout": rollout}}
    return Export("verl", policy.name, header(policy, "veRL", usage, notes) + dump_yaml(body),
                  tuple(notes), "yaml")
