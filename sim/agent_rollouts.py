"""A step's rollout when the workload is agentic (Workload.agentic): each prompt's group is a set of
trajectories (sim/trajectories.py), decoded turn by turn on an AgentPool (sim/agent_pool.py).

Everything else of a step is the single-turn rollout's (sim/rounds.py): the rollout modes (sync,
partial, tail batching, async), the drafter's state and spot training. What the update trains on
is every trajectory's whole sequence: its prompt, its turns and the tools' output (masked out of
the loss, but in the forward pass).
"""

from __future__ import annotations

import numpy as np

from sim.entities import Group
from sim.rounds import Rollouts
from sim.trajectories import group_trajectories
from workbench.contracts.schema import ConfigError
from workbench.contracts.turn_data import ObservedTurns, read_turns
from workbench.contracts.workload import Workload


def check_agentic(workload: Workload, replay: list | None) -> None:
    """Refuse what the simulator does not model for agentic workloads, naming the field."""
    if not workload.agentic.enabled:
        return
    if workload.dynamic_sampling.enabled:
        raise ConfigError(workload.name, "dynamic_sampling.enabled", True,
                          "false for an agentic workload: DAPO's filtering is not simulated with "
                          "multi-turn trajectories")
    if replay is not None:
        raise ConfigError(workload.name, "agentic.enabled", True,
                          "false with replayed single-turn lengths; an agentic workload replays "
                          "its own turns table (agentic.kind: replay)")


class AgentRollouts(Rollouts):
    """`Rollouts` whose groups are trajectories."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        a = self.workload.agentic
        self.turns: ObservedTurns | None = read_turns(a.data) if a.kind == "replay" else None

    def draw(self, key: tuple[int, int], attempt: int = 0, batch: int | None = None) -> Group:
        wl = self.workload
        batch = key[0] if batch is None else batch
        d = group_trajectories(wl.agentic, self.turns, wl.group_size, wl.max_response_tokens,
                               self.seed, batch, key[1], attempt)
        lengths = np.array([round(t.generated) for t in d.trajectories], dtype=np.int64)
        return Group(key, lengths, np.zeros(len(lengths)), attempt, prompt_tokens=d.prompt_tokens,
                     rank=d.rank, trajectories=d.trajectories)

    def tokens(self, groups: list[Group]) -> int:
        """Prompt, turns and tool output: every token of the trained sequences."""
        tools = sum(float(t.tool_tokens.sum()) for g in groups for t in (g.trajectories or ()))
        return super().tokens(groups) + int(round(tools))
