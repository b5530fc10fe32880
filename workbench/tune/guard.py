"""The tuner's guard: a tuned policy never runs SD in a bucket where its profile predicts SD slower
than plain decoding (workbench/schedule.py `guard_policy`), on every target.

Every trial's policy is guarded before it is simulated, so the study scores, stores and returns the
guarded policy (`tlt tune`'s result, and each trial's `sd_guard` attribute says what was changed).
The guard judges a bucket at the workload's typical decoding context (`guard_context`: the prompt
and half a median correct answer): SD's speedup grows with the context, so a bucket judged there
may lose in a response's first tokens and pay in its last. It turns a losing bucket off where the
target's table holds an SD-off row (vLLM's and veRL's chains, this project's backend, the
simulator), and otherwise lowers the threshold below it (SGLang/FastRL turn SD off by the
threshold alone). Suffix drafts are not guarded: their acceptance depends on the rollout's
history (earlier epochs' answers, finished siblings), which no batch-level prediction holds.
"""

from __future__ import annotations

import math

from sim.lengths import log_median
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload
from workbench.schedule import Guarded, guard_policy
from workbench.tune.space import refusal
from workbench.tune.targets import SPACES


def guard_context(workload: Workload) -> float:
    """The context the guard judges at: the prompt and half a median correct answer (the lengths'
    model at step 0, cut at the cap)."""
    cap = workload.max_response_tokens
    median = min(float(cap), math.exp(log_median(workload.lengths, cap)))
    return float(workload.prompt_tokens) + median / 2


def sd_guarded(policy: Policy, profile: Profile, workload: Workload, target: str) -> Guarded:
    """`policy` guarded as `target` runs it (module docstring)."""
    context = guard_context(workload)
    guarded = guard_policy(policy, profile, context, not SPACES[target].falling)
    if guarded.changes and refusal(guarded.policy, target) is not None:
        guarded = guard_policy(policy, profile, context, False)
    return guarded
