"""Agentic rollouts: the Workload's `agentic` section (a trajectory's turns and tool calls).

An agentic trajectory is a sequence of generation turns separated by tool calls: turn k generates
`completion` tokens, then (unless it is the last) a tool runs for its latency, off the engine, and
appends its output to the context, which the next turn prefills (only the part the engine's prefix
cache does not hold). A prompt's group is `group_size` such trajectories.

`kind` picks where trajectories come from: `replay` (the observed trajectories in `data`, the turns
table `tlt workload import` writes: step s of seed 0 is observed batch s exactly, other steps and
seeds resample whole groups of an observed batch) or `model` (drawn from the fitted model below).

The model, fitted by `tlt workload import` to a turns table (workbench/workloads/agentic_fit.py):
- the number of turns: a categorical over 1..max_turns (`turn_shares`); the turn counts of a
  group's trajectories share `group_correlation` of a latent normal score (a Gaussian copula);
- each turn's completion tokens: lognormal around the turn's median (`turn_median_tokens`, one per
  turn index) with log-sd `turn_sigma`, of which `trajectory_correlation` of the variance is shared
  by the turns of one trajectory (a verbose trajectory is verbose in every turn), and that shared
  part correlates by `count_length_correlation` with the turn count's normal score (in the
  Search-R1 run, trajectories with more turns write shorter ones);
- each tool call's appended tokens and latency: lognormal (`tool_tokens_median`,
  `tool_tokens_sigma`; `tool_latency_median_s`, `tool_latency_sigma`), their logs correlated by
  `latency_tokens_correlation` (a search that returns more takes longer).

What the cluster adds, declared here rather than measured by a trace:
- `tool_latency_scale` multiplies every tool latency, replayed or drawn (the tool-latency sweep);
- `tool_slots`: tool calls that may run at once over the whole cluster (tools on CPUs with their
  own concurrency limit); 0: no limit;
- `cache_tokens`: one engine's KV-cache capacity in tokens, the limit of its prefix cache (a
  trajectory waiting on a tool keeps its prefix cached until newer work evicts it); 0: no limit;
- `shared_prompt`: a group's trajectories share their prompt's cached prefix (a radix cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.contracts.schema import require

KINDS = ("replay", "model")


@dataclass(frozen=True)
class AgenticModel:
    """The `agentic` section of a Workload (module docstring). Disabled: single-turn rollouts."""

    enabled: bool = False
    kind: Literal["replay", "model"] = "model"
    # replay: the observed turns (Parquet from `tlt workload import`; a relative path is read next
    # to the workload file)
    data: str = ""
    max_turns: int = 5
    turn_shares: tuple[float, ...] = (0.07, 0.43, 0.34, 0.11, 0.05)
    turn_median_tokens: tuple[float, ...] = (34.0, 64.0, 85.0, 96.0, 92.0)
    turn_sigma: float = 0.8
    trajectory_correlation: float = 0.3
    group_correlation: float = 0.3
    count_length_correlation: float = 0.0
    tool_tokens_median: float = 540.0
    tool_tokens_sigma: float = 0.3
    tool_latency_median_s: float = 0.16
    tool_latency_sigma: float = 1.2
    latency_tokens_correlation: float = 0.0
    tool_latency_scale: float = 1.0
    tool_slots: int = 0
    cache_tokens: int = 0
    shared_prompt: bool = True

    def check(self) -> None:
        require(self.kind == "model" or bool(self.data.strip()), "data", self.data,
                "the path of the observed turns (Parquet from `tlt workload import`) for kind "
                "'replay'")
        require(1 <= self.max_turns <= 64, "max_turns", self.max_turns, "an integer from 1 to 64")
        require(len(self.turn_shares) == self.max_turns, "turn_shares", list(self.turn_shares),
                f"{self.max_turns} shares (one per turn count 1..max_turns)")
        require(all(s >= 0 for s in self.turn_shares) and abs(sum(self.turn_shares) - 1) < 1e-3,
                "turn_shares", list(self.turn_shares), "shares >= 0 that sum to 1")
        require(len(self.turn_median_tokens) == self.max_turns, "turn_median_tokens",
                list(self.turn_median_tokens), f"{self.max_turns} medians (one per turn index)")
        require(all(m >= 1 for m in self.turn_median_tokens), "turn_median_tokens",
                list(self.turn_median_tokens), "medians of at least 1 token")
        for name in ("turn_sigma", "tool_tokens_sigma", "tool_latency_sigma"):
            value = getattr(self, name)
            require(0.0 <= value <= 4.0, name, value, "a log-sd from 0 to 4")
        for name in ("trajectory_correlation", "group_correlation"):
            value = getattr(self, name)
            require(0.0 <= value < 1.0, name, value, "a share in [0, 1)")
        for name in ("latency_tokens_correlation", "count_length_correlation"):
            value = getattr(self, name)
            require(-1.0 < value < 1.0, name, value, "a correlation in (-1, 1)")
        require(self.tool_tokens_median >= 0, "tool_tokens_median", self.tool_tokens_median,
                "a number of tokens >= 0")
        require(self.tool_latency_median_s >= 0, "tool_latency_median_s",
                self.tool_latency_median_s, "seconds >= 0")
        require(0.0 <= self.tool_latency_scale <= 1000.0, "tool_latency_scale",
                self.tool_latency_scale, "a factor from 0 to 1000")
        require(self.tool_slots >= 0, "tool_slots", self.tool_slots,
                "an integer >= 0 (0: no limit)")
        require(self.cache_tokens >= 0, "cache_tokens", self.cache_tokens,
                "an integer >= 0 (0: no limit)")
