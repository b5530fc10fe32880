"""Torch helpers shared across the real backend. torch is imported when they run, so modules that
must stay importable without it (real.tiny.model) can import these."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Sequence


def pad_right(seqs: Sequence[Any], value: float = 0) -> tuple[Any, Any]:
    """Tensors of shape [L_i, ...] as one [B, max L, ...] tensor padded on the right with `value`,
    and its [B, max L] bool mask of real (not padding) positions."""
    import torch

    t = max(len(s) for s in seqs)
    out = seqs[0].new_full((len(seqs), t) + tuple(seqs[0].shape[1:]), value)
    mask = torch.zeros(len(seqs), t, dtype=torch.bool)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
        mask[i, : len(s)] = True
    return out, mask


@contextmanager
def torch_settings(threads: int):
    """Fixed threads and deterministic algorithms for the block; the caller's settings after.
    Yields the torch module."""
    import torch

    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield torch
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)
