"""One rollout's engine steps: vLLM stepped one `step()` at a time, one row per model step
(`RolloutEngine.run_steps`, real/rollout/engine.py, adds the requests and returns the rows; the
engine sweep's held batches, real/sweep/, step it the same way).

`StatsTap` keeps the scheduler stats of every output vLLM's engine core returns while it is on:
they carry the step's batch composition and its speculative-decoding counts."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from real.rollout.draft_clock import DraftClock
from real.rollout.outputs import Tracked, step_row, take_outputs
from real.rollout.requests import EngineStepRow, StepController


@dataclass
class StatsTap:
    """The scheduler stats of the engine core's outputs, kept while `on()`."""

    stats: list[Any] = field(default_factory=list)
    recording: bool = False

    @classmethod
    def attach(cls, core: Any) -> "StatsTap":
        tap = cls()
        orig = core.get_output

        def get_output(*a, **k):
            out = orig(*a, **k)
            if tap.recording:
                tap.stats.append(getattr(out, "scheduler_stats", None))
            return out

        core.get_output = get_output
        return tap

    @contextmanager
    def on(self) -> Iterator[None]:
        self.stats.clear()
        self.recording = True
        try:
            yield
        finally:
            self.recording = False


@dataclass
class StepLoop:
    """vLLM's engine (`LLM.llm_engine`), the scheduler stats its outputs append to `stats` (the
    engine records them while a rollout runs), its drafting timer and its batch cap."""

    engine: Any
    stats: list[Any]
    draft_clock: DraftClock
    max_num_seqs: int

    def step(self, tracked: dict[str, Tracked], alias: dict[str, str], live: set[str],
             now: Callable[[], float], t_prev: float, where: dict[str, int]
             ) -> tuple[EngineStepRow | None, float]:
        """One `step()`: its row (None: no model step, a stats-only output, whose time goes to the
        next step) and the time it ended. `where`: rl_step, worker, engine_step."""
        decoding = [tracked[k] for k in live if tracked[k].generated > 0]
        ctx = [s.prompt_tokens + s.generated for s in decoding]
        n_before = len(self.stats)
        drafted0 = self.draft_clock.seconds
        outs = self.engine.step()
        t_now, draft_s = now(), self.draft_clock.since(drafted0)
        new_stats = [s for s in self.stats[n_before:] if s is not None]
        new_tokens = take_outputs(outs, tracked, alias, live, t_now)
        ss = new_stats[-1] if new_stats else None
        if getattr(ss, "iteration_details", None) is None and new_tokens == 0:
            return None, t_prev
        row = step_row(ss, ctx, len(decoding), new_tokens, **where, start_s=t_prev,
                       wall_s=t_now - t_prev, finished=len(tracked) - len(live), draft_s=draft_s)
        return row, t_now

    def drive(self, tracked: dict[str, Tracked], alias: dict[str, str], now: Callable[[], float],
              controller: StepController | None,
              on_step: Callable[[EngineStepRow], None] | None, rl_step: int, worker: int,
              admit: Callable[[set[str]], None] = lambda live: None,
              held: Callable[[], int] = lambda: 0,
              between: Callable[[], None] = lambda: None) -> list[EngineStepRow]:
        """Step the engine until every request is finished; one row per model step (`admit(live)`
        adds requests held back by max_in_flight as others finish; `between()` runs after each
        step, off the clock)."""
        steps: list[EngineStepRow] = []
        live = set(tracked)
        t_prev = now()
        while self.engine.has_unfinished_requests():
            if controller is not None:
                controller.before_step(min(len(live), self.max_num_seqs))
            where = {"rl_step": rl_step, "worker": worker, "engine_step": len(steps)}
            row, t_prev = self.step(tracked, alias, live, now, t_prev, where)
            waiting_here = held()  # requests run_steps holds back (max_in_flight) wait too
            admit(live)
            if row is None:
                continue
            row.num_waiting += waiting_here
            steps.append(row)
            if controller is not None:
                controller.after_step(row)
            if on_step is not None:
                on_step(row)
            between()  # off the clock: the next step's wall starts at t_now still
        return steps
