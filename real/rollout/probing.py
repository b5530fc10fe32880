"""The run's clock, with the machine's speed measured between engine steps.

This machine's speed moves within seconds (a process beside it that streams memory slows a
tiny-model step 1.5-2x, and nothing in this VM's accounting shows it), so a reference measured
only before and after a rollout misses what happened during it. An in-process engine pauses
between two `step()` calls, so a short reference workload (`SpeedProbe`) timed there, every
`every_s` of the run, samples the machine while it decodes; its time is taken off the run's
clock, so step and request times stay the engine's alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from real.rollout.requests import ProbeSample, SpeedProbe

PROBE_EVERY_S = 0.25


class ProbedClock:
    """Seconds since `t0`, less the time spent probing; `between_steps()` probes when due."""

    def __init__(self, t0: float, probe: SpeedProbe | None = None, every_s: float = PROBE_EVERY_S):
        self.t0, self.probe, self.every_s = t0, probe, every_s
        self.paused_s = 0.0
        self.samples: list[ProbeSample] = []
        self._last = -float("inf")

    def now(self) -> float:
        return time.perf_counter() - self.t0 - self.paused_s

    def between_steps(self, force: bool = False) -> None:
        """Time the probe if `every_s` passed since the last one (or `force`)."""
        if self.probe is None:
            return
        t = self.now()
        if not force and t - self._last < self.every_s:
            return
        start = time.perf_counter()
        probe_s = self.probe.measure()
        cpu_s = float(getattr(self.probe, "last_cpu_s", probe_s))
        self.samples.append(ProbeSample(t, probe_s, cpu_s))
        self.paused_s += time.perf_counter() - start
        self._last = t


class ReferenceForward:
    """The machine's speed now, for `tlt calibrate --model`'s drift normalisation: a fixed set of
    forward passes of the target model in this process, timed.

    Why this yardstick: the calibration runs three kinds of engine (no SD, n-gram, EAGLE) one at a
    time, so no engine step can measure the machine the same way throughout; the target's own
    forward, in the process that runs the in-process engine, with its torch threads, is made of the
    same kernels and the same per-op Python/torch dispatch as an engine step (a batch-1 step of the
    tiny model is mostly dispatch: a 1x8-token forward takes ~3 ms here, a step 4-6 ms), so what
    slows the engine (another process on the cores, a lower clock) slows it alike. Mostly small
    (decode-like) passes, one larger one for compute; `measure()` returns the median over `repeats`
    of the time of one set, so one interruption does not move it. The calibration prints how it
    tracks the engine (the report's `tracking`).
    """

    def __init__(self, model_dir: str | Path, repeats: int = 5, small: int = 10, seed: int = 0):
        """`repeats` x (`small` 1x8-token forwards + one 8x32): the default set takes ~30 ms here;
        `ProbedClock` uses a light one (`light()`)."""
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=torch.float32
        ).eval()
        gen = torch.Generator().manual_seed(seed)
        vocab = int(self.model.config.vocab_size)
        self.inputs = [torch.randint(0, vocab, (1, 8), generator=gen)] * small + \
                      [torch.randint(0, vocab, (8, 32), generator=gen)]
        self.repeats = repeats

    def measure(self) -> float:
        """Seconds for one set of forwards (median of `repeats`); `last_cpu_s`: this process's CPU
        seconds for it (median), which other processes on the cores do not inflate."""
        times, cpu = [], []
        with self.torch.inference_mode():
            for _ in range(self.repeats):
                t, c = time.perf_counter(), time.process_time()
                for ids in self.inputs:
                    self.model(input_ids=ids, use_cache=False)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
        self.last_cpu_s = float(sorted(cpu)[len(cpu) // 2])
        return float(sorted(times)[len(times) // 2])


    @classmethod
    def light(cls, model_dir: str | Path, seed: int = 0) -> "ReferenceForward":
        """One set of three small forwards and the larger one (~6 ms here): light enough to
        run every `PROBE_EVERY_S` of a rollout."""
        return cls(model_dir, repeats=1, small=3, seed=seed)


def probe_summary(samples: list[ProbeSample], what: str) -> dict[str, Any]:
    """A trace's meta["speed"]: the probe's times during the run.
    workbench/calibrate/captures/drift.py takes
    their mean as the machine's mean slowness over the run: samples come at even intervals, so one
    that caught another process's burst stands for the share of the run the burst took."""
    wall = [1e3 * p.probe_s for p in samples]
    ordered = sorted(wall)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {
        "probe": what,
        "samples": n,
        "mean_ms": round(sum(wall) / n, 4),
        "median_ms": round(median, 4),
        "times_ms": [round(x, 3) for x in wall],
        "cpu_ms": [round(1e3 * p.cpu_s, 3) for p in samples],
        "t_s": [round(p.t_s, 3) for p in samples],
        "how": "a fixed reference workload timed before, during (between engine steps, off the "
        "run's clock) and after the rollout (real/rollout/probing.py)",
    }
