"""The operator profiler (real/profiler): TP sharding arithmetic, what it may import, and a real
measurement of the tiny architecture on this CPU (small grid, few runs)."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from real.profiler.grid import GRIDS, distinct_layers, points
from real.profiler.shard import Link, shard
from real.profiler.table import COLUMNS, bad_cell, read_measurements, write_measurements
from workbench.contracts.architecture import load_architecture
from workbench.contracts.schema import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# What a bare GPU machine's Python has (issue 13), beside the standard library.
BARE = {"torch", "numpy", "pandas", "pyarrow", "yaml", "transformers"}


@pytest.mark.parametrize("name, tp, heads, kv, inter", [
    ("qwen2.5-7b", 4, 7, 1, 4736), ("qwen2.5-7b", 1, 28, 4, 18944), ("qwen2.5-32b", 8, 5, 1, 3456),
    ("llama3.3-70b", 8, 8, 1, 3584), ("r1-distill-qwen-7b", 2, 14, 2, 9472),
])
def test_a_rank_holds_its_share_of_heads_kv_heads_and_mlp(name, tp, heads, kv, inter):
    a = load_architecture(name)
    s = shard(a, tp)
    assert (s.heads, s.kv_heads, s.intermediate) == (heads, kv, inter)
    assert s.vocab == math.ceil(a.vocab / tp)
    # Everything splits except the two norms each rank keeps whole (no KV replication here).
    assert tp * s.layer_params == a.layer_params + (tp - 1) * 2 * a.hidden


def test_kv_heads_are_replicated_beyond_the_models_kv_heads():
    a = load_architecture("llama3.3-70b")  # 64 heads, 8 KV heads
    s = shard(a, 16)
    assert s.kv_heads == 1 and s.heads == 4
    # 16 ranks x 1 KV head: each KV head's weights held twice.
    kv_weights = 2 * a.hidden * a.head_dim
    assert 16 * s.layer_params == a.layer_params + 15 * 2 * a.hidden + 8 * kv_weights


@pytest.mark.parametrize("name, tp, field", [("qwen2.5-7b", 8, "num_attention_heads"),
                                             ("qwen2.5-7b", 7, "intermediate_size"),
                                             ("tiny-gcd", 0, "tp")])
def test_a_tp_that_does_not_divide_the_model_is_refused_naming_the_field(name, tp, field):
    with pytest.raises(ConfigError, match=field) as err:
        shard(load_architecture(name), tp)
    # the fix names the TPs that work (Qwen2.5-7B: 28 heads, 4 KV heads, MLP 18944 = 2^9 x 37)
    if tp > 0:
        assert "use --tp among 1, 2, 4" in str(err.value)


def test_collectives_follow_the_ring_all_reduce_and_vanish_at_tp1():
    a = load_architecture("qwen2.5-7b")
    link = Link(latency_s=10e-6, bus_bytes_per_s=100e9)
    assert shard(a, 1).collectives_s(64, link, 2) == 0.0
    s = shard(a, 4)
    act = 64 * a.hidden * 2
    allreduce = 10e-6 + 2 * 3 / 4 * act / 100e9
    gather = 10e-6 + 3 / 4 * (64 * s.vocab * 4 * 2) / 100e9
    assert s.collectives_s(64, link, 2) == pytest.approx((2 * a.layers + 1) * allreduce + gather)
    assert s.drafter_collectives_s(64, link, 2) == pytest.approx(3 * allreduce + gather)


def test_distinct_layers_streams_twice_the_cache_at_most_the_models_layers():
    # fits: cycle the whole model
    assert distinct_layers(layer_bytes=10, model_layers=4, cache_bytes=1000) == 4
    assert distinct_layers(layer_bytes=400 * 2**20, model_layers=28, cache_bytes=50 * 2**20) == 1
    assert distinct_layers(layer_bytes=10 * 2**20, model_layers=80, cache_bytes=50 * 2**20) == 10


def test_the_grid_has_every_op_once_and_a_verify_point_for_each_drafter_point():
    g = GRIDS["cpu"]
    pts = points(g)
    assert len(pts) == len(set(pts))
    assert {p.op for p in pts} == {
        "decode",
        "verify",
        "drafter",
        "prefill",
        "train_fwd",
        "train_fwd_bwd",
        "drafter_train",
    }
    verify = {(p.batch, p.tokens) for p in pts if p.op == "verify"}
    assert all((b * k, 2) in verify for b, k in g.drafter)


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_the_profiler_imports_only_what_a_bare_gpu_machine_has():
    """The closure of real/profiler's imports (through our own modules, inside functions too):
    the standard library, BARE, and workbench.contracts."""
    seen, todo, outside = (
        set(),
        ["real.profiler." + p.stem for p in (ROOT / "real" / "profiler").glob("*.py")],
        set(),
    )
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        parts = mod.split(".")
        path = ROOT / (mod.replace(".", "/") + ".py")
        if not path.is_file():
            path = ROOT / mod.replace(".", "/") / "__init__.py"
        # Importing a module runs its packages' __init__ files first.
        inits = [ROOT.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
        for imp in set().union(*(_imports(f) for f in [path, *inits] if f.is_file())):
            top = imp.split(".")[0]
            if top in ("real", "workbench"):
                assert imp.startswith(("real.profiler", "workbench.contracts")), (
                    f"{mod} imports {imp}"
                )
                todo.append(imp)
            elif top not in sys.stdlib_module_names and top != "__future__":
                outside.add(top)
    assert outside <= BARE, f"not on a bare GPU machine: {outside - BARE}"
    assert any(m.startswith("workbench.contracts") for m in seen)


# The workbench's other dependencies (pyproject.toml) and the real backend's engine libraries:
# absent on a bare GPU machine, so the profiler must run with every one of them unimportable.
ABSENT = (
    "scipy",
    "simpy",
    "typer",
    "streamlit",
    "plotly",
    "matplotlib",
    "optuna",
    "vllm",
    "ray",
    "tokenizers",
    "safetensors",
    "sim",
)
_BLOCKED_RUN = """
import importlib.abc, runpy, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ImportError(f"{{name}} is not on a bare GPU machine")
sys.meta_path.insert(0, Absent())
sys.argv = ["real.profiler"] + {argv!r}
runpy.run_module("real.profiler", run_name="__main__")
"""


def test_python_m_real_profiler_runs_with_the_workbench_dependencies_unimportable(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "m.parquet"
    argv = [
        "--arch",
        "tiny-gcd",
        "--grid",
        "test",
        "--repeats",
        "1",
        "--warmup",
        "1",
        "--passes",
        "1",
        "--check-rounds",
        "0",
        "--out",
        str(out),
    ]
    res = subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN.format(absent=set(ABSENT), argv=argv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == str(out)
    assert set(read_measurements(out).rows["op"]) >= {
        "decode",
        "verify",
        "drafter",
        "prefill",
        "train_fwd_bwd",
    }


@pytest.fixture(scope="module")
def measured():
    pytest.importorskip("torch")
    from real.profiler.measure import measure
    from real.profiler.settings import make_settings

    st = make_settings("tiny-gcd", "cpu", tp=2, grid="test", repeats=3, warmup=1, seed=0, threads=1,
                       check_rounds=1, passes=1)
    return measure(st)


def test_a_measurement_covers_the_grid_and_sums_layers_head_and_collectives(measured):
    r = measured.rows
    assert set(r["op"]) == {
        "decode",
        "verify",
        "drafter",
        "prefill",
        "train_fwd",
        "train_fwd_bwd",
        "drafter_train",
        "whole",
    }
    assert (r["step_s"] > 0).all() and r["step_s"].map(math.isfinite).all()
    target = r[r["op"].isin(("decode", "verify", "prefill"))]
    # TP 2: collectives assumed
    assert (target["layers"] == 4).all() and (target["collectives_s"] > 0).all()
    recomposed = target["layers"] * target["layer_s"] + target["head_s"] + target["collectives_s"]
    assert recomposed.to_numpy() == pytest.approx(target["step_s"].to_numpy())
    whole = r[r["op"] == "whole"]
    assert len(whole) == 2 and (whole["whole_s"] > 0).all()
    assert measured.meta["tp"] == 2 and measured.meta["architecture"] == "tiny-gcd"


def test_measurements_round_trip_through_parquet_and_other_files_are_refused(measured, tmp_path):
    path = tmp_path / "m.parquet"
    write_measurements(path, measured)
    back = read_measurements(path)
    pd.testing.assert_frame_equal(
        back.rows, measured.rows[list(COLUMNS)].reset_index(drop=True), check_dtype=False
    )
    assert back.meta == json.loads(json.dumps(measured.meta))  # tuples come back as lists
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(ConfigError, match="tlt-profiler"):
        read_measurements(tmp_path / "other.parquet")


def test_a_step_time_no_engine_takes_is_refused_before_the_fit(measured, tmp_path):
    """1e300 seconds would overflow the cost fit (scipy's NNLS aborts the process on it): the
    file is refused naming the column and row, and the fit refuses non-finite inputs itself."""
    from workbench.calibrate.captures.robust import nnls_normal

    rows = measured.rows.copy()
    rows.loc[rows.index[3], "step_s"] = 1e300
    path = tmp_path / "m.parquet"
    write_measurements(path, type(measured)(rows, measured.meta))
    with pytest.raises(ConfigError) as e:
        read_measurements(path)
    assert "step_s" in str(e.value) and "under 86,400" in str(e.value)
    with pytest.raises(ValueError, match="not finite"):
        nnls_normal(np.array([[1e200, 1.0], [1.0, 1e200]]), np.array([1.0, 2.0]))


def test_an_op_that_is_no_name_is_the_bad_cell(measured):
    """A GPU-check file's rows come from JSON, where an op can be a list: named, not hashed."""
    rows = measured.rows.copy().astype({"op": object})
    rows.at[rows.index[2], "op"] = ["decode"]
    assert bad_cell(rows)[:2] == ("op", 2)


def test_python_m_real_profiler_refuses_a_bad_tp_and_writes_nothing(tmp_path):
    out = tmp_path / "m.parquet"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "real.profiler",
            "--arch",
            "tiny-gcd",
            "--tp",
            "3",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 2
    assert "num_attention_heads" in res.stderr and "--tp" in res.stderr
    assert not out.exists() and not list(tmp_path.iterdir())
