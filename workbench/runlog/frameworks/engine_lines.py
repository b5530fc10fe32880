"""The rollout engines' own periodic lines in a log: the running batch over time.

SGLang's scheduler prints, every `decode_log_interval` decode steps (40 by default),
`Decode batch. #running-req: N, #token: T, token usage: U, [accept len: A, ]... gen throughput
(token/s): X, #queue-req: Q` (python/sglang/srt/managers/scheduler_metrics_mixin.py; older
releases scheduler.py, and `Decode batch, #running-req: ...`). vLLM's stat logger prints every few
seconds `Avg prompt throughput: ..., Avg generation throughput: X tokens/s, Running: N reqs,
Waiting: Q reqs, ...` (V1, `vllm/v1/metrics/loggers.py`, behind `Engine 000:`; V0 says
`Swapped: ..., Pending: Q reqs`) and, with speculative decoding, `SpecDecoding metrics: Mean
acceptance length: A, ...`. Each line is kept with its log line, its time (from the line's own
stamp: SGLang's `[YYYY-MM-DD HH:MM:SS]`, vLLM's `MM-DD HH:MM:SS`; NaN where it has none) and the
engine that printed it (its Ray worker, pid and TP/DP rank where the line names them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import numpy as np

_SGLANG = re.compile(r"Decode batch[.,]\s*#running-req:\s*(\d+)")
_VLLM = re.compile(r"Avg generation throughput:\s*([\d.]+) tokens/s,\s*Running:\s*(\d+) reqs")
_ACCEPT = re.compile(r"accept len:\s*([\d.]+)|Mean acceptance length:\s*([\d.]+)")
_THROUGHPUT = re.compile(r"gen throughput \(token/s\):\s*([\d.]+)")
_QUEUE = re.compile(r"#queue-req:\s*(\d+)|(?:Waiting|Pending):\s*(\d+) reqs")
_STAMP_FULL = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
_STAMP_SHORT = re.compile(r"\b(\d\d-\d\d \d\d:\d\d:\d\d)\b")
_WHO = re.compile(r"\(([^()]*pid=\d+)[^()]*\)|\b(?:DP\d+ )?TP\d+\b|Engine \d+")
SMALL_BATCH = 8  # a running batch this small or smaller: the long tail (a GPU sized for hundreds)


@dataclass(frozen=True)
class RunningBatch:
    """The engines' periodic lines, one entry each (arrays of one length)."""

    line: np.ndarray  # the log's line
    time_s: np.ndarray  # seconds since the first stamped line (NaN: the line has no stamp)
    engine: tuple[str, ...]  # the printing engine (Ray worker and pid, TP rank)
    running: np.ndarray  # sequences decoding
    queued: np.ndarray  # requests waiting (NaN: not printed)
    accept_len: np.ndarray  # tokens per verify pass (NaN: no speculative decoding printed)
    source: str  # sglang or vllm

    @property
    def samples(self) -> int:
        return len(self.line)

    def between(self, first_line: int, last_line: int) -> np.ndarray:
        """Indices of the samples printed between two log lines (inclusive)."""
        return np.flatnonzero((self.line >= first_line) & (self.line <= last_line))


@dataclass(frozen=True)
class StepBatch:
    """One step's rollout as its engines printed it."""

    samples: int
    median: float  # running batch, over the engines' samples
    p90: float
    largest: float
    small_share: float  # share of samples at a running batch <= SMALL_BATCH
    accept_len: float  # median (NaN: none printed)


def _stamp(text: str) -> float:
    for pat, fmt in ((_STAMP_FULL, None), (_STAMP_SHORT, "%m-%d %H:%M:%S")):
        m = pat.search(text)
        if not m:
            continue
        try:
            t = (datetime.fromisoformat(m.group(1).replace("T", " ")) if fmt is None
                 else datetime.strptime("2000-" + m.group(1), "%Y-" + fmt))
        except ValueError:
            continue
        return t.timestamp()
    return float("nan")


def _first(pat: re.Pattern, text: str) -> float:
    m = pat.search(text)
    if not m:
        return float("nan")
    return float(next(g for g in m.groups() if g is not None))


def engine_lines(lines: list[str]) -> RunningBatch | None:
    """The periodic lines of SGLang or vLLM in `lines` (ANSI colours removed); None: none."""
    rows, accept_at = [], {}
    for n, text in enumerate(lines, 1):
        if "running-req" not in text and "Running:" not in text and "acceptance" not in text:
            continue  # most of a log: not an engine's periodic line
        sg, vl = _SGLANG.search(text), _VLLM.search(text)
        who = " ".join(m.group(0) for m in _WHO.finditer(text)) or "engine"
        if sg or vl:
            rows.append((n, _stamp(text), who, float((sg or vl).group(1 if sg else 2)),
                         _first(_QUEUE, text), _first(_ACCEPT, text), "sglang" if sg else "vllm"))
        elif "Mean acceptance length" in text:  # vLLM prints it on a line of its own
            accept_at[who] = _first(_ACCEPT, text)
            if rows and rows[-1][2] == who:
                rows[-1] = rows[-1][:5] + (accept_at[who],) + rows[-1][6:]
    if not rows:
        return None
    t = np.array([r[1] for r in rows])
    t0 = np.nanmin(t) if np.isfinite(t).any() else 0.0
    source = max(("sglang", "vllm"), key=lambda s: sum(r[6] == s for r in rows))
    return RunningBatch(np.array([r[0] for r in rows]), t - t0, tuple(r[2] for r in rows),
                        np.array([r[3] for r in rows]), np.array([r[4] for r in rows]),
                        np.array([r[5] for r in rows]), source)


def step_batch(rb: RunningBatch, first_line: int, last_line: int) -> StepBatch | None:
    """What the engines printed between two log lines (one step's rollout); None: nothing."""
    idx = rb.between(first_line, last_line)
    if not len(idx):
        return None
    r = rb.running[idx]
    acc = rb.accept_len[idx]
    return StepBatch(len(idx), float(np.median(r)), float(np.percentile(r, 90)), float(r.max()),
                     float(np.mean(r <= SMALL_BATCH)),
                     float(np.nanmedian(acc)) if np.isfinite(acc).any() else float("nan"))
