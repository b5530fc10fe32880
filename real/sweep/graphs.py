"""The CUDA graphs a swept engine captured, and the batches that straddle them.

vLLM keys its graphs on a step's tokens: a plain decode step of B sequences is B tokens, a verify
of K drafts B x (K + 1). Above the largest captured size a step runs without a graph (eager), and
SD reaches that size K + 1 times sooner than plain decoding does. The sweep records what each of
its engines captured (`captured`, from the engine's own compilation config: a CPU engine captures
none) and, asked to (`--graph-edges TOKENS`), times the batches just inside and just outside each
draft length's limit (`edge_batches`), so a user's sweep pins where its engine's SD goes eager.
"""

from __future__ import annotations

from typing import Any, Sequence


def captured(engine: Any) -> dict[str, Any]:
    """What an engine (real/rollout/engine.py's RolloutEngine) captured: its CUDA-graph mode and
    capture sizes in tokens, as its vLLM config holds them after start."""
    llm = getattr(engine, "llm", None)
    cfg = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    comp = getattr(cfg, "compilation_config", None)
    if comp is None:
        return {"mode": "unknown", "sizes": [], "max_tokens": None}
    sizes = sorted(int(s) for s in (getattr(comp, "cudagraph_capture_sizes", None) or []))
    mode = getattr(comp, "cudagraph_mode", None)
    return {"mode": getattr(mode, "name", str(mode)), "sizes": sizes,
            "max_tokens": sizes[-1] if sizes else None}


def largest_batch(max_tokens: int | None, k: int) -> int:
    """The largest batch whose verify of K drafts (K + 1 tokens a sequence; K = 0: plain) still
    replays a graph (0: none does)."""
    return 0 if not max_tokens else max_tokens // (k + 1)


def edge_batches(max_tokens: int, draft_lens: Sequence[int], max_num_seqs: int) -> list[int]:
    """For plain decoding and each draft length, the largest batch with a graph and the next one
    (without), within `max_num_seqs`."""
    out = set()
    for k in (0, *draft_lens):
        inside = largest_batch(max_tokens, k)
        out |= {b for b in (inside, inside + 1) if 1 <= b <= max_num_seqs}
    return sorted(out)


def graph_rows(capture: dict[str, Any], batches: Sequence[int],
               draft_lens: Sequence[int]) -> list[dict[str, Any]]:
    """Per batch and draft length (0: plain), whether the engine's verify there replays a graph."""
    top = capture.get("max_tokens")
    return [{"batch": b, "k": k, "tokens": b * (k + 1),
             "graph": bool(top) and b * (k + 1) <= top}
            for b in batches for k in (0, *draft_lens)]
