"""`tlt task gcd` and the refusals of `tlt train`/`tlt capture` inputs before any engine starts:
a bad task file or reward, and `--device cuda` on a machine without CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.contracts.task import load_task

runner = CliRunner()
MODEL = str(Path(__file__).resolve().parents[2] / "traces" / "reference" / "model")


def test_the_gcd_task_file_scores_its_own_solutions(tmp_path):
    out = tmp_path / "gcd.jsonl"
    res = runner.invoke(app, ["task", "gcd", "--n", "30", "--seed", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert (
        len(rows) == 30
        and rows[0]["prompt"].startswith("Q: gcd(")
        and rows[0]["solution"].endswith("A: " + rows[0]["answer"])
    )
    for reward in ("numeric", "real.tiny.task:answer_reward"):
        task = load_task(out, reward)
        assert all(task.score(p, p.solution) == 1.0 for p in task.problems)
        assert task.score(task.problems[0], "A: 1000") == 0.0


def _train(tmp_path, *extra):
    return runner.invoke(app, ["train", "--model", MODEL, "--policy", "baseline",
                               "--out", str(tmp_path / "run"), *extra])


def test_train_refuses_a_bad_task_file_naming_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "answer": 1}\n{"prompt": "b"}\n')
    res = _train(tmp_path, "--task", str(bad))
    assert res.exit_code == 2 and f"{bad}:2: field 'answer'" in res.output
    assert not (tmp_path / "run").exists()


def test_train_and_capture_refuse_a_bad_reward_naming_it(tmp_path):
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"prompt": "a", "answer": 1}\n')
    res = _train(tmp_path, "--task", str(ok), "--reward", "no_such_module_q:score")
    assert (
        res.exit_code == 2 and "--reward no_such_module_q:score: cannot import module" in res.output
    )
    res = runner.invoke(app, ["capture", "--model", MODEL, "--policy", "baseline",
                              "--out", str(tmp_path / "t"), "--task", str(ok), "--reward", "bogus"])
    assert res.exit_code == 2 and "--reward 'bogus': give one of exact, numeric, math" in res.output
    res = _train(tmp_path, "--reward", "numeric")
    assert res.exit_code == 2 and "give --task FILE too" in res.output


@pytest.mark.needs_torch
def test_device_cuda_is_refused_before_anything_starts_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    res = _train(tmp_path, "--device", "cuda")
    assert (
        res.exit_code == 2
        and "--device cuda: torch" in res.output
        and "sees no CUDA device" in res.output
    )
    assert not (tmp_path / "run").exists()
    res = runner.invoke(app, ["bench", "grpo", "--model", MODEL, "--device", "cuda"])
    assert (
        res.exit_code == 2 and "sees no CUDA device" in res.output and "sampling" not in res.output
    )
    res = runner.invoke(app, ["drafter", "train", "--model", MODEL, "--out",
                              str(tmp_path / "d"), "--device", "cuda"])
    assert res.exit_code == 2 and "sees no CUDA device" in res.output
    res = _train(tmp_path, "--device", "tpu")
    assert res.exit_code == 2 and "--device tpu: give cpu or cuda" in res.output


def test_calibrate_refuses_a_bad_task_file_before_any_capture(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": 1}\n')
    res = runner.invoke(
        app, ["calibrate", "--out", str(tmp_path / "p.yaml"), "--model", MODEL, "--task", str(bad)]
    )
    assert res.exit_code == 2 and f"{bad}:1: field 'prompt'" in res.output
    res = runner.invoke(app, ["calibrate", "--out", str(tmp_path / "p.yaml"), "--task", str(bad)])
    assert res.exit_code == 2 and "--task: give --model too" in res.output
    assert not list(tmp_path.glob("p*"))
