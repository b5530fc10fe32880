"""Training throughput measured by a GPU check (real/gpu_check/training.py) beside its references:
the GRPO update's tokens/s beside the measured database's forward cost of the same model (our
step: a no-grad log-prob pass and a forward+backward, GRPO_FORWARDS forwards per token), and
spot training's samples/s beside the TLT paper's (traces/published/tlt-paper.yaml) and the
profile's drafter training rate. workbench/calibrate/gpu_check/comparison.py gathers them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import yaml

from workbench.calibrate.database.aiconfigurator import Engine
from workbench.calibrate.published.microbenchmarks import PUBLISHED
from workbench.contracts.profile import Profile

# Our GRPO step per token: the no-grad log-prob pass (1) and a forward+backward (3).
GRPO_FORWARDS = 4
# The database's training forward is asked at this packed length (as measure_grid in
# database/aiconfigurator.py asks it).
TRAIN_TOKENS = 4096


@dataclass(frozen=True)
class ThroughputRow:
    what: str
    unit: str
    measured: float
    reference: float  # NaN: nothing to compare with
    reference_is: str

    @property
    def ratio(self) -> float:
        return (
            self.measured / self.reference
            if self.reference and math.isfinite(self.reference)
            else math.nan
        )


# The packed paths a check may time besides "packed" (real/gpu_check/training.py): the packed
# attention pinned to one backend of real/span_attention.py.
OTHER_PACKED = {
    "packed_per_span": "packed, attention per sequence without cuDNN",
    "packed_sdpa_default": "packed, attention per sequence, torch's default kernel",
}


def _other_packed(sec: dict, base: str, name: str, reference: float, reference_is: str
                  ) -> list[ThroughputRow]:
    """The other packed paths' ratios to path `base`, beside the same reference as packed's."""
    ratios = sec.get(f"ratio_to_{base}") or {}
    return [
        ThroughputRow(f"{name} {words} / {base}", "x", float(ratios[p]), reference, reference_is)
        for p, words in OTHER_PACKED.items()
        if ratios.get(p)
    ]


def paper_spot_trainer() -> dict:
    """The TLT paper's spot-trainer throughput (traces/published/tlt-paper.yaml)."""
    return yaml.safe_load(PUBLISHED.read_text(encoding="utf-8"))["spot_trainer"]


def grpo_rows(sec: dict, spec: str, gpu: str, framework: str) -> list[ThroughputRow]:
    """A GRPO section's tokens/s beside the database's forward cost of its model (`spec`: what
    the database reads for it) on `gpu`, and its packed/padded ratio beside its padding."""
    rows = []
    try:
        eng = Engine(spec, gpu, 1, framework)
        fwd = eng.train_forward(eng.full, TRAIN_TOKENS)[0] / TRAIN_TOKENS
        predicted, label = (
            1.0 / (GRPO_FORWARDS * fwd),
            f"database, {GRPO_FORWARDS} forwards/token on {gpu}",
        )
    except (ValueError, KeyError, RuntimeError) as exc:  # no database rows for this shape
        predicted, label = math.nan, f"no database rows ({str(exc)[:80]})"
    for path_ in ("packed", "padded"):
        if sec.get(f"{path_}_tokens_per_s"):
            rows.append(
                ThroughputRow(
                    f"GRPO update {path_}, {sec['model']} ({sec['tokens']} tokens)",
                    "tokens/s",
                    float(sec[f"{path_}_tokens_per_s"]),
                    predicted,
                    label,
                )
            )
    if sec.get("speedup"):
        rows.append(
            ThroughputRow(
                f"GRPO packed / padded, {sec['model']}",
                "x",
                float(sec["speedup"]),
                sec["padded_tokens"] / sec["tokens"],
                "padded tokens / real tokens",
            )
        )
    return rows + _other_packed(
        sec, "padded", f"GRPO, {sec['model']}:", sec["padded_tokens"] / sec["tokens"],
        "padded tokens / real tokens",
    )


def drafter_rows(sec: dict, profile: Profile | None) -> list[ThroughputRow]:
    """A spot-training section's samples/s beside the paper's, and its tokens/s beside the
    profile's drafter training rate (`profile`: the target's database profile, if compared)."""
    paper = paper_spot_trainer()
    rows = []
    for path_, key in (("plain", "plain_samples_per_s"), ("packed", "packed_samples_per_s")):
        if sec.get(key):
            rows.append(
                ThroughputRow(
                    f"drafter spot training {path_}, {sec['target']} hidden {sec['hidden']}",
                    "samples/s",
                    float(sec[key]),
                    float(paper[key]),
                    "TLT paper",
                )
            )
    if sec.get("speedup"):
        rows.append(
            ThroughputRow(
                "drafter packed / plain",
                "x",
                float(sec["speedup"]),
                paper["packed_samples_per_s"] / paper["plain_samples_per_s"],
                "TLT paper",
            )
        )
    rows += _other_packed(
        sec, "plain", "drafter", paper["packed_samples_per_s"] / paper["plain_samples_per_s"],
        "TLT paper (packed / plain)",
    )
    if sec.get("packed_tokens_per_s") and profile is not None:
        rows.append(
            ThroughputRow(
                f"drafter training tokens/s (packed), {sec['target']}",
                "tokens/s",
                float(sec["packed_tokens_per_s"]),
                profile.learning.train_tokens_per_s,
                f"profile {profile.name}: learning.train_tokens_per_s",
            )
        )
    return rows
