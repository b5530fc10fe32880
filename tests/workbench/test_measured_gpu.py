"""Profiles from NVIDIA's measured operator database (aiconfigurator-core, a dependency)."""

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from workbench.calibrate.database.catalog import (
    PRESET_CASES,
    disk_cached_profile,
    model_choices,
    preset_profile,
)
from workbench.calibrate.published.database_check import (
    draft_overhead_from_table_d,
    fit_draft_overheads,
    fit_overhead_exponent,
    reference_step_s,
    table_e_engines,
)
from workbench.calibrate.database.aiconfigurator import Engine, gpu_names
from workbench.calibrate.database.profile import (
    DRAFT_OVERHEAD_EXPONENT,
    DRAFT_OVERHEAD_REF_STEP_S,
    DRAFT_STEP_OVERHEAD_S,
    PROFILE_OVERHEADS,
)
from workbench.cli import app
from workbench.contracts.architecture import load_architecture
from workbench.contracts.profile import PRESET_DIR, load_profile
from workbench.contracts.provenance import provenance_kind
from workbench.contracts.schema import ConfigError, to_mapping

runner = CliRunner()
REL_TOL = 0.01  # a regeneration on another CPU: the least-squares fit may move in the last digits


def _gemm_ms(ops) -> float:
    return sum(o[1] for o in ops if o[0].endswith("gemm") and "logits" not in o[0])


def test_gpu_list_comes_from_the_database():
    names = gpu_names()
    assert {"h100", "h200", "b200", "a100", "l40s"} <= set(names)


def test_tp_sharding_arithmetic():
    one, four = Engine("qwen2.5-7b", "h100", 1, "vllm"), Engine("qwen2.5-7b", "h100", 4, "vllm")
    t1, ops1 = one.decode(1, 2048)
    t4, ops4 = four.decode(1, 2048)
    # A rank reads a quarter of each layer's weights at TP4: its GEMMs take roughly a quarter
    # (small GEMMs do not split perfectly: launch and tile costs stay).
    assert 0.2 < _gemm_ms(ops4) / _gemm_ms(ops1) < 0.45
    assert sum(o[1] for o in ops1 if "_ar" in o[0]) == 0.0  # no all-reduce at TP1
    assert sum(o[1] for o in ops4 if "_ar" in o[0]) > 0.0
    assert t4 < t1
    arch = load_architecture("qwen2.5-7b")
    cov = four.coverage(arch, 4, "vllm")
    assert (cov.heads, cov.kv_heads) == (arch.heads // 4, arch.kv_heads // 4)
    assert cov.beyond(1, 1024) <= 1.0


def test_tp_that_does_not_split_the_heads_is_refused():
    with pytest.raises(ConfigError):
        Engine("qwen2.5-7b", "h100", 3, "vllm")


def test_unknown_gpu_is_refused_naming_the_field(tmp_path):
    res = runner.invoke(
        app,
        [
            "profile",
            "--backend",
            "aiconfigurator",
            "--arch",
            "qwen2.5-7b",
            "--gpu",
            "tpu",
            "--out",
            str(tmp_path / "p.yaml"),
        ],
    )
    assert res.exit_code == 2 and "'gpu'" in res.output and "h100" in res.output
    assert not (tmp_path / "p.yaml").exists()


def test_a_gpu_named_selects_the_database_and_torch_with_it_is_refused(tmp_path):
    """The command a user writes from the README's wording: --gpu (no --backend) is NVIDIA's
    measured data, in seconds, never a CPU torch profile of a 7B; --backend torch with --gpu is
    refused with the fix."""
    out = tmp_path / "p.yaml"
    res = runner.invoke(
        app,
        [
            "profile",
            "--arch",
            "qwen2.5-7b",
            "--gpu",
            "a100",
            "--tp",
            "1",
            "--framework",
            "vllm",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    p = load_profile(out)
    assert provenance_kind(p) == "measured" and (p.cluster.gpu, p.cluster.framework) == (
        "a100",
        "vllm",
    )
    res = runner.invoke(
        app,
        [
            "profile",
            "--arch",
            "qwen2.5-7b",
            "--gpu",
            "a100",
            "--backend",
            "torch",
            "--out",
            str(tmp_path / "q.yaml"),
        ],
    )
    assert (
        res.exit_code == 2
        and "drop --backend torch" in res.output
        and "--backend aiconfigurator" in res.output
    )
    assert not (tmp_path / "q.yaml").exists()


@pytest.mark.parametrize("gpu,tp", [("h100", 4), ("a100", 1)])
def test_derived_profiles_load_in_tlt_sim(tmp_path, gpu, tp):
    prof = tmp_path / f"{gpu}-tp{tp}.yaml"
    res = runner.invoke(
        app,
        [
            "profile",
            "--backend",
            "aiconfigurator",
            "--arch",
            "qwen2.5-7b",
            "--gpu",
            gpu,
            "--tp",
            str(tp),
            "--framework",
            "vllm",
            "--out",
            str(prof),
        ],
    )
    assert res.exit_code == 0, res.output
    p = load_profile(prof)
    assert (p.cluster.gpu, p.cluster.tp, p.cluster.model, p.cluster.framework) == (
        gpu,
        tp,
        "qwen2.5-7b",
        "vllm",
    )
    assert (
        provenance_kind(p) == "measured"
        and "aiconfigurator-core" in p.source
        and p.power is not None
    )
    wl = yaml.safe_load((PRESET_DIR.parent / "workloads" / "cpu-tiny.yaml").read_text())
    wl.update(
        name=f"{gpu}-tp{tp}",
        profile=prof.name,
        gpus_per_worker=tp,
        gpu=gpu,
        model="qwen2.5-7b",
        max_response_tokens=256,
        steps=1,
    )
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(wl))
    out = tmp_path / "sim"
    res = runner.invoke(
        app,
        [
            "sim",
            "--workload",
            str(tmp_path / "wl.yaml"),
            "--policy",
            "baseline,static-sd",
            "--steps",
            "1",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads((out / "summary.json").read_text())["policies"]["baseline"]["step_time_s"] > 0
    # The same workload with a profile of another TP is refused, naming the field.
    wl.update(gpus_per_worker=2 * tp)
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(wl))
    res = runner.invoke(
        app,
        [
            "sim",
            "--workload",
            str(tmp_path / "wl.yaml"),
            "--policy",
            "baseline",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "sim2"),
        ],
    )
    assert res.exit_code == 2 and "gpus_per_worker" in res.output
    assert not (tmp_path / "sim2").exists()


def _close(a, b, path=""):
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=REL_TOL, abs=1e-9), path
    elif path.endswith(".source"):  # figures quoted in the text move with the fit's last digits
        assert a.split(" Form fitted")[0] == b.split(" Form fitted")[0]
    else:
        assert a == b, path


def test_regenerating_a_shipped_profile_matches_it():
    case = next(c for c in PRESET_CASES if c.model == "qwen2.5-7b" and c.tp == 4)
    _close(to_mapping(preset_profile(case)), to_mapping(load_profile(case.name)))


def test_the_draft_overheads_are_what_table_d_and_the_depth_grid_give():
    fitted = fit_draft_overheads()
    assert fitted.step_s == pytest.approx(PROFILE_OVERHEADS.step_s, rel=0.02)
    assert fitted.tree_pass_s == pytest.approx(PROFILE_OVERHEADS.tree_pass_s, rel=0.02)
    # A draft step costs a small part of what the pass costs whatever its depth: with the tree's
    # and the drafter's pass taken out, Table D's six rows leave about the fitted step each.
    per_row = sorted(draft_overhead_from_table_d())
    assert len(per_row) == 6
    assert per_row[len(per_row) // 2] == pytest.approx(DRAFT_STEP_OVERHEAD_S, rel=0.2)
    assert PROFILE_OVERHEADS.eagle_pass_s + PROFILE_OVERHEADS.tree_pass_s > 12 * fitted.step_s


def test_the_overhead_scales_as_table_e_across_gpus_gives_and_the_profiles_use_that_fit():
    # The shipped constants are the fits' outputs (within their written precision), not chosen
    # values.
    assert DRAFT_OVERHEAD_REF_STEP_S == pytest.approx(reference_step_s(), rel=1e-3)
    exponent, checks = fit_overhead_exponent(table_e_engines())
    assert 0.0 < exponent < 1.0 and DRAFT_OVERHEAD_EXPONENT == pytest.approx(exponent, abs=0.01)
    # One exponent for a step's and a pass's overheads: Table E's three speedups within 10%
    # (H100 and A100 about -8%: docs/results.md, "SD's speedup by draft length").
    assert all(abs(c.error_pct) < 10.0 for c in checks), checks
    # Faster engines pay less per draft step, slower ones more; Table D's own engine pays the
    # profiles' step overhead.
    by_gpu = {c.gpu: c.overhead_s for c in checks}
    assert by_gpu["B200"] < by_gpu["H100"] < DRAFT_STEP_OVERHEAD_S < by_gpu["A100"]


def test_model_list_holds_the_presets_and_the_packages_dense_configs():
    models = model_choices()
    assert {"qwen2.5-7b", "qwen2.5-32b", "llama3.3-70b"} <= set(models)
    assert "Qwen/Qwen3-8B" in models and not any("FP8" in m for m in models)


def test_a_derived_profile_is_kept_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = disk_cached_profile("qwen2.5-7b", "h200", 1, "vllm", "h100-qwen2.5-7b-tp1")
    files = list((tmp_path / "tlt" / "profiles").glob("*.yaml"))
    assert len(files) == 1 and first.cluster.gpu == "h200"
    assert to_mapping(
        disk_cached_profile("qwen2.5-7b", "h200", 1, "vllm", "h100-qwen2.5-7b-tp1")
    ) == to_mapping(first)


def test_tlt_gpu_check_prints_tables_e_and_c_with_their_errors():
    res = runner.invoke(app, ["gpu-check"])
    assert res.exit_code == 0, res.output
    for row in ("H100 no SD", "A100 SD 8_4_48", "B200 no SD", "TV 64 bs 32"):
        assert row in res.output
    assert "Table C: median |error|" in res.output and "E[L] 6.53" in res.output
    assert "best exponent" in res.output and "target step ms" in res.output
    # The public SD-by-batch figures: the fit series, the held-out ones with their errors.
    assert "SD's speedup by batch" in res.output
    assert "eagle3-table3-eagle (held_out): median |error|" in res.output
    assert "specdecode-bench-fit" in res.output
    # The engine releases' mechanisms: the eager pair, every sweep's crossover (goal 30%), the
    # held-out speedups at batch 32-256 (goal 15%) and the RL rollouts by draft length (goal 20%).
    assert "sglang-pr-4247-graphs (fit)" in res.output
    assert re.search(r"eagle3-table3-eagle +held_out +24 ", res.output), res.output
    assert "held-out speedups at batch 32-256" in res.output
    assert re.search(r"nemo-rl-rl-think +held_out +64 +5 / 3", res.output), res.output
