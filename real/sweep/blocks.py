"""One engine's part of a sweep cell (an engine serves one such record per cell): a held batch
opened, stepped one step at a time in turn with the cell's other engines, and closed, all recorded
on the engine's own clock.

A round opens fresh requests on every engine (the cell's prompts: after the cell's first,
priming round their prefixes are in the engine's prefix cache where its blocks allow, so the
prefill is short), runs until their prefill is done, then the engines take turns step by step
(real/sweep/run.py) and the round aborts what is left: every round decodes at the cell's batch
and context, whatever ran before it. Each engine's clock runs only while it steps, so its trace's
steps run back to back; the machine's speed probe (real/rollout/probing.py, between steps and off
every clock) is placed on each engine's clock where it was taken.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from real.rollout.engine import RolloutEngine
from real.rollout.outputs import Tracked
from real.rollout.probing import ProbedClock, probe_summary
from real.rollout.requests import EngineStepRow, ProbeSample, RolloutRequest, Sampling
from real.rollout.stepping import StepLoop
from workbench.contracts.trace import RequestRow, RLStepRow, StepRow, Trace, rows_frame

# Steps a round's prefill may take before the round gives up on it.
PREFILL_STEPS = 64
# Request ids, unique over the process: an engine serves every cell's record.
REQUEST_IDS = itertools.count()


@dataclass
class EngineRecord:
    """An engine of the sweep and what it recorded in the current cell."""

    name: str  # "plain", the method, or "<method>-k<K>" (one engine per draft length)
    engine: RolloutEngine
    k_fixed: int | None  # the one draft length of a restarted engine (None: set per step)
    steps: list[EngineStepRow] = field(default_factory=list)
    requests: list[RequestRow] = field(default_factory=list)
    # [engine_step, round, k, with_k, slot]: the arm a step counts for
    # (workbench/contracts/sweep.py)
    labels: list[list[int]] = field(default_factory=list)
    segments: list[tuple[float, float, float]] = field(default_factory=list)  # (g0, g1, e0)
    elapsed: float = 0.0  # this engine's clock
    _tracked: dict[str, Tracked] = field(default_factory=dict)
    _alias: dict[str, str] = field(default_factory=dict)
    _live: set[str] = field(default_factory=set)

    def set_k(self, k: int) -> None:
        """The draft length of the next steps (an engine started for one keeps it); set every time:
        the engine serves every cell's record (~5 us)."""
        if self.k_fixed is None and self.engine.adaptive:
            self.engine.set_draft_lengths([(1, self.engine.max_num_seqs, k)])

    def _clock(self, clock: ProbedClock) -> tuple[Callable[[], float], float]:
        g0, base = clock.now(), self.elapsed
        return (lambda: base + clock.now() - g0), g0

    def _done(self, clock: ProbedClock, g0: float, end: float) -> None:
        self.segments.append((g0, clock.now(), self.elapsed))
        self.elapsed = end

    def open(self, prompts: Sequence[list[int]], sampling: Sampling, clock: ProbedClock,
             until_done: bool = False) -> None:
        """Fresh requests for `prompts`; step until their prefill is over (`until_done`: until
        they finish), unlabelled."""
        now, g0 = self._clock(clock)
        eng = self.engine.llm.llm_engine
        self._tracked, self._alias = {}, {}
        for prompt in prompts:
            req = RolloutRequest(next(REQUEST_IDS), 0, list(prompt), sampling)
            self._tracked[req.request_id] = Tracked(req, len(prompt), now())
            got = eng.add_request(req.request_id, {"prompt_token_ids": list(prompt)},
                                  sampling.to_vllm(delta=True))
            if isinstance(got, str):
                self._alias[got] = req.request_id
        self._live = set(self._tracked)
        self._done(clock, g0, now())
        for _ in range(PREFILL_STEPS if not until_done else 1 << 30):
            if not eng.has_unfinished_requests():
                break
            row = self.step(clock, None)
            if row is not None and row.prefill_requests == 0 and not until_done:
                break

    def step(self, clock: ProbedClock, label: tuple[int, ...] | None) -> EngineStepRow | None:
        """One engine step; `label` (round, k, the SD arm alongside, the slot): the arm it counts
        for."""
        eng = self.engine.llm.llm_engine
        if not eng.has_unfinished_requests():
            return None
        now, g0 = self._clock(clock)
        loop = StepLoop(eng, self.engine.tap.stats, self.engine.draft_clock,
                        self.engine.max_num_seqs)
        where = {"rl_step": 0, "worker": 0, "engine_step": len(self.steps)}
        with self.engine.tap.on():
            row, end = loop.step(self._tracked, self._alias, self._live, now, now(), where)
        self._done(clock, g0, now())
        if row is not None:
            self.steps.append(row)
            if label is not None:
                self.labels.append([row.engine_step, *label])
        clock.between_steps()  # the speed probe, off every clock
        return row

    def close(self, clock: ProbedClock) -> None:
        """Abort what is left; every request of the round becomes a request row."""
        if self._live:
            self.engine.llm.llm_engine.abort_request(sorted(self._live))
            for key in self._live:
                self._tracked[key].end_s = self.elapsed
        self.requests += [t.row(0, 0) for t in self._tracked.values()]
        self._tracked, self._alias, self._live = {}, {}, set()

    def engine_time(self, t: float) -> float:
        """A time on the sweep's clock, on this engine's (its clock stands still between its
        steps)."""
        e = 0.0
        for g0, g1, e0 in self.segments:
            if t < g0:
                break
            e = e0 + min(t, g1) - g0
        return e

    def trace(self, meta: dict[str, Any], probes: Sequence[ProbeSample]) -> Trace:
        """The cell's trace of this engine (`meta`: everything but the speed probe's samples)."""
        rl = RLStepRow(rl_step=0, rollout_s=self.elapsed, train_s=0.0, sync_s=0.0,
                       drafter_train_s=0.0)
        mine = [ProbeSample(self.engine_time(p.t_s), p.probe_s, p.cpu_s) for p in probes]
        speed = {"speed": probe_summary(mine, "ReferenceForward.light of the target model")} \
            if mine else {}
        return Trace({**meta, **speed}, rows_frame(self.steps, StepRow),
                     rows_frame(self.requests, RequestRow), rows_frame([rl], RLStepRow))


def median_ms(rows: Sequence[EngineStepRow]) -> float:
    walls = sorted(r.wall_s for r in rows if r is not None and r.prefill_requests == 0)
    return 1e3 * walls[len(walls) // 2] if walls else math.nan
