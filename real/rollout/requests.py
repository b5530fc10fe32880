"""What goes into the rollout engine and what comes out: sampling, requests, responses, step rows.

`EngineStepRow` is a trace step row (`workbench.contracts.trace.StepRow`) plus what only the
engine's callers use; `rows_frame(rows, StepRow)` keeps the trace's columns. Request rows are
the trace's `RequestRow`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from workbench.contracts.trace import RequestRow, StepRow, accepted_length


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one response (temperature 0 is greedy)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    max_tokens: int = 256
    seed: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()

    def to_vllm(self, n: int = 1, seed: int | None = None, delta: bool = False):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        kw: dict[str, Any] = {}
        if delta:
            kw["output_kind"] = RequestOutputKind.DELTA
        return SamplingParams(n=n, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              max_tokens=self.max_tokens, seed=self.seed if seed is None else seed,
                              ignore_eos=self.ignore_eos, stop=list(self.stop) or None, **kw)


@dataclass
class Sample:
    """One response."""

    token_ids: list[int]
    text: str
    finish_reason: str  # 'stop' (EOS or a stop string) or 'length' (cut at max_tokens)


@dataclass
class PromptResult:
    prompt_token_ids: list[int]
    samples: list[Sample]


@dataclass(frozen=True)
class RolloutRequest:
    """One response to generate in `run_steps`: sample `sample` of prompt `prompt_id`."""

    prompt_id: int
    sample: int
    prompt: str | Sequence[int]
    sampling: Sampling = Sampling()

    @property
    def request_id(self) -> str:
        return f"p{self.prompt_id}-s{self.sample}"


def group_requests(
    prompts: Sequence[str | Sequence[int]], samples: int, sampling: Sampling
) -> list[RolloutRequest]:
    """GRPO's groups: `samples` requests per prompt, all sampled alike, prompt by prompt."""
    return [
        RolloutRequest(i, j, prompt, sampling)
        for i, prompt in enumerate(prompts)
        for j in range(samples)
    ]


@dataclass
class EngineStepRow(StepRow):
    """One engine step as `run_steps` records it: the trace's columns, then four of the engine's."""

    # vLLM's own model-execution time for the step (iteration_details.elapsed_ms)
    exec_s: float = math.nan
    finished: int = 0  # requests finished so far
    # the draft length a StepController gave the step's batch (None: no controller)
    chosen_k: int | None = None
    # seconds the step spent drafting (NaN: not timed; real/rollout/draft_clock.py)
    draft_s: float = math.nan


@dataclass
class RunResult:
    """What `run_steps` recorded: one row per engine step and per request, and the responses."""

    steps: list[EngineStepRow]
    requests: list[RequestRow]
    outputs: dict[str, Sample]  # request_id -> the response
    wall_s: float
    probes: list[ProbeSample] = field(default_factory=list)  # the machine's speed during the run


@dataclass(frozen=True)
class ProbeSample:
    """One timing of a fixed reference workload between two engine steps: how fast the machine
    was then. Its time is left out of the run's clock (steps, requests and wall_s)."""

    t_s: float  # on the run's clock
    probe_s: float  # wall seconds of the reference workload
    cpu_s: float  # this process's CPU seconds of it


class SpeedProbe(Protocol):
    """A fixed reference workload, timed (real/rollout/probing.py's ReferenceForward)."""

    def measure(self) -> float: ...  # wall seconds; sets `last_cpu_s`


class StepController(Protocol):
    """Called by `RolloutEngine.run_steps` around each engine step (real/rollout/adaptive.py has
    one)."""

    def before_step(self, batch_size: int) -> None: ...

    def after_step(self, row: EngineStepRow) -> None: ...


@dataclass
class SpecCounters:
    """vLLM's cumulative spec-decode counters (`LLM.get_metrics()`); subtract two for a window."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def __sub__(self, other: "SpecCounters") -> "SpecCounters":
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        pad = lambda v: list(v) + [0] * (n - len(v))  # noqa: E731
        return SpecCounters(
            self.num_drafts - other.num_drafts,
            self.num_draft_tokens - other.num_draft_tokens,
            self.num_accepted_tokens - other.num_accepted_tokens,
            [a - b for a, b in zip(pad(self.accepted_per_pos), pad(other.accepted_per_pos))],
        )

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens (NaN without drafts)."""
        return (
            self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else math.nan
        )

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per verify pass, 1 + accepted / drafts (NaN without drafts)."""
        return accepted_length(self.num_accepted_tokens, self.num_drafts)
