"""Engine costs from a model's shape: carry a profile fitted on one (model, TP) to another.

A decode step reads every weight once (memory-bound), reads each sequence's KV cache, runs
FLOPs in proportion to the tokens it verifies, and with tensor parallelism (TP) waits for two
all-reduces per layer. So with `Architecture` (workbench/contracts/architecture.py) and a GPU's
datasheet figures, the cost model's parameters scale as:

    weights_s           = decode weights bytes / TP / (HBM bandwidth x hbm_efficiency)
    kv_s_per_token      = KV bytes per context token on one GPU / (HBM bandwidth x hbm_efficiency)
    compute_s_per_token = 2 x decode params / TP / (peak FLOP/s x verify_mfu)
    overhead_s          = launch_overhead_s + 2 x layers x allreduce_s (TP > 1)
    eagle_step_s        = drafter_launch_s + drafter weights bytes / TP / (bandwidth x efficiency)
                          (+ 2 all-reduces with TP: the drafter's one layer)
    eagle_s_per_seq     = 2 x drafter params / TP / (peak FLOP/s x drafter_mfu)

`EngineFactors` holds what the shape cannot give (efficiencies, launch overhead, all-reduce
latency); `fit_published` measures the fitted ones on published microbenchmarks, the rest are
stated assumptions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.contracts.architecture import Architecture
from workbench.contracts.profile import DecodeCost, DrafterCost


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_bytes_per_s: float  # peak memory bandwidth
    bf16_flops: float  # peak dense bf16 FLOP/s
    source: str


H100_SXM = GPU("H100 SXM", 3.35e12, 989.4e12,
               "NVIDIA H100 SXM datasheet: 3.35 TB/s HBM3, 989.4 TFLOP/s dense bf16")
# In no measured database: a profile is carried to it from the H100's by these ratios
# (workbench/validate/agentic_engine.py).
H20 = GPU("H20", 4.0e12, 148e12, "NVIDIA H20 datasheet: 4.0 TB/s HBM3 (96 GB), 148 TFLOP/s dense "
          "bf16")
DATASHEETS = {"h100": H100_SXM, "h20": H20}


@dataclass(frozen=True)
class EngineFactors:
    """An engine's efficiencies on a GPU: fitted where a measurement shows them, assumed where
    not."""

    # per decode step outside the weights' reading (scheduling, launches, sampling)
    launch_overhead_s: float
    verify_mfu: float  # achieved share of peak FLOP/s on the verify forward's tokens
    overlap: float  # DecodeCost.overlap: how much of the weight reading hides under compute
    # one drafter forward's fixed cost (launches, tree bookkeeping): no TP split
    drafter_launch_s: float
    drafter_mfu: float  # achieved share of peak FLOP/s per drafted candidate
    # assumed: achieved share of peak bandwidth when streaming weights/KV
    hbm_efficiency: float = 0.85
    # assumed: one decode-size all-reduce over NVLink (NCCL small message)
    allreduce_s: float = 15e-6
    per_seq_s: float = 1.5e-5  # assumed: the engine's CPU work per sequence per step
    dtype_bytes: int = 2  # bf16 weights and KV cache


def weights_s(arch: Architecture, gpu: GPU, tp: int, f: EngineFactors) -> float:
    return arch.decode_params * f.dtype_bytes / tp / (gpu.hbm_bytes_per_s * f.hbm_efficiency)


def kv_s_per_token(arch: Architecture, gpu: GPU, tp: int, f: EngineFactors) -> float:
    """KV heads split over the TP ranks (each rank keeps at least one: replicated beyond
    kv_heads)."""
    per_rank = math.ceil(arch.kv_heads / tp) if tp <= arch.kv_heads else 1
    per_token_bytes = arch.layers * 2 * per_rank * arch.head_dim * f.dtype_bytes
    return per_token_bytes / (gpu.hbm_bytes_per_s * f.hbm_efficiency)


def allreduce_overhead_s(arch: Architecture, tp: int, f: EngineFactors) -> float:
    return 0.0 if tp == 1 else 2 * arch.layers * f.allreduce_s


def compute_s_per_token(arch: Architecture, gpu: GPU, tp: int, mfu: float) -> float:
    return 2 * arch.decode_params / tp / (gpu.bf16_flops * mfu)


def drafter_read_s(arch: Architecture, gpu: GPU, tp: int, f: EngineFactors) -> float:
    return arch.drafter_params * f.dtype_bytes / tp / (gpu.hbm_bytes_per_s * f.hbm_efficiency)


def decode_cost(arch: Architecture, gpu: GPU, tp: int, f: EngineFactors) -> DecodeCost:
    compute = compute_s_per_token(arch, gpu, tp, f.verify_mfu)
    return DecodeCost(overhead_s=f.launch_overhead_s + allreduce_overhead_s(arch, tp, f),
                      per_seq_s=f.per_seq_s,
                      weights_s=weights_s(arch, gpu, tp, f), compute_s_per_token=compute,
                      kv_s_per_token=kv_s_per_token(arch, gpu, tp, f),
                      prefill_s_per_token=compute, overlap=f.overlap)


def drafter_cost(arch: Architecture, gpu: GPU, tp: int, f: EngineFactors,
                 ngram_s_per_seq: float) -> DrafterCost:
    step = (f.drafter_launch_s + drafter_read_s(arch, gpu, tp, f)
            + (2 * f.allreduce_s if tp > 1 else 0.0))
    per_seq = 2 * arch.drafter_params / tp / (gpu.bf16_flops * f.drafter_mfu)
    return DrafterCost(eagle_step_s=step, eagle_s_per_seq=per_seq, ngram_s_per_seq=ngram_s_per_seq)
