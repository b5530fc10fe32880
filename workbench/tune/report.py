"""The tuner's results: the best trial and its policy (`best_policy`, `write_policy`), and the
tables the CLI prints and the Tune page shows (convergence, Pareto front, the tuned policy
against the presets on the study's seeds)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import optuna
import pandas as pd
from optuna.trial import FrozenTrial

from workbench.contracts.policy import Policy, load_policy
from workbench.contracts.schema import from_mapping, save
from workbench.report.tables import format_table
from workbench.tune.space import refusal
from workbench.tune.targets import SPACES
from workbench.tune.study import (
    PRESETS,
    STEP_TIME,
    TRAIN_GPU_S,
    TuneSpec,
    complete_trials,
    evaluate,
)

BASELINE = "baseline"


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
    desc = (f"Tuned by tlt tune (study {study.study_name!r}, trial {trial.number}) on "
            f"{fp.get('workload')} / {fp.get('profile')}, {fp.get('seeds')} seeds x "
            f"{fp.get('steps')} steps: {trial.user_attrs[STEP_TIME]:.2f} s per step. "
            f"{policy.description}")
    return replace(policy, description=desc)


def write_policy(policy: Policy, path: str | Path) -> None:
    """Atomic write; the file loads with `workbench.contracts.policy.load_policy` and runs in
    `tlt sim`."""
    save(policy, path)


def front_policies(study: optuna.Study, front: pd.DataFrame, name: str) -> dict[int, Policy]:
    """Trial number -> the policy of each trial of a Pareto front (`pareto_frame`), named
    NAME-trial-N."""
    trials = set(front["trial"])
    return {int(t.number): policy_of(t, f"{name}-trial-{t.number}")
            for t in study.get_trials(deepcopy=False) if t.number in trials}


def convergence_frame(study: optuna.Study) -> pd.DataFrame:
    """Complete trials in order: trial, step_time_s, train_gpu_s, best_so_far (lowest step time so
    far), preset."""
    rows, best = [], math.inf
    for t in sorted(complete_trials(study), key=lambda t: t.number):
        step = t.values[0]
        best = min(best, step)
        rows.append({"trial": t.number, STEP_TIME: step,
                     TRAIN_GPU_S: t.user_attrs.get(TRAIN_GPU_S, math.nan),
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
        front = [t for t, s, g in pts
                 if not any((s2 <= s and g2 <= g) and (s2 < s or g2 < g) for _, s2, g2 in pts)]
    rows = []
    for t in front:
        pol = policy_of(t)
        rows.append({"trial": t.number, STEP_TIME: t.user_attrs[STEP_TIME],
                     TRAIN_GPU_S: t.user_attrs[TRAIN_GPU_S],
                     "drafter": pol.drafter.kind, "bandit": pol.bandit.algorithm,
                     "sd_threshold": pol.sd_threshold,
                     "training": pol.spot_training.enabled,  # the tables' column name
                     "preset": t.user_attrs.get("preset", "")})
    df = pd.DataFrame(rows,
                      columns=["trial", STEP_TIME, TRAIN_GPU_S, "drafter", "bandit", "sd_threshold",
                                     "training", "preset"])
    return df.sort_values([STEP_TIME, TRAIN_GPU_S, "trial"]).reset_index(drop=True)


def comparison_frame(spec: TuneSpec, tuned: Policy, presets: Sequence[Policy] | None = None,
                     study: optuna.Study | None = None) -> pd.DataFrame:
    """The presets and the tuned policy on the study's seeds and steps.

    Columns: policy, step_time_s, speedup (vs baseline, or the first preset),
    rollout_time_s, train_gpu_s, mean_accept_len, note. With `study`, a preset it ran as a trial
    (and the tuned policy, its best trial) is read from that trial, simulated on the same seeds
    and steps; the others are simulated.
    """
    if presets is None:
        presets = [load_policy(n) for n in PRESETS]
    ran = _ran_in(study, tuned)
    rows = []
    for pol in [*presets, tuned]:
        got = ran.get(pol.name)
        if got is None:
            ev = evaluate(spec.workload, pol, spec.profile, spec.seed_list, spec.n_steps)
            got = {STEP_TIME: ev.step_time_s, "rollout_time_s": ev.rollout_time_s,
                   TRAIN_GPU_S: ev.train_gpu_s, "mean_accept_len": ev.mean_accept_len}
        note = ""
        unsearched = not spec.allow_warm_start and SPACES[spec.target].warm is None
        if pol.drafter.warm_start and unsearched:
            note = "warm start (offline drafter training, uncharged; outside the search space)"
        why = refusal(pol, spec.target)
        if why:
            note = f"outside the search space: {why}"
        rows.append({"policy": pol.name, **got, "note": note})
    df = pd.DataFrame(rows,
                      columns=["policy", STEP_TIME, "rollout_time_s", TRAIN_GPU_S,
                               "mean_accept_len", "note"])
    names = list(df["policy"])
    ref = df.loc[names.index(BASELINE), STEP_TIME] if BASELINE in names else df.loc[0, STEP_TIME]
    df.insert(2, "speedup", ref / df[STEP_TIME])
    return df


_FIGURES = (STEP_TIME, "rollout_time_s", TRAIN_GPU_S, "mean_accept_len")


def _ran_in(study: optuna.Study | None, tuned: Policy) -> dict[str, dict[str, float]]:
    """Policy name -> its figures, for the presets the study ran as complete trials and for the
    tuned policy (the best trial); trials recorded before these figures were are left out."""
    if study is None:
        return {}
    out = {}
    for t in complete_trials(study):
        if "preset" in t.user_attrs and all(k in t.user_attrs for k in _FIGURES):
            out[t.user_attrs["preset"]] = {k: float(t.user_attrs[k]) for k in _FIGURES}
    best = best_trial(study)
    if all(k in best.user_attrs for k in _FIGURES):
        out[tuned.name] = {k: float(best.user_attrs[k]) for k in _FIGURES}
    return out


def comparison_text(df: pd.DataFrame) -> str:
    rows = [[r.policy, f"{r.step_time_s:,.2f}", f"{r.speedup:.2f}x", f"{r.rollout_time_s:,.2f}",
             f"{r.train_gpu_s:,.0f}", f"{r.mean_accept_len:.2f}", r.note] for r in df.itertuples()]
    return format_table(rows,
                        ["policy", "step s", "speedup", "rollout s", "train GPU-s", "accept len",
                         "note"])


def pareto_text(df: pd.DataFrame) -> str:
    rows = [[str(r.trial), f"{r.step_time_s:,.2f}", f"{r.train_gpu_s:,.0f}", r.drafter, r.bandit,
             str(r.sd_threshold), "yes" if r.training else "no", r.preset] for r in df.itertuples()]
    return format_table(rows,
                        ["trial", "step s", "train GPU-s", "drafter", "bandit", "threshold",
                         "training",
                               "preset"])
