"""Errors in the program's words: a file of the wrong kind is refused saying what it is, what was
expected and the fix, never with a library's message ("Parquet magic bytes not found", "'utf-8'
codec can't decode") or a made-up field ("field '<file>' has value ...")."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli import app

ROOT = Path(__file__).resolve().parents[2]
RUN_LOG = ROOT / "traces/published/verl-runs/grpo_run_deepseek7b_llm.log.gz"
LIBRARY = ("magic bytes", "codec can't decode", "field '<", "Traceback")


def _console_log() -> bytes:
    with gzip.open(RUN_LOG, "rb") as f:
        return b"".join(line for _, line in zip(range(56), f))


def _refused(args: list[str]) -> str:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert not [w for w in LIBRARY if w in res.output], res.output
    return res.output


@pytest.mark.parametrize("name, data, says", [
    ("lengths.parquet", b"step,prompt,length\n0,a,10\n", ["is text beginning 'step,prompt,length'",
                                                          "not Parquet", "rename it to .csv"]),
    ("lengths.csv", b"PAR1\x00\x00PAR1", ["is a Parquet file", "rename it to .parquet"]),
    ("lengths.csv", "step,prompt,length\n0,a,10\n".encode("utf-16"),
     ["is UTF-16 text", "iconv -f UTF-16"]),
    ("lengths.jsonl", b"\x00\x01\x02binary", ["is binary"]),
    ("lengths.txt", b"step,prompt,length\n0,a,10\n", ["is a .txt file that is text",
                                                      "named .csv, .jsonl or .parquet"]),
])
def test_a_length_file_of_another_kind_is_named_for_what_it_is(tmp_path, name, data, says):
    path = tmp_path / name
    path.write_bytes(data)
    out = _refused(["workload", "import", str(path), "--base", "cpu-tiny", "--out",
                    str(tmp_path / "w.yaml")])
    assert str(path) in out and "expected response lengths" in out
    for words in says:
        assert words in out
    assert not list(tmp_path.glob("w*"))


def test_a_run_log_is_imported_for_its_length_statistics(tmp_path):
    """A run log (veRL's console here; any framework's: test_runlog_frameworks.py) given to `tlt
    workload import` is read for its steps' length statistics; the length reader itself still
    names a console log for what it is, pointing to the run-log reader."""
    from workbench.contracts.schema import ConfigError
    from workbench.contracts.workload import load_workload
    from workbench.workloads.build import import_workload
    path = tmp_path / "run.log"
    path.write_bytes(_console_log())
    res = CliRunner().invoke(app, ["workload", "import", str(path), "--base", "cpu-tiny", "--out",
                                   str(tmp_path / "w.yaml")])
    assert res.exit_code == 0 and "a veRL run log" in res.output, res.output
    assert load_workload(tmp_path / "w.yaml").steps == 4
    with pytest.raises(ConfigError) as exc:
        import_workload([path], tmp_path / "x.yaml", load_workload("cpu-tiny"))
    assert "is a veRL console log" in str(exc.value) and "tlt calibrate --run-log" in str(exc.value)


@pytest.mark.parametrize("data, says", [
    ("name: x\n".encode("utf-16"), "is UTF-16 text"),
    ("name: café\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9"),
    (b"[1, 2]\n", "holds a list at the top level"),
    (b"name: [unclosed\n", "is not valid YAML"),
])
def test_a_policy_file_that_is_no_mapping_says_what_it_is(tmp_path, data, says):
    path = tmp_path / "p.yaml"
    path.write_bytes(data)
    out = _refused(["check", "policy", str(path)])
    assert f"{path}: {says}" in out and "expected" in out


def test_a_damaged_trace_table_is_named_without_pyarrow_words(tmp_path):
    src = ROOT / "traces/reference/fit-none"
    trace = tmp_path / "t"
    trace.mkdir()
    for f in src.iterdir():
        (trace / f.name).write_bytes(f.read_bytes())
    (trace / "steps.parquet").write_bytes((src / "steps.parquet").read_bytes()[:100])
    out = _refused(["validate", "--profile", "cpu-tiny", str(trace)])
    assert "steps.parquet: is a Parquet file cut short" in out
