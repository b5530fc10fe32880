"""`tlt train`'s settings: `RunConfig`, its checks (`TrainError` names the option and the fix),
and the warm-start drafter a run on the shipped reference model gets by default."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from real.drafter.layout import EAGLE3, DrafterError
from real.drafter.resolve import DrafterRef, check_trainable, resolve_drafter
from real.rollout.spec_config import EngineConfigError, refuse_unrunnable
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.task import Task
from workbench.contracts.workload import RESPONSE_CAP


class TrainError(ValueError):
    """A `tlt train` input that cannot run (names the option and the fix)."""


@dataclass
class RunConfig:
    model: Path
    policy: Policy
    out: Path
    steps: int = 20
    workers: int = 2
    seed: int = 0
    prompts: int = 16  # prompts per RL step
    samples: int = 4  # group size G
    max_tokens: int = 1024
    temperature: float = 1.0
    mix: str = "default"
    # warm-start drafter (policies with drafter.warm_start): an EAGLE or EAGLE-3 head's directory,
    # ours or a public one (a hub id resolved to the cache's directory: real/hub_cache.py)
    drafter: Path | None = None
    lr: float = 2e-5  # GRPO
    kl_coef: float = 0.0
    max_num_seqs: int = 64
    max_model_len: int = 2048
    address: str | None = None  # Ray cluster to join; None: a local Ray
    checkpoint_every: int = 1
    # Per drafter kind, the draft length each schedule row starts at (workbench/schedule.py's
    # prediction from a profile); a kind without one starts at the policy's schedule.
    start_tables: dict[str, tuple[int, ...]] = field(default_factory=dict)
    start_source: str = ""  # where start_tables came from (e.g. "profile cpu-tiny"), for the trace
    # a user's task (workbench/contracts/task.py); None: the GCD task under `mix`
    task: Task | None = None
    # where the GRPO update and the drafter's training run: "cpu" or "cuda" (bf16)
    device: str = "cpu"

    def check(self) -> None:
        if not (Path(self.model) / "config.json").is_file():
            raise TrainError(f"--model {self.model}: no config.json "
                             "(give a Hugging Face model directory)")
        try:
            refuse_unrunnable(self.policy)
        except EngineConfigError as exc:
            raise TrainError(f"--policy {self.policy.name}: {exc}") from None
        d = self.policy.drafter
        if d.kind == DrafterKind.EAGLE and d.warm_start and self.drafter is None:
            raise TrainError(f"--policy {self.policy.name}: drafter.warm_start needs --drafter DIR "
                             "(a checkpoint from `tlt drafter train`, e.g. "
                             "traces/reference/drafter; only the shipped models under "
                             "traces/reference/ have one), or a cold-starting policy such as "
                             "tlt-cold")
        if self.drafter is not None:
            self._check_drafter()
        for name, v, lo in (("steps", self.steps, 1), ("workers", self.workers, 1),
                            ("prompts", self.prompts, 1), ("samples", self.samples, 2),
                            ("seed", self.seed, 0)):
            if v < lo:
                why = " (GRPO needs a group)" if name == "samples" else ""
                raise TrainError(f"--{name} {v}: must be >= {lo}{why}")
        if self.max_tokens < RESPONSE_CAP[0]:
            raise TrainError(f"--max-tokens {self.max_tokens}: must be >= {RESPONSE_CAP[0]} (a "
                             "shorter cap leaves nothing to decode, nor to predict the run by)")
        if self.prompts < self.workers:
            raise TrainError(f"--prompts {self.prompts} < --workers {self.workers}: every worker "
                             "needs a prompt group")
        self._check_device()
        for kind, table in self.start_tables.items():
            drafts = kind in (DrafterKind.NGRAM, DrafterKind.EAGLE)
            if not drafts or len(table) != len(self.policy.schedule) or min(table, default=0) < 0:
                raise TrainError(f"start table {kind}: {list(table)}: one draft length >= 0 per "
                                 f"schedule row ({len(self.policy.schedule)}) of policy "
                                 f"'{self.policy.name}', for ngram or eagle")

    def drafter_ref(self) -> DrafterRef | None:
        """The warm-start drafter, resolved and checked against the model (None: none given)."""
        if self.drafter is None:
            return None
        try:
            return resolve_drafter(self.drafter, self.model, need_local=True)
        except DrafterError as exc:
            raise TrainError(f"--{exc}") from None

    def drafter_layers(self) -> tuple[int, ...]:
        """The target layers the drafter reads besides the final one (an EAGLE-3 head's): the
        update's forward keeps their states for spot training."""
        ref = self.drafter_ref() if self.policy.drafter.kind == DrafterKind.EAGLE else None
        return ref.aux_layers if ref is not None and ref.method == EAGLE3 else ()

    def _check_drafter(self) -> None:
        ref = self.drafter_ref()
        pol = self.policy
        if ref is None or pol.drafter.kind != DrafterKind.EAGLE:
            return
        if pol.spot_training.enabled or pol.drafter.ngram_fallback:
            import json

            cfg = json.loads((Path(self.model) / "config.json").read_text())
            layers = int((cfg.get("text_config") or cfg).get("num_hidden_layers", 0))
            try:
                check_trainable(ref, layers)
            except DrafterError as exc:
                raise TrainError(f"--{exc} (policy {pol.name} spot-trains or checks it)") from None

    def _check_device(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise TrainError(f"--device {self.device}: give cpu or cuda")
        if self.device == "cuda":
            from real.torch_utils import train_device

            try:
                train_device(self.device)
            except ValueError as exc:
                raise TrainError(str(exc)) from None


# The shipped models (traces/reference/model, traces/reference/styles/model) each have their
# drafter beside them, in `drafter/`.
SHIPPED = Path(__file__).resolve().parents[2] / "traces" / "reference"


def default_drafter(model: Path | str, policy: Policy, drafter: Path | None = None) -> Path | None:
    """The warm-start drafter to use: the one given, else a shipped model's own drafter for a
    warm-starting EAGLE policy on a shipped model (so `tlt train` and the app need no --drafter
    there)."""
    if drafter is None and policy.drafter.kind == DrafterKind.EAGLE and policy.drafter.warm_start:
        m = Path(model).resolve()
        beside = m.parent / "drafter"
        shipped = m.name == "model" and m.parent.is_relative_to(SHIPPED)
        if shipped and (beside / "config.json").is_file():
            return beside
    return drafter


