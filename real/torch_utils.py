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


def train_device(name: str) -> Any:
    """The torch device the training runs on: "cpu" (float32) or "cuda" (bf16 autocast over float32
    weights, `autocast`). Raises ValueError where torch sees no CUDA device."""
    import os

    import torch

    if name == "cpu":
        return torch.device("cpu")
    if name != "cuda":
        raise ValueError(f"device {name!r}: give cpu or cuda")
    if not torch.cuda.is_available():
        build = (
            "a CPU-only build"
            if torch.version.cuda is None
            else f"built for CUDA {torch.version.cuda}"
        )
        raise ValueError(
            f"--device cuda: torch {torch.__version__} ({build}) sees no CUDA device on this "
            "machine; run with --device cpu, or on a machine with a GPU and the project's 'gpu' "
            "extra"
        )
    # Deterministic algorithms (torch_settings) need cuBLAS's fixed workspace, set before its first
    # use.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return torch.device("cuda")


def autocast(device: Any):
    """bf16 autocast on a CUDA device (the weights and optimiser stay float32: mixed precision, as
    veRL's FSDP actor runs); nothing on the CPU, whose path stays float32 throughout."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    from contextlib import nullcontext

    return nullcontext()
