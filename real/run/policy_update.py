"""Step 3 of an RL step: the responses' rewards (real/tiny/task.py) and one GRPO update (real/grpo.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from real.drafter.records import HiddenRecord
from real.run.records import WorkerRollout
from real.tiny import task
from workbench.contracts.trace import RequestRow

if TYPE_CHECKING:
    from real.grpo import StepStats  # torch: imported where a run starts


@dataclass
class Update:
    requests: list[RequestRow]  # every response's row, its reward set
    stats: StepStats
    hidden: list[HiddenRecord]  # the target's hidden states of the responses (keep_hidden), for the drafter
    style_share: float  # share of responses in the style the reward asks for (NaN: any style scores)


def policy_update(trainer: Any, problems: Sequence[task.Problem], rollouts: dict[int, WorkerRollout], variant: str,
                  keep_hidden: bool) -> Update:
    """Reward every response of the workers' rollouts (in worker order) and take one GRPO step."""
    from real.grpo import ScoredResponse

    requests, batch = [], []
    rewarded, styled = task.variant(variant).rewarded, 0
    for i in sorted(rollouts):
        r = rollouts[i]
        for row in r.requests:
            out = r.outputs[row.request_id]
            row.reward = float(task.reward(problems[row.prompt_id], out.text, variant))
            styled += task.style_of(out.text) in rewarded
            requests.append(row)
            batch.append(ScoredResponse(list(r.prompt_ids[row.request_id]), list(out.token_ids), row.reward,
                                        row.prompt_id))
    stats, hidden = trainer.step(batch, keep_hidden=keep_hidden)
    return Update(requests, stats, hidden, styled / len(requests) if rewarded else math.nan)
