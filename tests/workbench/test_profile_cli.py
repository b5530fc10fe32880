"""`tlt profile`: the operator fit recovers a known profile from its own points, and a real
measurement of the tiny architecture on this CPU becomes a profile that `tlt sim` runs."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from typer.testing import CliRunner

from real.profiler.grid import GRIDS, points
from real.profiler.table import Measurements, Row, frame, read_measurements
from workbench.calibrate.captures.operators import fit_operators, predict_point
from workbench.cli import app
from workbench.contracts.profile import DecodeCost, DrafterCost, load_profile
from workbench.contracts.provenance import profile_choice_label, provenance, provenance_kind

runner = CliRunner()


def _synthetic(prof, grid: str) -> Measurements:
    """Every inference point of a grid, timed as `prof` says it costs (no noise)."""
    rows = []
    for p in points(GRIDS[grid]):
        if p.op in ("decode", "verify", "drafter", "prefill"):
            s = predict_point(prof, p.op, p.batch, p.context, p.tokens, p.topk)
            rows.append(
                Row(
                    p.op,
                    p.batch,
                    p.context,
                    p.tokens,
                    p.topk,
                    "eager",
                    s,
                    s,
                    0.0,
                    0.0,
                    1,
                    1,
                    s,
                    s,
                    1,
                )
            )
    meta = {
        "architecture": "synthetic",
        "tp": 1,
        "device": "cpu",
        "device_name": "none",
        "grid": grid,
    }
    return Measurements(frame(rows), meta)


# A CPU-like engine (compute-bound from one token) and an H100-like 7B one: reading the weights
# costs 4.5 ms until ~300 tokens per step saturate compute (H100's ridge: ~295 FLOP per byte).
@pytest.mark.parametrize(
    "grid, weights_s, compute, kv", [("cpu", 0.0, 6e-5, 1e-7), ("cuda", 4.5e-3, 1.5e-5, 2e-8)]
)
def test_the_fit_recovers_a_known_profile_from_its_points(grid, weights_s, compute, kv):
    base = load_profile("cpu-tiny")
    truth = replace(base, decode=DecodeCost(overhead_s=1.5e-3, per_seq_s=2e-5, weights_s=weights_s,
                                            compute_s_per_token=compute, kv_s_per_token=kv,
                                            prefill_s_per_token=compute),
                    drafter=DrafterCost(eagle_step_s=4e-4, eagle_s_per_seq=3e-5,
                                        ngram_s_per_seq=base.drafter.ngram_s_per_seq))
    fit = fit_operators(_synthetic(truth, grid), base, "recovered")
    assert fit.max_abs_error_pct < 1.0
    got, want = fit.profile.decode, truth.decode
    for name in (
        "overhead_s",
        "per_seq_s",
        "compute_s_per_token",
        "kv_s_per_token",
        "prefill_s_per_token",
    ):
        assert getattr(got, name) == pytest.approx(getattr(want, name), rel=0.02), name
    assert got.weights_s == pytest.approx(weights_s, rel=0.02, abs=1e-6)
    assert fit.profile.drafter.eagle_step_s == pytest.approx(4e-4, rel=0.01)
    assert fit.profile.drafter.eagle_s_per_seq == pytest.approx(3e-5, rel=0.01)
    assert fit.profile.acceptance == base.acceptance  # what operators cannot show stays the base's


MEASURE = [
    "--arch",
    "tiny-gcd",
    "--device",
    "cpu",
    "--grid",
    "test",
    "--repeats",
    "3",
    "--passes",
    "1",
    "--threads",
    "1",
    "--check-rounds",
    "1",
]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("profile") / "tiny-op.yaml"
    res = runner.invoke(app, ["profile", *MEASURE, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_tlt_profile_writes_the_profile_raw_measurements_and_fit_error(profiled):
    out, output = profiled
    prof = load_profile(out)
    assert (
        prof.name == "tiny-op" and "real.profiler" in prof.source and prof.fit_error_pct is not None
    )
    m = read_measurements(out.with_name("tiny-op.measurements.parquet"))
    report = json.loads(out.with_name("tiny-op.fit.json").read_text())
    # The report's points are the file's measurements, each beside the saved profile's own
    # prediction.
    measured = m.rows[m.rows["op"].isin(("decode", "verify", "drafter", "prefill"))]
    assert len(report["points"]) == len(measured)
    for p in report["points"]:
        row = measured[
            (measured["op"] == p["op"])
            & (measured["batch"] == p["batch"])
            & (measured["context"] == p["context"])
            & (measured["tokens"] == p["tokens"])
        ]
        assert p["measured_s"] == pytest.approx(float(row["step_s"].iloc[0]))
        assert p["predicted_s"] == pytest.approx(
            predict_point(prof, p["op"], p["batch"], p["context"], p["tokens"], p["topk"]), rel=1e-3
        )
    assert len(report["whole_model_check"]) == 2 and "whole-model check" in output


def test_the_measured_profile_runs_in_tlt_sim(profiled, tmp_path):
    out, _ = profiled
    res = runner.invoke(
        app,
        [
            "sim",
            "--workload",
            "cpu-tiny",
            "--policy",
            "baseline,static-sd",
            "--steps",
            "1",
            "--profile",
            str(out),
            "--out",
            str(tmp_path / "sim"),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["policies"]["baseline"]["rollout_time_s"] > 0


def test_refitting_the_raw_measurements_gives_the_same_profile(profiled, tmp_path):
    out, _ = profiled
    again = tmp_path / "tiny-op.yaml"
    res = runner.invoke(
        app,
        [
            "profile",
            "--measurements",
            str(out.with_name("tiny-op.measurements.parquet")),
            "--out",
            str(again),
        ],
    )
    assert res.exit_code == 0, res.output
    assert again.read_text() == out.read_text()


@pytest.mark.parametrize("args, says", [
    (["--arch", "tiny-gcd", "--out", "p.txt"], "--out"),
    (["--out", "p.yaml"], "--measurements"),
    (["--arch", "tiny-gcd", "--tp", "3", "--out", "p.yaml"], "num_attention_heads"),
    (["--arch", "no-such-model", "--out", "p.yaml"], "architecture preset"),
])
def test_bad_options_fail_naming_the_fix_and_write_nothing(args, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["profile", *args])
    assert res.exit_code == 2
    assert says in res.output
    assert not list(tmp_path.iterdir())


def test_a_parquet_that_is_not_a_profilers_is_refused(tmp_path):
    pd.DataFrame({"a": [1.0]}).to_parquet(tmp_path / "x.parquet")
    res = runner.invoke(app, ["profile", "--measurements", str(tmp_path / "x.parquet"), "--out",
                              str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and "tlt-profiler" in res.output
    assert not (tmp_path / "p.yaml").exists()


def test_a_measured_profile_says_so_in_its_provenance_line(profiled):
    out, _ = profiled
    prof = load_profile(out)
    assert provenance_kind(prof) == "measured"
    assert provenance(prof).startswith("measured (operator level): tiny-gcd TP1 on ")
    assert provenance_kind(load_profile("cpu-tiny")) == "calibrated"
    assert provenance_kind(load_profile("h100-qwen2.5-7b-tp1")) == "published"
    assert profile_choice_label(str(out)) == f"{out} · measured"
    assert profile_choice_label("no-such-profile") == "no-such-profile"
