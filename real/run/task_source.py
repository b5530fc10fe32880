"""What a run's rollouts are asked and how they are scored: the project's GCD task
(real/tiny/task.py, the default) or a user's task file (workbench/contracts/task.py), behind one
interface.

A user's prompts go through the model's chat template when its tokenizer has one (a chat model
expects its template around the question); the GCD task's prompts are the tiny model's raw format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from real.tiny import task as gcd
from real.tiny.model import variant_of
from workbench.contracts.task import Task, TaskProblem


def chat_format(model_dir: str | Path) -> Callable[[str], str]:
    """The model's chat template around a user prompt (one user turn, the assistant's turn opened);
    the prompt itself when the tokenizer has no template."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_dir))
    except Exception:  # no loadable tokenizer: vLLM's own loading will report it
        return lambda p: p
    if not getattr(tok, "chat_template", None):
        return lambda p: p

    def fmt(prompt: str) -> str:
        return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                       add_generation_prompt=True)

    return fmt


@dataclass
class TaskSource:
    """The run's task. `draw` gives a step's problems (each has `.prompt` and `.solution`); `reward`
    scores a response to one; `styled` says whether a response is in the style the reward pays for
    (None: the task has no format term)."""

    name: str  # for the trace: the task module or file
    reward_name: str
    _draw: Callable[[int, int], list[Any]]
    _reward: Callable[[Any, str], float]
    _styled: Callable[[str], bool] | None = None

    def draw(self, n: int, seed: int) -> list[Any]:
        return self._draw(n, seed)

    def reward(self, problem: Any, response: str) -> float:
        return self._reward(problem, response)

    def style_share(self, responses: Sequence[str]) -> float:
        """Share of `responses` in the rewarded style (NaN: no format term)."""
        if self._styled is None or not responses:
            return math.nan
        return sum(self._styled(r) for r in responses) / len(responses)


def gcd_source(model_dir: str | Path, mix: str = "default") -> TaskSource:
    """The tiny GCD task under difficulty `mix`, scored by the variant the model was built for."""
    variant = variant_of(model_dir)
    rewarded = gcd.variant(variant).rewarded
    return TaskSource(gcd.__name__, f"gcd ({variant})",
                      lambda n, seed: gcd.make_problems(n, seed, mix, variant_name=variant),
                      lambda p, text: float(gcd.reward(p, text, variant)),
                      (lambda text: gcd.style_of(text) in rewarded) if rewarded else None)


def file_source(task: Task, model_dir: str | Path) -> TaskSource:
    """A user's task, its prompts in the model's chat template."""
    fmt = chat_format(model_dir)
    problems = tuple(replace(p, prompt=fmt(p.prompt)) for p in task.problems)
    formatted = replace(task, problems=problems)

    def score(p: TaskProblem, text: str) -> float:
        return formatted.score(p, text)

    return TaskSource(task.name, task.reward_name, formatted.draw, score)


def task_source(model_dir: str | Path, task: Task | None, mix: str = "default") -> TaskSource:
    return gcd_source(model_dir, mix) if task is None else file_source(task, model_dir)
