"""One rollout's engine steps: vLLM stepped one `step()` at a time, one row per model step
(`RolloutEngine.run_steps`, real/rollout/engine.py, adds the requests and returns the rows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from real.rollout.draft_clock import DraftClock
from real.rollout.outputs import Tracked, step_row, take_outputs
from real.rollout.requests import EngineStepRow, StepController


@dataclass
class StepLoop:
    """vLLM's engine (`LLM.llm_engine`), the scheduler stats its outputs append to `stats` (the
    engine records them while a rollout runs), its drafting timer and its batch cap."""

    engine: Any
    stats: list[Any]
    draft_clock: DraftClock
    max_num_seqs: int

    def drive(self, tracked: dict[str, Tracked], alias: dict[str, str], now: Callable[[], float],
              controller: StepController | None,
              on_step: Callable[[EngineStepRow], None] | None, rl_step: int, worker: int,
              admit: Callable[[set[str]], None] = lambda live: None,
              held: Callable[[], int] = lambda: 0,
              between: Callable[[], None] = lambda: None) -> list[EngineStepRow]:
        """Step the engine until every request is finished; one row per model step (`admit(live)`
        adds requests held back by max_in_flight as others finish; `between()` runs after each
        step, off the clock)."""
        eng = self.engine
        steps: list[EngineStepRow] = []
        live = set(tracked)
        t_prev = now()
        while eng.has_unfinished_requests():
            decoding = [tracked[k] for k in live if tracked[k].generated > 0]
            ctx = [s.prompt_tokens + s.generated for s in decoding]
            n_before = len(self.stats)
            if controller is not None:
                controller.before_step(min(len(live), self.max_num_seqs))
            drafted0 = self.draft_clock.seconds
            outs = eng.step()
            t_now, draft_s = now(), self.draft_clock.since(drafted0)
            new_stats = [s for s in self.stats[n_before:] if s is not None]
            new_tokens = take_outputs(outs, tracked, alias, live, t_now)
            waiting_here = held()  # requests run_steps holds back (max_in_flight) wait too
            admit(live)
            ss = new_stats[-1] if new_stats else None
            if getattr(ss, "iteration_details", None) is None and new_tokens == 0:
                continue  # no model step (a stats-only output): its time goes to the next step
            row = step_row(ss, ctx, len(decoding), new_tokens, rl_step=rl_step, worker=worker,
                           engine_step=len(steps), start_s=t_prev, wall_s=t_now - t_prev,
                           finished=len(tracked) - len(live), draft_s=draft_s)
            row.num_waiting += waiting_here
            t_prev = t_now
            steps.append(row)
            if controller is not None:
                controller.after_step(row)
            if on_step is not None:
                on_step(row)
            between()  # off the clock: the next step's wall starts at t_now still
        return steps
