"""`tlt project` and workbench.project: a whole run in days, GPU-hours, cost and energy."""

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from sim.lengths import log_median
from sim.simulator import simulate
from workbench.cli import app
from workbench.contracts.energy import GpuPower, GpuSeconds, cost, energy_kwh, gpu_hours
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import FieldError
from workbench.contracts.workload import load_workload
from workbench.project import (
    block_starts,
    project,
    project_run,
    projection_units,
    run_totals,
    step_usage,
    workload_at,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny():
    """cpu-tiny with lengths that grow over the run, so a projection must follow the drift."""
    wl = load_workload("cpu-tiny")
    wl = replace(wl, lengths=replace(wl.lengths, drift_per_step=0.01))
    return wl, load_profile(wl.profile)


def test_full_projection_totals_are_the_sums_of_the_simulated_steps(tiny):
    wl, prof = tiny
    for name in ("baseline", "tlt-cold"):
        pol = load_policy(name)
        (unit,) = projection_units(wl, [pol], prof, [1], 12, sample_steps=12)
        assert unit.starts == ()  # fits the budget: simulated in full
        proj = project_run(unit)
        steps = simulate(wl, pol, prof, seed=1, steps=12).steps
        assert proj.method == "full" and proj.simulated.all() and proj.simulated_steps == 12
        assert proj.total_wall_s == pytest.approx(sum(m.step_time_s for m in steps), rel=1e-12)
        usage = [step_usage(m, wl, pol) for m in steps]
        assert proj.gpu.decode == pytest.approx(sum(u.gpu.decode for u in usage), rel=1e-12)
        assert proj.gpu.train == pytest.approx(sum(u.gpu.train for u in usage), rel=1e-12)
        # Synchronous RL: every GPU is in one of the three states for the whole step.
        assert proj.gpu.total == pytest.approx(proj.total_wall_s * wl.gpus, rel=1e-9)
        # Decoding is what the rollout's worker-time leaves after bubbles and spot training.
        m = steps[0]
        assert usage[0].gpu.decode == pytest.approx(
            m.rollout_time_s * wl.workers * (1 - m.bubble_fraction - m.drafter_train_fraction),
            rel=1e-12,
        )


def test_energy_cost_and_gpu_hour_arithmetic():
    seconds = GpuSeconds(decode=10 * 3600.0, idle=5 * 3600.0, train=2 * 3600.0)
    power = GpuPower(decode_w=500.0, idle_w=100.0, train_w=700.0)
    assert gpu_hours(seconds) == pytest.approx(17.0)
    # 6.9 kWh.
    assert energy_kwh(seconds, power) == pytest.approx((10 * 500 + 5 * 100 + 2 * 700) / 1000.0)
    assert cost(17.0, 2.5) == pytest.approx(42.5)
    assert GpuPower.parse("650, 120,700") == GpuPower(650.0, 120.0, 700.0)
    for bad in ("650,120", "a,b,c", "650,120,-1"):
        with pytest.raises(FieldError):
            GpuPower.parse(bad)
    with pytest.raises(FieldError):
        cost(1.0, -1.0)


def test_run_totals_in_days_gpu_hours_cost_and_energy(tiny):
    wl, prof = tiny
    (unit,) = projection_units(wl, [load_policy("baseline")], prof, [0], 6, sample_steps=6)
    run = project_run(unit)
    power = GpuPower(400.0, 80.0, 450.0)
    t = run_totals(run, 3.0, power)
    assert t.days == pytest.approx(run.total_wall_s / 86400)
    assert t.gpu_hours == pytest.approx(run.total_wall_s * wl.gpus / 3600)
    assert t.cost == pytest.approx(3.0 * t.gpu_hours)
    assert t.energy_kwh == pytest.approx(
        (run.gpu.decode * 400 + run.gpu.idle * 80 + run.gpu.train * 450) / 3.6e6
    )
    unknown = run_totals(run, None, None)
    assert unknown.cost is None and unknown.energy_kwh is None


def test_workload_at_a_step_draws_what_the_run_draws_there(tiny):
    wl, _ = tiny
    cap = wl.max_response_tokens
    moved = workload_at(wl, 30)
    assert log_median(moved.lengths, cap, 0) == pytest.approx(
        log_median(wl.lengths, cap, 30), abs=1e-9
    )
    assert log_median(moved.lengths, cap, 5) == pytest.approx(
        log_median(wl.lengths, cap, 35), abs=1e-9
    )
    assert block_starts(100, 10, 40) == (0, 30, 60, 90)
    assert block_starts(40, 10, 40) == ()


def test_a_sampled_projection_agrees_with_the_full_simulation(tiny):
    """The drafter learns from cold over the run and lengths drift: sampling 3 blocks of 10 of 80
    steps stays within 5% of simulating all 80 (docs/results.md has the measured errors at
    scale)."""
    wl, prof = tiny
    pols = [load_policy("baseline"), load_policy("tlt-cold")]
    sampled = project(wl, pols, prof, [0], 80, sample_steps=30)
    full = project(wl, pols, prof, [0], 80, full=True)
    assert sampled.method == "sampled" and full.method == "full"
    for s, f in zip(sampled.runs, full.runs):
        assert s.simulated.sum() == 30
        # The first block is the full run's first steps: same seed, same drafter.
        assert s.wall_s[:10] == pytest.approx(f.wall_s[:10], rel=1e-12)
        assert s.total_wall_s == pytest.approx(f.total_wall_s, rel=0.05)
        assert s.gpu.decode == pytest.approx(f.gpu.decode, rel=0.05)
    # The drafter state carried across the skipped steps: the last block accepts as the full run
    # does there.
    s, f = sampled.runs[1], full.runs[1]
    assert s.accept_len[s.simulated][-10:].mean() == pytest.approx(
        f.accept_len[-10:].mean(), rel=0.05
    )


def test_tlt_project_writes_the_run_totals(tmp_path):
    out = tmp_path / "p"
    res = runner.invoke(
        app,
        [
            "project",
            "--workload",
            "cpu-tiny",
            "--policies",
            "baseline,tlt",
            "--steps",
            "30",
            "--seeds",
            "2",
            "--sample-steps",
            "20",
            "--price-per-gpu-hour",
            "2",
            "--gpu-watts",
            "300,60,350",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((out / "project.json").read_text())
    assert (
        data["method"] == "sampled" and data["block_starts"] == [0, 20] and data["seeds"] == [0, 1]
    )
    base, tlt = data["policies"]["baseline"], data["policies"]["tlt"]
    for key in ("days", "gpu_hours", "cost", "energy_kwh"):
        assert base[key]["mean"] > 0 and base["saving_vs_first"][key]["mean"] == 0.0
        assert tlt["saving_vs_first"][key]["mean"] == pytest.approx(
            1 - tlt[key]["mean"] / base[key]["mean"], abs=0.02)  # paired per seed, then averaged
    assert base["cost"]["mean"] == pytest.approx(2 * base["gpu_hours"]["mean"])
    assert (out / "project.png").stat().st_size > 0
    assert "GPU-hours" in res.stdout and "energy: GPUs only" in res.stdout
    # Every total comes with its 90% interval, around the projection's own figure.
    for name, entry in data["intervals"].items():
        for key in ("days", "gpu_hours", "cost", "energy_kwh", "speedup"):
            iv = entry[key]
            assert iv["low"] <= iv["value"] <= iv["high"] and iv["level"] == pytest.approx(0.9)
        assert entry["days"]["value"] == pytest.approx(data["policies"][name]["days"]["mean"],
                                                       rel=1e-9)
        assert entry["days"]["high"] > entry["days"]["low"]
    assert "how sure (the mean step simulated again" in res.stdout and "fit error" in res.stdout


def test_tlt_project_without_watts_says_how_to_get_energy_and_refuses_bad_watts(tmp_path):
    res = runner.invoke(
        app,
        [
            "project",
            "--workload",
            "cpu-tiny",
            "--policies",
            "baseline",
            "--steps",
            "3",
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "energy: unknown" in res.stdout and "--gpu-watts" in res.stdout
    assert (
        json.loads((tmp_path / "a" / "project.json").read_text())["policies"]["baseline"][
            "energy_kwh"
        ]
        is None
    )
    bad = runner.invoke(
        app,
        [
            "project",
            "--workload",
            "cpu-tiny",
            "--steps",
            "3",
            "--gpu-watts",
            "300,60",
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert bad.exit_code == 2 and "gpu_watts" in bad.output
    assert not (tmp_path / "b").exists()
