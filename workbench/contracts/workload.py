"""Workload: the RL job whose rollouts are simulated (cluster shape, batch, length model)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from workbench.contracts.agentic import AgenticModel
from workbench.contracts.schema import (
    OMIT_DEFAULT,
    RenameNotice,
    check_part,
    load,
    preset_names,
    require,
)

PRESET_DIR = Path(__file__).parent / "presets" / "workloads"
# The response cap a workload may have, in tokens: shorter caps leave the length models nothing to
# fit (and `tlt train`'s probe no decoding step to price); longer ones no engine serves.
RESPONSE_CAP = (16, 1_048_576)


@dataclass(frozen=True)
class LengthModel:
    """Response lengths: a lognormal body, right-censored at the cap.

    log(length) = mu_t + prompt effect + sample noise (+ log(wrong_factor) if wrong).
    The prompt effect is shared by a prompt's group, which is what correlates
    lengths within a group; each prompt has its own accuracy, and wrong answers
    run longer. mu_t is solved so that a share `clip_ratio` of responses hits the
    cap at step 0 (veRL's response_length/clip_ratio), then drifts by
    `drift_per_step` in log space per RL step (lengths grow as RL goes on).
    With `median_tokens` > 0 that median is given instead (a fit to real lengths) and
    `clip_ratio` only records the share at the cap the model implies.

    `kind` picks where lengths come from: `lognormal` (the model above); `replay` (the
    observed groups in `data`, a Parquet file written by `tlt workload import`: step s of
    seed 0 is observed generation batch s exactly, other steps and seeds resample whole
    groups of an observed batch); `empirical` (whole groups drawn from all observed
    batches pooled, no step structure).
    """

    clip_ratio: float = 0.03
    sigma: float = 0.9  # total log-sd of the body (prompt effect and sample noise together)
    group_correlation: float = 0.5  # share of the body's log-variance shared within a group
    mean_accuracy: float = 0.5  # mean share of correct answers
    # Beta(a, b) with a + b = this; small = prompts either easy or hard
    accuracy_concentration: float = 2.0
    wrong_factor: float = 1.6  # wrong answers are this many times longer, in median
    drift_per_step: float = 0.0
    kind: Literal["lognormal", "replay", "empirical"] = "lognormal"
    # replay, empirical: the observed groups (Parquet; a relative path is read next to the workload
    # file)
    data: str = ""
    # > 0: median of correct answers at step 0 (clip_ratio is then what it implies)
    median_tokens: float = 0.0

    def check(self) -> None:
        require(self.kind == "lognormal" or bool(self.data.strip()), "data", self.data,
                "the path of the observed lengths (Parquet from `tlt workload import`) for kind "
                f"'{self.kind}'")
        require(self.median_tokens >= 0.0, "median_tokens", self.median_tokens,
                "a number of tokens >= 0 (0: solved from clip_ratio)")
        if self.median_tokens > 0:
            require(0.0 <= self.clip_ratio < 0.5, "clip_ratio", self.clip_ratio,
                    "a share from 0 to 0.5")
        else:
            require(0.0 < self.clip_ratio < 0.5, "clip_ratio", self.clip_ratio,
                    "a share between 0 and 0.5")
        require(0.05 <= self.sigma <= 3.0, "sigma", self.sigma, "a log-sd from 0.05 to 3")
        require(0.0 <= self.group_correlation < 1.0, "group_correlation", self.group_correlation,
                "a number in [0, 1)")
        require(0.0 < self.mean_accuracy < 1.0, "mean_accuracy", self.mean_accuracy,
                "a share between 0 and 1")
        require(self.accuracy_concentration > 0.0, "accuracy_concentration",
                self.accuracy_concentration, "a number > 0")
        require(self.wrong_factor >= 1.0, "wrong_factor", self.wrong_factor, "a number >= 1")
        require(abs(self.drift_per_step) <= 0.5, "drift_per_step", self.drift_per_step,
                "a number from -0.5 to 0.5")


@dataclass(frozen=True)
class DynamicSampling:
    """DAPO's dynamic sampling: each generation round launches ceil(prompts_per_step x oversample)
    groups; groups whose rewards are all equal (all right or all wrong) are dropped; rounds go on
    until `prompts_per_step` groups are kept (or `max_rounds` ran), and the update trains on the
    first `prompts_per_step` kept. The rollout pays for every group generated."""

    enabled: bool = False
    oversample: float = 1.0  # veRL: gen_batch_size / train_batch_size
    max_rounds: int = 10  # veRL: max_num_gen_batches (the update takes what it has after that many)

    def check(self) -> None:
        require(1.0 <= self.oversample <= 100.0, "oversample", self.oversample,
                "a factor from 1 to 100")
        require(self.max_rounds >= 1, "max_rounds", self.max_rounds, "an integer >= 1")


@dataclass(frozen=True)
class Workload:
    name: str
    profile: str  # a Profile preset name or a path (relative paths: to the workload file)
    workers: int  # rollout engines (data-parallel replicas)
    prompts_per_step: int
    group_size: int  # samples per prompt (GRPO's n)
    max_response_tokens: int  # the cap
    description: str = ""
    source: str = ""  # where the numbers come from
    gpus_per_worker: int = 1  # tensor parallelism of one engine
    prompt_tokens: int = 512
    max_batch: int = 256  # most sequences an engine decodes at once (vLLM max_num_seqs)
    steps: int = 3
    # RL steps per pass over the prompt set (0: no prompt comes back within the run)
    epoch_steps: int = 0
    lengths: LengthModel = field(default_factory=LengthModel)
    dynamic_sampling: DynamicSampling = field(default_factory=DynamicSampling)
    # The cluster beyond TP (gpus_per_worker): "" takes the profile's; set, it must match the
    # profile's (workbench/contracts/cluster.py refuses a contradiction, naming the field).
    model: str = ""  # architecture name, e.g. qwen2.5-7b
    gpu: str = ""  # GPU key, e.g. h100
    framework: str = ""  # vllm or sglang
    # Multi-turn rollouts with tool calls (workbench/contracts/agentic.py); written to a file only
    # when enabled, so a single-turn workload's file is what it always was.
    agentic: AgenticModel = field(default_factory=AgenticModel, metadata=OMIT_DEFAULT)

    def check(self) -> None:
        require(bool(self.name.strip()), "name", self.name, "a non-empty name")
        require(self.workers >= 1, "workers", self.workers, "an integer >= 1")
        require(self.gpus_per_worker >= 1, "gpus_per_worker", self.gpus_per_worker,
                "an integer >= 1")
        require(self.prompts_per_step >= 1, "prompts_per_step", self.prompts_per_step,
                "an integer >= 1")
        require(self.group_size >= 1, "group_size", self.group_size, "an integer >= 1")
        lo, hi = RESPONSE_CAP
        require(lo <= self.max_response_tokens <= hi, "max_response_tokens",
                self.max_response_tokens, f"an integer from {lo} to {hi}")
        require(self.prompt_tokens >= 1, "prompt_tokens", self.prompt_tokens, "an integer >= 1")
        require(self.max_batch >= 1, "max_batch", self.max_batch, "an integer >= 1")
        require(self.steps >= 1, "steps", self.steps, "an integer >= 1")
        require(self.epoch_steps >= 0, "epoch_steps", self.epoch_steps, "an integer >= 0")
        check_part("lengths", self.lengths)
        check_part("dynamic_sampling", self.dynamic_sampling)
        check_part("agentic", self.agentic)

    @property
    def sequences_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


# Presets renamed for what they are: the old name still loads, with a notice (PresetRenamed).
RENAMED = {"paper-7b-8gpu": "fastrl-example-7b-8gpu",
           "paper-32b-128gpu": "fastrl-example-32b-128gpu"}


class PresetRenamed(RenameNotice):
    """A workload preset asked for by its old name."""


def load_workload(name_or_path: str | Path) -> Workload:
    key = str(name_or_path)
    if key in RENAMED and not Path(key).exists():
        new = RENAMED[key]
        warnings.warn(f"workload preset '{key}' is now '{new}' (FastRL's example shape with "
                      f"hand-set lengths, not the paper's measurements); loading '{new}'",
                      PresetRenamed, stacklevel=2)
        name_or_path = RENAMED[key]
    wl = load(Workload, name_or_path, PRESET_DIR)
    path = Path(name_or_path)
    # A profile named by a relative path is read next to the workload file, not the cwd.
    profile_file = Path(wl.profile)
    if (path.is_file() and profile_file.suffix in (".yaml", ".yml", ".json")
            and not profile_file.is_absolute()):
        wl = replace(wl, profile=str(path.parent / wl.profile))
    # So are the observed lengths and turns; a preset's lie beside the preset.
    home = path.parent if path.is_file() else PRESET_DIR
    data = Path(wl.lengths.data)
    if wl.lengths.data and not data.is_absolute():
        wl = replace(wl, lengths=replace(wl.lengths, data=str(home / data)))
    turns = Path(wl.agentic.data)
    if wl.agentic.data and not turns.is_absolute():
        wl = replace(wl, agentic=replace(wl.agentic, data=str(home / turns)))
    return wl


def workload_presets() -> list[str]:
    return preset_names(PRESET_DIR)
