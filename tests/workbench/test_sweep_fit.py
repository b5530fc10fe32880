"""A profile fitted to an engine sweep (`tlt calibrate SWEEP_DIR`), on the shipped CPU sweep
(traces/reference/sweep-cpu): the declared split holds its cells out of the fit (their steps
cannot move it) and they are predicted; the profile is a normal Profile file that records the
engine and its held-out errors; a half-written cell is never read; a bad split is refused with
nothing written."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.calibrate.sweeps.base import sweep_base
from workbench.calibrate.sweeps.fit import fit_sweep
from workbench.calibrate.sweeps.split import default_split, parse_split
from workbench.cli import app
from workbench.contracts.profile import load_profile
from workbench.contracts.provenance import provenance
from workbench.contracts.schema import ConfigError, differences, save
from workbench.contracts.sweep import SweepPlan, labelled_steps, load_sweep

SWEEP = Path(__file__).resolve().parents[2] / "traces" / "reference" / "sweep-cpu"


@pytest.fixture(scope="module")
def sweep():
    return load_sweep(SWEEP)


@pytest.fixture(scope="module")
def fitted(sweep):
    base, how, cluster = sweep_base(sweep, None)
    return fit_sweep(sweep, base, default_split(sweep.plan), "sweep-cpu", how, cluster)


def _plan(batches, ks) -> SweepPlan:
    return SweepPlan(tuple(batches), (128,), tuple(ks), 2, 4, "eagle", "live")


def test_the_default_split_holds_out_an_interior_batch_and_draft_length():
    split = default_split(_plan((1, 4, 16, 64), (1, 2, 3)))
    assert split.batches == (16,) and split.draft_lens == (2,) and split.declared == "default"
    assert split.holds(16, 1) and split.holds(64, 2) and not split.holds(64, 3)
    assert default_split(_plan((1, 64), (1, 2))).batches == ()  # nothing interior: fit on all
    assert parse_split(["none"], _plan((1, 4, 16), (1, 2, 3))).batches == ()
    declared = parse_split(["batch=4", "draft=3"], _plan((1, 4, 16), (1, 2, 3)))
    assert declared.batches == (4,) and declared.draft_lens == (3,)


@pytest.mark.parametrize("specs, says", [
    (["batch=5"], "B among"), (["draft=9"], "K among"), (["size=4"], "batch=B"),
    (["batch=1", "batch=4", "batch=16"], "at least one batch size"),
])
def test_a_split_the_sweep_cannot_have_is_refused(specs, says):
    with pytest.raises(ConfigError, match=says):
        parse_split(specs, _plan((1, 4, 16), (1, 2, 3)))


def test_held_out_cells_cannot_move_the_fit(sweep, fitted):
    """Their steps slowed 3x, a held-out batch's and a held-out draft length's alike: the fitted
    profile is the same, and only their measured side changes."""
    split = fitted.split
    cells = []
    for cell in sweep.cells:
        traces = {}
        for name, t in cell.traces.items():
            lab = labelled_steps(t)
            held = set(lab.loc[lab["k"].isin(split.draft_lens), "engine_step"])
            slow = (t.steps["engine_step"].isin(held) & (name != "plain")) \
                | (cell.batch in split.batches)
            steps = t.steps.assign(wall_s=t.steps["wall_s"].where(~slow, 3 * t.steps["wall_s"]))
            traces[name] = replace(t, steps=steps)
        cells.append(replace(cell, traces=traces))
    again = fit_sweep(replace(sweep, cells=cells), fitted.base, split, "sweep-cpu",
                      fitted.base_how)
    assert differences(again.profile.decode, fitted.profile.decode, 1e-9) == []
    assert differences(again.profile.drafter, fitted.profile.drafter, 1e-9) == []
    assert differences(again.profile.acceptance, fitted.profile.acceptance, 1e-9) == []
    moved = [a.measured.sd_ms / b.measured.sd_ms for a, b in zip(again.rows, fitted.rows)
             if b.held_out]
    assert moved and min(moved) > 1.5
    kept = [a.measured.sd_ms / b.measured.sd_ms for a, b in zip(again.rows, fitted.rows)
            if not b.held_out]
    assert kept and max(abs(x - 1) for x in kept) < 1e-6


def test_the_profile_records_the_engine_and_its_held_out_errors(sweep, fitted, tmp_path):
    e = fitted.profile.engine
    assert e.framework == "vllm" and e.version == sweep.identity["version"]
    assert e.device == sweep.identity["device"] and e.tp == 1 and e.dtype == "float32"
    assert e.graphs is False and e.method == "eagle" and e.base_profile == "cpu-tiny"
    assert "batch 16" in e.held_out and "draft length 2" in e.held_out
    held = [abs(r.fitted.speedup / r.measured.speedup - 1) * 100 for r in fitted.rows
            if r.held_out]
    assert len(held) == sum(1 for r in fitted.rows if r.held_out) > 0
    assert e.speedup_error_pct == pytest.approx(statistics.median(held), abs=1e-3)
    assert all(math.isfinite(x) for x in (e.step_error_pct, e.base_speedup_error_pct))
    # a normal Profile file: saved, loaded, its provenance names the engine
    save(fitted.profile, tmp_path / "p.yaml")
    again = load_profile(tmp_path / "p.yaml")
    assert again.engine == e and again.fitted_on[0].startswith("sweep:")
    assert "engine sweep" in provenance(again) and "vllm" in provenance(again)
    assert again.speed_probe_ms and again.drafter.sd_host_s_per_seq == 0.0


def test_a_half_written_cell_is_never_read(tmp_path, sweep):
    copy = tmp_path / "sweep"
    shutil.copytree(SWEEP, copy)
    first = sorted((copy / "cells").iterdir())[0]
    shutil.copytree(first, copy / "cells" / f".{first.name}.tmp123")  # a write in progress
    (first.parent / "b999-c1").mkdir()  # a cell with no cell.json
    assert [c.name for c in load_sweep(copy).cells] == [c.name for c in sweep.cells]


def test_tlt_calibrate_on_a_sweep_writes_the_profile_and_its_report(tmp_path):
    out = tmp_path / "engine.yaml"
    res = CliRunner().invoke(app, ["calibrate", str(SWEEP), "--out", str(out), "--hold-out",
                                   "batch=4", "--hold-out", "draft=3"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output.strip().splitlines()[-1])
    report = json.loads((tmp_path / "engine.calibration.json").read_text())
    held = [c for c in report["cells"] if c["held_out"]]
    assert {c["batch"] for c in held if c["k"] != 3} == {4} and held
    assert doc["held_out"] == load_profile(out).engine.held_out == report["split"]["label"]
    assert report["base_profile"] == "cpu-tiny" and "plain_ms" in report["cells"][0]["base"]
    curve = CliRunner().invoke(app, ["sd-curve", "--profile", str(out), "--strategy", "chain:2",
                                     "--batches", "1,16"])
    assert curve.exit_code == 0 and json.loads(curve.output.strip().splitlines()[-1])["speedup"]


def test_a_bad_split_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "engine.yaml"
    res = CliRunner().invoke(app, ["calibrate", str(SWEEP), "--out", str(out), "--hold-out",
                                   "batch=3"])
    assert res.exit_code == 2 and "--hold-out" in res.output
    assert not out.exists() and not list(tmp_path.iterdir())
