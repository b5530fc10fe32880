"""A sweep's cells and their rounds: each cell (a batch size at a context) keeps one record per
engine, and a round of a cell runs every arm of it with the engines stepping in turn.

Rounds run across the cells (round 1 of every cell, then round 2 of every cell, the cell order
reversed each round), so every cell's rounds are spread over the whole sweep: a machine that
slows down over minutes slows every cell alike, instead of the cells measured last (the largest
batch, the longest context) looking costlier than they are. After each round every cell is
written whole with the rounds it has (workbench/contracts/sweep.py `write_cell`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from real.rollout.probing import ProbedClock
from real.rollout.requests import ProbeSample, Sampling
from real.sweep.blocks import EngineRecord, median_ms
from workbench.contracts.sweep import PLAIN
from workbench.contracts.trace import Trace

Slot = list[tuple[EngineRecord, int, tuple[int, ...] | None]]


@dataclass
class CellState:
    batch: int
    context: int
    prompts: list[list[int]]
    records: list[EngineRecord]  # one per engine: this cell's part of each
    windows: list[tuple[float, float]] = field(default_factory=list)  # its rounds, sweep clock
    slots: int = 0  # turns so far (labels count them over the cell)
    primed: bool = False


def new_cell(batch: int, context: int, prompts: list[list[int]],
             engines: Sequence[EngineRecord]) -> CellState:
    return CellState(batch, context, prompts,
                     [EngineRecord(e.name, e.engine, e.k_fixed) for e in engines])


def round_schedule(records: Sequence[EngineRecord], draft_lens: Sequence[int], steps: int,
                   r: int) -> list[Slot]:
    """Round r as slots, each stepping every engine once: (engine, K, label (round, k, the SD
    arm alongside) or None). Live: the SD engine runs drafts off, then each K, for `steps`
    steps each after one unlabelled step that changes K (it verifies the previous K's drafts),
    the plain engine stepping beside it; the K order rotates by r and reverses every other
    round. Restart: every engine `steps` steps. Within a slot the engine order alternates."""
    plain = [x for x in records if x.name == PLAIN]
    sd = [x for x in records if x.name != PLAIN]
    slots: list[Slot] = []
    if len(sd) == 1 and sd[0].k_fixed is None:
        ks = [0, *draft_lens]
        order = [ks[(i + r) % len(ks)] for i in range(len(ks))]
        for k in (order[::-1] if r % 2 else order):
            for j in range(steps + 1):
                slots.append([(plain[0], 0, (r, 0, k)),
                              (sd[0], k, None if j == 0 else (r, k, k))])
    else:
        for j in range(steps):
            slots.append([(x, x.k_fixed or 0, (r, x.k_fixed or 0, -1)) for x in records])
    for i, slot in enumerate(slots):
        turn = (i + r) % len(slot)
        slot[:] = slot[turn:] + slot[:turn]
    return slots


def run_round(cell: CellState, r: int, draft_lens: Sequence[int], steps: int,
              clock: ProbedClock, sampling: Sampling) -> dict[str, float]:
    """Round r of the cell (its first also primes the engines' prefix caches with its prompts);
    the median ms of each arm."""
    g0 = clock.now()
    if not cell.primed:
        for rec in cell.records:
            rec.set_k(0)
            rec.open(cell.prompts, Sampling(temperature=0.0, max_tokens=1), clock,
                     until_done=True)
            rec.close(clock)
        cell.primed = True
    slots = round_schedule(cell.records, draft_lens, steps, r)
    for rec in cell.records:
        rec.set_k(next(k for slot in slots for x, k, _ in slot if x is rec))
        rec.open(cell.prompts, sampling, clock)
    arms: dict[str, list] = {}
    for i, slot in enumerate(slots):
        for rec, k, label in slot:
            rec.set_k(k)
            row = rec.step(clock, None if label is None else (*label, cell.slots + i))
            if label is not None:
                arms.setdefault(rec.name if rec.name == PLAIN else f"K={k}", []).append(row)
    for rec in cell.records:
        rec.close(clock)
    cell.slots += len(slots)
    cell.windows.append((g0, clock.now()))
    return {arm: median_ms(rows) for arm, rows in arms.items()}


def cell_traces(cell: CellState, samples: Sequence[ProbeSample],
                meta: Callable[[EngineRecord], dict[str, Any]]) -> dict[str, Trace]:
    """Each engine's trace of the cell, with the speed probe's samples taken during its rounds."""
    mine = [p for p in samples if any(g0 <= p.t_s <= g1 for g0, g1 in cell.windows)]
    return {rec.name: rec.trace(meta(rec), mine) for rec in cell.records}
