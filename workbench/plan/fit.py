"""Can an engine of a model run at a TP degree on a GPU: its weights (as the checkpoint stores
them: bf16, FP8, MXFP4 experts) and bf16 KV cache per GPU (against the GPU's memory in
aiconfigurator-core's system spec), and how long responses are on average (a full batch's KV
cache)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.lengths import log_median
from workbench.contracts.architecture import Architecture
from workbench.contracts.length_data import read_observed
from workbench.contracts.workload import Workload

KV_BYTES = 2  # bf16 KV cache, the engines' default


@dataclass(frozen=True)
class MemoryFit:
    """Does one engine's model fit at this TP: weights and KV cache per GPU, in bytes."""

    weights_per_gpu: float
    usable_per_gpu: float  # capacity less the runtime and NCCL reserves
    kv_tokens: int  # KV-cache tokens one engine holds in what is left
    reason: str  # "" when it fits


def memory_fit(arch: Architecture, spec: dict, tp: int, sequence_tokens: int) -> MemoryFit:
    """Weights split over TP (a mixture of experts' experts too, whatever its EP), KV heads split
    (or replicated past the KV-head count; MLA's latent vector whole on every GPU); what remains
    must hold one sequence of `sequence_tokens` (prompt + cap)."""
    if arch.heads % tp:
        return MemoryFit(0.0, 0.0, 0,
                         f"TP{tp} does not split the model's {arch.heads} attention heads")
    gpu, misc = spec["gpu"], spec.get("misc", {})
    nccl = (misc.get("nccl_mem") or {}).get(tp, 0) if tp > 1 else 0
    usable = float(gpu["mem_capacity"]) - float(misc.get("other_mem", 0)) - float(nccl)
    weights = arch.weight_bytes / tp
    kv_per_token = arch.kv_bytes_per_token(KV_BYTES, tp)  # per GPU
    free = usable - weights
    tokens = int(free // kv_per_token) if free > 0 else 0
    if tokens < sequence_tokens:
        if free <= 0:
            kind = "bf16 weights" if arch.quant == "bf16" else f"{arch.quant} weights"
            why = (f"the {kind} need {weights / 2**30:.1f} GiB per GPU at TP{tp}, "
                   f"{usable / 2**30:.1f} GiB usable")
        else:
            why = (f"after {weights / 2**30:.1f} GiB of weights per GPU at TP{tp} the KV cache "
                   f"holds {tokens:,} tokens, less than one {sequence_tokens:,}-token sequence")
        return MemoryFit(weights, usable, tokens, why)
    return MemoryFit(weights, usable, tokens, "")


def mean_response_tokens(wl: Workload, step: int) -> float:
    """Mean response length at `step` (the run's longest point when lengths grow), capped: a
    lognormal model's correct answers' median x exp(sigma^2 / 2), wrong ones `wrong_factor` times
    that; observed lengths (replay, empirical) their mean over every batch."""
    m, cap = wl.lengths, wl.max_response_tokens
    if m.kind != "lognormal":
        return min(float(cap), float(read_observed(m.data).length.mean()))
    correct = math.exp(log_median(m, cap, max(0, step)) + m.sigma ** 2 / 2)
    return min(float(cap),
               m.mean_accuracy * correct + (1 - m.mean_accuracy) * correct * m.wrong_factor)
