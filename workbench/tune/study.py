"""The tuner's study: a TuneSpec (what it optimises), the objective (`evaluate` a trial's policy
on the spec's seeds, SD first taken out of every bucket the profile predicts it loses in:
workbench/tune/guard.py), and the Optuna study that holds the trials (`open_study`, `run_study`).

Storage. Studies live in an RDB URL, by default `sqlite:///runs/tlt-studies.db`, or in an Optuna
journal file (`journal:PATH`): workbench/tune/storage.py, which also fails the trials a killed
process left RUNNING when the study is opened again (with a notice, `AbandonedTrials`). Each
finished trial is committed as it ends, so a study killed at any moment keeps every finished
trial; running again with the same study name resumes it, counting its finished trials towards
the requested total. The study records what it was created for (workload, profile,
seeds, steps, objective, search space: `TuneSpec.fingerprint`); resuming it with
anything else is refused, since trials scored differently cannot be compared (names a study could
take: workbench/tune/names.py).

The sampler (TPE) is seeded from the user's seed and the number of trials the
study already holds (`derive_seed(seed, Stream.TUNE_SAMPLER, n)`), so a fresh
study is reproducible end to end, and a resumed one is reproducible per trial
(a trial's value depends on its policy alone) but does not replay the sequence
an uninterrupted run would have sampled.

Parallel trials (`run_parallel`, `tlt tune --workers N`): N processes share one storage, each
with its own sampler stream (worker k > 0: `derive_seed(seed, TUNE_SAMPLER, n, k)`); each preset
trial is taken by one worker, and the study stops at its trial count (`enough_trials`). Storages
that take several writers: an Optuna journal file (`journal:PATH`, file locks: one machine, or a
shared file system with working locks; the recommended one) or an RDB URL (SQLite waits up to 60 s
for a lock, fine for a few processes; PostgreSQL or MySQL for many). A parallel run is not
reproducible trial by trial: which worker samples what depends on timing.

Pruning (single objective). A trial is scored seed by seed; after each seed but the last, one whose
mean step time over the seeds so far is more than PRUNE_MARGIN above the best complete trial's on
the same seeds (common random numbers: a seed's draws are the same for both) is stopped there
(Optuna's PRUNED, with `pruned_after` seeds). Such a trial counts towards the study's trials: it
was sampled and scored, and found hopeless. The presets are never pruned. Paired per-seed ratios
between two policies spread by a few percent, so a trial 10% behind on its first seed does not
become the best on three.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import multiprocessing
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from sim.sweep import sweep
from workbench.contracts.policy import Policy, load_policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError, Notice, to_mapping
from workbench.contracts.seeds import Stream, derive_seed
from workbench.contracts.workload import Workload
from workbench.tune.guard import sd_guarded
from workbench.tune.space import SPACE_VERSION, params_for, suggest_policy
from workbench.tune.storage import (
    DEFAULT_STORAGE,
    MEMORY,
    fail_abandoned_trials,
    make_storage,
    mark_process,
)
from workbench.tune.targets import check_target

PRUNE_MARGIN = 0.10
PRESETS = ("baseline", "static-sd", "tlt-cold", "tlt",
           "tlt-vllm")  # tlt-vllm: the paper's configuration as `tlt train` runs it
STEP_TIME = "step_time_s"
TRAIN_GPU_S = "train_gpu_s"


@dataclass(frozen=True)
class Evaluation:
    """A policy simulated for each seed: means over steps, then over seeds."""

    step_time_s: float  # mean RL step time
    train_gpu_s: float  # drafter spot-training GPU-seconds per RL step
    rollout_time_s: float
    mean_accept_len: float
    per_seed_step_time_s: tuple[float, ...]

    def attrs(self) -> dict[str, Any]:
        """As a trial records it (user attributes)."""
        return {STEP_TIME: self.step_time_s, TRAIN_GPU_S: self.train_gpu_s,
                "rollout_time_s": self.rollout_time_s,
                "mean_accept_len": self.mean_accept_len,
                "per_seed_step_time_s": list(self.per_seed_step_time_s)}


def evaluate(workload: Workload, policy: Policy, profile: Profile, seeds: Iterable[int],
             steps: int | None = None,
             after_seed: Callable[["Evaluation"], None] | None = None) -> Evaluation:
    """Simulate `policy` once per seed (the same seeds for every policy: common random numbers);
    `after_seed` hears the evaluation so far after each seed (it may stop it by raising)."""
    step_times, train, rollout, accept = [], [], [], []
    seeds = list(seeds)
    for i, seed in enumerate(seeds):
        run = next(iter(sweep(workload, [policy], profile, [seed], steps))).run
        step_times.append(run.mean("step_time_s"))
        rollout.append(run.mean("rollout_time_s"))
        accept.append(run.mean("mean_accept_len"))
        # Spot-training worker-seconds -> GPU-seconds (a worker is gpus_per_worker GPUs).
        train.append(sum(s.drafter_train_fraction * s.rollout_time_s for s in run.steps)
                     / len(run.steps)
                     * workload.workers * workload.gpus_per_worker)
        n = len(step_times)
        ev = Evaluation(sum(step_times) / n, sum(train) / n, sum(rollout) / n, sum(accept) / n,
                        tuple(step_times))
        if after_seed is not None and i < len(seeds) - 1:
            after_seed(ev)
    return ev


@dataclass(frozen=True)
class TuneSpec:
    """What a study optimises; recorded in the study so a resume cannot change it."""

    workload: Workload
    profile: Profile
    seeds: int = 3
    steps: int | None = None  # RL steps per simulation (None: the workload's)
    multi_objective: bool = False
    allow_warm_start: bool = False
    # the stack the tuned policy runs on: its space only (workbench/tune/targets.py)
    target: str = "sim"
    prune: bool = True  # stop hopeless trials after a seed (single objective; module docstring)

    def __post_init__(self) -> None:
        check_target(self.target)

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds))

    @property
    def n_steps(self) -> int:
        return self.steps or self.workload.steps

    def fingerprint(self) -> dict[str, Any]:
        def digest(obj: Any) -> str:
            text = json.dumps(to_mapping(obj), sort_keys=True)
            return hashlib.sha256(text.encode()).hexdigest()[:16]

        return {"workload": self.workload.name, "workload_sha": digest(self.workload),
                "profile": self.profile.name, "profile_sha": digest(self.profile),
                "seeds": self.seeds, "steps": self.n_steps, "multi_objective": self.multi_objective,
                "allow_warm_start": self.allow_warm_start, "target": self.target,
                "space_version": SPACE_VERSION}


def objective(spec: TuneSpec) -> Callable[[optuna.trial.Trial], float | tuple[float, float]]:
    """The Optuna objective: build the trial's policy, simulate it on every seed, record it."""

    def run(trial: optuna.trial.Trial) -> float | tuple[float, float]:
        mark_process(trial)  # a killed process's trial is found and failed on resume
        policy = suggest_policy(trial, spec.workload, spec.allow_warm_start,
                                name=f"trial-{trial.number}", target=spec.target)
        guarded = sd_guarded(policy, spec.profile, spec.workload, spec.target)
        policy = guarded.policy
        trial.set_user_attr("policy", to_mapping(policy))
        if guarded.changes:
            trial.set_user_attr("sd_guard", list(guarded.changes))
        t0 = time.perf_counter()
        prune = spec.prune and not spec.multi_objective and "preset" not in trial.user_attrs
        ev = evaluate(spec.workload, policy, spec.profile, spec.seed_list, spec.n_steps,
                      (lambda ev: _prune_if_hopeless(trial, ev, t0)) if prune else None)
        for key, value in {**ev.attrs(), "sim_seconds": time.perf_counter() - t0}.items():
            trial.set_user_attr(key, value)
        if spec.multi_objective:
            return ev.step_time_s, ev.train_gpu_s
        return ev.step_time_s

    return run


def _prune_if_hopeless(trial: optuna.trial.Trial, ev: Evaluation, t0: float) -> None:
    """Stop the trial when it is PRUNE_MARGIN behind the best complete trial on the seeds it ran."""
    k = len(ev.per_seed_step_time_s)
    trial.report(ev.step_time_s, k - 1)
    done = complete_trials(trial.study)
    if not done:
        return
    best = min(done, key=lambda t: t.values[0])
    on_same = best.user_attrs.get("per_seed_step_time_s", [])[:k]
    if len(on_same) < k or ev.step_time_s <= (1 + PRUNE_MARGIN) * sum(on_same) / k:
        return
    for key, value in {**ev.attrs(), "sim_seconds": time.perf_counter() - t0,
                       "pruned_after": k}.items():
        trial.set_user_attr(key, value)
    raise optuna.TrialPruned(f"{ev.step_time_s / (sum(on_same) / k) - 1:.0%} behind trial "
                             f"{best.number} "
                             f"after {k} seed(s)")


def input_changes(have: object, want: dict[str, Any]) -> str:
    """How a study's recorded inputs (`have`) differ from `want` (a `TuneSpec.fingerprint`); ""
    when they are the same."""
    if not isinstance(have, dict):
        return "it was not created by tlt tune"
    return ", ".join(f"{k} was {have.get(k)!r}, now {v!r}" for k, v in want.items()
                     if have.get(k) != v)


class AbandonedTrials(Notice):
    """A resumed study's trials that a killed process left running, now marked failed."""


def open_study(spec: TuneSpec, study_name: str,
               storage: str | optuna.storages.BaseStorage | None = DEFAULT_STORAGE,
               sampler_seed: int = 0, worker: int = 0) -> optuna.Study:
    """Create the study, or load it to resume; refuse one created for something else. Worker k > 0
    of a parallel run samples with its own seed (the same storage, a distinct sampler stream).

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
        diff = input_changes(existing.user_attrs.get("tune"), want)
        if diff:
            raise ConfigError(f"study {study_name!r}", "study", study_name,
                              f"a new study name, or the inputs it was created with ({diff})")
    n_before = 0 if existing is None else len(existing.trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Multivariate TPE with groups: the space is conditional (which parameters exist
        # depends on the drafter, the bandit and the bucket edges).
        seed = derive_seed(sampler_seed, Stream.TUNE_SAMPLER, n_before,
                           *((worker,) if worker else ()))
        sampler = optuna.samplers.TPESampler(seed=seed,
                                             multivariate=True, group=True, n_startup_trials=10)
        study = optuna.create_study(storage=store, study_name=study_name, directions=directions,
                                    sampler=sampler, load_if_exists=True)
        if fresh:
            study.set_user_attr("tune", want)
            study.set_metric_names([STEP_TIME, "train_gpu_s_per_step"] if spec.multi_objective
                                   else [STEP_TIME])
            for name in PRESETS:
                params = params_for(load_policy(name), spec.workload, spec.allow_warm_start,
                                    spec.target)
                if params is not None:
                    study.enqueue_trial(params, user_attrs={"preset": name}, skip_if_exists=True)
    abandoned = [] if fresh else fail_abandoned_trials(study)
    if abandoned:
        warnings.warn(f"study {study_name!r}: trial(s) {', '.join(map(str, abandoned))} were left "
                      "running by a process that is gone (killed?); marked failed, they count "
                      "towards nothing", AbandonedTrials, stacklevel=2)
    return study



def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def finished_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The trials that count towards a study's total: complete ones and those pruned as hopeless."""
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    return [t for t in study.get_trials(deepcopy=False, states=states)
            if t.state == TrialState.COMPLETE or "pruned_after" in t.user_attrs]


def run_study(study: optuna.Study, spec: TuneSpec, trials: int,
              callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = (),
              since: datetime.datetime | None = None) -> int:
    """Run trials until the study holds `trials` finished ones (complete, or pruned as hopeless:
    `finished_trials`); returns how many finished now.

    Other processes may work on the same study: a trial that starts when the finished trials plus
    those running before it already make `trials` is pruned at once and this process stops, so
    the study ends with `trials` finished ones, not one per process more. Running trials count only
    if they began `since` (default: now; another host's killed run may leave trials RUNNING in a
    journal file, where no heartbeat tells them from live ones)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    since = since or datetime.datetime.now()
    remaining = trials - len(finished_trials(study))
    if remaining <= 0:
        return 0
    func = objective(spec)
    gated_out: list[int] = []  # trials this process pruned because the study had enough
    mine: list[int] = []  # trials this process finished

    def gated(trial: optuna.trial.Trial) -> float | tuple[float, float]:
        if enough_trials(trial.study, trial.number, trials, since):
            gated_out.append(trial.number)
            trial.study.stop()
            raise optuna.TrialPruned(f"the study holds or is running its {trials} trials")
        return func(trial)

    def count(study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.state == TrialState.COMPLETE or "pruned_after" in trial.user_attrs:
            mine.append(trial.number)
        # even when another process works on the same study
        if len(finished_trials(study)) >= trials:
            study.stop()

    while remaining > 0 and not gated_out:
        before = len(mine)
        study.optimize(gated, n_trials=remaining, callbacks=[*callbacks, count],
                       gc_after_trial=False)
        remaining = trials - len(finished_trials(study))
        if len(mine) == before:  # every trial failed, or other processes hold the rest: do not spin
            break
    return len(mine)


def enough_trials(study: optuna.Study, number: int, trials: int, since: datetime.datetime) -> bool:
    """Whether trial `number` is one too many: finished trials plus those running that began before
    it (and after `since`)."""
    held = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    running = [t for t in held if t.number < number and t.datetime_start is not None
               and t.datetime_start >= since]
    return len(finished_trials(study)) + len(running) >= trials


def _tune_worker(spec: TuneSpec, study_name: str, storage: str, trials: int, sampler_seed: int,
                 worker: int, progress: bool, since: datetime.datetime) -> int:
    """One process of `run_parallel` (module level: spawned processes import it)."""
    study = open_study(spec, study_name, storage, sampler_seed, worker)
    prefix = f"[worker {worker}] "
    printer = [TrialPrinter(trials, spec.multi_objective, prefix=prefix)] if progress else []
    return run_study(study, spec, trials, printer, since)


def run_parallel(spec: TuneSpec, study_name: str, storage: str, trials: int, workers: int,
                 sampler_seed: int = 0, progress: bool = True) -> int:
    """Run the study's trials in `workers` processes against one storage (an RDB URL or
    'journal:PATH'; not 'memory', which a process cannot share); returns how many trials ran now."""
    if storage in MEMORY:
        raise ConfigError("--storage", "storage", storage,
                          "a storage several processes share with --workers > 1: 'journal:PATH' "
                          "(a file) or an RDB URL such as sqlite:///runs/tlt-studies.db")
    since = datetime.datetime.now()
    # created once, with its preset trials, before the workers
    open_study(spec, study_name, storage, sampler_seed)
    # fork would share the storage's connections and Ray's threads
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        jobs = [pool.submit(_tune_worker, spec, study_name, storage, trials, sampler_seed, k,
                            progress, since)
                for k in range(workers)]
        return sum(j.result() for j in jobs)


class TrialPrinter:
    """An Optuna callback printing one line per finished trial (to stderr by default)."""

    def __init__(self, total: int, multi_objective: bool = False, stream=None, prefix: str = ""):
        self.total, self.multi, self.prefix = total, multi_objective, prefix
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        done = len(finished_trials(study))
        elapsed = time.perf_counter() - self.t0
        head = f"{self.prefix}trial {done}/{self.total} (#{trial.number}, {elapsed:.1f}s)"
        if "pruned_after" in trial.user_attrs:
            print(f"{head}  step {trial.user_attrs[STEP_TIME]:,.2f} s on "
                  f"{trial.user_attrs['pruned_after']} "
                  f"seed(s): pruned (over {PRUNE_MARGIN:.0%} behind the best)",
                  file=self.stream, flush=True)
            return
        if trial.state != TrialState.COMPLETE:
            print(f"{head}  {trial.state.name.lower()}", file=self.stream, flush=True)
            return
        preset = trial.user_attrs.get("preset")
        tag = f"  [preset {preset}]" if preset else ""
        if self.multi:
            front = len(study.best_trials)
            print(f"{head}  step {trial.values[0]:,.2f} s  train {trial.values[1]:,.0f} "
                  f"GPU-s/step  front {front}{tag}", file=self.stream, flush=True)
        else:
            best = study.best_trial
            print(f"{head}  step {trial.value:,.2f} s  best {best.value:,.2f} s "
                  f"(#{best.number}){tag}",
                  file=self.stream, flush=True)
