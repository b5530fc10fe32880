"""A step's prompts: each prompt's group of responses drawn from its own random stream (common
random numbers across policies), kept for the next simulation of the same workload and seed."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from sim.lengths import GroupDraw, model_group, observed_group
from sim.entities import Group
from workbench.contracts import seeds
from workbench.contracts.length_data import ObservedLengths, read_observed
from workbench.contracts.seeds import Stream
from workbench.contracts.workload import Workload


def group_lengths(workload: Workload, seed: int, step: int, index: int, attempt: int = 0,
                  batch: int | None = None, observed: ObservedLengths | None = None) -> GroupDraw:
    """The responses of the `index`-th new prompt of generation batch `batch` (default: `step`;
    DAPO's dynamic sampling runs several batches a step) at RL step `step` (a re-run of a deferred
    prompt is a new attempt).

    Each prompt has its own random stream, so a prompt's responses are the same
    whichever policy or rollout mode meets it (common random numbers). `observed`: the workload's
    observed lengths, read already (a simulation reads them once, not per prompt). A draw is kept
    (`_DRAWS`) for the next simulation of the same workload and seed: a tuner's or a planner's
    hundreds of simulations draw the same prompts again, and drawing is a tenth of a simulation.
    """
    batch = step if batch is None else batch
    m, cap = workload.lengths, workload.max_response_tokens
    obs = None
    if m.kind != "lognormal":
        obs = observed if observed is not None else read_observed(m.data)
    key = (m, cap, workload.group_size, id(obs), seed, step, index, attempt, batch)
    with _DRAWS_LOCK:  # the app simulates in several threads
        hit = _DRAWS.get(key)
        # The very table: an id is only unique while its object lives.
        if hit is not None and hit[0] is obs:
            _DRAWS.move_to_end(key)
            return hit[1]
    if obs is not None:
        draw = observed_group(obs, m.kind, cap, seed, batch, index, attempt)
    else:
        rng = seeds.rng(seed, Stream.LENGTHS, batch, index, attempt)
        draw = model_group(m, cap, workload.group_size, step, rng)
    for arr in (draw.lengths, draw.correct):
        # Shared by every simulation that meets this prompt: nobody may change it.
        arr.setflags(write=False)
    with _DRAWS_LOCK:
        _DRAWS[key] = (obs, draw)
        if len(_DRAWS) > _DRAWS_KEPT:
            _DRAWS.popitem(last=False)
    return draw


_DRAWS: OrderedDict[tuple, tuple[ObservedLengths | None, GroupDraw]] = OrderedDict()
_DRAWS_LOCK = threading.Lock()
_DRAWS_KEPT = 100_000  # groups (a few hundred bytes each)


def new_group(key: tuple[int, int], draw: GroupDraw, attempt: int = 0) -> Group:
    return Group(key, draw.lengths, np.zeros(len(draw.lengths)), attempt,
                 prompt_tokens=draw.prompt_tokens, rank=draw.rank, mixed=draw.mixed)
