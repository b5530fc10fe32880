"""A workload and a profile must describe the same cluster (model x GPU x TP x framework)."""

from dataclasses import replace

import pytest

from workbench.contracts.cluster import Cluster
from workbench.contracts.cluster_check import check_workload_profile
from workbench.contracts.energy import GpuPower
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.workload import load_workload, workload_presets


def test_every_preset_workload_matches_its_profile():
    for name in workload_presets():
        wl = load_workload(name)
        check_workload_profile(wl, load_profile(wl.profile))


def test_tp_contradiction_is_refused_naming_gpus_per_worker():
    wl = load_workload("tlt-eval-qwen2.5-7b")  # TP4
    with pytest.raises(ConfigError) as exc:
        check_workload_profile(replace(wl, gpus_per_worker=8), load_profile(wl.profile))
    assert exc.value.field == "gpus_per_worker" and "TP" in str(exc.value)


@pytest.mark.parametrize("field,value",
                         [("gpu", "a100"), ("model", "qwen2.5-32b"), ("framework", "vllm")])
def test_gpu_model_and_framework_contradictions_are_refused_naming_the_field(field, value):
    wl = load_workload("tlt-eval-qwen2.5-7b")
    with pytest.raises(ConfigError) as exc:
        check_workload_profile(replace(wl, **{field: value}), load_profile(wl.profile))
    assert exc.value.field == field and repr(value) in str(exc.value)


def test_a_workload_field_left_empty_takes_the_profiles():
    wl = replace(load_workload("tlt-eval-qwen2.5-7b"), gpu="", model="", framework="")
    check_workload_profile(wl, load_profile(wl.profile))


def test_a_profile_without_cluster_constrains_nothing():
    wl = replace(load_workload("cpu-tiny"), gpus_per_worker=4, gpu="h100")
    prof = load_profile("cpu-tiny")
    assert prof.cluster is None
    check_workload_profile(wl, prof)


def test_cluster_and_energy_checks():
    with pytest.raises(FieldError):
        Cluster("m", "h100", 0).check()
    with pytest.raises(FieldError):
        Cluster("m", "h100", 1, framework="ollama").check()
    e = GpuPower(decode_w=420.0, idle_w=105.0, train_w=630.0)
    e.check()
    with pytest.raises(FieldError):
        replace(e, decode_w=-1.0).check()
