"""What an exported file is (`Export`), how an export is refused (`ExportError`), and the notes
every target shares: what `tlt train` does around the engine, spot training, and what was and was
not checked of the drafter (real/drafter/resolve.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from real.drafter.layout import DrafterError
from real.drafter.resolve import DrafterRef, resolve_drafter
from workbench.contracts.policy import DrafterKind, Policy


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


def export_drafter(policy: Policy, target: str, drafter: str | Path | None,
                   model: str | Path | None = None, method: str | None = None) -> DrafterRef | None:
    """An eagle policy's `--drafter` (a directory or hub id) resolved and checked against `model`
    where given; None when no drafter is given or the policy drafts without one."""
    if drafter is None or policy.drafter.kind != DrafterKind.EAGLE:
        return None
    try:
        return resolve_drafter(drafter, model, method)
    except DrafterError as exc:
        raise ExportError(f"{target}: --{exc}") from None
