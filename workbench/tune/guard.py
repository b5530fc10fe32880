"""The tuner's guard: a tuned policy never runs SD in a bucket where its profile predicts SD slower
than plain decoding (workbench/schedule.py `guard_policy`), on every target.

Every trial's policy is guarded before it is simulated, so the study scores, stores and returns the
guarded policy (`tlt tune`'s result, and each trial's `sd_guard` attribute says what was changed).
The guard judges a bucket at a response's start (the workload's prompt tokens): SD's speedup only
grows with the context, so a bucket that pays there pays throughout. It turns a losing bucket off
where the target's table holds an SD-off row (vLLM's and veRL's chains, this project's backend,
the simulator), and otherwise lowers the threshold below it (SGLang/FastRL turn SD off by the
threshold alone).
"""

from __future__ import annotations

from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload
from workbench.schedule import Guarded, guard_policy
from workbench.tune.space import refusal
from workbench.tune.targets import SPACES


def sd_guarded(policy: Policy, profile: Profile, workload: Workload, target: str) -> Guarded:
    """`policy` guarded as `target` runs it (module docstring)."""
    context = float(workload.prompt_tokens)
    guarded = guard_policy(policy, profile, context, not SPACES[target].falling)
    if guarded.changes and refusal(guarded.policy, target) is not None:
        guarded = guard_policy(policy, profile, context, False)
    return guarded
