"""Cluster: the engine shape a profile describes (model x GPU x TP x framework).

A Profile's costs hold for one model on one GPU type at one tensor-parallel degree under one
engine; simulating a workload of another shape with it answers a question about another
cluster (`workbench.contracts.cluster_check.check_workload_profile` refuses such a pair).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.contracts.schema import require

FRAMEWORKS = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class Cluster:
    """What a profile's costs were derived for."""

    # architecture name (a preset of presets/architectures/, or a config.json's directory name)
    model: str
    # GPU key (h100, h200, b200, a100, l40s, ...: workbench/calibrate/database/profile.py lists
    # them)
    gpu: str
    tp: int  # tensor-parallel degree of one engine (a workload's gpus_per_worker)
    framework: str = ""  # vllm, sglang or trtllm ("": not stated)
    framework_version: str = ""  # the engine version the costs were measured on ("": not stated)
    # A mixture-of-experts model's expert-parallel degree inside the engine's TP GPUs: each GPU
    # holds count/ep experts, each split over tp/ep GPUs (1: experts tensor-parallel, the vLLM and
    # SGLang default; also 1 for a dense model).
    ep: int = 1

    def check(self) -> None:
        require(bool(self.model.strip()), "model", self.model, "a non-empty architecture name")
        require(bool(self.gpu.strip()), "gpu", self.gpu, "a non-empty GPU key (h100, a100, ...)")
        require(self.tp >= 1, "tp", self.tp, "an integer >= 1")
        require(self.framework in ("",) + FRAMEWORKS, "framework", self.framework,
                "one of " + ", ".join(FRAMEWORKS))
        require(self.ep >= 1 and self.tp % self.ep == 0, "ep", self.ep,
                f"an expert-parallel degree that divides tp ({self.tp})")

    @property
    def label(self) -> str:
        fw = f" {self.framework}" + (f" {self.framework_version}" if self.framework_version else "")
        ep = f" EP{self.ep}" if self.ep > 1 else ""
        return f"{self.model} on {self.tp}x {self.gpu}{ep}{fw if self.framework else ''}"
