"""`tlt train` with the drafter a team already has: the model and a public EAGLE-3 head named by
hub id (both in this machine's Hugging Face cache), the head warm-started, served by vLLM as
method eagle3, and continued by spot training in its own layout (the CPU path of the README's GPU
recipe: the same command with `--device cuda`). A drafter that does not fit the model stops the
command before anything starts, naming the field.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]


def _short_and_long_task(root: Path) -> Path:
    """A task of two problems, a one-line one and a long one: each step's two prompts go one to
    each worker (prompt i to worker i mod 2), so whichever worker gets the short one idles for most
    of the rollout, and spot training has that time on any machine, however busy."""
    from real.tiny.task import make_problems
    from workbench.contracts.task import TaskProblem, write_task_file

    pool = make_problems(400, seed=5, mix="flat")
    short = min(pool, key=lambda q: q.difficulty)
    long = next(q for q in pool if 26 <= q.difficulty <= 30)
    path = root / "short-and-long.jsonl"
    write_task_file(path, [TaskProblem(q.prompt, str(q.answer), q.solution) for q in (short, long)])
    return path


def test_train_continues_a_public_eagle3_head_named_by_hub_id(
        tmp_path, hub_cache, reference_model, public_drafters):
    import pandas as pd
    import torch
    from safetensors.torch import load_file

    from real.drafter.resolve import resolve_drafter
    from workbench.contracts.trace import load_trace

    cache = hub_cache({"me/tiny-model": reference_model,
                       "me/tiny-EAGLE3": public_drafters["eagle3"]})
    out = tmp_path / "run"
    cmd = [str(Path(sys.executable).with_name("tlt")), "train", "--model", "me/tiny-model",
           "--drafter", "me/tiny-EAGLE3", "--policy", "tlt-vllm", "--out", str(out),
           "--task", str(_short_and_long_task(tmp_path)), "--reward", "exact",
           "--steps", "2", "--workers", "2", "--seed", "3", "--prompts", "2", "--samples", "4",
           "--max-tokens", "384", "--device", "cpu"]
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = pd.read_csv(out / "metrics.csv")
    assert len(metrics) == 2 and metrics["drafter_steps"].sum() > 0
    engine = load_trace(out / "trace").meta["engine"]
    spec = engine["speculative_config"]
    assert spec["method"] == "eagle3" and spec["model"].endswith("models--me--tiny-EAGLE3/"
                                                                  "snapshots/" + "0" * 40)
    # the served drafter at the end: the head spot training continued, in its public layout
    final = out / "drafter"
    assert json.loads((final / "config.json").read_text())["architectures"] == [
        "LlamaForCausalLMEagle3"]
    assert resolve_drafter(final, reference_model).method == "eagle3"
    start = load_file(str(public_drafters["eagle3"] / "model.safetensors"))
    trained = load_file(str(final / "model.safetensors"))
    assert set(trained) == set(start) and torch.equal(trained["d2t"], start["d2t"])
    assert not torch.equal(trained["midlayer.mlp.down_proj.weight"],
                           start["midlayer.mlp.down_proj.weight"])


@pytest.mark.parametrize("edit, field", [({"vocab_size": 151936}, "vocabulary 151936"),
                                         ({"hidden_size": 64}, "hidden size 64")])
def test_train_refuses_a_drafter_that_does_not_fit_the_model(tmp_path, reference_model,
                                                            public_drafters, edit, field):
    from typer.testing import CliRunner

    from workbench.cli import app

    bad = tmp_path / "head"
    shutil.copytree(public_drafters["eagle3"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, **edit}))
    res = CliRunner().invoke(app, ["train", "--model", str(reference_model), "--drafter", str(bad),
                                   "--policy", "tlt-vllm", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and f"--drafter {bad}: {field}" in res.stderr, res.stderr
    assert not (tmp_path / "run").exists()
