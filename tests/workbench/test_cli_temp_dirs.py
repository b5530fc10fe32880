"""Every temporary directory a command creates is gone when it ends: what the workbench derives
and keeps (profiles, the database's model configs, the GPU check's shapes) lives in its cache
($XDG_CACHE_HOME/tlt), never in the system's temporary folder."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [
    "profile --backend aiconfigurator --arch qwen2.5-7b --gpu h100 --tp 1 --framework vllm "
    "--out {out}/p.yaml",
    "gpu-check --measured traces/measured/gpu-check-h100-80gb-hbm3-2026-11-26.json",
    "workload import {out}/l.csv --model qwen2.5-7b --gpu h100 --tp 1 --framework sglang "
    "--out {out}/w.yaml",
    "sim --workload cpu-tiny --policy baseline,tlt-vllm --steps 1 --out {out}/sim",
], ids=["profile", "gpu-check", "workload-import", "sim"])
def test_a_command_leaves_the_temporary_folder_as_it_found_it(args, tmp_path, monkeypatch):
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    (out / "l.csv").write_text("step,prompt,length\n0,a,10\n0,a,300\n0,b,40\n0,b,41\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(app, args.format(out=out).split())
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp.iterdir()) == []
