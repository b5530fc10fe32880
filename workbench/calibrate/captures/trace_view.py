"""The traces as the fit sees them: the drafter an engine ran, each step's draft length, and
one frame of every engine step with the cost fit's inputs (`step_frame`); and `sig`, the
rounding every fitted value is stored with."""

from __future__ import annotations

import json
import math
from typing import Sequence

import numpy as np
import pandas as pd

from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.schema import from_mapping
from workbench.contracts.trace import Trace, TraceError

WARMUP_STEPS = 5
DRAFTER_KINDS = (DrafterKind.NONE, DrafterKind.NGRAM, DrafterKind.EAGLE)  # what a capture runs


def trace_drafter_kind(meta: dict) -> DrafterKind:
    """The drafter the traced engine ran: from meta['engine']['speculative_config'] (None: no SD;
    else its method) when the capture recorded it, else meta['engine']['drafter'] if that names a
    kind, else the policy's."""
    eng = meta.get("engine") or {}
    if "speculative_config" in eng:
        spec = eng["speculative_config"]
        if not spec:
            return DrafterKind.NONE
        method = str(spec.get("method", "")).lower() if isinstance(spec, dict) else ""
        if method == "ngram":  # vLLM's method names
            return DrafterKind.NGRAM
        if method.startswith("eagle"):
            return DrafterKind.EAGLE
    d = eng.get("drafter")
    if isinstance(d, dict):
        d = d.get("kind") or d.get("method")
    if isinstance(d, str) and d.lower() in DRAFTER_KINDS:
        return DrafterKind(d.lower())
    kind = ((meta.get("policy") or {}).get("drafter") or {}).get("kind", DrafterKind.NONE)
    if kind not in DRAFTER_KINDS:
        raise TraceError("meta.json", "field 'policy.drafter.kind'", f"is {kind!r}",
                         f"one of {', '.join(DRAFTER_KINDS)}")
    return DrafterKind(kind)


def parse_positions(value) -> np.ndarray:
    """accepted_per_pos as an int array: a list/array, or its JSON text."""
    if value is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(value, (bytes, str)):
        value = value.strip()
        value = json.loads(value) if value else []
    if isinstance(value, float) and math.isnan(value):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(list(value), dtype=np.float64).astype(np.int64)


def scheduled_draft_len(meta: dict, batch_size: np.ndarray) -> np.ndarray | None:
    """Draft length the traced policy's fixed schedule gives each step's batch (None: no fixed
    schedule, or an engine sweep's trace, whose draft lengths are its blocks')."""
    if meta.get("sweep"):
        return None
    try:
        pol = from_mapping(Policy, {"name": "trace", **(meta.get("policy") or {})})
    except Exception:
        return None
    fixed = pol.uses_sd and pol.bandit.algorithm == "fixed"
    if not fixed or trace_drafter_kind(meta) == DrafterKind.NONE:
        return None
    k = np.zeros(len(batch_size), dtype=np.int64)
    for row in pol.schedule:
        hit = (batch_size >= row.min_batch) & (batch_size <= min(row.max_batch, pol.sd_threshold))
        k[hit] = row.draft_len
    return k


def step_draft_len(steps: pd.DataFrame, meta: dict | None = None) -> np.ndarray:
    """Draft length per engine step, as the simulator sees it.

    The captured draft_len (the longest draft any request got), or, where a
    capture left it 0 though requests got drafts, the length of
    accepted_per_pos. With `meta`, a decoding step where the policy's fixed
    schedule asked for drafts but no request got one (n-gram found no match)
    counts as drafting the schedule's length with nothing accepted: the
    simulator runs the schedule, so its costs and acceptance must average over
    such steps too.
    """
    k = steps["draft_len"].to_numpy(np.int64).copy()
    odd = (k == 0) & (steps["num_drafts"].to_numpy() > 0)
    if odd.any():
        k[odd] = [len(parse_positions(v)) for v in steps.loc[odd, "accepted_per_pos"]]
    if meta is not None:
        sched = scheduled_draft_len(meta, steps["batch_size"].to_numpy())
        if sched is not None:
            missed = (k == 0) & (steps["decode_requests"].to_numpy() > 0) & (sched > 0)
            k[missed] = sched[missed]
    return k


def finished_before(s: pd.DataFrame, requests: pd.DataFrame) -> np.ndarray:
    """Per step (of `s`, sorted by rl_step, worker, engine_step): requests of the same worker that
    finished at the end of its previous step (a request's end_s is the end of the step that finished
    it)."""
    out = np.zeros(len(s), dtype=np.int64)
    req = requests[np.isfinite(requests["end_s"].to_numpy(float))]
    groups = req.groupby(["rl_step", "worker"])["end_s"]
    for (rl, w), idx in s.groupby(["rl_step", "worker"]).indices.items():
        if (rl, w) not in groups.groups:
            continue
        ends = (s["start_s"].to_numpy(float) + s["wall_s"].to_numpy(float))[idx]
        done = groups.get_group((rl, w)).to_numpy(float)
        at = np.clip(np.searchsorted(ends, done - 1e-6), 0,
                     len(idx) - 1)  # the step that finished each request
        per_step = np.bincount(at, minlength=len(idx))
        out[idx[1:]] = per_step[:-1]
    return out


def _trace_steps(t: Trace, warmup_steps: int, target: str) -> pd.DataFrame:
    """One trace's engine steps as `step_frame` rows."""
    s = t.steps.sort_values(["rl_step", "worker", "engine_step"]).reset_index(drop=True)
    kind = trace_drafter_kind(t.meta)
    wall = s["wall_s"].to_numpy(float)
    start = s["start_s"].to_numpy(float)
    worker, rl_step = s["worker"].to_numpy(), s["rl_step"].to_numpy()
    same = (worker[1:] == worker[:-1]) & (rl_step[1:] == rl_step[:-1])
    gap = np.zeros(len(s))
    gap[:-1] = np.where(same, np.clip(start[1:] - start[:-1] - wall[:-1], 0.0, None), 0.0)
    first_rl = s.groupby("worker")["rl_step"].transform("min")
    rank = s.groupby(["worker", "rl_step"]).cumcount()
    b = s["decode_requests"].to_numpy(np.int64)
    p = s["prefill_tokens"].to_numpy(np.int64)
    finished = finished_before(s, t.requests)
    f = pd.DataFrame({
        "trace": t.name, "rl_step": s["rl_step"], "worker": s["worker"],
        "engine_step": s["engine_step"],
        "kind": kind, "B": b, "ctx": s["context_mean"].to_numpy(float),
        "K": step_draft_len(s, t.meta), "P": p,
        "wall_s": wall, "gap_s": gap, "y": wall + gap if target == "cycle" else wall, "F": finished,
        "warmup": ((s["rl_step"] == first_rl) & (rank < warmup_steps)).to_numpy(),
    })
    f.loc[f["B"] == 0, "ctx"] = 0.0
    f.loc[f["B"] == 0, "K"] = 0
    f["ctx"] = f["ctx"].fillna(0.0)
    f["why_dropped"] = np.select([~np.isfinite(f["y"]) | (f["y"] <= 0), (b == 0) & (p == 0)],
                                 ["no time", "empty step"], "")
    return f


def step_frame(traces: Sequence[Trace], warmup_steps: int = WARMUP_STEPS,
               target: str = "cycle") -> pd.DataFrame:
    """Every engine step of every trace, with the fit's inputs and whether it is used.

    target "wall": the step's own wall time. "cycle": wall time plus the gap to
    the same engine's next step in the same RL step (host-side work between
    steps), which is what a rollout's wall time is made of, so a profile fitted
    on it predicts rollouts, not just steps (a capture whose wall_s runs from
    one engine output to the next, as `real/rollout/engine.py`'s does, has no gap).
    `warmup` marks the first `warmup_steps` steps of every engine's first RL step.
    """
    if target not in ("wall", "cycle"):
        raise ValueError(f"target {target!r}: allowed: wall, cycle")
    return pd.concat([_trace_steps(t, warmup_steps, target) for t in traces], ignore_index=True)


def fitted_name(trace: Trace) -> str:
    """How a profile's `fitted_on` names a trace: a `tlt train` run's trace (RUN/trace, metrics.csv
    beside it) as `run:` and the run directory's full path, since every run's trace directory is
    called `trace` and two benches both have a `baseline` run; any other trace by its directory
    name."""
    p = trace.path
    if p is not None and p.name == "trace" and (p.parent / "metrics.csv").is_file():
        return f"run:{p.parent.resolve()}"
    return trace.name
