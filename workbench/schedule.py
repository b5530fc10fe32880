"""The draft schedule a profile predicts best, per batch bucket: where a rollout engine starts;
and the guard that keeps a policy's SD out of every bucket the profile predicts it loses in.

The real backend cannot import the simulator (one-way layers), yet its bandit should not start
blind: this tool (layer 2) asks the simulator's pure cost and acceptance models
(`sim/costs.py`, `sim/acceptance.py`) what each candidate chain length is worth in each bucket
of a policy's schedule, on a profile (e.g. the calibrated `cpu-tiny`), and the CLI hands the
answer to `tlt train` / `tlt bench real` as a Policy whose rows hold the predicted best lengths
(`with_predicted_schedule`) plus one starting table per drafter kind the engines may run
(`start_tables`: a fallback policy runs n-gram and EAGLE, which pay differently).

A chain of K drafts at batch B is worth its goodput, tokens per second

    B * E[L_K] / (T_verify(B, context, K) + T_draft(B, K))

with E[L_K] the tokens one verify pass emits (1 + the expected accepted drafts) for the drafter
at its quality, and K = 0 the same engine with SD off (E[L] = 1; an EAGLE engine still runs its
drafter's first forward then, sim/costs.py, so against it one draft costs little more). A bucket's
value of K is the mean over its batch sizes of that goodput relative to K = 0's, and the bucket
starts at the K with the highest value; where no K beats 1.0 (plain decoding), it starts with SD off
(K = 0). A profile is a prediction, fitted on another machine or at another time (`tlt validate`:
errors of tens of percent across machines), so this is only the start: the engine's bandit measures
every step and moves off a wrong start (real/rollout/adaptive.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.acceptance import stats_for
from sim.costs import draft_step_s, verify_step_s
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.profile import Profile
from workbench.contracts.strategy import Strategy

# Tokens of context per sequence the costs are judged at: a prompt (~20 tokens) and a response
# part-way through on the reference task (p50 83, p90 317 tokens); the verify cost's context
# term is small on every shipped profile at this size.
DEFAULT_CONTEXT = 256.0


@dataclass(frozen=True)
class BucketChoice:
    """One bucket's verdict: every candidate's value and the winner."""

    bucket: int  # row of the policy's schedule
    min_batch: int
    max_batch: int  # cut at the policy's sd_threshold
    # draft length -> mean goodput over the bucket's batch sizes / no SD's
    speedups: dict[int, float]
    draft_len: int  # the best (0: no K beats plain decoding)

    @property
    def speedup(self) -> float:
        return self.speedups[self.draft_len]


@dataclass(frozen=True)
class PredictedSchedule:
    """The verdict for one drafter kind at one quality, on one profile."""

    profile: str
    kind: DrafterKind
    quality: float
    context: float
    buckets: tuple[BucketChoice, ...]

    @property
    def table(self) -> tuple[int, ...]:
        """The best draft length per schedule row (rows above the threshold keep 0)."""
        return tuple(b.draft_len for b in self.buckets)


def candidates(policy: Policy) -> tuple[int, ...]:
    """Chain lengths a bucket may start at: the bandit's arms for a learning bandit (it can only
    choose among them), with 0 (SD off) always among them."""
    if policy.bandit.algorithm != "fixed":
        arms = set(policy.bandit.arms)
    else:
        arms = {row.draft_len for row in policy.schedule}
    return tuple(sorted(arms | {0}))


def goodput(profile: Profile, kind: DrafterKind, quality: float, batch: int,
            draft_len: int | Strategy, context: float) -> float:
    """Predicted tokens per second of an engine decoding `batch` sequences with chains of
    `draft_len`."""
    accept = stats_for(profile.acceptance, kind, quality, draft_len).mean
    m = profile.mechanisms
    verify_s = verify_step_s(profile.decode, batch, context, draft_len, m)
    step = verify_s + draft_step_s(profile.drafter, kind, batch, draft_len, m)
    return batch * accept / step


def predict_schedule(policy: Policy, profile: Profile, kind: DrafterKind | None = None,
                     quality: float | None = None,
                     context: float = DEFAULT_CONTEXT) -> PredictedSchedule:
    """Each schedule row's best chain length among `candidates(policy)` for drafter `kind` (default:
    the policy's) at `quality` (default: a warm-started drafter's `warm_start_quality`, else a fresh
    one's 1.0: the learned drafter runs only once it beats n-gram, so a cold one's 0 never
    decodes)."""
    kind = kind or policy.drafter.kind
    if kind not in (DrafterKind.NGRAM, DrafterKind.EAGLE):
        raise ValueError(f"drafter kind {kind!r}: a schedule is predicted for 'ngram' or 'eagle'")
    if context < 0:
        raise ValueError(f"context {context}: a token count >= 0")
    if quality is None:
        quality = profile.acceptance.warm_start_quality if policy.drafter.warm_start else 1.0
    arms = candidates(policy)
    buckets = []
    for i, row in enumerate(policy.schedule):
        hi = min(row.max_batch, policy.sd_threshold)
        if row.min_batch > hi:  # above the threshold: SD is off there whatever the row says
            buckets.append(BucketChoice(i, row.min_batch, row.max_batch, {0: 1.0}, 0))
            continue
        sizes = range(row.min_batch, hi + 1)
        plain = [goodput(profile, kind, quality, b, 0, context) for b in sizes]
        speedups = {k: sum(goodput(profile, kind, quality, b, k, context) / p
                           for b, p in zip(sizes, plain)) / len(plain)
                    for k in arms}
        best = max(arms, key=lambda k: (speedups[k], -k))  # ties: the shorter chain (less to lose)
        buckets.append(BucketChoice(i, row.min_batch, hi, speedups,
                                    best if speedups[best] > 1.0 else 0))
    return PredictedSchedule(profile.name, kind, float(quality), float(context), tuple(buckets))


def start_tables(policy: Policy, profile: Profile,
                 context: float = DEFAULT_CONTEXT) -> dict[str, PredictedSchedule]:
    """The predicted schedule for every drafter kind the policy's engines may run: its own, and
    n-gram too for a learned drafter with `ngram_fallback`. Empty when the policy runs no SD or
    its bandit is a fixed table (a fixed table is the schedule as written, never re-derived)."""
    if not policy.uses_sd or policy.bandit.algorithm == "fixed":
        return {}
    fallback = policy.drafter.kind == DrafterKind.EAGLE and policy.drafter.ngram_fallback
    kinds = [policy.drafter.kind] + ([DrafterKind.NGRAM] if fallback else [])
    return {k: predict_schedule(policy, profile, kind=k, context=context) for k in kinds}


def with_table(policy: Policy, table: tuple[int, ...]) -> Policy:
    """The policy with its schedule rows' draft lengths replaced by `table` (one per row)."""
    if len(table) != len(policy.schedule):
        raise ValueError(f"{len(table)} draft lengths for the {len(policy.schedule)} rows of "
                         f"policy '{policy.name}'")
    rows = tuple(replace(row, draft_len=int(k)) for row, k in zip(policy.schedule, table))
    out = replace(policy, schedule=rows)
    out.check()
    return out


def with_predicted_schedule(policy: Policy, profile: Profile,
                            context: float = DEFAULT_CONTEXT) -> Policy:
    """The policy starting from the schedule `profile` predicts best for its own drafter kind (the
    policy unchanged when `start_tables` has nothing for it)."""
    tables = start_tables(policy, profile, context)
    return with_table(policy, tables[policy.drafter.kind].table) if tables else policy


@dataclass(frozen=True)
class Guarded:
    """A policy with SD taken out of every bucket where the profile predicts it slower than plain
    decoding, and what was changed (empty: nothing)."""

    policy: Policy
    changes: tuple[str, ...]


def guard_policy(policy: Policy, profile: Profile, context: float,
                 rows_may_turn_off: bool = True) -> Guarded:
    """`policy` never running SD at a batch where the profile predicts the bucket's strategy
    slower than plain decoding (an engine without a drafter), judged at `context`. A fixed table
    either lowers its threshold below its first losing batch, or (where the target runs an SD-off
    row, `rows_may_turn_off`) turns each losing bucket off, the top SD bucket keeping its paying
    batches under a lower threshold: whichever the profile predicts faster over the policy's
    batches. A learning bandit's threshold comes down below the first batch where every arm it
    may pull loses. The drafter's quality is a warm-started one's, else 1. Other drafter kinds
    (suffix drafts) pass unchanged."""
    if not policy.uses_sd or policy.drafter.kind not in (DrafterKind.EAGLE, DrafterKind.NGRAM):
        return Guarded(policy, ())
    kind = policy.drafter.kind
    quality = profile.acceptance.warm_start_quality if policy.drafter.warm_start else 1.0
    plain = {b: goodput(profile, DrafterKind.NONE, 1.0, b, 0, context)
             for b in range(1, policy.sd_threshold + 1)}

    def gain(b: int, s) -> float:
        return goodput(profile, kind, quality, b, s, context) / plain[b]

    if policy.bandit.algorithm != "fixed":
        arms = [k for k in policy.bandit.arms if k > 0]
        lose = next((b for b in plain if max(gain(b, k) for k in arms) < 1.0), None)
        if lose is None:
            return Guarded(policy, ())
        return _guarded(policy, lose - 1, policy.schedule,
                        [f"every arm loses from batch {lose}: SD off above {lose - 1}"])
    losing = {}  # row index -> its first losing batch
    for i, r in enumerate(policy.schedule):
        hi = min(r.max_batch, policy.sd_threshold)
        if r.strategy.steps and r.min_batch <= hi:
            lose = next((b for b in range(r.min_batch, hi + 1) if gain(b, r.strategy) < 1.0), None)
            if lose is not None:
                losing[i] = lose
    if not losing:
        return Guarded(policy, ())
    first = min(losing.values())
    options = [_guarded(policy, first - 1, policy.schedule,
                        [f"SD loses from batch {first}: off above {first - 1}"])]
    if rows_may_turn_off:
        options.append(_rows_off(policy, losing))

    def score(g: Guarded) -> float:
        p = g.policy
        return sum(gain(b, p.schedule[p.bucket_of(b)].strategy)
                   if p.bucket_of(b) is not None and p.schedule[p.bucket_of(b)].strategy.steps
                   else 1.0 for b in plain)

    return max(options, key=score)


def _rows_off(policy: Policy, losing: dict[int, int]) -> Guarded:
    """Each losing bucket off; the top SD bucket, where it pays at its first batches, cut by the
    threshold instead."""
    rows, threshold, changes = list(policy.schedule), policy.sd_threshold, []
    top = max(i for i, r in enumerate(rows) if r.strategy.steps and r.min_batch <= threshold)
    for i, lose in sorted(losing.items()):
        r = rows[i]
        if i == top and lose > r.min_batch:
            threshold = lose - 1
            changes.append(f"{r.strategy.name} loses from batch {lose}: SD off above {threshold}")
        else:
            rows[i] = replace(r, draft_len=0, topk=1, tokens=0)
            changes.append(f"{r.strategy.name} loses at batch {lose} of bucket "
                           f"{r.min_batch}-{r.max_batch}: SD off there")
    return _guarded(policy, threshold, tuple(rows), changes)


def _guarded(policy: Policy, threshold: int, rows, changes: list[str]) -> Guarded:
    out = replace(policy, sd_threshold=threshold, schedule=tuple(rows))
    out.check()
    return Guarded(out, tuple(changes))
