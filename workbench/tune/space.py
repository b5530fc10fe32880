"""The tuner's search space: one valid Policy from an Optuna trial (`suggest_policy`), and back
(`params_for`: the trial parameters that rebuild a policy, to enqueue the presets).

Lossless only. The space is the speculative-decoding and drafter part of a
Policy; `rollout` keeps its default (`sync`), since partial rollouts and tail
batching change what RL trains on, not only how fast it gets there. Warm start
(`drafter.warm_start`) is in the space only with `allow_warm_start` (see
`workbench.tune`).

Targets (workbench/tune/targets.py): the stack the tuned policy will run on. Each target's space
holds only what that stack runs as `tlt export` writes it: `vllm` and `verl` fixed chain tables,
`sglang` FastRL's EAGLE chains or trees per bucket (verified tokens falling with the batch) with
spot training, `tlt-train` what `tlt train` runs (also checked by the real backend's own refusal,
`real.rollout.spec_config.refuse_unrunnable`, so the two cannot drift), `sim` everything.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import optuna

from real.rollout.spec_config import EngineConfigError, refuse_unrunnable
from workbench.contracts.policy import (
    BanditConfig,
    DrafterConfig,
    DrafterKind,
    Policy,
    ScheduleBucket,
    SpotTraining,
    Strategy,
)
from workbench.contracts.schema import FieldError, to_mapping
from workbench.contracts.workload import Workload
from workbench.deploy.exported import ExportError
from workbench.deploy.sglang import fastrl_buckets, sd_buckets
from workbench.tune.targets import SPACES, TargetSpace, check_target

# Bump when the search space changes: a study is only resumed with the space it was created with.
SPACE_VERSION = 4

# SD thresholds tried (SD is off above this batch); capped at the workload's max_batch,
# which is always a choice. 0 (never SD) is drafter "none".
THRESHOLDS = (4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
MAX_DRAFT_LEN = 8  # per-bucket draft lengths of a fixed table: 0..8
# Arm sets a bandit may choose from (draft lengths; 0 = SD off for that decision).
ARM_SETS = {
    "0,2,4": (0, 2, 4),
    "0,2,4,6": (0, 2, 4, 6),
    "0,1,2,3,4": (0, 1, 2, 3, 4),
    "0,2,4,6,8": (0, 2, 4, 6, 8),
    "0,3,6": (0, 3, 6),
    "1,2,4": (1, 2, 4),
    "2,4,6": (2, 4, 6),
    "2,4,6,8": (2, 4, 6, 8),
    "0,1,2,3,4,6,8": (0, 1, 2, 3, 4, 6, 8),  # tlt-vllm's: every short chain, SD off an arm
}
# EAGLE trees a fixed-table bucket may use where the target runs them ("chain": its draft_len_*
# instead):
# the paper's SGLang settings (the `tlt` preset's), depth 8, top-4, 8 to 48 tokens verified.
TREES = ("chain", "8_4_8", "8_4_16", "8_4_32", "8_4_48")
# SGLang / FastRL: a bucket's EAGLE strategy, trees then chains (8_1_9 is a chain of 8); SD off is
# the threshold's.
FASTRL_STRATEGIES = ("8_4_48", "8_4_32", "8_4_16", "8_4_8",
                     *(f"{k}_1_{k + 1}" for k in range(8, 0, -1)))
LR_RANGE = (1e-6, 1e-2)
TRAIN_STEPS_RANGE = (100, 20000)
BUFFER_RANGE = (1, 4)
TRAIN_INTERVALS = (1, 2, 5, 10)  # spot-train every N-th RL step (FastRL: 10)
EPSILON_RANGE = (0.01, 0.5)
WINDOW_RANGE = (4, 256)
# shorter intervals, and median rewards, make a simulated trial 10-40x slower
INTERVAL_RANGE = (8, 512)
SWITCH_MARGIN_RANGE = (0.0, 0.5)


def threshold_choices(max_batch: int) -> list[int]:
    """SD thresholds for a workload: the fixed set up to max_batch, and max_batch itself."""
    return sorted({t for t in THRESHOLDS if t < max_batch} | {max_batch})


def _edge_candidates(threshold: int, extra: Sequence[int] = ()) -> list[int]:
    """Powers of two (and a target's own `extra` edges) below the threshold: the possible upper
    bounds of all buckets but the last."""
    twos = {2**i for i in range(int(math.log2(threshold)) + 1)}
    return sorted(e for e in twos | set(extra) if e < threshold)


def suggest_policy(trial: optuna.trial.BaseTrial, workload: Workload,
                   allow_warm_start: bool = False, name: str = "trial",
                   target: str = "sim") -> Policy:
    """One valid Policy from the trial's suggestions (constructed valid; never pruned).

    Parameters are conditional: a bucket's draft length exists only for a fixed
    table, epsilon only for the epsilon-greedy bandits, training settings only
    for a trained EAGLE drafter. Parameter names are stable across trials (a
    bucket's draft length is named by its upper batch bound) so TPE learns
    across them. `target` keeps to what that stack runs (module docstring).
    """
    check_target(target)
    space = SPACES[target]
    # Optuna stores plain strings (a resumed study reads them back)
    kind = DrafterKind(trial.suggest_categorical("drafter", [k.value for k in space.drafters]))
    if kind == DrafterKind.NONE:
        return _checked(Policy(name=name, description="no speculative decoding"), target)

    threshold = trial.suggest_categorical("sd_threshold", threshold_choices(workload.max_batch))
    algorithm = trial.suggest_categorical("bandit", list(space.algorithms))
    if algorithm == "egreedy":
        uppers = [threshold]  # one pool over every batch size: buckets are unused
    else:
        uppers = [p for p in _edge_candidates(threshold, space.edges)
                  if trial.suggest_categorical(f"edge_{p}", [False, True])]
        uppers.append(threshold)

    if algorithm == "fixed" and space.falling:
        lens = _falling_strategies(trial, uppers)
        bandit = BanditConfig(algorithm="fixed")
    elif algorithm == "fixed":
        trees = space.trees and kind == DrafterKind.EAGLE  # SGLang/FastRL trees are EAGLE's
        lens = [_fixed_strategy(trial, u, trees) for u in uppers]
        bandit = BanditConfig(algorithm="fixed")
    else:
        arms = ARM_SETS[trial.suggest_categorical("arms", list(ARM_SETS))]
        defaults = BanditConfig()
        epsilon = (trial.suggest_float("epsilon", *EPSILON_RANGE, log=True)
                   if algorithm in ("beg", "egreedy") else defaults.epsilon)
        beg = algorithm == "beg"
        window = trial.suggest_int("window", *WINDOW_RANGE, log=True) if beg else defaults.window
        interval = trial.suggest_int("decision_interval", *INTERVAL_RANGE, log=True)
        bandit = BanditConfig(algorithm=algorithm, arms=arms, epsilon=epsilon, window=window,
                              decision_interval=interval)
        # The bandit only uses the rows as buckets; their draft length (the median
        # arm) is what a fixed-table engine would fall back to.
        lens = [Strategy.chain(_median_arm(arms))] * len(uppers)

    schedule, lo = [], 1
    for upper, s in zip(uppers, lens):
        tree = {} if s.is_chain else {"topk": s.topk, "tokens": s.tokens}
        schedule.append(ScheduleBucket(lo, upper, s.steps, **tree))
        lo = upper + 1

    drafter, spot = DrafterConfig(kind=kind), SpotTraining()
    if kind == DrafterKind.EAGLE:
        drafter, spot = _eagle(trial, workload, allow_warm_start, space)
    warmup = {} if space.warmup is None else {"sd_warmup_steps": space.warmup}
    policy = Policy(name=name, description=describe(threshold, algorithm, kind),
                    sd_threshold=threshold, schedule=tuple(schedule), bandit=bandit,
                    drafter=drafter, spot_training=spot, **warmup)
    return _checked(policy, target)


def _eagle(trial: optuna.trial.BaseTrial, workload: Workload, allow_warm_start: bool,
           space: TargetSpace) -> tuple[DrafterConfig, SpotTraining]:
    """The EAGLE drafter's settings: warm start (if allowed), the n-gram fallback and spot training
    where the target runs them."""
    warm = space.warm if space.warm is not None else (
        trial.suggest_categorical("warm_start", [False, True]) if allow_warm_start else False)
    fallback = (trial.suggest_categorical("ngram_fallback", [False, True]) if space.fallback
                else False)
    margin = trial.suggest_float("switch_margin", *SWITCH_MARGIN_RANGE) if fallback else 0.0
    drafter = DrafterConfig(kind=DrafterKind.EAGLE, warm_start=warm, ngram_fallback=fallback,
                            switch_margin=margin)
    # The trial parameter keeps its name "training": stored studies resume with it.
    if not (space.spot_training and trial.suggest_categorical("training", [False, True])):
        return drafter, SpotTraining()
    return drafter, SpotTraining(
        enabled=True,
        min_idle_workers=trial.suggest_int("min_idle_workers", 1, workload.workers),
        lr=trial.suggest_float("lr", *LR_RANGE, log=True),
        steps=trial.suggest_int("train_steps", *TRAIN_STEPS_RANGE, log=True),
        buffer=trial.suggest_int("buffer", *BUFFER_RANGE),
        interval_steps=trial.suggest_categorical("train_interval", list(TRAIN_INTERVALS)),
    )


def _falling_strategies(trial: optuna.trial.BaseTrial, uppers: list[int]) -> list[Strategy]:
    """FastRL's buckets: one EAGLE strategy each (`fastrl_U`), given to the buckets in falling order
    of verified tokens (its MAB's rule: a larger batch verifies strictly fewer); of two
    strategies verifying as many, the first chosen holds both buckets (they merge into one)."""
    picked = [Strategy.parse(trial.suggest_categorical(f"fastrl_{u}", list(FASTRL_STRATEGIES)))
              for u in uppers]
    picked.sort(key=lambda s: -s.verify_tokens)
    for i in range(1, len(picked)):
        if picked[i].verify_tokens == picked[i - 1].verify_tokens:
            picked[i] = picked[i - 1]
    return picked


def _fixed_strategy(trial: optuna.trial.BaseTrial, upper: int, trees: bool) -> Strategy:
    """A fixed-table bucket's strategy: a tree (`tree_U`, only where `trees`) or a chain
    (`draft_len_U`)."""
    tree = trial.suggest_categorical(f"tree_{upper}", list(TREES)) if trees else "chain"
    if tree != "chain":
        return Strategy.parse(tree)
    return Strategy.chain(trial.suggest_int(f"draft_len_{upper}", 0, MAX_DRAFT_LEN))


def refusal(policy: Policy, target: str) -> str | None:
    """Why `target`'s space does not hold `policy` (None: it does; the simulator's holds every
    valid one)."""
    check_target(target)
    if target == "sim":
        return None
    if target == "tlt-train":
        try:
            refuse_unrunnable(policy)
        except EngineConfigError as exc:
            return str(exc)
        return None
    space, p, why = SPACES[target], policy, []
    if p.uses_sd:
        if p.drafter.kind not in space.drafters:
            why.append(f"drafter {p.drafter.kind}")
        if p.bandit.algorithm not in space.algorithms:
            why.append(f"bandit {p.bandit.algorithm} (it runs a fixed table)")
        if not space.trees and any(not r.strategy.is_chain for r in p.schedule):
            why.append("EAGLE trees")
        if space.warmup is not None and p.sd_warmup_steps != space.warmup:
            why.append(f"sd_warmup_steps {p.sd_warmup_steps} (it runs {space.warmup})")
        if space.falling:
            try:
                fastrl_buckets(p, sd_buckets(p, target))
            except ExportError as exc:
                why.append(str(exc))
    cold = p.drafter.kind == DrafterKind.EAGLE and not p.drafter.warm_start
    if p.uses_sd and cold and space.warm:
        why.append("a cold EAGLE drafter (it runs the trained checkpoint it is given)")
    if p.rollout.mode != "sync" or p.rollout.stream:
        why.append(f"rollout mode {p.rollout.mode} (the trainer's, not the engine's)")
    if p.spot_training.enabled and not space.spot_training:
        why.append("spot training")
    if p.drafter.ngram_fallback and not space.fallback:
        why.append("the n-gram fallback")
    return f"{space.label} does not run: {', '.join(why)}" if why else None


def _median_arm(arms: Sequence[int]) -> int:
    return sorted(arms)[len(arms) // 2]


def _checked(policy: Policy, target: str = "sim") -> Policy:
    """The policy, checked as a file would be and as its target checks it (`refusal`)."""
    try:
        policy.check()
        why = refusal(policy, target)
    except FieldError as exc:  # a bug in the space, not a bad trial: say which policy
        why = str(exc)
    if why:
        raise AssertionError(f"search space ({target}) built a policy it must not: {why}: "
                             f"{to_mapping(policy)}")
    return policy


def describe(threshold: int, algorithm: str, kind: str) -> str:
    return f"{kind} drafter, {algorithm} draft lengths, SD up to batch {threshold}"


def canonical(policy: Policy) -> Policy:
    """The policy with the fields its behaviour does not depend on reset to defaults.

    Two policies with equal canonical forms simulate identically: name and
    description; bandit settings an algorithm does not read; a bandit's schedule
    draft lengths (it only uses the rows as buckets; `climb` starts at them); the switch margin
    without n-gram fallback; spot-training settings when spot training is off.
    """
    p = replace(policy, name="-", description="")
    if p.drafter.kind == DrafterKind.NONE or p.sd_threshold == 0:
        return replace(p, sd_threshold=0, schedule=(), bandit=BanditConfig(),
                       drafter=DrafterConfig(), spot_training=SpotTraining())
    b, d = BanditConfig(), p.bandit
    if d.algorithm == "fixed":
        bandit = BanditConfig(algorithm="fixed")
    else:
        bandit = BanditConfig(algorithm=d.algorithm, arms=tuple(sorted(d.arms)),
                              epsilon=d.epsilon if d.algorithm in ("beg", "egreedy", "climb")
                              else b.epsilon,
                              window=d.window if d.algorithm in ("beg", "climb") else b.window,
                              decision_interval=d.decision_interval, reward_stat=d.reward_stat)
    # Rows above the threshold are never used; the last used row ends at the threshold.
    rows = tuple(replace(r, max_batch=min(r.max_batch, p.sd_threshold)) for r in p.schedule
                 if r.min_batch <= p.sd_threshold)
    if d.algorithm not in ("fixed", "climb"):  # climb starts at the rows' draft lengths
        rows = tuple(replace(r, draft_len=0) for r in rows)
    if d.algorithm == "egreedy":
        rows = (ScheduleBucket(1, max(p.sd_threshold, 1), 0),)
    drafter = p.drafter
    if not drafter.ngram_fallback:
        drafter = replace(drafter, switch_margin=0.0)
    spot = p.spot_training if p.spot_training.enabled else SpotTraining()
    return replace(p, bandit=bandit, schedule=rows, drafter=drafter, spot_training=spot)


def params_for(policy: Policy, workload: Workload, allow_warm_start: bool = False,
               target: str = "sim") -> dict[str, Any] | None:
    """The trial parameters that rebuild `policy` (up to `canonical`), or None if it lies outside
    the space.

    Used to enqueue the presets as the study's first trials.
    """
    pol = canonical(policy)
    kind = policy.drafter.kind if policy.uses_sd else DrafterKind.NONE
    params: dict[str, Any] = {"drafter": kind.value}
    if kind != DrafterKind.NONE:
        params["sd_threshold"] = policy.sd_threshold
        params["bandit"] = policy.bandit.algorithm
        uppers = [r.max_batch for r in policy.schedule if r.max_batch < policy.sd_threshold]
        if policy.bandit.algorithm != "egreedy":
            for p in _edge_candidates(policy.sd_threshold, SPACES[target].edges):
                params[f"edge_{p}"] = p in uppers
        if policy.bandit.algorithm == "fixed":
            for r in policy.schedule:
                if r.min_batch <= policy.sd_threshold:
                    upper = min(r.max_batch, policy.sd_threshold)
                    params[f"draft_len_{upper}"] = r.draft_len
                    params[f"tree_{upper}"] = "chain" if r.strategy.is_chain else r.strategy.name
                    s = r.strategy
                    params[f"fastrl_{upper}"] = f"{s.steps}_{s.topk}_{s.verify_tokens}"
        else:
            keys = [k for k, v in ARM_SETS.items() if sorted(v) == sorted(policy.bandit.arms)]
            if not keys:
                return None
            params.update(arms=keys[0], epsilon=policy.bandit.epsilon, window=policy.bandit.window,
                          decision_interval=policy.bandit.decision_interval)
        if policy.drafter.kind == DrafterKind.EAGLE:
            params.update(warm_start=policy.drafter.warm_start,
                          ngram_fallback=policy.drafter.ngram_fallback,
                          switch_margin=policy.drafter.switch_margin,
                          training=policy.spot_training.enabled)
            t = policy.spot_training
            params.update(min_idle_workers=t.min_idle_workers, lr=t.lr, train_steps=t.steps,
                          buffer=t.buffer, train_interval=t.interval_steps)
    trial = StrictFixedTrial(params)
    try:
        rebuilt = suggest_policy(trial, workload, allow_warm_start, target=target)
    except (ValueError, KeyError, AssertionError):
        return None
    if canonical(rebuilt) != pol:
        return None
    return {k: v for k, v in params.items() if k in trial.used}


class StrictFixedTrial(optuna.trial.FixedTrial):
    """A FixedTrial that refuses values outside a parameter's distribution and records what was
    asked."""

    def __init__(self, params: dict[str, Any]):
        super().__init__(params)
        self.used: set[str] = set()

    def _suggest(self, name: str, distribution: optuna.distributions.BaseDistribution) -> Any:
        if name not in self._params:
            raise KeyError(name)
        value = self._params[name]
        if isinstance(distribution, optuna.distributions.CategoricalDistribution):
            if value not in distribution.choices:
                raise ValueError(name)
        elif not distribution._contains(distribution.to_internal_repr(value)):
            raise ValueError(name)
        self.used.add(name)
        return super()._suggest(name, distribution)
