"""A tuned policy for a real team's stack: vLLM, SGLang / FastRL and veRL (`tlt export`).

Each target gets the file its users already write, with what the target cannot express named
at the top (as comments) and in `Export.notes`, each note saying whether it was *approximated*
(the file runs something close, and says what) or *dropped* (left out: the target has no such
setting), and what was and was not checked of the drafter (a directory or a hub id, EAGLE or
EAGLE-3: real/drafter/resolve.py). What would run something else is refused with an
`ExportError` naming the field (workbench/deploy/exported.py).

- vllm: a `vllm serve MODEL --config FILE` YAML: `max-num-seqs` and `speculative-config`, the
  dict the real engine builds (real/rollout/spec_config.py's `speculative_config`, one
  translation for both), with the schedule as vLLM's `num_speculative_tokens_per_batch_size`.
- sglang (workbench/deploy/sglang.py): a shell file setting `SGLANG_ARGS` (for `python -m
  sglang.launch_server`) in the argument names of FastRL's SGLang fork (mit-han-lab/fastrl
  third-party/sglang), where EAGLE trees per batch bucket, the MAB and the SD threshold live, and
  `FASTRL_OVERRIDES`, the same policy as FastRL's trainer (`python3 -m
  verl.trainer.main_fastrl`) reads it (`speculative.*`).
- verl: a veRL rollout config fragment under `actor_rollout_ref.rollout`: `max_num_seqs`, and
  `engine_kwargs.vllm.speculative_config` (veRL forwards it to vLLM verbatim) or, for trees,
  `engine_kwargs.sglang` (upstream SGLang's arguments: one strategy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from real.drafter.resolve import DrafterRef
from real.rollout.spec_config import EngineConfigError, speculative_config
from workbench.contracts.policy import DrafterKind, Policy
from workbench.deploy.exported import (
    Export,
    ExportError,
    export_drafter,
    spot_training_note,
    trainer_notes,
)
from workbench.deploy.file_text import dump_yaml, header
from workbench.deploy.sglang import (
    FASTRL_WARMUP_CHECKS,
    sglang_export,
    upstream_sglang_kwargs,
)

TARGETS = ("vllm", "sglang", "verl")
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default engine batch (the table is closed there)
__all__ = ["DEFAULT_MAX_NUM_SEQS", "FASTRL_WARMUP_CHECKS", "TARGETS", "Export", "ExportError",
           "check_out", "export_policy"]


def export_policy(policy: Policy, target: str, drafter: str | Path | None = None,
                  max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, model: str | Path | None = None,
                  drafter_method: str | None = None) -> Export:
    """The policy as `target` ('vllm', 'sglang' or 'verl') runs it; ExportError where it cannot.
    `drafter`: an eagle policy's drafter, a directory or hub id (real/drafter/resolve.py), checked
    against the target `model` (a directory or hub id) where given; `drafter_method` (eagle,
    eagle3) where its files cannot say. What was and was not checked is among the notes."""
    if target not in TARGETS:
        raise ExportError(f"--to {target!r}: give one of {', '.join(TARGETS)}")
    if max_num_seqs < 1:
        raise ExportError(f"--max-num-seqs {max_num_seqs}: give the engine's batch limit (an "
                          "integer >= 1)")
    ref = export_drafter(policy, target, drafter, model, drafter_method)
    build = {"vllm": vllm_export, "sglang": sglang_export, "verl": verl_export}[target]
    return build(policy, ref, max_num_seqs)


def check_out(target: str, out: str | Path) -> None:
    """vLLM's `--config` and Hydra read only .yaml/.yml files: refuse another name before
    writing."""
    if target in ("vllm", "verl") and Path(out).suffix not in (".yaml", ".yml"):
        raise ExportError(f"--out {out}: {target} reads a .yaml or .yml file "
                          f"(e.g. --out {Path(out).stem}.{target}.yaml)")


def _vllm_refusal(policy: Policy, exc: EngineConfigError, target: str) -> ExportError:
    trees = any(not r.strategy.is_chain for r in policy.schedule)
    hint = " (tree strategies: tlt export --to sglang)" if trees else ""
    return ExportError(f"{target}: {exc}{hint}")


def vllm_spec(policy: Policy, drafter: DrafterRef | None, max_num_seqs: int,
              target: str = "vllm") -> dict[str, Any] | None:
    """vLLM's speculative_config, by the real engine's own translation (a static table)."""
    try:
        return speculative_config(policy, drafter, max_num_seqs, adaptive=False)
    except EngineConfigError as exc:
        raise _vllm_refusal(policy, exc, target) from None


def vllm_notes(policy: Policy, spec: dict[str, Any] | None, drafter: DrafterRef | None,
               target: str = "vllm") -> list[str]:
    """What the file cannot express, after what was and was not checked of its drafter."""
    used = spec is not None and drafter is not None and spec["method"] == drafter.method
    notes = (drafter.notes() if used else []) + trainer_notes(policy, target)
    notes += spot_training_note(policy, target)
    if policy.uses_sd and policy.sd_warmup_steps > 0:
        notes.append(f"dropped: sd_warmup_steps {policy.sd_warmup_steps} (FastRL's "
                     "adaptive_spec_warmup_checks): vLLM's table turns SD back on at once when the "
                     "batch falls to sd_threshold")
    if spec is None:
        notes.append("the policy does not use speculative decoding: plain decoding"
                     + (", no speculative-config" if target == "vllm" else ""))
    return notes


# ---------------------------------------------------------------- vLLM


def vllm_export(policy: Policy, drafter: DrafterRef | None, max_num_seqs: int) -> Export:
    spec = vllm_spec(policy, drafter, max_num_seqs)
    notes = vllm_notes(policy, spec, drafter)
    body: dict[str, Any] = {"max-num-seqs": max_num_seqs}
    if spec is not None:
        body["speculative-config"] = spec
    usage = ["Run: vllm serve MODEL --config THIS_FILE (Python: LLM(model, max_num_seqs=..., "
             "speculative_config=...)).",
             "num_speculative_tokens_per_batch_size rows are (min_batch, max_batch, draft length); "
             "0: SD off."]
    return Export("vllm", policy.name, header(policy, "vLLM", usage, notes) + dump_yaml(body),
                  tuple(notes), "yaml")


# ---------------------------------------------------------------- veRL


def verl_export(policy: Policy, drafter: DrafterRef | None, max_num_seqs: int) -> Export:
    trees = any(not r.strategy.is_chain for r in policy.schedule) and policy.uses_sd
    rollout: dict[str, Any] = {"name": "sglang" if trees else "vllm", "max_num_seqs": max_num_seqs}
    if trees:
        if policy.drafter.kind != DrafterKind.EAGLE:
            raise ExportError(f"verl: policy '{policy.name}': tree strategies need drafter.kind "
                              "'eagle'")
        kwargs, checked, approx = upstream_sglang_kwargs(policy, drafter)
        notes = (checked + trainer_notes(policy, "verl") + spot_training_note(policy, "verl")
                 + approx)
        rollout["engine_kwargs"] = {"sglang": kwargs}
    else:
        spec = vllm_spec(policy, drafter, max_num_seqs, "verl")
        notes = vllm_notes(policy, spec, drafter, "verl")
        if spec is not None:
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
