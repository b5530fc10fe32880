"""The run's engine: its measured-database profile, the run-level factors over it, its workload, and
each RL step simulated.

Every step of the log is a simulation of that step (`sim.simulator.simulate`): the run's engines
(GPUs / TP) decode its modelled responses with continuous batching (at most `max_batch` at once),
then the update and the sync. A baseline (no SD) rollout's schedule does not depend on the costs:
which responses decode together, for how many engine steps, at what context, is fixed by the
lengths and the batch cap. So each step is simulated once at the database's costs and its engines'
work kept (`StepWork`); any factors then price it exactly as a simulation with the factored profile
would (`predict`; a test checks the two agree), which is what lets the fit try many factors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from sim.simulator import simulate
from workbench.contracts.fileio import sig
from workbench.project import Mapper, serial_map
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import Profile, RunFactors
from workbench.contracts.workload import Workload
from workbench.runlog.lengths import ModelledLengths
from workbench.runlog.shape import DATABASE_FORWARDS, RunShape

CHUNK_STEPS = 25  # steps per task when the simulations run in parallel
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
    """Per step and engine, what the database's engine did; per step, its update at the database's
    cost."""

    engine_s: np.ndarray  # steps x engines: decode and prefill seconds at the database's costs
    passes: np.ndarray  # steps x engines: engine steps (one token for each sequence in the batch)
    train_s: np.ndarray  # steps: the update at the database's cost per token (its forwards)
    tokens: np.ndarray  # steps: prompt + response tokens the update trains on


@dataclass(frozen=True)
class Predicted:
    """Per step: the rollout as veRL times it (decoding plus the fixed cost per RL step), the
    update, the step."""

    gen_s: np.ndarray
    update_s: np.ndarray

    @property
    def step_s(self) -> np.ndarray:
        return self.gen_s + self.update_s


def database_profile(shape: RunShape) -> Profile:
    """The measured-database profile of the run's cluster (derived once, then kept on disk)."""
    from workbench.calibrate.database.catalog import default_base_profile, disk_cached_profile

    base = default_base_profile(shape.arch, shape.tp)
    return disk_cached_profile(shape.arch, shape.gpu, shape.tp, shape.framework, base, shape.ep)


def apply_factors(db: Profile, f: RunFactors, forwards: int, name: str) -> Profile:
    """The database's profile turned into the run's (RunFactors): every decode and drafter cost
    times the decode speed, the fixed cost per engine step on top, the RL step's fixed cost as its
    sync, the
    update at the train speed for `forwards` forwards per token."""
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
    per_token = db.phases.train_gpu_s_per_token * f.train_speed * forwards / DATABASE_FORWARDS
    phases = replace(
        db.phases, train_gpu_s_per_token=sig(per_token), weight_sync_s=sig(f.rl_step_s)
    )
    learning = replace(
        db.learning, train_tokens_per_s=sig(db.learning.train_tokens_per_s / f.train_speed)
    )
    return replace(
        db,
        name=name,
        decode=dec,
        drafter=dr,
        phases=phases,
        learning=learning,
        run_factors=replace(f, train_forwards=forwards),
    )


def run_workload(shape: RunShape, lengths: ModelledLengths, name: str, profile: str) -> Workload:
    """The run as a Workload (one step; `simulate_steps` sets each step's prompt tokens)."""
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


@dataclass(frozen=True)
class StepChunk:
    """Consecutive steps to simulate together (one task when the steps run in parallel)."""

    workload: Workload
    profile: Profile
    lengths: list[np.ndarray]
    prompt_tokens: list[int]


def simulate_chunk(chunk: StepChunk) -> StepWork:
    """A chunk's steps simulated at the database's costs (baseline policy: no SD), one simulation
    per step (each with its own prompt tokens), its engines' work kept."""
    policy = load_policy("baseline")
    n, engines = len(chunk.lengths), chunk.workload.workers
    engine_s, passes = np.zeros((n, engines)), np.zeros((n, engines))
    train_s, tokens = np.zeros(n), np.zeros(n)
    for i, (x, prompt) in enumerate(zip(chunk.lengths, chunk.prompt_tokens)):
        w = replace(chunk.workload, prompt_tokens=int(prompt))
        run = simulate(w, policy, chunk.profile, seed=0, steps=1, replay=[x])
        tl = run.timeline
        dec = tl[tl["state"].isin(("decode", "decode_sd"))]
        worker = dec["worker"].to_numpy()
        np.add.at(engine_s[i], worker, (dec["end_s"] - dec["start_s"]).to_numpy())
        np.add.at(passes[i], worker, (dec["passes"] / dec["batch"]).to_numpy())
        train_s[i] = run.steps[0].train_time_s
        tokens[i] = float(x.sum()) + float(prompt) * len(x)
    return StepWork(engine_s, passes, train_s, tokens)


def simulate_steps(wl: Workload, db: Profile, lengths: ModelledLengths,
                   progress: Callable[[int, int], None] | None = None,
                   mapper: Mapper = serial_map) -> StepWork:
    """Every step simulated, in chunks of CHUNK_STEPS: here one after another, or as tasks
    (`mapper`: workbench/deploy/distributed.py's runs them on Ray).
    `progress(steps done, steps)`."""
    n = len(lengths.lengths)
    chunks = [StepChunk(wl, db, lengths.lengths[a:a + CHUNK_STEPS],
                        [int(t) for t in lengths.prompt_tokens[a:a + CHUNK_STEPS]])
              for a in range(0, n, CHUNK_STEPS)]
    done = (lambda k, total, c: progress(min(n, k * CHUNK_STEPS), n)) if progress else None
    parts = mapper(simulate_chunk, chunks, done)
    return StepWork(*(np.concatenate([getattr(w, f) for w in parts])
                      for f in ("engine_s", "passes", "train_s", "tokens")))


def log_prob_s(work: StepWork, train_speed: float, gen_forwards: int) -> np.ndarray:
    """Per step, the old log-probs' forward that older veRL times inside the rollout
    (`RunShape.gen_forwards`): the update's cost of that many forwards per token."""
    return work.train_s * train_speed * gen_forwards / DATABASE_FORWARDS


def predict(work: StepWork, f: RunFactors, forwards: int, gen_forwards: int = 0) -> Predicted:
    """Each step priced with the factors (as a simulation with `apply_factors`' profile gives
    it, the old log-probs' forward inside the rollout timer where the run's veRL puts it there)."""
    gen = (f.decode_speed * work.engine_s + f.step_overhead_s * work.passes).max(
        axis=1
    ) + f.rl_step_s + log_prob_s(work, f.train_speed, gen_forwards)
    update = work.train_s * f.train_speed * forwards / DATABASE_FORWARDS
    return Predicted(gen, update)
