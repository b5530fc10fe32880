"""Each run-level factor's declared prior, from what the run's engine is (its log's config).

A factor's prior is log-normal: a median and a log-sd; its declared range is the median x/÷
exp(RANGE_SDS x log-sd), and the fit stays inside it (workbench/runlog/fit.py). The medians say
what each cost is where the engine's config says it happens:

- decode_speed: the run's per-token GPU time over the measured database's, for the GPU named
  (--gpu), this model and TP: the same kernels, so 1, give or take the engine's version and eager
  kernels (log-sd 0.35: x/÷ 2.4 at the range's ends).
- step_overhead_s: a fixed host cost per engine step (kernel launches, the scheduler, sampling on
  the host). Eager mode (enforce_eager) launches every kernel from Python: 0.5 ms per decoder
  layer; with CUDA graphs one replay per step: 2 ms. Log-sd 0.6; where the log does not say which,
  the geometric mean of the two, log-sd 0.9.
- rl_step_s: the fixed cost per RL step inside veRL's rollout timer, as the parts the config says
  happen: the weight sync into the engine (1.5 s of calls plus the parameters' bytes at 10 GB/s;
  left out where the log times the sync on its own, `update_weights`, as slime, NeMo-RL, SkyRL,
  OpenRLHF, AReaL, ROLL and newer veRL do: that phase prices it, workbench/runlog/phases.py),
  the KV cache freed and allocated again when free_cache_engine (1.5 s), CUDA graphs captured
  again when not eager (3 s), and dispatching the batch (1 s); with `layered_summon` the FSDP
  weights are gathered and loaded layer by layer (SUMMON_S_PER_LAYER a layer more); the
  `load_format` is said. Log-sd 0.6.

The training factors price the phases outside the rollout (workbench/runlog/phases.py's BASES),
from the run's training shape:

- train_speed: the phases' kernels over the database's (the same kernels, FSDP's and veRL's work
  between them): 1.5, log-sd 0.5;
- launch_s: a micro-batch's fixed cost per decoder layer and forward: an eager PyTorch forward
  launches each layer's kernels from Python, and FSDP's hooks unshard and reshard each wrapped
  layer: LAUNCH_S_PER_LAYER, log-sd 0.7. A backward counts as its forwards;
- gather_s_per_gb: FSDP's all-gather of a model's bf16 weights from the other ranks, for every
  micro-batch's forward (an update's micro-batch gathers again for its backward and
  reduce-scatters its fp32 gradients: veRL accumulates them without FSDP's no_sync), at
  GATHER_BYTES_PER_S (NVLink's ring, its share for each rank), log-sd 0.8 (DeepSpeed's ZeRO-3
  likewise); Megatron and ZeRO-1/2 keep their weights whole and gather nothing;
- offload_s_per_gb: the host link, as veRL moves tensors to and from the host (PCIe: pageable
  copies a few GB/s, pinned ones on Gen5 x16 up to ~55 GB/s): 1 / HOST_BYTES_PER_S, log-sd 0.8;
- phase_s: a phase's fixed cost (the batch dispatched to the workers and gathered back through
  Ray, the cache emptied): PHASE_S, log-sd 1.0;
- reward_s: scoring one response (detokenised, a rule-based reward in Python): REWARD_S, log-sd 1.

An engine profile measured on the user's GPU (`--engine-profile`: a Profile whose `decode` was
fitted to a sweep of the same engine, `tlt engine-sweep`) replaces the decode-speed prior by its
own per-token time over the database's (log-sd 0.1) and, when it ran in the run's eager mode, the
per-step prior by its own per-step cost (log-sd 0.3): `engine_profile_priors`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from sim.costs import verify_step_s
from workbench.contracts.architecture import load_architecture
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.training_shape import TrainingShape
from workbench.runlog.engine_config import EngineConfig
from workbench.runlog.shape import RunShape

RANGE_SDS = 2.5
EAGER_S_PER_LAYER = 5e-4
GRAPHS_STEP_S = 2e-3
SYNC_CALLS_S, SYNC_BYTES_PER_S = 1.5, 10e9
REALLOC_S, CAPTURE_S, DISPATCH_S = 1.5, 3.0, 1.0
SUMMON_S_PER_LAYER = 0.01
LAUNCH_S_PER_LAYER = 8e-4
GATHER_BYTES_PER_S = 100e9
HOST_BYTES_PER_S = 12e9
PHASE_S = 0.2
REWARD_S = 2e-4
ROLLOUT_FACTORS = ("decode_speed", "step_overhead_s", "rl_step_s")
TRAIN_FACTORS = ("train_speed", "launch_s", "gather_s_per_gb", "offload_s_per_gb", "phase_s",
                 "reward_s")
# RunFactors' four first (contracts/profile.py), then `extra`'s
FACTORS = ROLLOUT_FACTORS + TRAIN_FACTORS
ROLLOUT = np.array([FACTORS.index(n) for n in ROLLOUT_FACTORS])
TRAIN = np.array([FACTORS.index(n) for n in TRAIN_FACTORS])


@dataclass(frozen=True)
class FactorPrior:
    name: str
    median: float
    log_sd: float
    why: str  # what the engine is that gives the median

    @property
    def lower(self) -> float:
        return self.median * math.exp(-RANGE_SDS * self.log_sd)

    @property
    def upper(self) -> float:
        return self.median * math.exp(RANGE_SDS * self.log_sd)


@dataclass(frozen=True)
class RunPriors:
    """One run's priors, FACTORS' order."""

    factors: tuple[FactorPrior, ...]

    def __getitem__(self, name: str) -> FactorPrior:
        return next(f for f in self.factors if f.name == name)

    @property
    def medians(self) -> np.ndarray:
        return np.array([f.median for f in self.factors])

    @property
    def log_sds(self) -> np.ndarray:
        return np.array([f.log_sd for f in self.factors])


def _step_overhead(engine: EngineConfig, layers: int) -> FactorPrior:
    eager = engine.enforce_eager
    if eager is None:
        med = math.sqrt(EAGER_S_PER_LAYER * layers * GRAPHS_STEP_S)
        return FactorPrior("step_overhead_s", med, 0.9, "eager mode not in the log: between "
                           f"eager ({1e3 * EAGER_S_PER_LAYER:.1f} ms x {layers} layers) and CUDA "
                           f"graphs ({1e3 * GRAPHS_STEP_S:.0f} ms)")
    if eager:
        return FactorPrior("step_overhead_s", EAGER_S_PER_LAYER * layers, 0.6,
                           f"enforce_eager: {1e3 * EAGER_S_PER_LAYER:.1f} ms of launches x "
                           f"{layers} layers")
    return FactorPrior("step_overhead_s", GRAPHS_STEP_S, 0.6, "CUDA graphs (not eager): one "
                       "replay and the scheduler per step")


def _rl_step(engine: EngineConfig, param_bytes: float, layers: int,
             sync_apart: bool = False) -> FactorPrior:
    sync = SYNC_CALLS_S + param_bytes / SYNC_BYTES_PER_S
    parts = [f"weight sync {sync:.1f} s ({param_bytes / 1e9:.1f} GB at "
             f"{SYNC_BYTES_PER_S / 1e9:.0f} GB/s + {SYNC_CALLS_S} s"
             + (f", as {engine.value('load_format')}" if engine.value("load_format") else "")
             + ")"]
    if sync_apart:  # the log times it on its own: its phase prices it, not the rollout's timer
        sync, parts = 0.0, ["no weight sync (the log times it apart: update_weights)"]
    if engine.value("layered_summon") is True and not sync_apart:
        sync += SUMMON_S_PER_LAYER * layers
        parts.append(f"layered_summon: a gather and a load per layer, {SUMMON_S_PER_LAYER} s x "
                     f"{layers}")
    total = sync + DISPATCH_S
    if engine.free_cache_engine is not False:
        total += REALLOC_S
        parts.append(f"KV cache re-allocated {REALLOC_S} s" + (
            "" if engine.free_cache_engine else " (free_cache_engine not in the log: veRL's "
            "default, True)"))
    if engine.enforce_eager is False and engine.free_cache_engine is not False:
        total += CAPTURE_S
        parts.append(f"CUDA graphs captured again {CAPTURE_S} s")
    parts.append(f"dispatch {DISPATCH_S} s")
    return FactorPrior("rl_step_s", total, 0.6, " + ".join(parts))


def training_priors(t: TrainingShape) -> tuple[FactorPrior, ...]:
    """TRAIN_FACTORS' priors for a run of this training shape (module docstring)."""
    gathers = t.gathers
    return (
        FactorPrior("train_speed", 1.5, 0.5, "the phases' kernels below the database's (FSDP's "
                    "and veRL's work between them)"),
        FactorPrior("launch_s", LAUNCH_S_PER_LAYER, 0.7, "an eager, FSDP-wrapped layer's "
                    "launches and hooks per micro-batch forward"),
        FactorPrior("gather_s_per_gb", 1e9 / GATHER_BYTES_PER_S, 0.8,
                    f"FSDP's all-gather at {GATHER_BYTES_PER_S / 1e9:.0f} GB/s" if gathers else
                    "nothing gathered (one rank, Megatron or ZeRO-2): its prior only"),
        FactorPrior("offload_s_per_gb", 1.0 / (HOST_BYTES_PER_S / 1e9), 0.8,
                    f"the host link (PCIe) at {HOST_BYTES_PER_S / 1e9:.0f} GB/s"),
        FactorPrior("phase_s", PHASE_S, 1.0, "the batch dispatched and gathered through Ray, "
                    "the cache emptied"),
        FactorPrior("reward_s", REWARD_S, 1.0, "a rule-based score in Python per response"),
    )


def run_priors(shape: RunShape, engine: EngineConfig, training: TrainingShape,
               sync_apart: bool = False) -> RunPriors:
    """The priors of a run of this shape on this engine, training so (module docstring), in
    FACTORS' order; `sync_apart`: the log times the weight sync on its own (update_weights)."""
    arch = load_architecture(shape.arch)
    given = (
        FactorPrior("decode_speed", 1.0, 0.35, f"the measured database's kernels for {shape.gpu} "
                    f"TP{shape.tp} (--gpu names the GPU)"),
        _step_overhead(engine, arch.layers),
        _rl_step(engine, 2.0 * arch.params, arch.layers, sync_apart),
    ) + training_priors(training)
    return RunPriors(tuple(next(f for f in given if f.name == n) for n in FACTORS))


def engine_profile_priors(priors: RunPriors, measured: Profile, database: Profile,
                          shape: RunShape, engine: EngineConfig, context: float) -> RunPriors:
    """The priors a measured engine profile tightens (module docstring). What it reads of the
    profile: `cluster` (its GPU, model and TP must be the run's), `decode` (the per-token costs
    and the per-step `overhead_s`) and, where the profile records the engine it measured
    (`engine.graphs`), whether that engine ran eager as the run did."""
    c = measured.cluster
    if c is not None:
        for field, want in (("gpu", shape.gpu), ("tp", shape.tp)):
            if getattr(c, field) != want:
                raise ConfigError(measured.name, f"cluster.{field}", getattr(c, field),
                                  f"{want}, the run's (an engine profile of the run's GPU and TP)")
    batches = [b for b in (1, 8, 32, 128, 512) if b <= max(1, shape.max_batch)]
    ratios = [(verify_step_s(measured.decode, b, context, 0) - measured.decode.overhead_s)
              / max(1e-12, verify_step_s(database.decode, b, context, 0)
                    - database.decode.overhead_s) for b in batches]
    speed = float(np.exp(np.mean(np.log(np.maximum(ratios, 1e-6)))))
    out = [replace(priors["decode_speed"], median=speed, log_sd=0.1,
                   why=f"the engine profile {measured.name}: its per-token time over the "
                       f"database's at batches {batches[0]}-{batches[-1]}")]
    sweep = measured.engine  # `tlt engine-sweep`'s record of the engine it measured
    same_mode = sweep is not None and engine.enforce_eager is not None and (
        sweep.graphs == (not engine.enforce_eager))
    step = priors["step_overhead_s"]
    if same_mode and measured.decode.overhead_s > 0:
        step = replace(step, median=measured.decode.overhead_s, log_sd=0.3,
                       why=f"the engine profile {measured.name}: its per-step cost, measured in "
                           "the run's eager mode")
    return RunPriors((out[0], step) + priors.factors[2:])
