"""The simulated run a capture describes, built from the trace itself: the workload, the policy
the traced engine ran, and the traced response lengths in the order the simulator shards them.
workbench/validate/capture.py replays it to validate a profile."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sim.rollout import shard
from workbench.calibrate.captures.trace_view import step_draft_len, trace_drafter_kind
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError, from_mapping
from workbench.contracts.strategy import ScheduleBucket
from workbench.contracts.trace import Trace, TraceError
from workbench.contracts.workload import Workload


@dataclass(frozen=True)
class ScheduleOverride:
    """A schedule bucket whose traced steps mostly ran another draft length: the replay uses
    theirs."""

    bucket: tuple[int, int]  # (min_batch, max_batch)
    schedule: int  # the draft length the schedule gives it
    traced: int  # the traced steps' majority draft length

    def to_dict(self) -> dict[str, Any]:
        return {"bucket": list(self.bucket), "schedule": self.schedule, "traced": self.traced}


@dataclass(frozen=True)
class TracePolicy:
    """The policy a traced engine ran, as the simulator replays it, and how it was set from the
    trace."""

    policy: Policy
    drafter: str  # the drafter kind the engine ran
    schedule_overridden: list[ScheduleOverride] | None  # None: no SD schedule to check
    off_threshold_sd_steps: int  # traced steps that drafted above the SD threshold


def rl_index(trace: Trace) -> list[int]:
    """The trace's RL steps, in order."""
    return sorted(set(trace.requests["rl_step"].astype(int)))


def trace_workload(trace: Trace, profile: Profile) -> Workload:
    meta, steps, req = trace.meta, trace.steps, trace.requests
    eng = meta.get("engine") or {}
    max_batch = eng.get("max_num_seqs") or int(steps["batch_size"].max())
    wl = Workload(name=f"trace:{trace.name}", profile=profile.name,
                  workers=int(steps["worker"].nunique()),
                  prompts_per_step=int(meta["prompts"]), group_size=int(meta["samples"]),
                  max_response_tokens=int(meta["max_tokens"]),
                  prompt_tokens=max(1, int(round(float(req["prompt_tokens"].mean())))),
                  max_batch=int(max_batch), steps=len(rl_index(trace)),
                  gpus_per_worker=int(eng.get("tensor_parallel_size", 1) or 1),
                  source=f"built from trace {trace.name} by tlt validate")
    try:
        wl.check()
    except Exception as exc:
        raise TraceError(trace.path or trace.name, "meta.json",
                         f"does not make a valid workload ({exc})",
                         "check prompts, samples, max_tokens and engine.max_num_seqs") from None
    return wl


def _check_schedule(pol: Policy, trace: Trace,
                    kind: DrafterKind) -> tuple[Policy, list[ScheduleOverride] | None, int]:
    """Did the traced steps follow the schedule? Per bucket, the traced draft lengths: a bucket
    whose steps mostly ran another length takes theirs. Returns (policy, overrides, off-threshold SD
    steps)."""
    s = trace.steps
    k = step_draft_len(s, trace.meta)
    batch = s["batch_size"].to_numpy()
    decoding = s["decode_requests"].to_numpy() > 0
    overridden = None
    if kind != DrafterKind.NONE and pol.schedule:
        rows, overridden = [], []
        for row in pol.schedule:
            expect = row.draft_len if row.min_batch <= pol.sd_threshold else 0
            inb = decoding & (batch >= row.min_batch) & (batch <= row.max_batch)
            if row.max_batch > pol.sd_threshold:  # the part above the threshold runs without SD
                inb &= batch <= pol.sd_threshold
            seen = Counter(k[inb].tolist())
            majority, count = seen.most_common(1)[0] if seen else (None, 0)
            if seen and majority != expect and count > 0.5 * inb.sum():
                traced = int(majority)
                overridden.append(ScheduleOverride((row.min_batch, row.max_batch), expect, traced))
                row = ScheduleBucket(row.min_batch, row.max_batch, traced)
            rows.append(row)
        if overridden:
            pol = replace(pol, schedule=tuple(rows))
    sd_off = decoding & (batch > pol.sd_threshold) if kind != DrafterKind.NONE else decoding
    return pol, overridden, int(np.sum(sd_off & (k > 0)))


def trace_policy(trace: Trace) -> TracePolicy:
    """The policy the traced engine ran, as a fixed schedule (see the module docstring)."""
    meta = trace.meta
    mapping = dict(meta.get("policy") or {})
    mapping.setdefault("name", f"trace:{trace.name}")
    try:
        pol = from_mapping(Policy, mapping, f"{trace.path or trace.name}/meta.json", "policy")
    except ConfigError as exc:
        raise TraceError(trace.path or trace.name, "meta.json", f"policy: {exc}",
                         "the trace's policy must be a valid Policy") from None
    kind = trace_drafter_kind(meta)
    drafter = replace(pol.drafter, kind=kind, warm_start=kind == DrafterKind.EAGLE,
                      ngram_fallback=False)
    spot = replace(pol.spot_training, enabled=False)
    # The replay holds each RL step's prompts x samples, run to the end: a sync rollout.
    pol = replace(pol, bandit=replace(pol.bandit, algorithm="fixed"), drafter=drafter,
                  spot_training=spot, rollout=replace(pol.rollout, mode="sync", oversample=0.0))
    pol, overridden, off_threshold = _check_schedule(pol, trace, kind)
    pol.check()
    return TracePolicy(pol, kind, overridden, off_threshold)


def trace_replay(trace: Trace, wl: Workload) -> tuple[list[np.ndarray], float]:
    """Per RL step, the traced response lengths in the order the simulator shards them; and the
    share of responses the simulator's shards put on the engine that served them."""
    req = trace.requests
    replay, matches = [], []
    for rl in rl_index(trace):
        r = req[req["rl_step"] == rl]
        n = wl.prompts_per_step * wl.group_size
        sizes = r.groupby("prompt_id").size()
        if len(r) != n or (sizes != wl.group_size).any():
            raise TraceError(trace.path or trace.name, "requests.parquet",
                             f"RL step {rl} has {len(r)} responses in {len(sizes)} prompts",
                             f"a validated trace needs prompts x samples = {wl.prompts_per_step} x "
                             f"{wl.group_size} per RL step "
                             "(sync rollouts)")
        group_worker = r.groupby("prompt_id")["worker"].min()
        order = r.assign(group_worker=r["prompt_id"].map(group_worker))
        order = order.sort_values(["group_worker", "prompt_id", "sample"])
        replay.append(order["response_tokens"].to_numpy(np.int64))
        workers = order["worker"].to_numpy()
        worker_ids = {e: i for i, e in enumerate(sorted(set(workers)))}
        expect = np.empty(len(order), int)
        for w, rg in enumerate(shard(len(order), wl.workers)):
            expect[list(rg)] = w
        matches.append(float(np.mean([worker_ids[e] == x for e, x in zip(workers, expect)])))
    return replay, float(np.mean(matches))
