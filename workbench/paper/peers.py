"""TLT's peers, each in its own setting: the simulator's prediction beside the published claim.

A team weighing TLT against asynchronous RL, partial rollouts, tail batching or drafts from
history asks what each would buy on its own workload; the first check of the simulator is
whether it reproduces what each method's paper claims in that paper's setting. Each case runs
the peer's workload preset (`peer-*`, provenance in the file) under `baseline` (veRL, sync, no
SD) and the peer's policy preset, on the same seeds, and reports the claimed quantity:

- `step_speedup`: the baseline's mean step time / the policy's (end-to-end training speed);
- `rollout_speedup`: the same for the rollout phase alone;
- `rollout_throughput`: the policy's response tokens per rollout second / the baseline's.

SPEC-RL's claim holds from the second epoch on (its drafts are earlier epochs' answers): its
case counts the steps after the first pass over the prompt set. Each row's published value is
the middle of the claimed range, and each case says what drives the prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from sim.results import PolicyRun
from sim.sweep import sweep
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.paper.reproduce import PaperRow


@dataclass(frozen=True)
class PeerCase:
    peer: str
    claim: str  # the published claim, in words
    low: float
    high: float
    metric: str  # "step_speedup", "rollout_speedup" or "rollout_throughput"
    workload: str
    policy: str


PEERS = (
    PeerCase("RollPacker", "2.03-2.56x end to end vs veRL", 2.03, 2.56, "step_speedup",
             "peer-rollpacker-32b-128gpu", "rollpacker"),
    PeerCase("APRIL", "+22.5% rollout throughput on average (up to +44%)", 1.225, 1.225,
             "rollout_throughput", "peer-april-7b-8gpu", "april"),
    PeerCase("veRL fully async",
             "2.35-2.67x end to end (veRL fully_async_policy, Qwen2.5-7B, 128 GPUs; AReaL: up to "
             "2.57x)",
             2.35, 2.67, "step_speedup", "peer-async-7b-128gpu", "verl-fully-async"),
    PeerCase("SPEC-RL", "2-3x faster rollout", 2.0, 3.0, "rollout_speedup", "peer-spec-rl-7b-8gpu",
             "history-sd"),
)


@dataclass(frozen=True)
class PeerExplanation:
    """What drives a peer's prediction, measured in its runs."""

    peer: str
    steps_counted: str
    baseline_rollout_share: float  # rollout / step, baseline
    baseline_bubble: float  # idle engine-time share of the baseline's rollout
    # None when the policy streams: its steps have no rollout of their own
    policy_rollout_share: float | None
    policy_train_share: float  # train / step: with async, the trainer's busy share of the pace
    policy_lag: float  # mean policy updates behind its trained samples
    groups_left: float  # mean groups left unfinished per step (partial, tail batching)
    accept_len: float  # tokens per verify pass (history drafts)


def _value(metric: str, base: PolicyRun, pol: PolicyRun, first: int) -> float:
    b, p = base.steps[first:], pol.steps[first:]
    mean = lambda steps, name: float(np.mean([getattr(s, name) for s in steps]))  # noqa: E731
    if metric == "step_speedup":
        return mean(b, "step_time_s") / mean(p, "step_time_s")
    if metric == "rollout_speedup":
        return mean(b, "rollout_time_s") / mean(p, "rollout_time_s")
    return mean(p, "tokens_per_s") / mean(b, "tokens_per_s")


def _explain(case: PeerCase, base: list[PolicyRun], pol: list[PolicyRun],
             first: int) -> PeerExplanation:
    def avg(runs: list[PolicyRun], name: str, ratio_to: str | None = None) -> float:
        vals = [getattr(s, name) / (getattr(s, ratio_to) if ratio_to else 1.0) for r in runs
                for s in r.steps[first:]]
        return float(np.mean(vals))

    streamed = load_policy(case.policy).rollout.stream
    return PeerExplanation(case.peer, f"{first}-{len(base[0].steps) - 1}",
                           avg(base, "rollout_time_s", "step_time_s"), avg(base, "bubble_fraction"),
                           None if streamed else avg(pol, "rollout_time_s", "step_time_s"),
                           avg(pol, "train_time_s", "step_time_s"), avg(pol, "policy_lag"),
                           avg(pol, "groups_left"), avg(pol, "mean_accept_len"))


def peer_rows(steps: int, seeds: list[int],
              on_progress: Callable[[str], None] | None = None,
              ) -> tuple[list[PaperRow], list[PeerExplanation]]:
    """Each peer's case: `steps` RL steps counted (after the first epoch where drafts need one)."""
    rows, expl = [], []
    for case in PEERS:
        wl = load_workload(case.workload)
        first = wl.epoch_steps
        runs = {(r.policy.name, r.seed): r.run for r in sweep(
            wl, [load_policy("baseline"), load_policy(case.policy)], load_profile(wl.profile),
            seeds, first + steps)}
        base = [runs[("baseline", s)] for s in seeds]
        pol = [runs[(case.policy, s)] for s in seeds]
        value = float(np.mean([_value(case.metric, b, p, first) for b, p in zip(base, pol)]))
        rows.append(PaperRow("peers",
                             f"{case.peer}: {case.policy} on {case.workload}, {case.metric} "
                             f"({case.claim})",
                             (case.low + case.high) / 2, value, "predicted"))
        expl.append(_explain(case, base, pol, first))
        if on_progress:
            on_progress(f"{case.peer}: simulated baseline and {case.policy} x {len(seeds)} seed(s) "
                        f"x {first + steps} steps")
    return rows, expl
