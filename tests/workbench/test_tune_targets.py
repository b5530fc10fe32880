"""Tune for a target stack: the search space holds only what the stack runs, so every policy in it
exports (`tlt export --to TARGET`) without a refusal or an approximation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from workbench import tune
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.deploy.export import export_policy

DRAFTER = (
    Path(__file__).resolve().parents[2] / "traces" / "reference" / "drafter"
)  # the shipped EAGLE checkpoint
# FastRL keeps its own bound on a training session and its own buffer: said in every file with spot
# training.
FASTRL_OWN = "dropped: spot_training.steps"


@pytest.fixture(scope="module")
def workload():
    return replace(load_workload("polytrace-dapo-qwen2.5-32b"), steps=1)


@pytest.mark.parametrize("target", ["vllm", "sglang", "verl"])
def test_every_policy_of_a_stacks_space_exports_to_it_unchanged(workload, target):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    kinds = set()
    for _ in range(300):
        trial = study.ask()
        pol = tune.suggest_policy(trial, workload, target=target)
        exp = export_policy(pol, target, DRAFTER)  # raises ExportError on a refusal
        loose = [
            n
            for n in exp.notes
            if n.startswith(("approximated", "dropped")) and not n.startswith(FASTRL_OWN)
        ]
        assert not loose, (loose, pol)
        assert tune.refusal(pol, target) is None
        kinds.add(
            (
                pol.drafter.kind,
                any(not r.strategy.is_chain for r in pol.schedule),
                pol.spot_training.enabled,
            )
        )
        study.tell(trial, 0.0)
    assert (
        ("eagle", True, True) in kinds
        if target == "sglang"
        else not any(tree or train for _, tree, train in kinds)
    )


def test_the_simulators_space_holds_what_no_stack_runs(workload):
    """The check above can fail: sampled the same way, the `sim` space yields policies a stack
    refuses."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    outside = 0
    for _ in range(200):
        trial = study.ask()
        pol = tune.suggest_policy(trial, workload, target="sim")
        outside += tune.refusal(pol, "vllm") is not None
        study.tell(trial, 0.0)
    assert outside > 50


def test_the_default_target_follows_the_workloads_engine_and_the_presets_it_runs_start_the_study(
    workload,
):
    prof = load_profile(workload.profile)
    assert (
        tune.default_target(prof, workload) == "sglang"
    )  # the DAPO workload runs on SGLang's costs
    assert (
        tune.default_target(load_profile("cpu-tiny")) == "tlt-train"
    )  # calibrated on this machine's real runs
    assert tune.default_target(prof, replace(workload, framework="vllm")) == "vllm"
    # TLT as FastRL runs it lies in the SGLang space; vLLM's holds the static table, not TLT's
    # trees.
    assert tune.params_for(load_policy("tlt"), workload, target="sglang") is not None
    assert tune.params_for(load_policy("tlt"), workload, target="vllm") is None
    assert tune.params_for(load_policy("static-sd"), workload, target="vllm") is not None
    assert "EAGLE trees" in tune.refusal(load_policy("tlt"), "vllm")
    with pytest.raises(ValueError, match="target 'gpu'"):
        tune.TuneSpec(workload, prof, target="gpu")


def test_a_small_study_for_vllm_exports_its_best_policy(workload):
    prof = load_profile(workload.profile)
    spec = tune.TuneSpec(workload, prof, seeds=1, target="vllm")
    study = tune.open_study(spec, "v", None)
    tune.run_study(study, spec, 6)
    best = tune.best_policy(study)
    assert tune.refusal(best, "vllm") is None
    exp = export_policy(best, "vllm", DRAFTER)
    assert exp.text.startswith("# tlt export: policy 'tuned-v' for vLLM.")
