"""`tlt plan`: the cluster-shape search (workbench/plan/) on small spaces (one or two TPs, so few
profiles are derived), its front, its infeasible shapes, the files it writes and its refusals."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench import plan as planning
from workbench.calibrate.database.aiconfigurator import system_spec
from workbench.cli import app
from workbench.contracts.architecture import load_architecture
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload

runner = CliRunner()
REL_TOL = 1e-6


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One profile cache for the module: each TP is derived once (about 4 s), then read."""
    return tmp_path_factory.mktemp("xdg")


@pytest.fixture(scope="module")
def tiny_plan(cache, tmp_path_factory) -> tuple[planning.Plan, Path]:
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(cache))
    out = tmp_path_factory.mktemp("plan")
    spec = planning.PlanSpec(
        load_workload("tlt-eval-qwen2.5-7b"),
        (load_policy("baseline"), load_policy("tlt")),
        "h100",
        2.5,
        tps=(4,),
        max_batches=(128, 256),
        gpus=16,
        trials=6,
        steps=2,
    )
    result = planning.run_plan(spec)
    result.save(out)
    mp.undo()
    return result, out


def _dominates(a: planning.PlanTrial, b: planning.PlanTrial) -> bool:
    return a.days <= b.days and a.cost <= b.cost and (a.days < b.days or a.cost < b.cost)


def test_a_tiny_plan_completes_with_a_non_dominated_front(tiny_plan):
    result, out = tiny_plan
    shapes = {t.shape for t in result.trials}
    assert len(shapes) == 6  # six distinct shapes evaluated (repeats of a shape are not counted)
    ok = [t for t in result.trials if t.feasible]
    front = result.front
    assert front and all(t.feasible for t in front)
    for f in front:
        assert not any(_dominates(o, f) for o in ok)
    # Every feasible shape off the front is beaten by one on it.
    for t in ok:
        if t.shape not in {f.shape for f in front}:
            assert any(_dominates(f, t) for f in front)
    chosen = result.chosen
    assert chosen.days == min(t.days for t in ok)  # budget: the fastest
    assert chosen.shape.gpus <= 16 and chosen.cost == pytest.approx(
        chosen.gpu_hours * 2.5, rel=REL_TOL
    )
    assert chosen.energy_kwh > 0
    data = json.loads((out / "plan.json").read_text())
    assert data["goal"] == "budget" and data["chosen"]["shape"]["tp"] == 4
    assert len(data["front"]) == len(front) and len(data["trials"]) == len(result.trials)
    assert (out / "plan.png").stat().st_size > 1000


def test_the_chosen_files_load_and_tlt_sim_runs_them(tiny_plan, tmp_path):
    result, out = tiny_plan
    wl = load_workload(out / "workload.yaml")
    c = result.chosen
    assert (wl.workers, wl.gpus_per_worker, wl.max_batch) == (
        c.shape.engines,
        c.shape.tp,
        c.shape.max_batch,
    )
    assert load_policy(out / "policy.yaml").name == c.shape.policy
    assert load_profile(out / "profile.yaml").cluster.tp == c.shape.tp
    res = runner.invoke(
        app,
        [
            "sim",
            "--workload",
            str(out / "workload.yaml"),
            "--policy",
            str(out / "policy.yaml"),
            "--steps",
            "1",
            "--out",
            str(tmp_path / "sim"),
        ],
    )
    assert res.exit_code == 0, res.output


def test_tlt_plan_prints_the_chosen_shapes_days_and_cost_with_their_interval(cache, monkeypatch,
                                                                           tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    res = runner.invoke(app, ["plan", "--workload", "tlt-eval-qwen2.5-7b", "--gpu", "h100",
                              "--gpus", "16", "--price-per-gpu-hour", "1000", "--tp", "4",
                              "--max-batch", "128", "--policies", "tlt", "--trials", "1",
                              "--steps", "2", "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if x.startswith("chosen"))
    cost = float(re.search(r"days, ([\d,]+) USD", line).group(1).replace(",", ""))
    lo, hi = (float(x.replace(",", "")) for x in
              re.search(r"90%: [\d.]+-[\d.]+ days, ([\d,]+)-([\d,]+) USD", res.stdout).groups())
    assert lo < cost < hi, res.stdout
    assert "fit error" in res.stdout  # what the interval covers: the database profile's fit


def test_a_model_too_big_for_the_gpu_is_marked_not_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    arch, spec = load_architecture("llama3.3-70b"), system_spec("h100")
    fit = planning.memory_fit(arch, spec, 1, 33_000)
    assert "weights need" in fit.reason and fit.kv_tokens == 0
    assert planning.memory_fit(arch, spec, 8, 33_000).reason == ""
    res = runner.invoke(
        app,
        [
            "plan",
            "--workload",
            "tlt-eval-llama3.3-70b",
            "--gpu",
            "h100",
            "--gpus",
            "8",
            "--price-per-gpu-hour",
            "2",
            "--tp",
            "1",
            "--max-batch",
            "64",
            "--policies",
            "baseline",
            "--trials",
            "3",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "p"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "chosen: none" in res.output and "weights need" in res.output
    data = json.loads((tmp_path / "p" / "plan.json").read_text())
    # TP1 x max batch 64: screened, not proposed.
    assert data["trials"] == [] and len(data["screened"]) == 1
    assert (
        data["screened"][0]["status"] == "infeasible"
        and "weights need" in data["screened"][0]["reason"]
    )
    assert data["chosen"] is None and not (tmp_path / "p" / "workload.yaml").exists()
    # Nothing derived for a shape that cannot run.
    assert not list((tmp_path / "xdg").rglob("*.yaml"))


def test_a_deadline_no_shape_meets_is_marked(tiny_plan, cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    base = tiny_plan[0].spec
    spec = replace(base, gpus=None, deadline_days=1e-6, max_gpus=16, trials=3)
    result = planning.run_plan(spec)
    ran = [t for t in result.trials if t.days is not None]
    assert ran and all(t.status == "deadline missed" for t in ran)
    assert result.chosen is None and result.front == []
    loose = planning.run_plan(replace(spec, deadline_days=1e3))
    ok = [t for t in loose.trials if t.feasible]
    assert loose.chosen.cost == min(t.cost for t in ok)  # deadline: the cheapest meeting it


def test_the_front_of_given_points():
    def t(days, cost, tp=1):
        return planning.PlanTrial(
            0, planning.Shape(tp, 8, 64, f"p{days}-{cost}"), "ok", days=days, cost=cost
        )

    pts = [t(1.0, 10.0), t(2.0, 5.0), t(2.0, 6.0), t(3.0, 5.0), t(0.5, 20.0)]
    assert [(p.days, p.cost) for p in planning.pareto_front(pts)] == [
        (0.5, 20.0),
        (1.0, 10.0),
        (2.0, 5.0),
    ]
    late = replace(t(0.1, 1.0), status="deadline missed")
    assert planning.pareto_front(pts + [late]) == planning.pareto_front(pts)


def test_gpu_counts_and_mean_lengths():
    assert planning.gpu_choices(64) == [64, 32, 16, 8, 4]
    assert planning.gpu_choices(6) == [6, 3]
    wl = load_workload("tlt-eval-qwen2.5-32b")
    mean = planning.mean_response_tokens(wl, 0)
    assert 1_000 < mean < wl.max_response_tokens
    grown = replace(wl, lengths=replace(wl.lengths, drift_per_step=0.05))
    assert planning.mean_response_tokens(grown, 20) > mean


@pytest.mark.parametrize("args, field", [
    (["--gpu", "nosuch", "--gpus", "8"], "--gpu"),
    (["--gpu", "h100", "--gpus", "0"], "--gpus"),
    (["--gpu", "h100"], "--gpus/--deadline-days"),
    (["--gpu", "h100", "--gpus", "8", "--deadline-days", "3"], "--gpus/--deadline-days"),
    (["--gpu", "h100", "--deadline-days", "0"], "--deadline-days"),
    (["--gpu", "h100", "--gpus", "8", "--tp", "0"], "--tp"),
    (["--gpu", "h100", "--gpus", "8", "--framework", "tensorflow"], "framework"),
])
def test_bad_inputs_are_refused_naming_the_field(args, field, tmp_path):
    price = ["--price-per-gpu-hour", "2"]
    res = runner.invoke(
        app, ["plan", "--workload", "tlt-eval-qwen2.5-7b", *args, *price, "--out", str(tmp_path)]
    )
    assert res.exit_code == 2, res.output
    assert field in res.output
    assert not (tmp_path / "plan.json").exists()


def test_a_zero_price_is_refused(tmp_path):
    res = runner.invoke(
        app,
        [
            "plan",
            "--workload",
            "tlt-eval-qwen2.5-7b",
            "--gpu",
            "h100",
            "--gpus",
            "8",
            "--price-per-gpu-hour",
            "0",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 2 and "--price-per-gpu-hour" in res.output


def test_a_model_the_database_never_measured_is_marked(tmp_path, monkeypatch):
    """A mixture of experts whose expert shape is in no MoE table (allenai/OLMoE-1B-7B's: 64
    experts of 1024, top-8): every shape is infeasible, the reason naming the config field."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    olmoe = tmp_path / "olmoe" / "config.json"
    olmoe.parent.mkdir()
    olmoe.write_text(json.dumps({
        "architectures": ["OlmoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 1024,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
        "num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 50304}))
    res = runner.invoke(
        app,
        [
            "plan",
            "--workload",
            "cpu-tiny",
            "--model",
            str(olmoe),
            "--gpu",
            "h100",
            "--gpus",
            "2",
            "--price-per-gpu-hour",
            "2",
            "--tp",
            "1",
            "--max-batch",
            "64",
            "--policies",
            "baseline",
            "--trials",
            "2",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "p"),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert data["chosen"] is None and data["trials"]
    assert all(
        t["status"] == "infeasible" and "num_experts" in t["reason"]
        and "the database measured" in t["reason"]
        for t in data["trials"]
        if t["shape"]["gpus"] % t["shape"]["tp"] == 0
    )
