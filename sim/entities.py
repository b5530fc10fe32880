"""What a rollout is made of: groups of responses, their sequences, one rollout round that the
engines share, how they draft, and one segment of an engine's decoding.

Plain state with the bookkeeping that keeps it consistent (a response finishing updates its
group's count and the round's complete groups); the engines that act on it are in
sim/rollout.py (one rollout) and sim/streaming.py (fully asynchronous RL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.acceptance import AcceptStats
from workbench.contracts.bandit import Arm, StepReward
from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import PositionMiss


@dataclass
class Group:
    """One prompt's group of responses, possibly spread over several rollouts."""

    key: tuple[int, int]  # (step it was drawn at, index): its identity when deferred
    lengths: np.ndarray
    generated: np.ndarray  # tokens generated so far per response (carried over by partial rollouts)
    attempt: int = 0
    version: int | None = None  # weights version its generation started under (None: not started)
    started_s: float | None = None  # streaming: when its first response was admitted
    finished_s: float | None = None  # streaming: when its last response finished
    prompt_tokens: int | None = None  # None: the workload's prompt_tokens
    rank: int | None = None  # replay: the data-parallel rank that generated it
    mixed: bool = True  # rewards not all equal (what DAPO's dynamic sampling keeps)
    # Agentic rollouts: each response's turns and tool calls (sim/trajectories.py); its length is
    # the tokens its turns generate.
    trajectories: tuple | None = None
    # Responses at their length, counted as they finish (`finish`, the only way a response gets
    # there once decoding started): suffix drafts read the share every segment.
    finished_count: int = field(init=False)
    # The SiblingShares of the engines holding its responses (a finish marks them stale).
    watchers: list = field(init=False, repr=False)

    def __post_init__(self):
        self.finished_count = int(np.count_nonzero(self.generated >= self.lengths))
        self.watchers = []

    def prompt(self, default: int) -> int:
        """Its prompt's tokens (`default`: the workload's, when the group has none of its own)."""
        return default if self.prompt_tokens is None else self.prompt_tokens

    @property
    def complete(self) -> bool:
        return bool((self.generated >= self.lengths).all())

    @property
    def finished_share(self) -> float:
        """The share of a response's siblings that finished (its own not among them: it is
        decoding)."""
        n = len(self.lengths)
        return float(self.finished_count) / (n - 1) if n > 1 else 0.0

    def finish(self, member: int) -> None:
        # One already at its length (0) was counted at creation.
        if self.generated[member] < self.lengths[member]:
            self.finished_count += 1
            for w in self.watchers:
                w.stale = True
        self.generated[member] = self.lengths[member]


@dataclass(slots=True)  # thousands a step: slots make them cheaper to build and read
class Seq:
    group: int  # index into the rollout's groups
    member: int  # index within the group


def open_seqs(groups: list[Group]) -> list[Seq]:
    """The responses of `groups` still to generate, group by group (found at once over all groups:
    a step has thousands)."""
    if not groups:
        return []
    sizes = np.fromiter((len(g.lengths) for g in groups), np.int64, len(groups))
    generated = np.concatenate([g.generated for g in groups])
    open_ = generated < np.concatenate([g.lengths for g in groups])
    group = np.repeat(np.arange(len(groups)), sizes)
    member = np.arange(len(open_)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return [Seq(gi, m) for gi, m in zip(group[open_].tolist(), member[open_].tolist())]


@dataclass(frozen=True)
class Drafting:
    """How the engines draft: the drafter in use and what it yields."""

    kind: DrafterKind  # drafter in use
    accept: dict[Strategy, AcceptStats]  # tokens per verify pass under each strategy
    history: bool = False  # suffix drafts: the prompts were answered in an earlier epoch
    # How acceptance moves along a response (AcceptanceModel.*_position): the rows' starts and,
    # per strategy, tokens per pass under each row (empty: flat).
    position: tuple[PositionMiss, ...] = ()
    accept_by_row: dict[Strategy, tuple[AcceptStats, ...]] = field(default_factory=dict)


@dataclass
class RolloutRound:
    """What the engines of one rollout share."""

    step: int
    drafting: Drafting
    groups: list[Group]
    seqs: list[Seq]
    stop_at: int | None  # stop once this many groups are complete (None: run to the end)
    done: simpy.Event  # decoding is over
    stop: simpy.Event  # enough groups are complete
    spot_open: simpy.Event  # enough engines are idle to start spot training
    left: list[int] = field(default_factory=list)  # responses still to finish per group
    complete_groups: int = 0
    idle_workers: int = 0
    tool_waiting: int = 0  # agentic: engines whose trajectories are all out on a tool call
    trained_tokens: float = 0.0
    generated: float = 0.0  # response tokens generated in this rollout
    spot: bool = False  # idle engines train the drafter in this rollout
    # DAPO's dynamic sampling: only mixed-reward groups count towards stop_at.
    mixed_only: bool = False

    def __post_init__(self):
        self.left = [0] * len(self.groups)
        for q in self.seqs:  # the responses still to generate, by group
            self.left[q.group] += 1
        self.complete_groups = sum(
            1 for n, g in zip(self.left, self.groups) if n == 0 and self._counts(g)
        )

    def _counts(self, g: Group) -> bool:
        return g.mixed or not self.mixed_only

    def engine_inputs(self, seqs: list[Seq],
                      prompt: int) -> tuple[list[float], list[int], list[float]]:
        """For an engine's `seqs`: the tokens each has still to generate, its context (its prompt,
        `prompt` for a group without its own, plus what it generated before) and what it generated
        before, gathered from the groups' arrays at once (a step has thousands of responses)."""
        if not seqs:
            return [], [], []
        groups = self.groups
        sizes = np.fromiter((len(g.lengths) for g in groups), np.int64, len(groups))
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        lengths = np.concatenate([g.lengths for g in groups])
        generated = np.concatenate([g.generated for g in groups]).astype(float)
        prompts = np.fromiter((g.prompt(prompt) for g in groups), np.int64, len(groups))
        gi = np.fromiter((q.group for q in seqs), np.int64, len(seqs))
        at = starts[gi] + np.fromiter((q.member for q in seqs), np.int64, len(seqs))
        done = generated[at]
        context = prompts[gi] + done.astype(np.int64)
        return (lengths[at] - done).tolist(), context.tolist(), done.tolist()

    def finished(self, seq: Seq) -> None:
        self.groups[seq.group].finish(seq.member)
        self.left[seq.group] -= 1
        if self.left[seq.group] == 0 and self._counts(self.groups[seq.group]):
            self.complete_groups += 1
            enough = self.stop_at is not None and self.complete_groups >= self.stop_at
            if enough and not self.stop.triggered:
                self.stop.succeed()


@dataclass(frozen=True)
class Segment:
    """How one stretch of an engine's decoding runs: a constant batch under one strategy."""

    arm: Arm | None  # what the bandit chose (None: no SD, nothing to learn)
    strategy: Strategy
    passes: float
    accept_len: float


def segment_reward(seg: Segment, batch: int, decode_s: float) -> StepReward:
    """What a segment earned its arm: `passes` verify passes of `batch` sequences, each emitting
    `accept_len` tokens a pass, in `decode_s` (its rate: tokens per second)."""
    return StepReward(seg.passes * seg.accept_len, decode_s, batch, seg.passes)
