"""The self-calibration's capture plan and the machine that runs it.

`plan_captures` interleaves the drafter kinds in rounds and repeats every fit shape in every
round, with a held-out capture in the middle of each engine session, so no kind or shape is
measured only while the machine ran fast or slow (`workbench/validate/self_calibration.py` says
why). `Machine` is what runs the captures: `VllmMachine` on the real engine, a synthetic one in
the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.schema import from_mapping
from workbench.contracts.task import Task
from workbench.contracts.trace import Trace

KINDS = (DrafterKind.NONE, DrafterKind.NGRAM, DrafterKind.EAGLE)
# Fit shapes: (prompts, samples, max_tokens, batch cap); every one runs for every kind every round.
FIT_SHAPES = ((16, 4, 1024, 64), (16, 4, 512, 32), (8, 4, 512, 8), (16, 4, 256, 16))
# Draft-length schedules (min_batch, max_batch, K) of the SD fit captures, rotated over the shapes
# so each K meets several batch sizes. K runs up to 8, the SD engines' num_speculative_tokens and
# the longest draft the tuner and `tlt-vllm` use, so no tuned K = 8 rests on acceptance and verify
# costs extrapolated from shorter drafts.
FIT_SCHEDULES = (((1, 8, 6), (9, 32, 2)), ((1, 64, 3),), ((1, 4, 8), (5, 16, 1), (17, 64, 2)),
                 ((1, 16, 4), (17, 64, 1)))
MAX_DRAFT_LEN = 8
# The held-out shape: a mix, group size and cap no fit capture has; its own schedule too.
HELDOUT = dict(prompts=24, samples=2, max_tokens=768, cap=24, mix="hard",
               schedule=((1, 6, 4), (7, 24, 2)))


@dataclass(frozen=True)
class CaptureSpec:
    """One planned capture."""

    name: str  # its trace directory under PROFILE.captures/
    kind: DrafterKind  # drafter the engine runs: none, ngram, eagle
    role: str  # "fit" or "heldout"
    round: int
    prompts: int
    samples: int
    max_tokens: int
    cap: int  # batch cap: the most requests in flight
    seed: int
    mix: str
    schedule: tuple[tuple[int, int, int], ...]  # draft length per batch bucket; () without SD

    def policy(self) -> Policy:
        """The policy the capture runs (a fixed schedule), as its trace's meta records it."""
        if self.kind == DrafterKind.NONE:
            return from_mapping(Policy, {"name": f"selfcal-{self.name}",
                                         "drafter": {"kind": DrafterKind.NONE}})
        return from_mapping(Policy, {
            "name": f"selfcal-{self.name}", "sd_threshold": max(hi for _, hi, _ in self.schedule),
            "schedule": [list(r) for r in self.schedule], "bandit": {"algorithm": "fixed"},
            "drafter": {"kind": self.kind, "warm_start": self.kind == DrafterKind.EAGLE},
            "spot_training": {"enabled": False}})


def plan_captures(kinds: Sequence[DrafterKind] = KINDS, rounds: int = 2,
                  seed: int = 0) -> list[CaptureSpec]:
    """The captures in run order: per round, one engine session per kind (the kind order rotates
    each round), each session its kind's fit shapes with the held-out capture in the middle."""
    if rounds < 1 or not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"plan: rounds >= 1 and kinds among {', '.join(KINDS)} (got {rounds}, "
                         f"{list(kinds)})")
    plan: list[CaptureSpec] = []
    for r in range(rounds):
        order = [kinds[(j + r) % len(kinds)] for j in range(len(kinds))]
        # a new round starts on another engine
        if plan and len(kinds) > 1 and order[0] == plan[-1].kind:
            order = order[1:] + order[:1]
        for kind in order:
            ki = kinds.index(kind)
            fits = []
            for i in range(len(FIT_SHAPES)):
                s = (i + r + ki) % len(FIT_SHAPES)  # another shape order each session
                prompts, samples, max_tokens, cap = FIT_SHAPES[s]
                sd = kind != DrafterKind.NONE
                sched = FIT_SCHEDULES[(s + r) % len(FIT_SCHEDULES)] if sd else ()
                fits.append(CaptureSpec(f"fit-r{r}-{kind}-{i}", kind, "fit", r, prompts, samples,
                                        max_tokens, cap,
                                        seed + 100 * r + 10 * ki + i, "default", sched))
            h = HELDOUT
            sched = () if kind == DrafterKind.NONE else h["schedule"]
            held = CaptureSpec(f"heldout-r{r}-{kind}", kind, "heldout", r, h["prompts"],
                               h["samples"], h["max_tokens"], h["cap"], seed + 1000 + 100 * r + ki,
                               h["mix"], sched)
            half = len(fits) // 2
            plan += fits[:half] + [held] + fits[half:]
    return plan


class Machine(Protocol):
    """What runs the captures: one engine at a time, and the drift reference."""

    # (re)start the engine for a drafter kind; seconds
    def start(self, kind: DrafterKind) -> float: ...

    def capture(self, spec: CaptureSpec) -> Trace: ...  # one capture on the running engine

    def reference_s(self) -> float: ...  # the fixed reference measurement, seconds

    # Optional: `reference_cpu_s()`, this process's CPU seconds of the last reference measurement,
    # and `meta["summary"]["cpu_share"]` in each capture's trace enable method "cpu".

    def close(self) -> None: ...


class VllmMachine:
    """The real machine: real/run/capture.py's EngineSession (vLLM in this process)."""

    def __init__(self, model: str | Path, drafter: str | Path | None = None, seed: int = 0,
                 task: Task | None = None):
        """`task`: a user's task file the captures draw their prompts from (None: the GCD task)."""
        from real.run.capture import EngineSession

        self.session = EngineSession(model, drafter, seed=seed, max_draft_len=MAX_DRAFT_LEN,
                                     task_file=task)

    def start(self, kind: DrafterKind) -> float:
        return self.session.start(kind)

    def capture(self, spec: CaptureSpec) -> Trace:
        return self.session.capture(spec.policy(), prompts=spec.prompts, samples=spec.samples,
                                    max_tokens=spec.max_tokens, seed=spec.seed, mix=spec.mix,
                                    max_in_flight=spec.cap)

    def reference_s(self) -> float:
        return self.session.reference_s()

    def reference_cpu_s(self) -> float:
        return self.session.reference_cpu_s()

    def close(self) -> None:
        self.session.close()
