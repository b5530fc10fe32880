"""Atomic run checkpoints (real/run/checkpoints.py): no torch needed."""

from __future__ import annotations

import pytest

from real.run.checkpoints import CheckpointError, load_latest, save_checkpoint


def _write_text(text):
    return lambda path: path.write_text(text)


def test_checkpoint_round_trip_and_pruning(tmp_path):
    run = tmp_path / "run"
    assert load_latest(run) is None
    for step in (1, 2, 3):
        ck = save_checkpoint(run, step, {"metrics": [step], "policy": "tlt"},
                             {"trainer.pt": _write_text(f"t{step}"), "model": lambda p: p.mkdir()})
        assert ck.dir.name == f"step-{step:06d}"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002", "step-000003"]
    latest = load_latest(run)
    assert latest.step == 3 and latest.state == {"metrics": [3], "policy": "tlt"}
    assert latest.path("trainer.pt").read_text() == "t3" and latest.path("model").is_dir()
    assert (run / "LATEST").read_text().strip() == "checkpoints/step-000003"
    assert not [p for p in run.rglob(".*")]  # no temp files or dirs left


def test_partial_checkpoint_is_skipped(tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run, 1, {"a": 1}, {})
    save_checkpoint(run, 2, {"a": 2}, {})
    partial = run / "checkpoints" / "step-000003"
    partial.mkdir()
    (partial / "trainer.pt").write_text("half")  # killed before state.json
    (run / "LATEST").write_text("checkpoints/step-000003\n")
    assert load_latest(run).step == 2
    (run / "LATEST").unlink()  # no pointer at all: the newest complete step
    assert load_latest(run).step == 2
    save_checkpoint(run, 3, {"a": 3}, {})  # redoing step 3 replaces the partial directory
    assert load_latest(run).state == {"a": 3}
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002", "step-000003"]


def test_corrupt_state_is_an_error_naming_the_file(tmp_path):
    run = tmp_path / "run"
    ck = save_checkpoint(run, 7, {"a": 1}, {})
    ck.path("state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"step-000007/state\.json"):
        load_latest(run)
