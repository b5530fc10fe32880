"""EngineIdentity: the real engine a profile's costs were measured on, and how well its fit held.

A profile fitted to an engine sweep (`tlt engine-sweep`, then `tlt calibrate SWEEP_DIR`) describes
one engine: one vLLM version on one device, at one tensor-parallel degree and dtype, with CUDA
graphs or eager. Whoever takes the profile as that engine's prior (the run-log calibration, the
app) must be able to say which engine it is and how far to trust it, so the profile records both
(`Profile.engine`; docs/formats.md, "Engine sweeps").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.contracts.schema import require


@dataclass(frozen=True)
class EngineIdentity:
    """What ran, and the fit's errors on the sweep's held-out cells."""

    framework: str  # "vllm"
    version: str  # the framework's version
    device: str  # the accelerator's name ("NVIDIA H100 80GB HBM3"), or the CPU's
    tp: int  # tensor-parallel degree
    dtype: str  # the weights' dtype as the engine ran them ("bfloat16", "float32")
    graphs: bool  # CUDA graphs captured (False: eager)
    model: str  # the target: a directory or a Hugging Face hub id
    method: str  # vLLM's speculative method ("ngram", "eagle", "eagle3", "draft_model", "mtp")
    drafter: str = ""  # the drafter: a directory or a hub id ("": none, n-gram or MTP heads)
    max_num_seqs: int = 0
    max_model_len: int = 0
    # The declared split (the batch sizes and draft lengths held out of the fit and predicted),
    # and the fit's and the base profile's median |error| on the held-out cells (None: no cell
    # was held out).
    held_out: str = ""
    base_profile: str = ""
    step_error_pct: float | None = None  # SD step time of the held-out cells
    speedup_error_pct: float | None = None  # SD speedup over the plain engine, held-out cells
    base_step_error_pct: float | None = None  # the base profile, same cells
    base_speedup_error_pct: float | None = None

    def check(self) -> None:
        require(bool(self.framework.strip()), "framework", self.framework, "a framework (vllm)")
        require(self.tp >= 1, "tp", self.tp, "an integer >= 1")
        require(bool(self.model.strip()), "model", self.model, "the target model's path or hub id")
        require(bool(self.method.strip()), "method", self.method, "vLLM's speculative method")
        for name in ("step_error_pct", "speedup_error_pct", "base_step_error_pct",
                     "base_speedup_error_pct"):
            v = getattr(self, name)
            require(v is None or (math.isfinite(v) and v >= 0), name, v,
                    "a percentage >= 0, or null")

    @property
    def label(self) -> str:
        """One line: framework, version, device, TP, dtype, graphs, method."""
        mode = "CUDA graphs" if self.graphs else "eager"
        return (f"{self.framework} {self.version} on {self.device}, TP{self.tp}, {self.dtype}, "
                f"{mode}, {self.method}")
