"""A user's RL task: prompts and reference answers from a file, and the reward that scores a
response.

The task file (JSONL, one JSON object a line, or Parquet, one row a problem) has the fields

    prompt    str, non-empty   what the model is asked (the model's chat template, if it has one,
                               is applied by the run, not written here)
    answer    str or number    the reference answer the reward compares a response with
    solution  str, optional    a reference response: the SD guard's probe (real/run/sd_pricing.py)
                               starts its requests part-way into it, as deep as a rollout's contexts

The reward is named (`REWARDS`: exact, numeric, math) or a `module:function` the user supplies,
called as `function(response: str, answer: str) -> float`. Both are checked before any engine
starts (`load_task`): every line of the file, and the reward called once on a reference
response, so a bad file or function is refused naming the file and line, or the function.

A run draws its prompts per RL step with `Task.draw(n, seed)` (seeded: the same n, seed and file
give the same problems on any machine).
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import random
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from workbench.contracts.file_kind import parquet_frame, text_problem, utf8_fix

RewardFn = Callable[[str, str], float]  # (response, answer) -> reward


class TaskError(ValueError):
    """A task file or reward that cannot be used (names the file and line, or the function, and the
    fix)."""


@dataclass(frozen=True)
class TaskProblem:
    prompt: str
    answer: str
    solution: str = ""  # "" when the file has none


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _number(text: str) -> float | None:
    """The last number written in `text` (thousands separators dropped), or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    return float(found[-1]) if found else None


def exact_reward(response: str, answer: str) -> float:
    """1.0 when the response, stripped of surrounding whitespace, is the answer; else 0.0."""
    return 1.0 if response.strip() == answer.strip() else 0.0


def numeric_reward(response: str, answer: str) -> float:
    """1.0 when the last number in the response equals the answer's number (relative 1e-6); else
    0.0."""
    got, want = _number(response), _number(answer)
    if got is None or want is None:
        return 0.0
    return 1.0 if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9) else 0.0


def math_reward(response: str, answer: str) -> float:
    """1.0 when Hugging Face's `math-verify` finds the response's final answer (LaTeX or plain)
    mathematically equal to the reference; else 0.0."""
    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which only the main thread may set.
    main = threading.current_thread() is threading.main_thread()
    kw = {} if main else {"parsing_timeout": None}
    gold, pred = parse(answer, **kw), parse(response, **kw)
    return 1.0 if verify(gold, pred, **({} if main else {"timeout_seconds": None})) else 0.0


REWARDS: dict[str, RewardFn] = {"exact": exact_reward, "numeric": numeric_reward,
                                "math": math_reward}


@dataclass(frozen=True)
class Task:
    """A task: its problems and its reward (`reward_name` as the user gave it)."""

    name: str  # where it came from (the file)
    problems: tuple[TaskProblem, ...]
    reward_name: str
    reward: RewardFn = field(compare=False, repr=False)

    def draw(self, n: int, seed: int) -> list[TaskProblem]:
        """`n` problems for `seed`: without repetition while the file has enough, then with."""
        rng = random.Random(f"task-draw/{seed}")
        k = len(self.problems)
        if n <= k:
            idx = rng.sample(range(k), n)
        else:
            idx = rng.sample(range(k), k) + rng.choices(range(k), k=n - k)
        return [self.problems[i] for i in idx]

    def score(self, problem: TaskProblem, response: str) -> float:
        """The reward of `response` to `problem`; a reward function that fails or returns no finite
        number is reported naming it."""
        try:
            v = self.reward(response, problem.answer)
            out = float(v)
        except Exception as exc:
            raise TaskError(f"--reward {self.reward_name}: failed on a response to "
                            f"{problem.prompt[:40]!r}: {type(exc).__name__}: {exc}") from exc
        if not math.isfinite(out):
            raise TaskError(f"--reward {self.reward_name}: returned {v!r} for a response to "
                            f"{problem.prompt[:40]!r}: a reward must be a finite number")
        return out


def resolve_reward(spec: str) -> RewardFn:
    """A named reward (`REWARDS`) or `module:function` importable from here (e.g. `my_rewards:score`
    with my_rewards.py on PYTHONPATH or in the current directory)."""
    spec = spec.strip()
    if spec in REWARDS:
        if spec == "math":
            try:
                import math_verify  # noqa: F401
            except ImportError:
                raise TaskError("--reward math needs the math-verify package: pip install "
                                "math-verify (in the project's cpu and gpu extras)") from None
        return REWARDS[spec]
    if ":" not in spec:
        raise TaskError(f"--reward {spec!r}: give one of {', '.join(REWARDS)} or module:function "
                        "(a function(response, answer) -> float)")
    mod_name, _, fn_name = spec.partition(":")
    # The `tlt` script, unlike `python -m`, does not put the current directory on the path.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except Exception as exc:
        raise TaskError(f"--reward {spec}: cannot import module {mod_name!r} "
                        f"({type(exc).__name__}: {exc}); put it on PYTHONPATH or in the current "
                        "directory") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise TaskError(f"--reward {spec}: module {mod_name!r} has no function {fn_name!r}")
    try:
        inspect.signature(fn).bind("response", "answer")
    except TypeError:
        raise TaskError(f"--reward {spec}: {fn_name}{inspect.signature(fn)} cannot be called as "
                        f"{fn_name}(response, answer)") from None
    except ValueError:  # builtins without a signature: the trial call checks them
        pass
    return fn


def _problem(row: Any, where: str) -> TaskProblem:
    if not isinstance(row, dict):
        raise TaskError(f"{where}: not a JSON object (every line is {{\"prompt\": ..., \"answer\": "
                        f"...}})")
    prompt, answer, solution = row.get("prompt"), row.get("answer"), row.get("solution")
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskError(f"{where}: field 'prompt' missing or not a non-empty string")
    if (isinstance(answer, bool) or not isinstance(answer, (str, int, float))
            or str(answer).strip() == ""):
        raise TaskError(f"{where}: field 'answer' missing or not a string or number")
    if solution is not None and not isinstance(solution, str):
        raise TaskError(f"{where}: field 'solution' must be a string (or left out)")
    return TaskProblem(prompt, str(answer), solution or "")


def read_problems(path: str | Path) -> list[TaskProblem]:
    """The problems of a task file (`.jsonl`/`.json` lines or `.parquet`), every row checked."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"--task {path}: no such file (write one with `tlt task gcd --out FILE`, "
                        "or your own JSONL)")
    rows: list[tuple[Any, str]] = []
    fix = "a task file: JSONL, one {\"prompt\": ..., \"answer\": ...} a line, or Parquet"
    if path.suffix == ".parquet":
        frame, problem = parquet_frame(path)
        if problem is not None:
            raise TaskError(f"--task {path}: {problem}; expected {fix}")
        missing = [c for c in ("prompt", "answer") if c not in frame.columns]
        if missing:
            raise TaskError(f"--task {path}: no column {', '.join(missing)} (columns: "
                            f"{', '.join(frame.columns)})")
        for i, rec in enumerate(frame.to_dict("records")):
            if isinstance(rec.get("solution"), float) and math.isnan(rec["solution"]):
                rec["solution"] = None  # a Parquet column with gaps
            rows.append((rec, f"{path}: row {i}"))
    else:
        raw = path.read_bytes()
        problem = text_problem(raw)
        if problem is not None:
            raise TaskError(f"--task {path}: {problem}; expected {fix}"
                            + (f"; {utf8_fix(problem)}" if utf8_fix(problem) else ""))
        for n, line in enumerate(raw.decode("utf-8").removeprefix("\ufeff").splitlines(),
                                 start=1):
            if not line.strip():
                continue
            try:
                rows.append((json.loads(line), f"{path}:{n}"))
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}:{n}: not valid JSON ({exc.msg}); one JSON object per "
                                "line") from None
    problems = [_problem(row, where) for row, where in rows]
    if not problems:
        raise TaskError(f"--task {path}: no problems in it")
    return problems


def load_task(path: str | Path, reward: str) -> Task:
    """The task of `path` scored by `reward`, checked: the file row by row, the reward resolved and
    called once (on the first problem's solution, else its answer) so it fails now, not mid-run."""
    problems = read_problems(path)
    task = Task(str(path), tuple(problems), reward, resolve_reward(reward))
    first = problems[0]
    task.score(first, first.solution or first.answer)
    if reward == "numeric":
        for i, p in enumerate(problems):
            if _number(p.answer) is None:
                raise TaskError(f"--task {path}: problem {i}: answer {p.answer!r} has no number "
                                "for --reward numeric")
    return task


def write_task_file(path: str | Path, problems: list[TaskProblem]) -> None:
    """`problems` as a JSONL task file (atomically: never half-written)."""
    from workbench.contracts.fileio import write_atomic

    lines = [json.dumps({"prompt": p.prompt, "answer": p.answer,
                         **({"solution": p.solution} if p.solution else {})})
             for p in problems]
    write_atomic(path, "\n".join(lines) + "\n")
