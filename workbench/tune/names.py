"""A study's name, and what a storage holds under it, before anything runs.

A study is tied to the inputs it was created with (`TuneSpec.fingerprint`), so a name given by
default must never point at a study of other inputs: tuning the same workload for another target,
another seed count or another profile would be refused. `default_study_name` says what the inputs
are (`tune-<workload>`, with the target when it is not the workload's own engine, and `-mo` for
two objectives); `free_study_name` takes the first of that name, `-2`, `-3`, ... that is new or
holds a study of these very inputs (which it then resumes). `study_status` says what the storage
holds under a name, so the page can say it before "Run study" is pressed: a new study, a study to
resume and how many trials it holds, or one created for other inputs (and which).
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from workbench.tune.storage import abandoned
from workbench.tune.study import TuneSpec, input_changes
from workbench.tune.targets import default_target


def default_study_name(spec: TuneSpec) -> str:
    own = spec.target == default_target(spec.profile, spec.workload)
    return (f"tune-{spec.workload.name}" + ("" if own else f"-{spec.target}")
            + ("-mo" if spec.multi_objective else ""))


@dataclass(frozen=True)
class StudyStatus:
    """What a storage holds under a study name."""

    name: str
    exists: bool
    complete: int = 0
    pruned: int = 0  # pruned as hopeless: they count towards the study's trials
    running: int = 0  # abandoned ones included
    abandoned: int = 0  # left running by a process that is gone: opening the study fails them
    failed: int = 0
    other_inputs: str = ""  # how the study's inputs differ from these ("": the same, or new)

    @property
    def finished(self) -> int:
        """The trials that count towards the study's total (complete and pruned as hopeless)."""
        return self.complete + self.pruned


def study_status(spec: TuneSpec, name: str, storage: optuna.storages.BaseStorage) -> StudyStatus:
    """What `storage` holds under `name`, against `spec`'s inputs."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return StudyStatus(name, exists=False)
    trials = study.get_trials(deepcopy=False)
    if not trials and "tune" not in study.user_attrs:  # as good as new (`open_study`)
        return StudyStatus(name, exists=False)
    count = lambda state: sum(t.state == state for t in trials)  # noqa: E731
    pruned = sum(t.state == TrialState.PRUNED and "pruned_after" in t.user_attrs for t in trials)
    return StudyStatus(name, True, count(TrialState.COMPLETE), pruned, count(TrialState.RUNNING),
                       sum(abandoned(t) for t in trials), count(TrialState.FAIL),
                       input_changes(study.user_attrs.get("tune"), spec.fingerprint()))


def free_study_name(spec: TuneSpec, storage: optuna.storages.BaseStorage,
                    base: str | None = None) -> str:
    """The first of `base` (default: `default_study_name`), `base-2`, `base-3`, ... that `storage`
    holds no study of other inputs under."""
    base = base or default_study_name(spec)
    want = spec.fingerprint()
    held = {s.study_name: s.user_attrs.get("tune")
            for s in optuna.get_all_study_summaries(storage, include_best_trial=False)
            if s.n_trials or "tune" in s.user_attrs}
    name, i = base, 2
    while name in held and input_changes(held[name], want):
        name, i = f"{base}-{i}", i + 1
    return name
