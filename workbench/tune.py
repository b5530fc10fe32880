"""The tuner: an Optuna study over the Policy space, scored by the simulator.

Each trial builds one valid Policy (`suggest_policy`) and simulates it on the
workload for seeds 0..K-1 (`evaluate`). Every trial sees the same seeds, and the
simulator draws response lengths from (seed, step) alone, so two trials differ
only by their policies (common random numbers): the comparison between trials
is not blurred by sampling noise, and K only sets how many length draws the
policy has to be good on.

Objectives:
- single: the mean simulated RL step time (seconds) over the K seeds;
- multi-objective (`multi_objective=True`): (that step time, drafter-training
  compute in GPU-seconds per RL step), both minimised; the answer is the Pareto
  front (`study.best_trials`). Spot training runs on GPUs that would otherwise
  idle, so it costs no wall time, but it is power and it is GPU time a shared
  cluster could give to someone else: the front shows what each second saved
  costs.

Lossless only. The space is the speculative-decoding and drafter part of a
Policy; `rollout` keeps its default (`sync`), since partial rollouts and tail
batching change what RL trains on, not only how fast it gets there.

Warm start. `drafter.warm_start` means a drafter trained offline, before RL,
on the initial policy. The simulator starts such a drafter at full quality and
charges nothing for that offline training, so a search allowed to use it would
always pick it: it is a free lunch in the objective, not a finding. The search
space therefore keeps `warm_start: false` unless the user passes
`allow_warm_start=True` (`--allow-warm-start`); the `static-sd` preset, which
does warm-start, is still shown in the comparison table, marked as such.

Storage. Studies live in an RDB URL, by default `sqlite:///tlt-studies.db`
(a file in the current directory). Each finished trial is committed as it
ends, so a study killed at any moment keeps every finished trial; running again
with the same study name resumes it, counting its complete trials towards the
requested total. `optuna-dashboard sqlite:///tlt-studies.db` shows the studies.
The study records what it was created for (workload, profile, seeds, steps,
objective, search space); resuming it with anything else is refused, since
trials scored differently cannot be compared.

Steps. A policy is scored over the workload's RL steps (3 for the presets)
unless told otherwise (`steps`, `--steps`). A cold drafter trained on idle
workers pays back over tens of steps, so a short horizon undervalues spot
training; tune with `--steps 20` (slower) when that is the question.

The sampler (TPE) is seeded from the user's seed and the number of trials the
study already holds, so a fresh study is reproducible end to end, and a resumed
one is reproducible per trial (a trial's value depends on its policy alone) but
does not replay the sequence an uninterrupted run would have sampled.

The presets that fall inside the search space (`baseline` and `tlt`, plus
`static-sd` with warm start allowed) are enqueued as the study's first trials,
so the tuner starts from them and its answer is never worse than the best of
them on the same seeds.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from sim.sweep import sweep
from workbench.contracts.schema import ConfigError, FieldError, from_mapping, save, to_mapping
from workbench.contracts.policy import BanditConfig, DrafterConfig, DrafterTraining, Policy, ScheduleBucket, load_policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload
from workbench.tables import format_table

DEFAULT_STORAGE = "sqlite:///tlt-studies.db"
PRESETS = ("baseline", "static-sd", "tlt")
BASELINE = "baseline"
# Bump when the search space changes: a study is only resumed with the space it was created with.
SPACE_VERSION = 1

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
}
ALGORITHMS = ("fixed", "beg", "ucb1", "egreedy")
DRAFTERS = ("none", "ngram", "eagle")
LR_RANGE = (1e-6, 1e-2)
TRAIN_STEPS_RANGE = (100, 20000)
BUFFER_RANGE = (1, 4)
EPSILON_RANGE = (0.01, 0.5)
WINDOW_RANGE = (4, 256)
INTERVAL_RANGE = (8, 512)
SWITCH_MARGIN_RANGE = (0.0, 0.5)

STEP_TIME = "step_time_s"
TRAIN_GPU_S = "train_gpu_s"


# ---------------------------------------------------------------- the search space


def threshold_choices(max_batch: int) -> list[int]:
    """SD thresholds for a workload: the fixed set up to max_batch, and max_batch itself."""
    return sorted({t for t in THRESHOLDS if t < max_batch} | {max_batch})


def _edge_candidates(threshold: int) -> list[int]:
    """Powers of two below the threshold: the possible upper bounds of all buckets but the last."""
    return [2**i for i in range(int(math.log2(threshold)) + 1) if 2**i < threshold]


def suggest_policy(trial: optuna.trial.BaseTrial, workload: Workload, allow_warm_start: bool = False,
                   name: str = "trial") -> Policy:
    """One valid Policy from the trial's suggestions (constructed valid; never pruned).

    Parameters are conditional: a bucket's draft length exists only for a fixed
    table, epsilon only for the epsilon-greedy bandits, training settings only
    for a trained EAGLE drafter. Parameter names are stable across trials (a
    bucket's draft length is named by its upper batch bound) so TPE learns
    across them.
    """
    kind = trial.suggest_categorical("drafter", list(DRAFTERS))
    if kind == "none":
        return _checked(Policy(name=name, description="no speculative decoding"))

    threshold = trial.suggest_categorical("sd_threshold", threshold_choices(workload.max_batch))
    algorithm = trial.suggest_categorical("bandit", list(ALGORITHMS))
    if algorithm == "egreedy":
        uppers = [threshold]  # one pool over every batch size: buckets are unused
    else:
        uppers = [p for p in _edge_candidates(threshold) if trial.suggest_categorical(f"edge_{p}", [False, True])]
        uppers.append(threshold)

    if algorithm == "fixed":
        lens = [trial.suggest_int(f"draft_len_{u}", 0, MAX_DRAFT_LEN) for u in uppers]
        bandit = BanditConfig(algorithm="fixed")
    else:
        arms = ARM_SETS[trial.suggest_categorical("arms", list(ARM_SETS))]
        defaults = BanditConfig()
        epsilon = (trial.suggest_float("epsilon", *EPSILON_RANGE, log=True)
                   if algorithm in ("beg", "egreedy") else defaults.epsilon)
        window = trial.suggest_int("window", *WINDOW_RANGE, log=True) if algorithm == "beg" else defaults.window
        interval = trial.suggest_int("decision_interval", *INTERVAL_RANGE, log=True)
        bandit = BanditConfig(algorithm=algorithm, arms=arms, epsilon=epsilon, window=window,
                              decision_interval=interval)
        # The bandit only uses the rows as buckets; their draft length (the median
        # arm) is what a fixed-table engine would fall back to.
        lens = [_median_arm(arms)] * len(uppers)

    schedule, lo = [], 1
    for upper, k in zip(uppers, lens):
        schedule.append(ScheduleBucket(lo, upper, k))
        lo = upper + 1

    drafter, training = DrafterConfig(kind=kind), DrafterTraining()
    if kind == "eagle":
        warm = trial.suggest_categorical("warm_start", [False, True]) if allow_warm_start else False
        fallback = trial.suggest_categorical("ngram_fallback", [False, True])
        margin = trial.suggest_float("switch_margin", *SWITCH_MARGIN_RANGE) if fallback else 0.0
        drafter = DrafterConfig(kind="eagle", warm_start=warm, ngram_fallback=fallback, switch_margin=margin)
        if trial.suggest_categorical("training", [False, True]):
            training = DrafterTraining(
                enabled=True,
                min_idle_workers=trial.suggest_int("min_idle_workers", 1, workload.workers),
                lr=trial.suggest_float("lr", *LR_RANGE, log=True),
                steps=trial.suggest_int("train_steps", *TRAIN_STEPS_RANGE, log=True),
                buffer=trial.suggest_int("buffer", *BUFFER_RANGE),
            )
    return _checked(Policy(name=name, description=describe(threshold, algorithm, kind), sd_threshold=threshold,
                           schedule=tuple(schedule), bandit=bandit, drafter=drafter, training=training))


def _median_arm(arms: Sequence[int]) -> int:
    return sorted(arms)[len(arms) // 2]


def _checked(policy: Policy) -> Policy:
    try:
        policy.check()
    except FieldError as exc:  # a bug in the space, not a bad trial: say which policy
        raise AssertionError(f"search space built an invalid policy: {exc}: {to_mapping(policy)}") from exc
    return policy


def describe(threshold: int, algorithm: str, kind: str) -> str:
    return f"{kind} drafter, {algorithm} draft lengths, SD up to batch {threshold}"


def canonical(policy: Policy) -> Policy:
    """The policy with the fields its behaviour does not depend on reset to defaults.

    Two policies with equal canonical forms simulate identically: name and
    description; bandit settings an algorithm does not read; a bandit's schedule
    draft lengths (it only uses the rows as buckets); the switch margin without
    n-gram fallback; training settings when training is off.
    """
    p = replace(policy, name="-", description="")
    if p.drafter.kind == "none" or p.sd_threshold == 0:
        return replace(p, sd_threshold=0, schedule=(), bandit=BanditConfig(), drafter=DrafterConfig(),
                       training=DrafterTraining())
    b, d = BanditConfig(), p.bandit
    if d.algorithm == "fixed":
        bandit = BanditConfig(algorithm="fixed")
    else:
        bandit = BanditConfig(algorithm=d.algorithm, arms=tuple(sorted(d.arms)),
                              epsilon=d.epsilon if d.algorithm in ("beg", "egreedy") else b.epsilon,
                              window=d.window if d.algorithm == "beg" else b.window,
                              decision_interval=d.decision_interval)
    # Rows above the threshold are never used; the last used row ends at the threshold.
    rows = tuple(replace(r, max_batch=min(r.max_batch, p.sd_threshold)) for r in p.schedule
                 if r.min_batch <= p.sd_threshold)
    if d.algorithm != "fixed":
        rows = tuple(replace(r, draft_len=0) for r in rows)
    if d.algorithm == "egreedy":
        rows = (ScheduleBucket(1, max(p.sd_threshold, 1), 0),)
    drafter = p.drafter
    if not drafter.ngram_fallback:
        drafter = replace(drafter, switch_margin=0.0)
    training = p.training if p.training.enabled else DrafterTraining()
    return replace(p, bandit=bandit, schedule=rows, drafter=drafter, training=training)


def params_for(policy: Policy, workload: Workload, allow_warm_start: bool = False) -> dict[str, Any] | None:
    """The trial parameters that rebuild `policy` (up to `canonical`), or None if it lies outside the space.

    Used to enqueue the presets as the study's first trials.
    """
    pol = canonical(policy)
    params: dict[str, Any] = {"drafter": policy.drafter.kind if policy.uses_sd else "none"}
    if params["drafter"] != "none":
        params["sd_threshold"] = policy.sd_threshold
        params["bandit"] = policy.bandit.algorithm
        uppers = [r.max_batch for r in policy.schedule if r.max_batch < policy.sd_threshold]
        if policy.bandit.algorithm != "egreedy":
            for p in _edge_candidates(policy.sd_threshold):
                params[f"edge_{p}"] = p in uppers
        if policy.bandit.algorithm == "fixed":
            for r in policy.schedule:
                if r.min_batch <= policy.sd_threshold:
                    params[f"draft_len_{min(r.max_batch, policy.sd_threshold)}"] = r.draft_len
        else:
            keys = [k for k, v in ARM_SETS.items() if sorted(v) == sorted(policy.bandit.arms)]
            if not keys:
                return None
            params.update(arms=keys[0], epsilon=policy.bandit.epsilon, window=policy.bandit.window,
                          decision_interval=policy.bandit.decision_interval)
        if policy.drafter.kind == "eagle":
            params.update(warm_start=policy.drafter.warm_start, ngram_fallback=policy.drafter.ngram_fallback,
                          switch_margin=policy.drafter.switch_margin, training=policy.training.enabled)
            t = policy.training
            params.update(min_idle_workers=t.min_idle_workers, lr=t.lr, train_steps=t.steps, buffer=t.buffer)
    trial = _StrictFixedTrial(params)
    try:
        rebuilt = suggest_policy(trial, workload, allow_warm_start)
    except (ValueError, KeyError, AssertionError):
        return None
    if canonical(rebuilt) != pol:
        return None
    return {k: v for k, v in params.items() if k in trial.used}


class _StrictFixedTrial(optuna.trial.FixedTrial):
    """A FixedTrial that refuses values outside a parameter's distribution and records what was asked."""

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


# ---------------------------------------------------------------- the objective


@dataclass(frozen=True)
class Evaluation:
    """A policy simulated for each seed: means over steps, then over seeds."""

    step_time_s: float  # mean RL step time
    train_gpu_s: float  # drafter spot-training GPU-seconds per RL step
    rollout_time_s: float
    mean_accept_len: float
    per_seed_step_time_s: tuple[float, ...]


def evaluate(workload: Workload, policy: Policy, profile: Profile, seeds: Iterable[int],
             steps: int | None = None) -> Evaluation:
    """Simulate `policy` once per seed (the same seeds for every policy: common random numbers)."""
    step_times, train, rollout, accept = [], [], [], []
    for r in sweep(workload, [policy], profile, list(seeds), steps):
        run = r.run
        step_times.append(run.mean("step_time_s"))
        rollout.append(run.mean("rollout_time_s"))
        accept.append(run.mean("mean_accept_len"))
        # Spot-training worker-seconds -> GPU-seconds (a worker is gpus_per_worker GPUs).
        train.append(sum(s.drafter_train_fraction * s.rollout_time_s for s in run.steps) / len(run.steps)
                     * workload.workers * workload.gpus_per_worker)
    n = len(step_times)
    return Evaluation(sum(step_times) / n, sum(train) / n, sum(rollout) / n, sum(accept) / n, tuple(step_times))


@dataclass(frozen=True)
class TuneSpec:
    """What a study optimises; recorded in the study so a resume cannot change it."""

    workload: Workload
    profile: Profile
    seeds: int = 3
    steps: int | None = None  # RL steps per simulation (None: the workload's)
    multi_objective: bool = False
    allow_warm_start: bool = False

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds))

    @property
    def n_steps(self) -> int:
        return self.steps or self.workload.steps

    def fingerprint(self) -> dict[str, Any]:
        def digest(obj: Any) -> str:
            return hashlib.sha256(json.dumps(to_mapping(obj), sort_keys=True).encode()).hexdigest()[:16]

        return {"workload": self.workload.name, "workload_sha": digest(self.workload),
                "profile": self.profile.name, "profile_sha": digest(self.profile),
                "seeds": self.seeds, "steps": self.n_steps, "multi_objective": self.multi_objective,
                "allow_warm_start": self.allow_warm_start, "space_version": SPACE_VERSION}


def objective(spec: TuneSpec) -> Callable[[optuna.trial.Trial], float | tuple[float, float]]:
    """The Optuna objective: build the trial's policy, simulate it on every seed, record it."""

    def run(trial: optuna.trial.Trial) -> float | tuple[float, float]:
        policy = suggest_policy(trial, spec.workload, spec.allow_warm_start, name=f"trial-{trial.number}")
        t0 = time.perf_counter()
        ev = evaluate(spec.workload, policy, spec.profile, spec.seed_list, spec.n_steps)
        trial.set_user_attr("policy", to_mapping(policy))
        trial.set_user_attr(STEP_TIME, ev.step_time_s)
        trial.set_user_attr(TRAIN_GPU_S, ev.train_gpu_s)
        trial.set_user_attr("per_seed_step_time_s", list(ev.per_seed_step_time_s))
        trial.set_user_attr("sim_seconds", time.perf_counter() - t0)
        if spec.multi_objective:
            return ev.step_time_s, ev.train_gpu_s
        return ev.step_time_s

    return run


# ---------------------------------------------------------------- the study


def make_storage(url: str | None) -> optuna.storages.BaseStorage:
    """An RDB storage for a URL (heartbeats mark trials of killed runs as failed), or in-memory for None/'memory'."""
    if url is None or url in ("", "memory", ":memory:"):
        return optuna.storages.InMemoryStorage()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None
        # A trial whose process was killed stops beating; the next run marks it failed
        # once it has been silent for grace_period seconds.
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=10, grace_period=30)


def open_study(spec: TuneSpec, study_name: str, storage: str | optuna.storages.BaseStorage | None = DEFAULT_STORAGE,
               sampler_seed: int = 0) -> optuna.Study:
    """Create the study, or load it to resume; refuse one created for something else.

    Raises ConfigError (field 'study') when the stored study optimises another
    workload, profile, seed count, step count, objective or search space.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = storage if isinstance(storage, optuna.storages.BaseStorage) else make_storage(storage)
    directions = ["minimize", "minimize"] if spec.multi_objective else ["minimize"]
    try:
        existing = optuna.load_study(study_name=study_name, storage=store)
    except KeyError:
        existing = None
    want = spec.fingerprint()
    # A study created by a run killed before it recorded its inputs is as good as new.
    fresh = existing is None or (not existing.trials and "tune" not in existing.user_attrs)
    if not fresh:
        have = existing.user_attrs.get("tune")
        if have != want:
            if isinstance(have, dict):
                diff = ", ".join(f"{k} was {have.get(k)!r}, now {v!r}" for k, v in want.items() if have.get(k) != v)
            else:
                diff = "it was not created by tlt tune"
            raise ConfigError(f"study {study_name!r}", "study", study_name,
                              f"a new study name, or the inputs it was created with ({diff})")
    n_before = 0 if existing is None else len(existing.trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Multivariate TPE with groups: the space is conditional (which parameters exist
        # depends on the drafter, the bandit and the bucket edges).
        sampler = optuna.samplers.TPESampler(seed=_sampler_seed(sampler_seed, n_before), multivariate=True,
                                             group=True, n_startup_trials=10)
        study = optuna.create_study(storage=store, study_name=study_name, directions=directions, sampler=sampler,
                                    load_if_exists=True)
        if fresh:
            study.set_user_attr("tune", want)
            study.set_metric_names([STEP_TIME, "train_gpu_s_per_step"] if spec.multi_objective else [STEP_TIME])
            for name in PRESETS:
                params = params_for(load_policy(name), spec.workload, spec.allow_warm_start)
                if params is not None:
                    study.enqueue_trial(params, user_attrs={"preset": name}, skip_if_exists=True)
        if isinstance(store, optuna.storages.RDBStorage) and store.get_heartbeat_interval():
            # Trials of a killed run that have been silent past the grace period: mark them failed
            # now (optimize() also does, before each trial), so they do not show as running forever.
            optuna.storages.fail_stale_trials(study)
    return study


def _sampler_seed(seed: int, n_trials: int) -> int:
    """A resumed study must not replay the random start-up samples of its first run."""
    return int(hashlib.sha256(f"{seed}:{n_trials}".encode()).hexdigest()[:8], 16)


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def run_study(study: optuna.Study, spec: TuneSpec, trials: int,
              callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = ()) -> int:
    """Run trials until the study holds `trials` complete ones; returns how many ran now."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    remaining = trials - len(complete_trials(study))
    if remaining <= 0:
        return 0
    func = objective(spec)
    # Stops at `trials` complete ones even when another process works on the same study.
    stop = optuna.study.MaxTrialsCallback(trials, states=(TrialState.COMPLETE,))
    ran = 0
    while remaining > 0:
        before = len(complete_trials(study))
        study.optimize(func, n_trials=remaining, callbacks=[*callbacks, stop], gc_after_trial=False)
        done = len(complete_trials(study)) - before
        ran += done
        remaining = trials - len(complete_trials(study))
        if done == 0:  # every trial failed: do not spin
            break
    return ran


class Progress:
    """An Optuna callback printing one line per finished trial (to stderr by default)."""

    def __init__(self, total: int, multi_objective: bool = False, stream=None):
        self.total, self.multi, self.stream = total, multi_objective, stream or sys.stderr
        self.t0 = time.perf_counter()

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        done = len(complete_trials(study))
        elapsed = time.perf_counter() - self.t0
        head = f"trial {done}/{self.total} (#{trial.number}, {elapsed:.1f}s)"
        if trial.state != TrialState.COMPLETE:
            print(f"{head}  {trial.state.name.lower()}", file=self.stream, flush=True)
            return
        preset = trial.user_attrs.get("preset")
        tag = f"  [preset {preset}]" if preset else ""
        if self.multi:
            front = len(study.best_trials)
            print(f"{head}  step {trial.values[0]:,.2f} s  train {trial.values[1]:,.0f} GPU-s/step  "
                  f"front {front}{tag}", file=self.stream, flush=True)
        else:
            best = study.best_trial
            print(f"{head}  step {trial.value:,.2f} s  best {best.value:,.2f} s (#{best.number}){tag}",
                  file=self.stream, flush=True)


# ---------------------------------------------------------------- results


def policy_of(trial: FrozenTrial, name: str | None = None) -> Policy:
    """The exact policy a trial simulated (from its 'policy' user attribute)."""
    data = dict(trial.user_attrs["policy"])
    if name is not None:
        data["name"] = name
    return from_mapping(Policy, data, f"trial {trial.number}")


def best_trial(study: optuna.Study) -> FrozenTrial:
    """Single objective: the best trial. Multi-objective: the fastest trial on the Pareto front."""
    if len(study.directions) == 1:
        return study.best_trial
    return min(study.best_trials, key=lambda t: (t.values[0], t.values[1], t.number))


def best_policy(study: optuna.Study, name: str | None = None) -> Policy:
    trial = best_trial(study)
    name = name or f"tuned-{study.study_name}"
    policy = policy_of(trial, name)
    fp = study.user_attrs.get("tune", {})
    desc = (f"Tuned by tlt tune (study {study.study_name!r}, trial {trial.number}) on {fp.get('workload')} / "
            f"{fp.get('profile')}, {fp.get('seeds')} seeds x {fp.get('steps')} steps: "
            f"{trial.user_attrs[STEP_TIME]:.2f} s per step. {policy.description}")
    return replace(policy, description=desc)


def write_policy(policy: Policy, path) -> None:
    """Atomic write; the file loads with `workbench.policy.load_policy` and runs in `tlt sim`."""
    save(policy, path)


def convergence_frame(study: optuna.Study) -> pd.DataFrame:
    """Complete trials in order: trial, step_time_s, train_gpu_s, best_so_far (lowest step time so far), preset."""
    rows, best = [], math.inf
    for t in sorted(complete_trials(study), key=lambda t: t.number):
        step = t.values[0]
        best = min(best, step)
        rows.append({"trial": t.number, STEP_TIME: step, TRAIN_GPU_S: t.user_attrs.get(TRAIN_GPU_S, math.nan),
                     "best_so_far": best, "preset": t.user_attrs.get("preset", "")})
    return pd.DataFrame(rows, columns=["trial", STEP_TIME, TRAIN_GPU_S, "best_so_far", "preset"])


def pareto_frame(study: optuna.Study) -> pd.DataFrame:
    """The Pareto front of (step time, training GPU-s per step), fastest first.

    Multi-objective studies: `study.best_trials`. Single-objective ones: the
    non-dominated trials over the same two quantities (from the user attributes).
    """
    trials = complete_trials(study)
    if len(study.directions) > 1:
        front = study.best_trials
    else:
        pts = [(t, t.values[0], t.user_attrs.get(TRAIN_GPU_S, 0.0)) for t in trials]
        front = [t for t, s, g in pts if not any((s2 <= s and g2 <= g) and (s2 < s or g2 < g) for _, s2, g2 in pts)]
    rows = []
    for t in front:
        pol = policy_of(t)
        rows.append({"trial": t.number, STEP_TIME: t.user_attrs[STEP_TIME], TRAIN_GPU_S: t.user_attrs[TRAIN_GPU_S],
                     "drafter": pol.drafter.kind, "bandit": pol.bandit.algorithm, "sd_threshold": pol.sd_threshold,
                     "training": pol.training.enabled, "preset": t.user_attrs.get("preset", "")})
    df = pd.DataFrame(rows, columns=["trial", STEP_TIME, TRAIN_GPU_S, "drafter", "bandit", "sd_threshold",
                                     "training", "preset"])
    return df.sort_values([STEP_TIME, TRAIN_GPU_S, "trial"]).reset_index(drop=True)


def comparison_frame(spec: TuneSpec, tuned: Policy, presets: Sequence[Policy] | None = None) -> pd.DataFrame:
    """The presets and the tuned policy on the study's seeds and steps.

    Columns: policy, step_time_s, speedup (vs baseline, or the first preset),
    rollout_time_s, train_gpu_s, mean_accept_len, note.
    """
    if presets is None:
        presets = [load_policy(n) for n in PRESETS]
    rows = []
    for pol in [*presets, tuned]:
        ev = evaluate(spec.workload, pol, spec.profile, spec.seed_list, spec.n_steps)
        note = ""
        if pol.drafter.warm_start and not spec.allow_warm_start:
            note = "warm start (offline drafter training, uncharged; outside the search space)"
        rows.append({"policy": pol.name, STEP_TIME: ev.step_time_s, "rollout_time_s": ev.rollout_time_s,
                     TRAIN_GPU_S: ev.train_gpu_s, "mean_accept_len": ev.mean_accept_len, "note": note})
    df = pd.DataFrame(rows)
    names = list(df["policy"])
    ref = df.loc[names.index(BASELINE), STEP_TIME] if BASELINE in names else df.loc[0, STEP_TIME]
    df.insert(2, "speedup", ref / df[STEP_TIME])
    return df


def comparison_text(df: pd.DataFrame) -> str:
    rows = [[r.policy, f"{r.step_time_s:,.2f}", f"{r.speedup:.3f}x", f"{r.rollout_time_s:,.2f}",
             f"{r.train_gpu_s:,.0f}", f"{r.mean_accept_len:.2f}", r.note] for r in df.itertuples()]
    return format_table(rows, ["policy", "step s", "speedup", "rollout s", "train GPU-s", "accept len", "note"])


def pareto_text(df: pd.DataFrame) -> str:
    rows = [[str(r.trial), f"{r.step_time_s:,.2f}", f"{r.train_gpu_s:,.0f}", r.drafter, r.bandit,
             str(r.sd_threshold), "yes" if r.training else "no", r.preset] for r in df.itertuples()]
    return format_table(rows, ["trial", "step s", "train GPU-s", "drafter", "bandit", "threshold", "training",
                               "preset"])
