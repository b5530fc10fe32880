"""The run's engine and training: its measured-database profile, each RL step's work at the
database's costs, and each phase priced with the run-level factors.

Every step of the log is what the simulator would make of it (`sim.simulator.simulate`): the run's
engines (GPUs / TP) decode its modelled responses with continuous batching (at most `max_batch` at
once), then the phases outside the rollout. A baseline (no SD) rollout's schedule does not depend
on the costs: which responses decode together, for how many engine steps, at what context, is fixed
by the lengths and the batch cap. So each step's engine work is computed once at the database's
costs, in closed form (workbench/runlog/rollout_work.py; a test checks it against the simulator),
and the phases outside the rollout as their physical bases (workbench/runlog/phases.py); any
factors then price them exactly (`predict`), which is what lets the fit try many factors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from workbench.contracts.fileio import sig
from workbench.contracts.profile import Profile
from workbench.contracts.run_factors import RunFactors
from workbench.contracts.workload import Workload
from workbench.runlog.lengths import ModelledLengths
from workbench.runlog.phases import StepBases
from workbench.runlog.priors import ROLLOUT, TRAIN
from workbench.runlog.rollout_work import step_work
from workbench.runlog.shape import RunShape

PROGRESS_EVERY = 25  # steps between progress reports
DECODE_FIELDS = (
    "overhead_s",
    "per_seq_s",
    "weights_s",
    "compute_s_per_token",
    "kv_s_per_token",
    "prefill_s_per_token",
)


@dataclass(frozen=True)
class StepWork:
    """Per step and engine, what the database's engine did; per step and timed phase, the
    physical bases the training factors price."""

    engine_s: np.ndarray  # steps x engines: decode and prefill seconds at the database's costs
    passes: np.ndarray  # steps x engines: engine steps (one token for each sequence in the batch)
    bases: StepBases  # timed phases x steps x BASES
    tokens: np.ndarray  # steps: prompt + response tokens of the step

    def rows(self, rows: np.ndarray) -> StepWork:
        return StepWork(self.engine_s[rows], self.passes[rows], self.bases.rows(rows),
                        self.tokens[rows])


@dataclass(frozen=True)
class Predicted:
    """Per step, each timed phase (`phases`; `gen` the rollout as veRL times it: decoding, the
    fixed cost per RL step and what else its timer holds), the update (the rest of the step) and
    the step."""

    phases: tuple[str, ...]
    phase_s: np.ndarray  # phases x steps

    def of(self, phase: str) -> np.ndarray:
        return self.phase_s[self.phases.index(phase)]

    @property
    def gen_s(self) -> np.ndarray:
        return self.of("gen")

    @property
    def step_s(self) -> np.ndarray:
        return self.phase_s.sum(axis=0)

    @property
    def update_s(self) -> np.ndarray:
        return self.step_s - self.gen_s


def database_profile(shape: RunShape) -> Profile:
    """The measured-database profile of the run's cluster (derived once, then kept on disk)."""
    from workbench.calibrate.database.catalog import default_base_profile, disk_cached_profile

    base = default_base_profile(shape.arch, shape.tp)
    return disk_cached_profile(shape.arch, shape.gpu, shape.tp, shape.framework, base, shape.ep)


def rollout_s(work: StepWork, v: np.ndarray) -> np.ndarray:
    """Per step, the rollout priced with the rollout factors `v` (ROLLOUT_FACTORS' values): its
    slowest engine (its kernels and its fixed cost per engine step), and the fixed cost per RL
    step."""
    return (v[0] * work.engine_s + v[1] * work.passes).max(axis=1) + v[2]


def predict(work: StepWork, values: np.ndarray) -> Predicted:
    """Each step's phases priced with the factors' `values` (FACTORS' order)."""
    values = np.asarray(values, float)
    phases = work.bases.seconds(values[TRAIN])
    gen = work.bases.phases.index("gen")
    phases[gen] = phases[gen] + rollout_s(work, values[ROLLOUT])
    return Predicted(work.bases.phases, phases)


def factor_values(f: RunFactors) -> np.ndarray:
    return np.array(f.values, float)


def affine_update(pred: Predicted, tokens: np.ndarray) -> tuple[float, float]:
    """(seconds per step, seconds per token): the update as the simulator's one training phase
    can hold it (fixed, and linear in the step's tokens), least squares over the steps."""
    x, y = np.asarray(tokens, float), pred.update_s
    if len(x) < 2 or np.ptp(x) == 0:
        return float(np.median(y)), 0.0
    slope, icept = np.polyfit(x, y, 1)
    slope = max(0.0, float(slope))
    return max(0.0, float(np.median(y - slope * x))), slope


def apply_factors(db: Profile, f: RunFactors, fixed_s: float, per_token_s: float, gpus: int,
                  name: str) -> Profile:
    """The database's profile turned into the run's (RunFactors): every decode and drafter cost
    times the decode speed, the fixed cost per engine step on top; the simulator's sync per RL
    step holds the rollout's fixed cost and the update's fixed part, its training cost per token
    the update's part that grows with the step's tokens (`affine_update`)."""
    d = db.decode
    dec = replace(d, **{k: sig(getattr(d, k) * f.decode_speed) for k in DECODE_FIELDS})
    if d.experts is not None:  # a mixture of experts' routed experts, at the same speed
        dec = replace(dec, experts=replace(d.experts,
                                           weights_s=sig(d.experts.weights_s * f.decode_speed)))
    dec = replace(dec, overhead_s=sig(dec.overhead_s + f.step_overhead_s))
    dr = replace(
        db.drafter,
        eagle_step_s=sig(db.drafter.eagle_step_s * f.decode_speed),
        eagle_s_per_seq=sig(db.drafter.eagle_s_per_seq * f.decode_speed),
    )
    phases = replace(db.phases, train_gpu_s_per_token=sig(per_token_s * gpus),
                     weight_sync_s=sig(f.rl_step_s + fixed_s))
    learning = replace(
        db.learning, train_tokens_per_s=sig(db.learning.train_tokens_per_s / f.train_speed)
    )
    return replace(db, name=name, decode=dec, drafter=dr, phases=phases, learning=learning,
                   run_factors=f)


def run_workload(shape: RunShape, lengths: ModelledLengths, name: str, profile: str) -> Workload:
    """The run as a Workload (one step; each replayed step sets its own prompt tokens)."""
    return Workload(
        name=name,
        profile=profile,
        workers=shape.engines,
        prompts_per_step=shape.prompts_per_step,
        group_size=shape.group_size,
        max_response_tokens=shape.max_response_tokens,
        gpus_per_worker=shape.tp,
        prompt_tokens=int(np.median(lengths.prompt_tokens)),
        max_batch=shape.max_batch,
        steps=1,
        framework=shape.framework,
        gpu=shape.gpu,
    )


def rollout_steps(shape: RunShape, db: Profile, lengths: ModelledLengths,
                  progress: Callable[[int, int], None] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Every step's engine work at the database's costs (steps x engines: seconds, engine
    steps). `progress(steps done, steps)`."""
    n = len(lengths.lengths)
    out = np.zeros((2, n, shape.engines))
    for i, (x, prompt) in enumerate(zip(lengths.lengths, lengths.prompt_tokens)):
        out[:, i] = step_work(db.decode, x, int(prompt), shape.engines, shape.max_batch)
        if progress and ((i + 1) % PROGRESS_EVERY == 0 or i + 1 == n):
            progress(i + 1, n)
    return out[0], out[1]
