"""One mixture-of-experts layer on the device, timed by the number of tokens it routes: the
mechanism that decides what speculative decoding costs on a MoE target.

A decode step of batch B routes B tokens, a verify pass of K+1 tokens per sequence B(K+1); each
token goes to `top_k` of `experts` experts, so a pass reads the weights of the experts its tokens
touch, about E(1 - (1 - k/E)^T) of them under uniform routing. At small T that count grows with
T, so a verify pass can read several times a decode step's expert weights; at large T every
expert is read either way. This section times the layer as a fused MoE engine runs it (router,
top-k, tokens sorted by expert, one grouped GEMM for the gate/up projections and one for the down
projection over only the experts that received tokens, `torch._grouped_mm`), captured in a CUDA
graph per token count (the engines' decode path), with random weights and new random tokens
before every replay (so the routing, and the experts read, change every time, as in a rollout).
Beside it: the experts the routing touched, the layer's weight bytes they hold, and the device's
read bandwidth measured in the same run, so the comparison (workbench/calibrate/gpu_check/)
prices the layer as bytes read over bandwidth and sets it against the time measured.
"""

from __future__ import annotations

import statistics
import time

import torch

from real.gpu_check.plan import MoeShape

BYTES = 2  # bf16 (a CPU run times float32 at tiny shapes; the bytes it reports are per bf16)


class MoeLayer:
    """Random weights of one MoE layer (and its shared expert, if any) in the layout grouped
    GEMMs read: gate/up [E, 2I, H] and down [E, H, I], each used transposed."""

    def __init__(self, shape: MoeShape, device: str, dtype: torch.dtype, seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)
        e, h, i = shape.experts, shape.hidden, shape.moe_intermediate
        scale = h**-0.5

        def draw(*dims: int) -> torch.Tensor:
            return torch.randn(*dims, device=device, dtype=dtype, generator=gen) * scale

        self.shape = shape
        self.router = draw(h, e)
        self.gate_up = draw(e, 2 * i, h)
        self.down = draw(e, h, i)
        s = shape.shared_intermediate
        self.shared = (draw(h, 2 * s), draw(s, h)) if s else None

    def expert_bytes(self) -> int:
        return 3 * self.shape.hidden * self.shape.moe_intermediate * BYTES

    def fixed_bytes(self) -> int:
        """Read every pass whatever the routing: the router and the shared expert."""
        s = self.shape
        return (s.hidden * s.experts + 3 * s.hidden * s.shared_intermediate) * BYTES

    def forward(self, x: torch.Tensor, touched: torch.Tensor) -> torch.Tensor:
        """The layer on tokens `x` [T, H]; `touched` [E] receives how many token slots each
        expert got (static shapes throughout, so a CUDA graph can hold it)."""
        k, e = self.shape.top_k, self.shape.experts
        probs = torch.softmax((x @ self.router).float(), dim=-1)
        weight, expert = torch.topk(probs, k, dim=-1)
        flat = expert.flatten()
        order = torch.argsort(flat, stable=True)
        token = order // k
        counts = torch.zeros(e, device=x.device, dtype=torch.int32)
        counts.scatter_add_(0, flat.to(torch.int32), torch.ones_like(flat, dtype=torch.int32))
        touched.copy_(counts)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        xs = x[token]
        up = torch._grouped_mm(xs, self.gate_up.transpose(-2, -1), offs=offs)
        half = up.shape[-1] // 2
        act = torch.nn.functional.silu(up[:, :half]) * up[:, half:]
        y = torch._grouped_mm(act, self.down.transpose(-2, -1), offs=offs)
        y = y * weight.flatten()[order, None].to(y.dtype)
        out = torch.zeros_like(x).index_add_(0, token, y)
        if self.shared is not None:
            gu = x @ self.shared[0]
            s = gu.shape[-1] // 2
            out = out + (torch.nn.functional.silu(gu[:, :s]) * gu[:, s:]) @ self.shared[1]
        return out


def _bandwidth_gbs(device: str, budget) -> float | None:
    """Read bandwidth: a sum over 2 GiB (64 MiB on a CPU), the median of several."""
    n = (2**30 if device == "cuda" else 2**25) // BYTES
    buf = torch.ones(n, device=device, dtype=torch.bfloat16)
    times = []
    for _ in range(6):
        budget.check()
        _sync(device)
        t0 = time.perf_counter()
        buf.sum()
        _sync(device)
        times.append(time.perf_counter() - t0)
    del buf
    return round(n * BYTES / statistics.median(times[1:]) / 1e9, 1)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class _Runner:
    """The layer at one token count: a CUDA graph replayed (eager on a CPU, or where the capture
    fails, recorded as such), fresh tokens drawn before each replay, each replay timed alone."""

    def __init__(self, layer: MoeLayer, tokens: int, device: str, dtype: torch.dtype):
        self.layer, self.device = layer, device
        self.x = torch.randn(tokens, layer.shape.hidden, device=device, dtype=dtype)
        self.touched = torch.zeros(layer.shape.experts, device=device, dtype=torch.int32)
        self.graph, self.mode = None, "eager"
        if device == "cuda":
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        layer.forward(self.x, self.touched)
                torch.cuda.current_stream().wait_stream(side)
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    layer.forward(self.x, self.touched)
                self.mode = "graph"
            except RuntimeError as exc:
                self.graph, self.mode = None, f"eager (graph capture failed: {exc})"[:200]

    def time_once(self) -> tuple[float, int]:
        self.x.normal_()
        _sync(self.device)
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.graph.replay() if self.graph else self.layer.forward(self.x, self.touched)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            self.layer.forward(self.x, self.touched)
            seconds = time.perf_counter() - t0
        return seconds, int((self.touched > 0).sum())


def _shape(shape: MoeShape, device: str, budget, bandwidth: float | None) -> dict:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    layer = MoeLayer(shape, device, dtype, seed=0)
    points = []
    for tokens in shape.tokens:
        budget.check()
        run = _Runner(layer, tokens, device, dtype)
        for _ in range(2):
            run.time_once()
        times, touched = [], []
        for _ in range(shape.repeats):
            s, t = run.time_once()
            times.append(s)
            touched.append(t)
        points.append({
            "tokens": tokens,
            "ms": round(1e3 * statistics.median(times), 4),
            "ms_min": round(1e3 * min(times), 4),
            "experts_touched": round(statistics.mean(touched), 2),
            "mode": run.mode,
        })
        del run
    return {
        "label": shape.label,
        "experts": shape.experts,
        "top_k": shape.top_k,
        "hidden": shape.hidden,
        "moe_intermediate": shape.moe_intermediate,
        "shared_intermediate": shape.shared_intermediate,
        "expert_mib": round(layer.expert_bytes() / 2**20, 3),
        "fixed_mib": round(layer.fixed_bytes() / 2**20, 3),
        "dtype": str(dtype).removeprefix("torch."),
        "bandwidth_gbs": bandwidth,
        "points": points,
    }


def run(shapes: tuple[MoeShape, ...], device: str, budget, entry: dict, save) -> None:
    """Each shape's points into entry["moe"], saved after each shape."""
    entry["bandwidth_gbs"] = _bandwidth_gbs(device, budget)
    entry["moe"] = []
    for shape in shapes:
        entry["moe"].append(_shape(shape, device, budget, entry["bandwidth_gbs"]))
        save()
        if device == "cuda":
            torch.cuda.empty_cache()
