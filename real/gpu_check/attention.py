"""Packed attention alone on the device (real/span_attention.py), one layer's worth at a model's
head layout: each backend's forward and backward over long-tailed packed rows, timed on fresh
rows (new lengths at new offsets every call, as training meets them) and on one row again (a
shape seen before), its output and gradients set against "per-span"'s on the same row, and the
attention operators it ran (torch's profiler: cuDNN's, flash, memory-efficient, math or the
varlen kernel). A backend much slower on fresh rows than on a repeated one pays a set-up per
shape (cuDNN builds an execution plan per shape and strides). Also recorded: PyTorch's SDPA
kernel order and cuDNN's version."""

from __future__ import annotations

import random
import statistics
from typing import Callable

import torch

from real.gpu_check.plan import AttentionShape
from real.gpu_check.training import lengths, timed
from real.span_attention import Spans, attend, backend, packed_spans

# "per-span" first: the reference the others are compared with.
BACKENDS = ("per-span", "varlen", "per-span-default")
_OP_WORDS = ("scaled_dot_product", "flash", "cudnn", "efficient_attention", "varlen")


class Row:
    """A packed row's spans, its query, key and value ([1, H, T, D] views of [1, T, H, D], as a
    model's projections give them) and the gradient pushed back through the output."""

    def __init__(self, shape: AttentionShape, seed: int, device: str, dtype: torch.dtype):
        lens = lengths(random.Random(seed), shape.sequences, shape.median_tokens, shape.cap)
        bounds, start = [], 0
        for n in lens:
            bounds.append((start, start + n))
            start += n
        self.spans: Spans = packed_spans(bounds, device)
        gen = torch.Generator().manual_seed(seed)

        def draw(heads: int) -> torch.Tensor:
            x = torch.randn(1, start, heads, shape.head_dim, generator=gen)
            return x.to(device=device, dtype=dtype).transpose(1, 2)

        self.q, self.k, self.v = draw(shape.heads), draw(shape.kv_heads), draw(shape.kv_heads)
        self.grad_out = torch.randn(1, start, shape.heads, shape.head_dim, generator=gen).to(device)
        self.tokens = start

    def run(self, name: str) -> list[torch.Tensor]:
        """Backend `name`'s output and the query, key and value gradients."""
        q, k, v = (x.detach().requires_grad_() for x in (self.q, self.k, self.v))
        with backend(name):
            out = attend(q, k, v, self.spans)
        (out.float() * self.grad_out).sum().backward()
        return [out.detach(), q.grad, k.grad, v.grad]


def _rel_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> dict:
    names = ("out", "dq", "dk", "dv")
    return {
        n: float((x.float() - y.float()).abs().max() / y.float().abs().max().clamp_min(1e-12))
        for n, x, y in zip(names, a, b)
    }


def _ops(fn: Callable[[], object]) -> list[str]:
    """The attention operators `fn` launched (names from torch's profiler, CPU side only)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = {e.name for e in prof.events() if e.name.startswith("aten::")}
    return sorted(n for n in names if any(w in n.lower() for w in _OP_WORDS))


def _ms(xs: list[float]) -> float | None:
    return round(1e3 * statistics.median(xs), 3) if xs else None


def _shape(shape: AttentionShape, device: str, budget, out: dict, save) -> None:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    rows = [Row(shape, seed, device, dtype) for seed in range(shape.repeats + 1)]
    out.update(tokens_per_row=round(statistics.mean(r.tokens for r in rows), 1), backends={})
    reference = rows[0].run(BACKENDS[0])
    live = []
    for name in BACKENDS:
        b = out["backends"][name] = {}
        try:
            b["first_ms"] = round(1e3 * timed(device, lambda: rows[0].run(name)), 3)
        except (ValueError, RuntimeError, NotImplementedError) as exc:
            if isinstance(exc, torch.OutOfMemoryError):
                raise
            b["status"] = f"unavailable: {type(exc).__name__}: {exc}"[:300]
            continue
        b.update(status="ok", ops=_ops(lambda: rows[0].run(name)), fresh_s=[], same_s=[])
        b["max_rel_diff"] = _rel_diff(rows[0].run(name), reference)
        live.append(name)
    for r in range(shape.repeats):
        for name in live if r % 2 == 0 else live[::-1]:
            budget.check()
            b = out["backends"][name]
            b["fresh_s"].append(round(timed(device, lambda: rows[r + 1].run(name)), 5))
            b["same_s"].append(round(timed(device, lambda: rows[0].run(name)), 5))
            b.update(fresh_ms=_ms(b["fresh_s"]), same_ms=_ms(b["same_s"]))
        save()


def run(shapes: tuple[AttentionShape, ...], device: str, budget, entry: dict, save) -> None:
    order = getattr(torch._C, "_get_sdp_priority_order", None)
    entry["shapes"] = []
    for shape in shapes:
        out = {
            "label": shape.label,
            "heads": shape.heads,
            "kv_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "sequences": shape.sequences,
        }
        entry["shapes"].append(out)
        _shape(shape, device, budget, out, save)
    # After the first SDPA call: PyTorch settles its default kernel order then (cuDNN first on
    # some GPUs). The numbers are torch.nn.attention.SDPBackend's.
    entry["sdp"] = {
        "priority_order": [int(x) for x in order()] if order else None,
        "backend_names": {int(b): b.name for b in _sdp_backends()},
        "cudnn_version": torch.backends.cudnn.version() if device == "cuda" else None,
        "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled(),
    }


def _sdp_backends() -> list:
    from torch.nn.attention import SDPBackend

    return [getattr(SDPBackend, n) for n in dir(SDPBackend) if n.isupper() and n != "ERROR"]
