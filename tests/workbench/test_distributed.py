"""Sweeps on Ray and tuning in several processes: the same results as one process, no trial twice.

One local Ray for the module (it takes ~5 s to start)."""

import json

import optuna
import pytest
from typer.testing import CliRunner

from sim.sweep import sweep
from workbench import tune as tuning
from workbench.cli import app
from workbench.compare.policies import compare
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import load_workload
from workbench.deploy.distributed import RayConfig, ensure_ray, ray_mapper, ray_runner, shutdown
from workbench.project import project

runner = CliRunner()
POLICIES = ("baseline", "static-sd", "tlt-cold")


@pytest.fixture(scope="module")
def ray_local():
    ensure_ray(RayConfig(workers=2))
    yield RayConfig(workers=2)
    shutdown()


@pytest.fixture(scope="module")
def tiny():
    wl = load_workload("cpu-tiny")
    return wl, [load_policy(p) for p in POLICIES], load_profile(wl.profile)


def test_a_ray_sweep_is_the_serial_sweep(ray_local, tiny, tmp_path):
    wl, pols, prof = tiny
    heard = []
    serial = compare(wl, pols, prof, [0, 3], steps=2)
    on_ray = compare(
        wl,
        pols,
        prof,
        [0, 3],
        steps=2,
        runner=ray_runner(ray_local),
        on_progress=lambda done, total, name, seed: heard.append((done, total, name, seed)),
    )
    # Same units, same seeds, same machine: the same floats, in the same order.
    assert on_ray.runs.equals(serial.runs)
    assert on_ray.to_json() == serial.to_json()
    assert [h[0] for h in heard] == [1, 2, 3, 4, 5, 6] and {h[1] for h in heard} == {6}
    assert sorted((h[2], h[3]) for h in heard) == sorted((p, s) for p in POLICIES for s in (0, 3))
    # Whole runs come back too (timelines included), in the serial order.
    runs = list(ray_runner(ray_local)(wl, pols[:1], prof, 2, 1))
    local = list(sweep(wl, pols[:1], prof, 2, 1))
    assert [r.seed for r in runs] == [0, 1]
    assert all(a.run.timeline.equals(b.run.timeline) for a, b in zip(runs, local))
    # The command line: --workers 2 writes the serial run's compare.json.
    args = [
        "compare",
        "--workload",
        "cpu-tiny",
        "--policies",
        "baseline,tlt",
        "--seeds",
        "2",
        "--steps",
        "1",
    ]
    assert runner.invoke(app, [*args, "--out", str(tmp_path / "a")]).exit_code == 0
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "b"), "--workers", "2"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "a" / "compare.json").read_text() == (
        tmp_path / "b" / "compare.json"
    ).read_text()


def test_a_ray_projection_is_the_serial_projection(ray_local, tiny):
    wl, pols, prof = tiny
    serial = project(wl, pols[::2], prof, 2, 40, sample_steps=20, price_per_gpu_hour=1.5)
    on_ray = project(wl, pols[::2], prof, 2, 40, sample_steps=20, price_per_gpu_hour=1.5,
                     mapper=ray_mapper(ray_local))
    assert json.loads(on_ray.to_json()) == json.loads(serial.to_json())


def test_two_tuner_processes_complete_the_trial_count_without_duplicates(tmp_path):
    """Two processes, one journal file: the study ends with exactly its trial count, each preset
    once."""
    wl = load_workload("cpu-tiny")
    spec = tuning.TuneSpec(wl, load_profile(wl.profile), seeds=1, steps=2, target="tlt-train")
    storage = f"journal:{tmp_path / 'study.log'}"
    ran = tuning.run_parallel(
        spec, "par", storage, trials=10, workers=2, sampler_seed=3, progress=False
    )
    study = optuna.load_study(study_name="par", storage=tuning.make_storage(storage))
    done = tuning.complete_trials(study)
    assert len(done) == 10 and ran == 10
    # A trial begun when the others already made the count is pruned at once: at most one per extra
    # process.
    assert len(study.trials) - len(done) <= 1
    assert len({t.number for t in study.trials}) == len(study.trials)
    presets = [t.user_attrs["preset"] for t in done if "preset" in t.user_attrs]
    assert sorted(presets) == sorted(set(presets)) and "baseline" in presets
    # No SD at all is one point of the space (no other parameter): the sampler may come back to it.
    sampled = [json.dumps(t.params, sort_keys=True) for t in done
               if "preset" not in t.user_attrs and t.params.get("drafter") != "none"]
    assert len(sampled) == len(set(sampled)), "two workers sampled the same policy"
    # Resuming with the count reached runs nothing more.
    assert (
        tuning.run_parallel(
            spec, "par", storage, trials=10, workers=2, sampler_seed=3, progress=False
        )
        == 0
    )
    with pytest.raises(ConfigError, match="journal:PATH"):
        tuning.run_parallel(spec, "mem", "memory", trials=2, workers=2)
