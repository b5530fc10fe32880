"""A baseline rollout's engine work in closed form: what `sim.simulator.simulate` computes for one
RL step without speculative decoding, without the event loop.

Without SD the simulator's engine (sim/engine.py, sim/rollout.py) decodes its shard with
continuous batching: every active sequence gains one token per engine step, the queue admits the
next sequences (in order) as soon as slots free, and each segment between two completions costs
`prefill_s` of what it admitted plus `passes x verify_step_s(batch, mean context + passes / 2)`
(sim/costs.py). That cost is linear in everything but the batch (the weights-or-compute term), so
over a whole shard it sums exactly to

    overhead x T + per_seq x sum(r) + kv x sum(c r + r^2 / 2) + sum over segments of passes x g(b)
    + prefill of each admission wave,

T the engine steps (the last completion's progress), r the responses' lengths, c their prompts'
tokens, g(b) the batch's weights-or-compute term. Only the admissions after the first wave need
an order: a heap of completion times gives each queued sequence its admission, as the engine's
own heap does. A test checks the two agree step by step.
"""

from __future__ import annotations

import heapq

import numpy as np

from sim.costs import expert_read_s, prefill_s
from sim.rollout import shard
from workbench.contracts.profile import DecodeCost


def _admissions(r: np.ndarray, max_batch: int) -> np.ndarray:
    """Each sequence's progress at admission: the first `max_batch` at 0, then each queued one
    when the earliest active one finishes (FIFO, as sim/engine.py admits)."""
    n = len(r)
    a = np.zeros(n)
    if n <= max_batch:
        return a
    heap = r[:max_batch].astype(float).tolist()
    heapq.heapify(heap)
    for i in range(max_batch, n):
        t = heap[0]
        a[i] = t
        heapq.heapreplace(heap, t + float(r[i]))
    return a


def _batch_term(c: DecodeCost, b: np.ndarray) -> np.ndarray:
    """g(b): reading the weights or computing b tokens, whichever dominates, the other partly
    hidden (sim/costs.py `verify_step_s`)."""
    compute = c.compute_s_per_token * b
    weights = c.weights_s + np.array([expert_read_s(c.experts, float(x)) for x in b]) \
        if c.experts is not None else np.full(len(b), c.weights_s)
    return np.maximum(weights, compute) + (1.0 - c.overlap) * np.minimum(weights, compute)


def shard_work(c: DecodeCost, r: np.ndarray, context: int, max_batch: int) -> tuple[float, float]:
    """(seconds at `c`'s costs, engine steps) of one engine decoding responses `r` (in queue order)
    after prompts of `context` tokens each."""
    r = np.asarray(r, dtype=float)
    if not len(r):
        return 0.0, 0.0
    a = _admissions(r, max_batch)
    f = a + r
    events = np.unique(f)
    starts = np.concatenate(([0.0], events[:-1]))
    passes = events - starts
    # the batch over [start, end): admitted by its start, not yet finished at it
    b = (np.searchsorted(np.sort(a), starts, side="right")
         - np.searchsorted(np.sort(f), starts, side="right")).astype(float)
    keep = passes > 0
    seconds = (c.overhead_s * float(events[-1]) + c.per_seq_s * float(r.sum())
               + c.kv_s_per_token * float(np.sum(context * r + r * r / 2.0))
               + float(np.sum(passes[keep] * _batch_term(c, b[keep]))))
    _, counts = np.unique(a, return_counts=True)
    if c.experts is None:
        seconds += prefill_s(c, context * len(r))
    else:
        seconds += sum(prefill_s(c, context * int(k)) for k in counts)
    return seconds, float(events[-1])


def step_work(c: DecodeCost, lengths: np.ndarray, context: int, engines: int,
              max_batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Per engine, (seconds, engine steps) of one RL step's rollout: the responses (prompt-major)
    in contiguous shards, as the simulator splits them."""
    seconds, steps = np.zeros(engines), np.zeros(engines)
    for w, rows in enumerate(shard(len(lengths), engines)):
        seconds[w], steps[w] = shard_work(c, lengths[rows.start:rows.stop], context, max_batch)
    return seconds, steps
