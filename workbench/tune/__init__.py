"""The tuner: an Optuna study over the Policy space, scored by the simulator.

Each trial builds one valid Policy (`space.suggest_policy`) and simulates it on
the workload for seeds 0..K-1 (`study.evaluate`). Every trial sees the same
seeds, and the simulator draws response lengths from (seed, step) alone, so two
trials differ only by their policies (common random numbers): the comparison
between trials is not blurred by sampling noise, and K only sets how many length
draws the policy has to be good on.

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

Storage and resuming: see `study` (default `sqlite:///runs/tlt-studies.db`);
`optuna-dashboard sqlite:///runs/tlt-studies.db` shows the studies. Hopeless trials are pruned
after a seed (`study`, "Pruning").

Steps. A policy is scored over the workload's RL steps (3 for the presets)
unless told otherwise (`steps`, `--steps`). A cold drafter trained on idle
workers pays back over tens of steps, so a short horizon undervalues spot
training; tune with `--steps 20` (slower) when that is the question.

The presets that fall inside the search space (`baseline` and `tlt`, plus
`static-sd` with warm start allowed) are enqueued as the study's first trials,
so the tuner starts from them and its answer is never worse than the best of
them on the same seeds.

Targets. `TuneSpec.target` is the stack the tuned policy will run on (`tlt tune --target`, the
Tune page's "Target stack"): `vllm`, `sglang` (FastRL), `verl`, `tlt-train` (this project's
real backend) or `sim` (simulator only, anything goes). The search space holds only what the
target runs as `tlt export` writes it (workbench/tune/targets.py), so the tuned policy exports
without a refusal. `default_target` picks `tlt-train` for a profile calibrated on real traces,
else the workload's engine (SGLang -> sglang, vLLM -> vllm), else `sim`.

Modules: `targets` (what each stack runs), `space` (the search space), `study` (the spec, the
objective, the study and its per-trial printer), `storage` (where studies live, and the trials a
killed process left running), `names` (a study's default name and what a storage holds under a
name), `report` (the best policy and the tables).
"""

from workbench.tune.names import (
    StudyStatus,
    default_study_name,
    free_study_name,
    study_status,
)
from workbench.tune.report import (
    best_policy,
    best_trial,
    comparison_frame,
    comparison_text,
    convergence_frame,
    front_policies,
    pareto_frame,
    pareto_text,
    policy_of,
    write_policy,
)
from workbench.tune.space import (
    canonical,
    params_for,
    refusal,
    suggest_policy,
)
from workbench.tune.storage import (
    DEFAULT_STORAGE,
    JOURNAL_PREFIX,
    MEMORY,
    SQLITE_PREFIX,
    fail_abandoned_trials,
    make_storage,
)
from workbench.tune.study import (
    PRESETS,
    PRUNE_MARGIN,
    STEP_TIME,
    TRAIN_GPU_S,
    AbandonedTrials,
    Evaluation,
    TrialPrinter,
    TuneSpec,
    complete_trials,
    evaluate,
    finished_trials,
    input_changes,
    objective,
    open_study,
    run_parallel,
    run_study,
)
from workbench.tune.targets import (
    ALGORITHMS,
    EXPORTS,
    LEGACY,
    SPACES,
    TARGETS,
    check_target,
    default_target,
)

__all__ = [
    "ALGORITHMS", "DEFAULT_STORAGE", "EXPORTS", "JOURNAL_PREFIX", "LEGACY", "MEMORY", "PRESETS",
    "PRUNE_MARGIN", "SPACES", "SQLITE_PREFIX", "STEP_TIME", "TARGETS", "TRAIN_GPU_S",
    "AbandonedTrials", "Evaluation", "StudyStatus", "TrialPrinter", "TuneSpec", "best_policy",
    "best_trial", "canonical", "check_target", "comparison_frame", "comparison_text",
    "complete_trials", "convergence_frame", "default_study_name", "default_target", "evaluate",
    "fail_abandoned_trials", "finished_trials", "free_study_name", "front_policies",
    "input_changes", "make_storage", "objective", "open_study", "pareto_frame", "pareto_text",
    "params_for", "policy_of", "refusal", "run_parallel", "run_study", "study_status",
    "suggest_policy", "write_policy",
]
