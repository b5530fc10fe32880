"""Seconds a vLLM engine's model runner spends drafting, per engine step
(`EngineStepRow.draft_s`)."""

from __future__ import annotations

import math
import time
from typing import Any

from real.rollout.vllm_env import running_on_cpu


# The runner's drafting work: the proposer (input preparation and forward passes), the drafts'
# copy to the CPU, and handing them to the scheduler. None of them runs in a plain engine.
DRAFT_METHODS = ("propose_draft_token_ids", "_copy_draft_token_ids_to_cpu", "take_draft_token_ids")


class DraftClock:
    """Seconds the engine's model runner spent drafting (`propose_draft_token_ids`: the proposer's
    input preparation and its forward passes), summed; `on` only where it is timed.

    Why: vLLM's EAGLE engine runs the drafter's first pass at every step, K=0 included, to keep the
    drafter's KV cache whole, so "SD off" in an EAGLE engine is not plain decoding; a step's wall
    time minus its drafting is close to what the same step costs a plain engine
    (`python -m real.experiments.plain_estimate` compares them). Timed only with the engine core
    in this process, on CPU, where the runner's work is synchronous (a GPU's would need a device
    sync per step)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.on = False

    def since(self, seconds: float) -> float:
        """Drafting seconds since the clock read `seconds` (NaN: not timed)."""
        return self.seconds - seconds if self.on else math.nan

    @classmethod
    def attach(cls, core: Any, wanted: bool) -> "DraftClock":
        clock = cls()
        runner = None
        if wanted and running_on_cpu():
            worker = getattr(
                getattr(getattr(core, "engine_core", None), "model_executor", None),
                "driver_worker",
                None,
            )
            runner = getattr(getattr(worker, "worker", None), "model_runner", None)
        if runner is None or not all(hasattr(runner, m) for m in DRAFT_METHODS):
            return clock
        for name in DRAFT_METHODS:
            setattr(runner, name, clock._timed(getattr(runner, name)))
        clock.on = True
        return clock

    def _timed(self, method: Any) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t

        return timed
