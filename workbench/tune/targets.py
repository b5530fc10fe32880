"""Where a tuned policy will run: the target stack, and what its search space may hold.

A tuned policy is only worth what its user can run. Each target holds exactly what that stack
runs as `tlt export --to TARGET` writes it (workbench/deploy/export.py), so the tuned policy exports
without a refusal and without an approximation, and the simulated gain is the deployed one:

On a serving stack an EAGLE drafter is the checkpoint it is given (`tlt export --drafter`), trained
before RL: there the space's EAGLE drafter is warm-started (its offline training is not charged).

- `vllm`: `vllm serve` (and veRL's vLLM rollout, `verl`): a fixed table of chain draft lengths
  per batch bucket (`num_speculative_tokens_per_batch_size`), none / n-gram / EAGLE drafts; no
  bandit (vLLM's table does not learn), no spot training, no n-gram fallback, SD back on at once
  below the threshold (`sd_warmup_steps` 0);
- `sglang`: FastRL's SGLang: EAGLE chains or trees per bucket, fewer verified tokens at larger
  batches (its MAB's rule), spot training (FastRL's trainer), SD back on after FastRL's 10 decode
  steps; no n-gram (SGLang's n-gram worker has no threshold), no fallback, no learning bandit;
- `verl`: as `vllm` (the chains veRL passes to vLLM verbatim);
- `tlt-train`: this project's real backend (`tlt train`, vLLM with the bandits and spot training):
  chains, none / n-gram / EAGLE, any bandit (`real.rollout.spec_config.refuse_unrunnable`);
- `sim`: anything the simulator runs losslessly (EAGLE trees with any bandit's buckets, suffix
  drafts): a question about the model, not a deployable answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.contracts.profile import Profile
from workbench.contracts.provenance import provenance_kind
from workbench.contracts.workload import Workload
from workbench.contracts.policy import DrafterKind
from workbench.deploy.sglang import FASTRL_WARMUP_CHECKS

ALGORITHMS = ("fixed", "beg", "ucb1", "egreedy")


@dataclass(frozen=True)
class TargetSpace:
    """What a target's policies may use."""

    label: str
    drafters: tuple[DrafterKind, ...]
    algorithms: tuple[str, ...]
    trees: bool  # EAGLE trees in a fixed table's buckets
    spot_training: bool  # spot training of the EAGLE drafter
    fallback: bool  # the switch to n-gram drafts while the learned drafter is worse
    warmup: int | None  # sd_warmup_steps fixed to this (None: the Policy's default)
    falling: bool  # verified tokens fall strictly from bucket to bucket (FastRL's MAB)
    # An EAGLE drafter warm-started: True on a serving stack, which runs the checkpoint it is given
    # (trained before RL); None: only where the user allows it (`allow_warm_start`).
    warm: bool | None = None
    edges: tuple[int, ...] = ()  # bucket edges tried besides the powers of two (FastRL's own)


_CHAINS = TargetSpace(
    "vLLM",
    (DrafterKind.NONE, DrafterKind.NGRAM, DrafterKind.EAGLE),
    ("fixed",),
    trees=False,
    spot_training=False,
    fallback=False,
    warmup=0,
    falling=False,
    warm=True,
)
FASTRL_EDGES = (
    4,
    20,
)  # FastRL's default buckets: 1, 2-4, 5-20, 21-bs_threshold (the `tlt` preset's)
SPACES = {
    "vllm": _CHAINS,
    "sglang": TargetSpace(
        "SGLang / FastRL",
        (DrafterKind.NONE, DrafterKind.EAGLE),
        ("fixed",),
        trees=True,
        spot_training=True,
        fallback=False,
        warmup=FASTRL_WARMUP_CHECKS,
        falling=True,
        warm=True,
        edges=FASTRL_EDGES,
    ),
    "verl": TargetSpace(
        "veRL (vLLM rollout)",
        _CHAINS.drafters,
        _CHAINS.algorithms,
        trees=False,
        spot_training=False,
        fallback=False,
        warmup=0,
        falling=False,
        warm=True,
    ),
    "tlt-train": TargetSpace(
        "tlt train (this project's vLLM backend)",
        (DrafterKind.NONE, DrafterKind.NGRAM, DrafterKind.EAGLE),
        ALGORITHMS,
        trees=False,
        spot_training=True,
        fallback=True,
        warmup=None,
        falling=False,
    ),
    "sim": TargetSpace(
        "simulator only (anything goes)",
        (DrafterKind.NONE, DrafterKind.NGRAM, DrafterKind.EAGLE, DrafterKind.SUFFIX),
        ALGORITHMS,
        trees=True,
        spot_training=True,
        fallback=True,
        warmup=None,
        falling=False,
    ),
}
TARGETS = tuple(SPACES)
EXPORTS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "verl": "verl",
}  # the targets `tlt export --to` writes a file for
# The former `--backend` names.
LEGACY = {"real": "tlt-train", "sim": "sim"}


def check_target(target: str) -> None:
    if target not in SPACES:
        raise ValueError(f"target {target!r}: allowed: {', '.join(TARGETS)}")


def default_target(profile: Profile, workload: Workload | None = None) -> str:
    """`tlt-train` for a profile calibrated on traces of real runs (a machine the real backend ran
    on); else the engine the workload or profile names (SGLang -> `sglang`, vLLM -> `vllm`);
    `sim` where neither says."""
    if provenance_kind(profile) == "calibrated":
        return "tlt-train"
    framework = (workload.framework if workload is not None else "") or (
        profile.cluster.framework if profile.cluster else ""
    )
    return {"sglang": "sglang", "vllm": "vllm"}.get(framework, "sim")
