"""One seed-derivation scheme for every random choice, in the simulator and the real backend.

A run has one user seed. Every consumer of randomness draws from its own stream, named by a
`Stream` and the indices that make it unique (RL step, prompt, worker, ...), through numpy's
`SeedSequence([seed, stream, *indices])`: streams are statistically independent, and a
stream's numbers do not depend on which other streams were used or in what order, so the
same seed gives the same run however the work is split or interleaved.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Stream(IntEnum):
    # The simulator (values fixed: they define its results for a seed).
    LENGTHS = 0  # response lengths of one prompt's group: (step, prompt index, attempt)
    BANDIT = 1  # a worker's bandit: (worker,)
    NOISE = 2  # a worker's acceptance noise: (worker,)
    # The real backend.
    PROMPTS = 3  # the task problems of an RL step: (step,)
    SAMPLING = 4  # vLLM's sampling seeds of an RL step: (step,)
    GRPO = 5  # the policy update's minibatch order and initial torch state
    DRAFTER_INIT = 6  # the weights of a fresh (cold) drafter
    ENGINE = 7  # a rollout worker's engine: (worker,)
    SPOT = 8  # a worker's spot trainer: (worker,)
    CONTROLLER = 9  # a worker's engine bandit: (worker,)
    # Tools.
    TUNE_SAMPLER = 10  # the Optuna sampler of a (resumed) study: (trials already in it,)
    # Real-backend experiments (real/experiments/drift.py).
    EVAL_PROMPTS = 11  # the held-out problems the drafters are measured on
    EVAL_SAMPLING = 12  # the sampling of the held-out responses
    # The real backend again (values are never reused).
    PROBE = 13  # the SD guard's probe before step 0, its problems and sampling: (worker,)
    # Tools again.
    # a sampled block of a whole-run projection (workbench/project.py): (its first RL step,)
    PROJECTION = 14
    PLAN_SAMPLER = 15  # the NSGA-II sampler of a cluster-shape search (workbench/plan/search.py)
    RUNLOG_ORDER = 16  # a run log's modelled responses, their engine and queue order: (step,)
    COST_DRAWS = 17  # a profile's cost components drawn for an interval (contracts/uncertainty.py)
    RUNLOG_POSTERIOR = 18  # the run-level factors' posterior chain (workbench/runlog/fit.py)
    # The simulator again: an agentic prompt's trajectories, their turns and tool calls (drawn
    # from the model, or which observed group a replay resamples): (batch, prompt index, attempt)
    TRAJECTORIES = 19


def seed_sequence(seed: int, stream: Stream, *indices: int) -> np.random.SeedSequence:
    if seed < 0 or any(i < 0 for i in indices):
        raise ValueError(f"seed {seed} and stream indices {indices}: seeds are integers >= 0")
    return np.random.SeedSequence([int(seed), int(stream), *(int(i) for i in indices)])


def rng(seed: int, stream: Stream, *indices: int) -> np.random.Generator:
    """A numpy generator for one stream."""
    return np.random.default_rng(seed_sequence(seed, stream, *indices))


def derive_seed(seed: int, stream: Stream, *indices: int) -> int:
    """An integer seed in [0, 2**31) for one stream, for libraries that take an int (torch, vLLM,
    Optuna)."""
    return int(seed_sequence(seed, stream, *indices).generate_state(1, np.uint32)[0] >> 1)
