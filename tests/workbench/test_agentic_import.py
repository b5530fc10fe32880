"""`tlt workload import` on multi-turn trajectories: PolyTrace's log (the shipped Search-R1 file),
the generic one-row-per-turn table, the fitted model, and bad files refused."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.trajectories import model_group
from workbench.cli import app
from workbench.contracts.agentic import AgenticModel
from workbench.contracts.schema import ConfigError
from workbench.contracts.turn_data import COLUMNS, from_frame, read_turns
from workbench.contracts.workload import load_workload
from workbench.workloads.agentic_fit import fit_agentic
from workbench.workloads.agentic_reader import read_turn_files
from workbench.workloads.build import import_workload

ROOT = Path(__file__).resolve().parents[2]
STEP0 = ROOT / "traces/published/polytrace-search-r1/multiturn_workload_step_0.jsonl.gz"
PRESET = "polytrace-search-r1-qwen2.5-7b"
runner = CliRunner()


def test_the_shipped_step_imports_to_the_presets_turns_table_exactly():
    im = read_turn_files([STEP0])
    mine = im.turns.frame()
    shipped = read_turns(load_workload(PRESET).agentic.data).frame()
    shipped = shipped[shipped["batch"] == 0].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, shipped)
    assert im.cap == 3000
    assert len(mine) == 5455 and mine.groupby(["group", "member"]).ngroups == 2048


def test_a_polytrace_turn_reads_as_the_file_says():
    first = json.loads(gzip.open(STEP0, "rt").readline())
    t = read_turn_files([STEP0]).turns.frame().query("group == 0 and member == 0")
    assert t["prompt_tokens"].tolist() == [u["prompt_tokens"] for u in first["turns"]]
    assert t["cached_tokens"].tolist() == [u["cached_tokens"] for u in first["turns"]]
    assert t["engine_s"].tolist() == pytest.approx([u["engine_latency_s"] for u in first["turns"]])
    # the tool's tokens: the next prompt less this prompt and completion
    t0, t1 = first["turns"]
    assert t["tool_tokens"].iloc[0] == t1["prompt_tokens"] - t0["prompt_tokens"] - t0[
        "completion_tokens"]
    assert t["tool_s"].iloc[0] == pytest.approx(first["tool_calls"][0]["latency_s"])
    assert t["tool_s"].iloc[1] == 0 and t["tool_tokens"].iloc[1] == 0


def generic_csv(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def generic_rows() -> list[dict]:
    rows = []
    for step in range(2):
        for prompt in range(3):
            for sample in range(2):
                traj = f"s{step}-p{prompt}-{sample}"
                context = 100 + prompt
                for turn in range(1 + (prompt + sample) % 3):
                    completion = 20 + 7 * turn + sample
                    rows.append({"step": step, "group": f"q{prompt}", "trajectory": traj,
                                 "turn": turn, "prompt_tokens": context,
                                 "completion_tokens": completion, "tool_latency_s": 0.25,
                                 "engine_latency_s": 1.5})
                    context += completion + 40
    return rows


def test_the_generic_table_imports_as_a_replayed_agentic_workload(tmp_path):
    src = generic_csv(tmp_path / "turns.csv", generic_rows())
    out = tmp_path / "mine.yaml"
    res = import_workload([src], out, load_workload("cpu-tiny"))
    wl = load_workload(out)
    assert wl.agentic.enabled and wl.agentic.kind == "replay"
    assert (wl.prompts_per_step, wl.group_size, wl.steps) == (3, 2, 2)
    t = read_turns(wl.agentic.data).frame()
    assert set(t.loc[t["turn"] < t.groupby(["batch", "group", "member"])["turn"].transform("max"),
                     "tool_tokens"]) == {40}
    assert any("wrote" in line for line in res.lines)


def test_the_fit_finds_the_model_it_drew_from():
    truth = AgenticModel(enabled=True, turn_shares=(0.1, 0.4, 0.3, 0.15, 0.05),
                         turn_median_tokens=(40.0, 70.0, 90.0, 100.0, 95.0), turn_sigma=0.6,
                         trajectory_correlation=0.3, group_correlation=0.25,
                         count_length_correlation=-0.5, tool_latency_median_s=0.2,
                         tool_latency_sigma=1.0, latency_tokens_correlation=0.4)
    rng = np.random.default_rng(11)
    rows = []
    for g in range(1500):
        for m, t in enumerate(model_group(truth, 8, 1 << 30, rng).trajectories):
            for k in range(t.turns):
                rows.append((0, g, m, -1, k, 100, -1, int(t.completion[k]), int(k < t.turns - 1),
                             int(t.tool_tokens[k]), 0, float(t.tool_s[k]), np.nan))
    fit = fit_agentic(from_frame(pd.DataFrame(rows, columns=list(COLUMNS))),
                      AgenticModel(enabled=True)).model
    assert fit.turn_shares == pytest.approx(truth.turn_shares, abs=0.01)
    assert fit.turn_median_tokens == pytest.approx(truth.turn_median_tokens, rel=0.1)
    assert fit.turn_sigma == pytest.approx(truth.turn_sigma, abs=0.05)
    for name in ("trajectory_correlation", "group_correlation", "count_length_correlation",
                 "latency_tokens_correlation"):
        assert getattr(fit, name) == pytest.approx(getattr(truth, name), abs=0.1), name
    assert fit.tool_latency_median_s == pytest.approx(0.2, rel=0.1)


def polytrace_line(**over) -> dict:
    line = {"step": 0, "prompt_group_id": 0, "sample_id": 0, "max_response_len": 3000,
            "turns": [{"turn": 0, "prompt_tokens": 300, "cached_tokens": 0,
                       "completion_tokens": 40, "finish_reason": "tool_calls",
                       "engine_latency_s": 9.0},
                      {"turn": 1, "prompt_tokens": 900, "cached_tokens": 339,
                       "completion_tokens": 60, "finish_reason": "stop",
                       "engine_latency_s": 12.0}],
            "tool_calls": [{"turn": 0, "latency_s": 0.1, "append_len": 560}],
            "validate": False}
    line.update(over)
    return line


@pytest.mark.parametrize("line, field", [
    ('{"step": 0, "prompt_group_id": 0', "one JSON object per line"),
    (json.dumps(polytrace_line(turns=[])), "turns"),
    (json.dumps({k: v for k, v in polytrace_line().items() if k != "sample_id"}), "sample_id"),
    (json.dumps(polytrace_line(tool_calls=[{"turn": 0}])), "tool_calls[0]"),
    (json.dumps(polytrace_line(turns=[{"turn": 0, "prompt_tokens": -5,
                                       "completion_tokens": 3}])), "turns[0].prompt_tokens"),
    (json.dumps(polytrace_line(turns=[{"turn": 0, "prompt_tokens": 5}])),
     "turns[0].completion_tokens"),
])
def test_a_bad_polytrace_line_is_refused_naming_the_line_and_field(tmp_path, line, field):
    good = json.dumps(polytrace_line(sample_id=1))
    f = tmp_path / "multiturn_workload_step_0.jsonl"
    f.write_text(good + "\n" + line + "\n")
    with pytest.raises(ConfigError) as e:
        read_turn_files([f])
    assert f"{f}:2" in str(e.value) and field in str(e.value)


@pytest.mark.parametrize("change, field", [
    (lambda r: r[0].update(completion_tokens=-3), "completion_tokens"),
    (lambda r: r[0].update(turn=1.5), "turn"),
    (lambda r: r[1].update(tool_latency_s="slow"), "tool_latency_s"),
    (lambda r: [x.update(turn=x["turn"] + 1) for x in r if x["trajectory"] == "s0-p0-0"], "turn"),
])
def test_a_bad_generic_row_is_refused_naming_the_row_and_field(tmp_path, change, field):
    rows = generic_rows()
    change(rows)
    src = generic_csv(tmp_path / "turns.csv", rows)
    with pytest.raises(ConfigError) as e:
        read_turn_files([src])
    assert field in str(e.value) and "turns.csv" in str(e.value)


def test_a_missing_column_is_refused_and_the_cli_exits_2_writing_nothing(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "completion_tokens"} for r in generic_rows()]
    rows[0]["trajectory"] = "x"
    src = generic_csv(tmp_path / "turns.csv", [dict(r, completion=1) for r in rows])
    out = tmp_path / "w.yaml"
    res = runner.invoke(app, ["workload", "import", str(src), "--base", "cpu-tiny",
                              "--out", str(out)])
    assert res.exit_code == 2
    assert "turns.csv" in res.output or "columns" in res.output
    assert not out.exists() and not (tmp_path / "w.turns.parquet").exists()


def test_a_step_the_run_stopped_in_is_left_out_and_said_so(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    full = [polytrace_line(prompt_group_id=g, sample_id=m) for g in range(2) for m in range(2)]
    part = [polytrace_line(step=1, prompt_group_id=0, sample_id=0)]
    (d / "multiturn_workload_step_0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in full))
    (d / "multiturn_workload_step_1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in part))
    im = read_turn_files([d])
    assert im.steps == [0] and any("left out step(s) 1" in n for n in im.notes)


def test_a_fitted_agentic_workload_draws_from_its_model(tmp_path):
    out = tmp_path / "fit.yaml"
    import_workload([generic_csv(tmp_path / "t.csv", generic_rows())], out,
                    load_workload("cpu-tiny"), mode="fit")
    wl = load_workload(out)
    assert wl.agentic.kind == "model" and wl.agentic.max_turns == 3
    assert replace(wl.agentic, kind="replay").data.endswith("fit.turns.parquet")
