"""Measuring one TP rank of an architecture, operator by operator (`measure`).

For each grid point (grid.py) the profiler builds the tensors the step touches (a KV cache of
exactly the step's context per layer, static inputs) and times, on one rank's shapes
(shard.py): one decoder layer (cycling through `grid.distinct_layers` copies so that no
repeat finds the last one's weights in the cache), and the head (embedding, final norm, LM
head, token choice). The step is `layers x layer + head + collectives`. On CUDA, decode,
verify and drafter steps are timed replayed from CUDA graphs, as production engines run them,
and eagerly beside; prefill and training are eager (engines do not capture them). The
whole-model check (`check_whole`) builds every layer and times the whole forward as one,
interleaved with the per-layer timing it is compared to.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from real.profiler.grid import GRIDS, Grid, Point, distinct_layers, points
from real.profiler.ops import DecoderLayer, Drafter, Head, KVCache, rotary
from real.profiler.settings import Settings
from real.profiler.shard import Link, Shard, shard
from real.profiler.table import SCHEMA, Measurements, Row, frame
from real.profiler.timing import Timer, Timing

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
Progress = Callable[[int, int, str], None]


class Rank:
    """One rank's modules, built on first use: distinct decoder layers, the head, the drafter."""

    def __init__(self, s: Shard, device: torch.device, dtype: torch.dtype):
        self.shard, self.device, self.dtype = s, device, dtype
        self.dtype_bytes = torch.finfo(dtype).bits // 8
        self._layers: list[DecoderLayer] = []
        self.head = self._build(lambda: Head(s))
        self._drafter: Drafter | None = None

    def _build(self, make: Callable[[], torch.nn.Module]):
        with torch.device(self.device):
            return make().to(self.dtype)

    def layers(self, n: int) -> list[DecoderLayer]:
        while len(self._layers) < n:
            self._layers.append(self._build(lambda: DecoderLayer(self.shard)))
        return self._layers[:n]

    @property
    def drafter(self) -> Drafter:
        if self._drafter is None:
            self._drafter = self._build(lambda: Drafter(self.shard))
        return self._drafter

    def layer_bytes(self, p: Point) -> int:
        return self.shard.layer_params * self.dtype_bytes + self.shard.kv_bytes(
            p.batch, p.context + p.tokens, self.dtype_bytes
        )


@dataclass
class StepFns:
    """The callables one target point times: a chain of `copies` layers, the head, the whole
    model."""

    chain: Callable[[], torch.Tensor]
    head: Callable[[], torch.Tensor]
    copies: int
    whole: Callable[[], torch.Tensor] | None = None


def target_fns(rank: Rank, p: Point, copies: int, whole: bool = False) -> StepFns:
    """decode, verify and prefill: the new tokens' forward over each layer's KV cache. Prefill
    computes logits for its last position only, as engines do."""
    s, dev, dt = rank.shard, rank.device, rank.dtype
    layers = rank.layers(s.arch.layers if whole else copies)
    caches = [KVCache(s, p.batch, p.context + p.tokens, dev, dt) for _ in layers]
    cos, sin = rotary(s.head_dim, p.context, p.tokens, dev, dt)
    x = torch.randn(p.batch, p.tokens, s.hidden, device=dev, dtype=dt)
    ids = torch.randint(0, s.vocab, (p.batch, p.tokens), device=dev)
    last = slice(p.tokens - 1, p.tokens) if p.op == "prefill" else slice(None)

    def run(y: torch.Tensor, n: int) -> torch.Tensor:
        for layer, cache in zip(layers[:n], caches[:n]):
            y = layer(y, p.context, cos, sin, cache)
        return y

    def head() -> torch.Tensor:
        rank.head.embed(ids)
        return rank.head.logits(x[:, last]).argmax(-1)

    def model() -> torch.Tensor:
        return rank.head.logits(run(rank.head.embed(ids), len(layers))[:, last]).argmax(-1)

    return StepFns(lambda: run(x, copies), head, copies, model if whole else None)


def time_mode(timer: Timer, fn: Callable[[], torch.Tensor], mode: str) -> Timing:
    return timer.graph(fn) if mode == "graph" else timer.eager(fn)


def measure_target(rank: Rank, timer: Timer, p: Point, mode: str, link: Link,
                   cache_bytes: int) -> Row:
    s = rank.shard
    copies = distinct_layers(rank.layer_bytes(p), s.arch.layers, cache_bytes)
    fns = target_fns(rank, p, copies)
    layer = time_mode(timer, fns.chain, mode)
    head = time_mode(timer, fns.head, mode)
    per_layer = layer.seconds / copies
    coll = s.collectives_s(p.batch * p.tokens, link, rank.dtype_bytes,
                           p.batch if p.op == "prefill" else None)
    return Row(p.op, p.batch, p.context, p.tokens, p.topk, mode,
               s.arch.layers * per_layer + head.seconds + coll, per_layer, head.seconds, coll,
               s.arch.layers, copies, layer.p10_s / copies, layer.p90_s / copies, layer.runs)


def measure_drafter(rank: Rank, timer: Timer, p: Point, mode: str, link: Link) -> Row:
    """One drafter forward: B sequences x top-k candidates over the drafter layer's KV cache of C,
    then top-k over the logits (the next tree level's candidates)."""
    s, dev, dt = rank.shard, rank.device, rank.dtype
    cache = KVCache(s, p.batch, p.context + p.tokens, dev, dt)
    cos, sin = rotary(s.head_dim, p.context, p.tokens, dev, dt)
    hidden = torch.randn(p.batch, p.tokens, s.hidden, device=dev, dtype=dt)
    ids = torch.randint(0, s.vocab, (p.batch, p.tokens), device=dev)
    drafter, head = rank.drafter, rank.head
    t = time_mode(timer,
                  lambda: drafter(head, ids, hidden, p.context, cos, sin,
                                  cache).topk(p.topk, dim=-1).indices, mode)
    coll = s.drafter_collectives_s(p.batch * p.tokens, link, rank.dtype_bytes)
    return Row(p.op, p.batch, p.context, p.tokens, p.topk, mode, t.seconds + coll, t.seconds, 0.0,
               coll, 1, 1, t.p10_s, t.p90_s, t.runs)


def train_fns(rank: Rank, p: Point) -> tuple[Callable[[], object], Callable[[], object]]:
    """(one layer, the head with its loss) of the policy update, forward only or with backward."""
    s, dev, dt = rank.shard, rank.device, rank.dtype
    layer = rank.layers(1)[0]
    cos, sin = rotary(s.head_dim, 0, p.tokens, dev, dt)
    x = torch.randn(p.batch, p.tokens, s.hidden, device=dev, dtype=dt, requires_grad=True)
    ids = torch.randint(0, s.vocab, (p.batch * p.tokens,), device=dev)
    backward = p.op == "train_fwd_bwd"

    def layer_step():
        with torch.set_grad_enabled(backward):
            y = layer(x, 0, cos, sin)
            if backward:
                y.backward(torch.ones_like(y))

    def head_step():
        with torch.set_grad_enabled(backward):
            loss = F.cross_entropy(rank.head.logits(x).flatten(0, 1).float(), ids)
            if backward:
                loss.backward()

    return layer_step, head_step


def drafter_train_fn(rank: Rank, p: Point) -> Callable[[], object]:
    """The drafter's forward+backward (soft cross-entropy against the target's distribution);
    the target's embedding and LM head stay frozen, as in spot training."""
    s, dev, dt = rank.shard, rank.device, rank.dtype
    cos, sin = rotary(s.head_dim, 0, p.tokens, dev, dt)
    hidden = torch.randn(p.batch, p.tokens, s.hidden, device=dev, dtype=dt)
    ids = torch.randint(0, s.vocab, (p.batch, p.tokens), device=dev)
    target = torch.softmax(torch.randn(p.batch * p.tokens, s.vocab, device=dev), dim=-1)
    rank.head.requires_grad_(False)

    def step():
        logits = rank.drafter(rank.head, ids, hidden, 0, cos, sin).flatten(0, 1).float()
        torch.sum(-target * torch.log_softmax(logits, dim=-1), dim=-1).mean().backward()

    return step


def measure_training(rank: Rank, timer: Timer, p: Point) -> Row:
    """Eager, one rank (training is data-parallel: build the rank with TP 1). For train ops the
    step is the whole model's forward (+ backward) over B x T tokens; per token divides by it."""
    if p.op == "drafter_train":
        t = timer.eager(drafter_train_fn(rank, p))
        return Row(p.op, p.batch, 0, p.tokens, 1, "eager", t.seconds, t.seconds, 0.0, 0.0, 1, 1,
                   t.p10_s, t.p90_s, t.runs)
    layer_fn, head_fn = train_fns(rank, p)
    layer, head = timer.eager(layer_fn), timer.eager(head_fn)
    n = rank.shard.arch.layers
    return Row(p.op, p.batch, 0, p.tokens, 1, "eager", n * layer.seconds + head.seconds,
               layer.seconds, head.seconds, 0.0, n, 1, layer.p10_s, layer.p90_s, layer.runs)


def check_whole(rank: Rank, timer: Timer, p: Point, mode: str, rounds: int,
                cache_bytes: int) -> Row:
    """The whole model's forward (every layer, one rank, no collectives) against layers x one
    layer + head timed as `measure_target` times them, in `rounds` interleaved rounds (a
    machine's speed drifts)."""
    s = rank.shard
    copies = distinct_layers(rank.layer_bytes(p), s.arch.layers, cache_bytes)
    fns = target_fns(rank, p, copies, whole=True)
    layer, head, whole = [], [], []
    for _ in range(rounds):
        layer.append(time_mode(timer, fns.chain, mode))
        head.append(time_mode(timer, fns.head, mode))
        whole.append(time_mode(timer, fns.whole, mode))
    # Each side's fastest round, as `fastest_pass` keeps for the profile: on a shared machine
    # other processes only add time, and the rounds interleave, so both sides had the same chances.
    fast = lambda ts: min(t.seconds for t in ts)
    per_layer = fast(layer) / copies
    return Row("whole", p.batch, p.context, p.tokens, 1, mode,
               s.arch.layers * per_layer + fast(head), per_layer, fast(head), 0.0, s.arch.layers,
               copies, math.nan, math.nan, rounds * timer.repeats, whole_s=fast(whole))


def cache_bytes(device: torch.device) -> int:
    """The device's last-level cache: the GPU's L2, or the CPU's largest cache (32 MiB if
    unknown)."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20))
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        unit = {"K": 2**10, "M": 2**20}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KM")) * unit)
    return max(sizes, default=32 * 2**20)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = next((line.split(":", 1)[1].strip()
                  for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")),
                 "CPU") if Path("/proc/cpuinfo").is_file() else "CPU"
    return f"{model}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def whole_model_fits(rank: Rank, p: Point) -> bool:
    """Whether every layer with its KV cache fits in the device's free memory (with a margin)."""
    need = rank.shard.arch.layers * rank.layer_bytes(p)
    if rank.device.type == "cuda":
        return need < 0.7 * torch.cuda.mem_get_info(rank.device)[0]
    return need < 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def check_points(g: Grid) -> list[Point]:
    """The whole-model check: decode at every grid batch up to 64, at the middle context."""
    context = g.contexts[len(g.contexts) // 2]
    return [Point("decode", b, context, 1) for b in g.batches if b <= 64]


def meta(st: Settings, device: torch.device, grid: Grid, llc: int, clock: str,
         modes: tuple[str, ...] = ("graph", "eager")) -> dict:
    a = st.arch
    return {
        "schema": SCHEMA,
        "architecture": a.name,
        "shape": {k: getattr(a, k) for k in a.__dataclass_fields__},
        "tp": st.tp,
        "dtype": st.dtype,
        "device": device.type,
        "device_name": device_name(device),
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": st.repeats,
        "passes": st.passes,
        "warmup": st.warmup,
        "seed": st.seed,
        "grid": st.grid,
        "grid_points": {k: getattr(grid, k) for k in grid.__dataclass_fields__},
        "link": {
            "allreduce_latency_s": st.link.latency_s,
            "bus_bytes_per_s": st.link.bus_bytes_per_s,
        },
        "cache_bytes": llc,
        "clock": clock,
        "decode_mode": modes[0] if device.type == "cuda" else "eager",
    }


def jobs(grid: Grid, modes: tuple[str, ...],
         check: bool) -> tuple[list[tuple[str, Point, str]], list[Point]]:
    """(what, point, mode) of the inference points, then the whole-model checks; and the training
    points."""
    pts = points(grid)
    infer = [p for p in pts if p.op in ("decode", "verify", "drafter", "prefill")]
    out = [("drafter" if p.op == "drafter" else "target", p, m)
           for p in infer for m in (("eager",) if p.op == "prefill" else modes)]
    out += [("whole", p, m) for p in (check_points(grid) if check else []) for m in modes]
    return out, [p for p in pts if p not in infer]


def fastest_pass(rows: list[Row]) -> Row:
    """The pass with the shortest step: other processes on a shared machine only ever add time
    (they evict caches and share the core), so the fastest pass's median is the closest to
    the step on a machine of its own (timeit takes the minimum for the same reason); its
    components stay together."""
    return min(rows, key=lambda r: r.step_s)


def measure_infer(rank: Rank, timer: Timer, st: Settings, todo: list, llc: int, say: Progress,
                  total: int) -> list[Row]:
    """The inference points in `st.passes` interleaved passes (a busy machine's slow spells then
    hit one pass of a point, not all: each point keeps its fastest pass), then the whole-model
    checks."""
    per_job: dict[int, list[Row]] = {}
    targets = [(i, job) for i, job in enumerate(todo) if job[0] != "whole"]
    for k in range(st.passes):
        for i, (what, p, mode) in targets:
            fn = measure_drafter if what == "drafter" else measure_target
            args = (st.link,) if what == "drafter" else (st.link, llc)
            per_job.setdefault(i, []).append(fn(rank, timer, p, mode, *args))
            r = per_job[i][-1]
            say(i + 1, total,
                f"{what} {p.label()} {mode}: {1e3 * r.step_s:.3f} ms (pass {k + 1}/{st.passes})")
    rows = [fastest_pass(per_job[i]) for i, _ in targets]
    for what, p, mode in (job for job in todo if job[0] == "whole"):
        if not whole_model_fits(rank, p):
            say(len(rows), total,
                f"whole-model check at {p.label()}: skipped, the model does not fit")
            continue
        rows.append(check_whole(rank, timer, p, mode, st.check_rounds, llc))
        say(len(rows), total, f"whole {p.label()} {mode}: {1e3 * rows[-1].step_s:.3f} ms (sum over "
                              f"layers); whole model {1e3 * rows[-1].whole_s:.3f} ms")
    return rows


def measure(st: Settings, grid: Grid | None = None, progress: Progress | None = None,
            ops: tuple[str, ...] | None = None,
            modes: tuple[str, ...] | None = None) -> Measurements:
    """Every point of `grid` (default: the grid `st.grid` names) and the whole-model check;
    `progress(i, n, line)` after each. `ops`: only these ops of the grid ("whole" names the
    whole-model check; None: all). `modes`: how CUDA steps are timed (default graph and eager;
    ("eager",) where graphs cannot be captured); a CPU times eagerly."""
    grid = grid or GRIDS[st.grid]
    device = torch.device(st.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device here")
    threads = torch.get_num_threads()
    if st.threads:
        torch.set_num_threads(st.threads)
    modes = ("eager",) if device.type != "cuda" else (modes or ("graph", "eager"))
    try:
        return _measure(st, grid, device, progress or (lambda i, n, line: None), ops, modes)
    finally:
        # a caller in the same process (the test suite) keeps its own
        torch.set_num_threads(threads)


def _measure(st: Settings, grid: Grid, device: torch.device, say: Progress,
             ops: tuple[str, ...] | None, modes: tuple[str, ...]) -> Measurements:
    torch.manual_seed(st.seed)
    dtype, llc = DTYPES[st.dtype], cache_bytes(device)
    todo, train = jobs(grid, modes, st.check_rounds > 0)
    if ops is not None:
        todo = [j for j in todo if ("whole" if j[0] == "whole" else j[1].op) in ops]
        train = [p for p in train if p.op in ops]
    total = len(todo) + len(train)
    rank = Rank(shard(st.arch, st.tp), device, dtype)
    timer = Timer(device, st.repeats, st.warmup)
    with torch.inference_mode():
        rows = measure_infer(rank, timer, st, todo, llc, say, total)
    del rank
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if train:
        # training is data-parallel: whole layers
        train_rank = Rank(shard(st.arch, 1), device, dtype)
    for p in train:
        rows.append(measure_training(train_rank, timer, p))
        say(len(rows), total,
            f"{p.label()}: {1e6 * rows[-1].step_s / (p.batch * p.tokens):.2f} us per token")
    return Measurements(frame(rows), meta(st, device, grid, llc, timer.clock_name, modes))
