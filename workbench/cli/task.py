"""`tlt task`: the project's GCD task written as a task file, and the `--task`/`--reward` options'
loading for `tlt train` and `tlt capture` (checked before any engine starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from real.tiny import task as gcd
from workbench.cli.apps import task_app
from workbench.cli.common import fail
from workbench.contracts.task import (REWARDS, Task, TaskError, TaskProblem, load_task,
                                      write_task_file)

TASK_HELP = ("Task file (JSONL or Parquet: prompt, answer, optional solution; "
             "docs/formats.md) to train on instead of the GCD task; e.g. from `tlt task gcd`.")
REWARD_HELP = (f"Reward of --task: {', '.join(REWARDS)} (math: math-verify's equivalence) "
               "or module:function, called as function(response, answer) -> float.")


def task_option(task: Optional[Path], reward: Optional[str]) -> Task | None:
    """The loaded, checked task of --task/--reward
    (None: the GCD task); exits naming the problem."""
    if task is None:
        if reward is not None:
            fail(ValueError(f"--reward {reward}: give --task FILE "
                            "too (the GCD task has its own reward)"))
        return None
    try:
        return load_task(task, reward or "exact")
    except TaskError as exc:
        fail(exc)


@task_app.command("gcd")
def task_gcd(
    out: Path = typer.Option(..., help="JSONL file to write (prompt, answer, solution per line)."),
    n: int = typer.Option(200, min=1, help="Problems to draw."),
    seed: int = typer.Option(0, help="Seed of the problems."),
    mix: str = typer.Option("default",
                            help="Difficulty mix (real/tiny/task.py: default, easy, hard, flat)."),
    split: str = typer.Option("all", help="Pairs to draw from: train, test or all."),
) -> None:
    """The GCD task as a task file.

    `tlt train --task FILE --reward real.tiny.task:answer_reward` then trains on it (or --reward
    numeric: the last number of the response)."""
    if mix not in gcd.MIXES:
        fail(ValueError(f"--mix {mix!r}: allowed: {', '.join(gcd.MIXES)}"))
    if split not in gcd.SPLITS:
        fail(ValueError(f"--split {split!r}: allowed: {', '.join(gcd.SPLITS)}"))
    problems = gcd.make_problems(n, seed, mix, split)
    write_task_file(out, [TaskProblem(p.prompt, str(p.answer), p.solution) for p in problems])
    typer.echo(f"wrote {out}: {n} GCD problems (seed {seed}, mix {mix}, split {split})")
