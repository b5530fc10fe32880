"""The task contract: task files read and checked line by line, rewards resolved by name or
module:function and tried before any engine starts, seeded draws."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from workbench.contracts.task import (
    TaskError,
    TaskProblem,
    exact_reward,
    load_task,
    numeric_reward,
    read_problems,
    resolve_reward,
    write_task_file,
)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [{"prompt": f"What is {i} + {i}?", "answer": 2 * i, "solution": f"{i} + {i} = {2 * i}"}
        for i in range(6)]


def test_a_jsonl_and_a_parquet_file_give_the_same_problems(tmp_path):
    a = read_problems(_write(tmp_path / "t.jsonl", ROWS))
    rows = pd.DataFrame(ROWS).assign(answer=lambda f: f["answer"].astype(str))
    rows.to_parquet(tmp_path / "t.parquet")
    assert read_problems(tmp_path / "t.parquet") == a
    assert a[3] == TaskProblem("What is 3 + 3?", "6", "3 + 3 = 6")


@pytest.mark.parametrize("line, says", [
    ("{\"prompt\": \"x\"}", "t.jsonl:2: field 'answer'"),
    ("{\"answer\": 3}", "t.jsonl:2: field 'prompt'"),
    ("{\"prompt\": \"\", \"answer\": 3}", "t.jsonl:2: field 'prompt'"),
    ("{\"prompt\": \"x\", \"answer\": 3, \"solution\": 4}", "t.jsonl:2: field 'solution'"),
    ("not json", "t.jsonl:2: not valid JSON"),
    ("[1, 2]", "t.jsonl:2: not a JSON object"),
])
def test_a_bad_line_is_refused_naming_the_file_and_line(tmp_path, line, says):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + line + "\n")
    with pytest.raises(TaskError, match=says.replace("[", r"\[")):
        load_task(path, "exact")


def test_missing_and_empty_files_and_columns_are_refused(tmp_path):
    with pytest.raises(TaskError, match="no such file"):
        read_problems(tmp_path / "none.jsonl")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TaskError, match="no problems"):
        read_problems(tmp_path / "e.jsonl")
    pd.DataFrame({"question": ["x"], "answer": ["1"]}).to_parquet(tmp_path / "q.parquet")
    with pytest.raises(TaskError, match="no column prompt"):
        read_problems(tmp_path / "q.parquet")


def test_the_named_rewards():
    assert exact_reward(" 42\n", "42") == 1.0 and exact_reward("42.", "42") == 0.0
    assert numeric_reward("so the total is 1,250.0", "1250") == 1.0
    assert numeric_reward("A: 12", "13") == 0.0 and numeric_reward("no number", "1") == 0.0


def test_the_math_reward_uses_math_verify():
    pytest.importorskip("math_verify")
    fn = resolve_reward("math")
    assert fn("The answer is $\\frac{1}{2}$", "0.5") == 1.0
    assert fn("The answer is $3$", "0.5") == 0.0


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "team_rw.py").write_text(
        "def good(response, answer):\n    return float(answer in response)\n"
        "def one_arg(response):\n    return 1.0\n"
        "def raises(response, answer):\n    raise KeyError('score')\n"
        "def nan(response, answer):\n    return float('nan')\n"
        "not_callable = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("team_rw", None)


def test_a_module_function_reward_is_imported_and_scores(tmp_path, user_module):
    task = load_task(_write(tmp_path / "t.jsonl", ROWS), "team_rw:good")
    assert task.score(task.problems[2], "it is 4") == 1.0
    assert task.score(task.problems[2], "5") == 0.0


@pytest.mark.parametrize("spec, says", [
    ("nosuchmodule_xyz:f", "cannot import module 'nosuchmodule_xyz'"),
    ("team_rw:missing", "has no function 'missing'"),
    ("team_rw:not_callable", "has no function 'not_callable'"),
    ("team_rw:one_arg", r"one_arg\(response\) cannot be called as one_arg\(response, answer\)"),
    ("team_rw:raises", "team_rw:raises: failed on a response .*KeyError"),
    ("team_rw:nan", "team_rw:nan: returned nan .* must be a finite number"),
    ("levenshtein", "give one of exact, numeric, math or module:function"),
])
def test_a_bad_reward_is_refused_naming_the_function(tmp_path, user_module, spec, says):
    with pytest.raises(TaskError, match=says):
        load_task(_write(tmp_path / "t.jsonl", ROWS), spec)


def test_a_numeric_reward_needs_numeric_answers(tmp_path):
    with pytest.raises(TaskError, match="problem 1: answer 'seven' has no number"):
        load_task(_write(tmp_path / "t.jsonl", [ROWS[0], {"prompt": "p", "answer": "seven"}]),
                  "numeric")


def test_draws_are_seeded_and_repeat_only_past_the_file(tmp_path):
    task = load_task(_write(tmp_path / "t.jsonl", ROWS), "exact")
    assert task.draw(4, 7) == task.draw(4, 7) != task.draw(4, 8)
    assert len(set(task.draw(6, 1))) == 6 and len(task.draw(10, 1)) == 10


def test_a_written_task_file_reads_back(tmp_path):
    probs = [TaskProblem("Q: gcd(4,6)=?\n", "2", "6-4=2\nA: 2"), TaskProblem("p", "1")]
    write_task_file(tmp_path / "w.jsonl", probs)
    assert read_problems(tmp_path / "w.jsonl") == probs
