"""Tune -> deploy: a policy `tlt tune` writes for a CPU workload is one `tlt train` runs unchanged.

The workload is the shipped `cpu-tiny` one (its profile is calibrated on real traces, so
`--backend auto` searches the real backend's space) cut to what one short real step can run:
one worker, 2 prompts x 2 samples, a 64-token cap. `tlt train` then runs the tuned file for one
RL step on the reference model (one vLLM engine) and its trace must record that very policy.
`--profile none`: with a profile, a learning bandit's schedule draft lengths (its start points)
are re-predicted (workbench/schedule.py); here the file must arrive exactly as written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.contracts.policy import Policy, load_policy
from workbench.contracts.schema import from_mapping, save, to_mapping
from workbench.contracts.trace import load_trace
from workbench.contracts.workload import load_workload

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]


def test_a_policy_tuned_on_a_cpu_workload_trains_unchanged_on_the_real_backend(
    tmp_path, reference_model
):
    base = load_workload("cpu-tiny")
    wl = replace(
        base,
        name="cpu-tiny-deploy",
        workers=1,
        prompts_per_step=2,
        group_size=2,
        max_response_tokens=64,
        steps=1,
        profile="cpu-tiny",
    )
    wl_file, tuned = tmp_path / "wl.yaml", tmp_path / "tuned.yaml"
    save(wl, wl_file)
    res = CliRunner().invoke(
        app,
        [
            "tune",
            "--workload",
            str(wl_file),
            "--trials",
            "12",
            "--seeds",
            "1",
            "--storage",
            "memory",
            "--study",
            "deploy",
            "--out",
            str(tuned),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "target tlt-train" in res.output and "tlt train" in res.output
    pol = load_policy(tuned)
    # on cpu-tiny's costs SD pays at small batches: the deployed policy drafts
    assert pol.uses_sd, pol

    out = tmp_path / "run"
    cmd = [
        str(Path(sys.executable).with_name("tlt")),
        "train",
        "--model",
        str(reference_model),
        "--policy",
        str(tuned),
        "--steps",
        "1",
        "--workers",
        "1",
        "--prompts",
        "2",
        "--samples",
        "2",
        "--max-tokens",
        "64",
        "--seed",
        "0",
        "--profile",
        "none",
        "--out",
        str(out),
    ]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""}, timeout=400
    )
    assert done.returncode == 0, f"{pol}\n{done.stderr[-3000:]}"
    assert len((out / "metrics.csv").read_text().splitlines()) == 2  # header and the one step
    meta = load_trace(out / "trace").meta
    assert from_mapping(Policy, meta["policy"], "meta.json") == pol
    assert meta["policy"] == json.loads(json.dumps(to_mapping(pol)))
