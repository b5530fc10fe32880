"""The update of an RL step: the responses' rewards (the run's task, real/run/task_source.py) and
one GRPO step (real/grpo.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from real.drafter.records import HiddenRecord
from real.run.records import WorkerRollout
from real.run.task_source import TaskSource
from workbench.contracts.trace import RequestRow

if TYPE_CHECKING:
    from real.grpo import StepStats  # torch: imported where a run starts


@dataclass
class Update:
    requests: list[RequestRow]  # every response's row, its reward set
    stats: StepStats
    # the target's hidden states of the responses (keep_hidden), for the drafter
    hidden: list[HiddenRecord]
    # share of responses in the style the reward asks for (NaN: any style scores)
    style_share: float


def policy_update(trainer: Any, problems: Sequence[Any], rollouts: dict[int, WorkerRollout],
                  source: TaskSource, keep_hidden: bool) -> Update:
    """Reward every response of the workers' rollouts (in worker order) and take one GRPO step."""
    from real.grpo import ScoredResponse

    requests, batch, texts = [], [], []
    for i in sorted(rollouts):
        r = rollouts[i]
        for row in r.requests:
            out = r.outputs[row.request_id]
            row.reward = source.reward(problems[row.prompt_id], out.text)
            texts.append(out.text)
            requests.append(row)
            prompt_ids = list(r.prompt_ids[row.request_id])
            batch.append(ScoredResponse(prompt_ids, list(out.token_ids), row.reward, row.prompt_id))
    stats, hidden = trainer.step(batch, keep_hidden=keep_hidden)
    return Update(requests, stats, hidden, source.style_share(texts))
