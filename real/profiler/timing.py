"""Timing one step: the median of repeated runs after warm-up, eager or replayed from a CUDA graph.

On a CPU every run is timed with `perf_counter`, or, when torch runs on one thread, with that
thread's CPU clock (`thread_time`): on a CPU shared with other processes (this project's
2-core machines) a run that is descheduled midway then costs what it computed, not how long it
waited (wall-clock medians of the same point move severalfold with the machine's load). On CUDA
the runs are queued back to back with a CUDA event recorded between them, so each interval is
what the GPU spent on one run, or, when the host cannot launch kernels as fast as the GPU runs
them (eager mode at small batches), the host's launch time: either way, the step's time in a
running engine. A graph run replays one captured step (production engines capture decode steps
so that launching a step's hundreds of kernels costs one launch). Each graph gets a memory pool
of its own: an engine keeps its graphs alive in one shared pool, but here each is timed and
dropped, and on torch 2.11 capturing into a shared pool whose last graph was freed fails
(CUDACachingAllocator: "use_count > 0"; seen on an H100).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Timing:
    seconds: float  # median of the timed runs
    p10_s: float
    p90_s: float
    runs: int


def _summary(samples: list[float]) -> Timing:
    a = np.asarray(samples, dtype=float)
    return Timing(
        float(np.median(a)), float(np.quantile(a, 0.1)), float(np.quantile(a, 0.9)), len(a)
    )


class Timer:
    """Times callables on one device with `warmup` untimed and `repeats` timed runs."""

    def __init__(self, device: torch.device, repeats: int, warmup: int):
        if repeats < 1 or warmup < 0:
            raise ValueError(f"repeats {repeats} and warmup {warmup}: repeats >= 1, warmup >= 0")
        self.device, self.repeats, self.warmup = device, repeats, warmup
        self.cuda = device.type == "cuda"
        self.clock = (
            time.thread_time
            if not self.cuda and torch.get_num_threads() == 1
            else time.perf_counter
        )
        self.clock_name = "cuda-events" if self.cuda else self.clock.__name__

    def eager(self, fn: Callable[[], object]) -> Timing:
        for _ in range(self.warmup):
            fn()
        if not self.cuda:
            samples = []
            for _ in range(self.repeats):
                t0 = self.clock()
                fn()
                samples.append(self.clock() - t0)
            return _summary(samples)
        torch.cuda.synchronize(self.device)
        return self._events(fn)

    def graph(self, fn: Callable[[], object]) -> Timing:
        """Capture one run of `fn` (after warm-up on a side stream, as torch.cuda.graphs asks) and
        time its replays. CUDA only."""
        if not self.cuda:
            raise ValueError("CUDA graphs need a CUDA device")
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(max(self.warmup, 1)):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        for _ in range(self.warmup):
            g.replay()
        torch.cuda.synchronize(self.device)
        try:
            return self._events(g.replay)
        finally:
            del g

    def _events(self, fn: Callable[[], object]) -> Timing:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(self.repeats + 1)]
        marks[0].record()
        for i in range(self.repeats):
            fn()
            marks[i + 1].record()
        torch.cuda.synchronize(self.device)
        return _summary([1e-3 * a.elapsed_time(b) for a, b in itertools.pairwise(marks)])
