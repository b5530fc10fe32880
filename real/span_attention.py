"""Causal attention within each sequence of a packed row (sequences concatenated, no padding):
the attention of the padding-free GRPO forward (real/packing.py) and of the EAGLE drafter's
packed training step (real/drafter/eagle.py).

`attend(query, key, value, spans)` runs one of BACKENDS, chosen for a block by `backend(name)`
(default "auto"):

- "varlen": PyTorch's variable-length FlashAttention (`torch.nn.attention.varlen.varlen_attn`)
  over the whole row, its sequences given by their cumulative offsets (`cu_seqlens`): one
  kernel per layer whatever the number of sequences, as veRL's remove-padding runs
  flash-attn's varlen kernel. CUDA only; the row runs in autocast's half dtype (the kernel
  takes fp16/bf16 only).
- "per-span": scaled-dot-product attention on each sequence alone with PyTorch's kernels other
  than cuDNN's on CUDA (flash, memory-efficient, math). The CPU's path.
- "per-span-default": per sequence, PyTorch choosing the kernel. On an sm90 GPU with a recent
  cuDNN that choice can be cuDNN's attention, which builds an execution plan for every new
  shape and strides it meets (tens of ms of host time each), and a packed row's sequences come
  at new lengths and offsets in nearly every call. Kept for the GPU check to time against.
- "auto": "varlen" where it can run (a CUDA row, head size a multiple of 8 up to 256, a half
  dtype at hand), else "per-span". A varlen call that fails for want of the kernel (a build
  without it, a torch without `torch.nn.attention.varlen`) falls back to "per-span" for the
  rest of the process; `varlen_unavailable()` says why.

No token attends across a sequence boundary in any of them, so attention costs the sum of the
squared lengths, never the squared total (as a dense block-diagonal mask over the row would).
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "varlen", "per-span", "per-span-default")
_HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True, eq=False)
class Spans:
    """The sequences of a packed row: each one's [start, end), consecutive from 0, and their
    cumulative offsets on the row's device (what a varlen kernel reads)."""

    bounds: tuple[tuple[int, int], ...]
    cu_seqlens: torch.Tensor  # int32 [n + 1]: 0, the first sequence's end, ..., the row's length
    max_len: int

    @property
    def total(self) -> int:
        return self.bounds[-1][1]


def packed_spans(bounds: Sequence[tuple[int, int]], device) -> Spans:
    """`Spans` of consecutive, non-empty [start, end) from 0, offsets built once on `device`."""
    if not bounds:
        raise ValueError("a packed row needs at least one sequence")
    prev = 0
    for s, e in bounds:
        if s != prev or e <= s:
            raise ValueError(f"span [{s}, {e}) after one ending at {prev}: the sequences of a "
                             "packed row must be consecutive and non-empty, from position 0")
        prev = e
    cu = torch.tensor([0] + [int(e) for _, e in bounds], dtype=torch.int32, device=device)
    return Spans(tuple((int(s), int(e)) for s, e in bounds), cu, max(e - s for s, e in bounds))


class _State:
    choice = "auto"
    unavailable: str | None = None  # why varlen cannot run in this process (its first failure)
    last: str | None = None  # the backend the last `attend` ran


_state = _State()


@contextmanager
def backend(name: str) -> Iterator[None]:
    """`attend` runs backend `name` (one of BACKENDS) inside the block."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend {name!r}: give one of {', '.join(BACKENDS)}")
    old, _state.choice = _state.choice, name
    try:
        yield
    finally:
        _state.choice = old


def last_backend() -> str | None:
    """The backend the last `attend` call ran ("varlen", "per-span" or "per-span-default")."""
    return _state.last


def varlen_unavailable() -> str | None:
    """Why "auto" stopped trying the varlen kernel in this process (None: it has not)."""
    return _state.unavailable


class VarlenUnavailable(RuntimeError):
    """This torch's varlen kernel cannot run the call (an argument it does not take)."""


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, row: Spans,
           scale: float | None = None) -> torch.Tensor:
    """query [1, Hq, T, D], key and value [1, Hkv, T, D] (Hq a multiple of Hkv) -> [1, T, Hq, D]:
    each position attends causally to its own sequence's positions up to itself."""
    if query.shape[0] != 1 or query.shape[2] != row.total or key.shape[2] != row.total:
        raise ValueError(f"one packed row of {row.total} positions expected, got query "
                         f"{tuple(query.shape)} and key {tuple(key.shape)}")
    choice = _state.choice
    if choice in ("auto", "varlen"):
        blocker = _varlen_blocker(query)
        if blocker is None:
            try:
                kernel, dtype = varlen_kernel(), _half_dtype(query)
                out = varlen_rows(query, key, value, row, scale, kernel, dtype)
                _state.last = "varlen"
                return out
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, NotImplementedError) as exc:
                if choice == "varlen":
                    raise
                _state.unavailable = f"{type(exc).__name__}: {exc}"[:300]
                warnings.warn(f"packed attention: the varlen kernel failed ({_state.unavailable});"
                              " running attention per sequence from now on", RuntimeWarning,
                              stacklevel=2)
        elif choice == "varlen":
            raise ValueError(f"attention backend 'varlen' cannot run here: {blocker}")
    fused_only = choice != "per-span-default"
    _state.last = "per-span" if fused_only else "per-span-default"
    return per_span(query, key, value, row, scale, fused_only)


def per_span(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, row: Spans,
             scale: float | None, fused_only: bool = True) -> torch.Tensor:
    """`attend` by scaled-dot-product attention on each sequence alone; `fused_only`: without
    cuDNN's kernel on CUDA (the module docstring says why)."""
    gqa = key.shape[1] != query.shape[1]
    with _no_cudnn() if fused_only and query.is_cuda else nullcontext():
        out = torch.cat([F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e],
                                                        value[:, :, s:e], is_causal=True,
                                                        scale=scale, enable_gqa=gqa)
                         for s, e in row.bounds], dim=2)
    return out.transpose(1, 2).contiguous()


def varlen_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, row: Spans,
                scale: float | None, kernel: Callable, dtype: torch.dtype) -> torch.Tensor:
    """`attend` through a varlen kernel: `kernel(q, k, v, cu_seqlens, max_len, scale)` on
    [T, H, D] rows in `dtype`, returning [T, Hq, D]."""
    q, k, v = (x[0].transpose(0, 1).to(dtype).contiguous() for x in (query, key, value))
    return kernel(q, k, v, row.cu_seqlens, row.max_len, scale).unsqueeze(0)


def _no_cudnn():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.MATH])


def _half_dtype(query: torch.Tensor) -> torch.dtype | None:
    """The dtype the varlen kernel runs in: autocast's where it is on, else the query's if half."""
    if query.is_cuda and torch.is_autocast_enabled("cuda"):
        dtype = torch.get_autocast_dtype("cuda")
        return dtype if dtype in _HALF else None
    return query.dtype if query.dtype in _HALF else None


def _varlen_blocker(query: torch.Tensor) -> str | None:
    """Why the varlen kernel cannot run this call (None: it can)."""
    if not query.is_cuda:
        return f"the row is on {query.device.type}, the kernel runs on CUDA only"
    d = query.shape[-1]
    if d % 8 or d > 256:
        return f"head size {d}: the kernel takes multiples of 8 up to 256"
    if _half_dtype(query) is None:
        return f"{query.dtype} without autocast: the kernel takes fp16 or bf16"
    if varlen_kernel() is None:
        return (f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn "
                "taking a causal flag")
    return _state.unavailable


@functools.cache
def varlen_kernel() -> Callable | None:
    """This torch's `varlen_attn`, called causally whatever its version's signature: `is_causal`
    (torch 2.10) or `window_size=(-1, 0)` (later); `scale` where taken; GQA by `enable_gqa` where
    taken, else by repeating the key and value heads."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    if "window_size" not in params and "is_causal" not in params:
        return None

    def run(q, k, v, cu, max_len: int, scale: float | None):
        kw: dict = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
        if scale is not None and "scale" in params:
            kw["scale"] = scale
        elif scale is not None and not math.isclose(scale, q.shape[-1] ** -0.5, rel_tol=1e-6):
            raise VarlenUnavailable(f"this torch's varlen_attn takes no scale (the model's: "
                                    f"{scale})")
        if k.shape[1] != q.shape[1]:
            if "enable_gqa" in params:
                kw["enable_gqa"] = True
            else:
                rep = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kw)

    return run
