"""The NSGA-II study over shapes (`run_plan`): each proposal evaluated once, the deadline as a
constraint, the plan it returns."""

from __future__ import annotations

import time
import warnings
from typing import Callable

import optuna

from workbench.contracts.profile import Profile
from workbench.contracts.seeds import Stream, derive_seed
from workbench.plan.result import Plan
from workbench.plan.search import Planner, PlanSpec, PlanTrial, Shape, gpu_choices

# Sampler proposals allowed per distinct shape asked for (NSGA-II repeats shapes).
PROPOSALS_PER_SHAPE = 3
# Optuna 5 records constraints on the trial; 4 takes them from the sampler's constraints_func.
_SET_CONSTRAINT = hasattr(optuna.trial.Trial, "set_constraint")


def _engine_key(tp: int, max_batch: int) -> str:
    return f"tp{tp}-b{max_batch}"


def _objective(
    planner: Planner,
    engines: list[tuple[int, int]],
    trials: list[PlanTrial],
    on_trial: Callable[[PlanTrial], None] | None,
) -> Callable[[optuna.trial.Trial], tuple[float, float]]:
    s = planner.spec
    by_key = {_engine_key(tp, b): (tp, b) for tp, b in engines}

    def run(trial: optuna.trial.Trial) -> tuple[float, float]:
        # One categorical over the engine shapes that fit (TP and max batch together), so the
        # sampler never proposes one the screen already refused.
        tp, batch = by_key[trial.suggest_categorical("engine", list(by_key))]
        gpus = trial.suggest_categorical("gpus", gpu_choices(s.cap))
        policy = trial.suggest_categorical("policy", list(planner.policies))
        shape = Shape(tp, gpus, batch, policy)
        t = planner.evaluate(trial.number, shape)
        trials.append(t)
        if on_trial is not None:
            on_trial(t)
        if t.days is None:
            # Not run: no objective values; kept in the plan as infeasible.
            raise optuna.TrialPruned(t.reason)
        # Constrained domination (NSGA-II): a shape past the deadline ranks below every shape
        # meeting it.
        late = t.days - s.deadline_days if s.deadline_days is not None else -1.0
        if _SET_CONSTRAINT:
            trial.set_constraint("deadline", late)
        else:
            trial.set_user_attr("deadline", [late])
        return t.days, t.cost

    return run


def run_plan(spec: PlanSpec, on_trial: Callable[[PlanTrial], None] | None = None) -> Plan:
    """Search `spec.trials` distinct shapes (or the whole space, when smaller) with NSGA-II
    (seeded) and project each; a shape proposed again is not re-run, and the search stops after
    3x `trials` proposals. The workload's own shape is tried first with every policy, when it lies
    in the space."""
    planner = Planner(spec)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        constraints = {} if _SET_CONSTRAINT else {
            "constraints_func": lambda t: t.user_attrs.get("deadline", [1.0])}
        sampler = optuna.samplers.NSGAIISampler(
            seed=derive_seed(spec.seed, Stream.PLAN_SAMPLER),
            population_size=max(4, min(20, spec.trials // 3)),
            **constraints)
        study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    engines, screened = planner.screen()
    wl = spec.workload
    if (wl.gpus_per_worker, wl.max_batch) in engines and wl.gpus in gpu_choices(spec.cap):
        for p in spec.policies:
            engine = _engine_key(wl.gpus_per_worker, wl.max_batch)
            study.enqueue_trial({"engine": engine, "gpus": wl.gpus, "policy": p.name})
    trials: list[PlanTrial] = []
    t0 = time.perf_counter()
    objective = _objective(planner, engines, trials, on_trial)
    want = min(spec.trials, len(engines) * len(gpu_choices(spec.cap)) * len(spec.policies))
    while len(planner.done) < want and len(trials) < PROPOSALS_PER_SHAPE * spec.trials:
        study.optimize(objective, n_trials=1, catch=())
    profiles = {tp: p for tp, p in planner.profiles.items() if isinstance(p, Profile)}
    return Plan(spec, trials, time.perf_counter() - t0, profiles, screened)
