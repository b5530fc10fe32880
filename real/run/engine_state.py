"""What every rollout engine of a `tlt train` run runs: the one owner of the drafter kind, SD on or
off, and the start tables.

The coordinator holds the run's `EngineState` and asks it what the engines run next (`next`, by
the rules of real/run/engine_choice.py); the workers obey the state they are handed
(`RolloutWorker.run_engine`). The policy stays as the user wrote it; the start tables (one per
drafter kind, workbench/schedule.py) travel beside it, never written into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from real.run.engine_choice import next_engines
from real.run.records import DrafterCheck
from real.run.sd_guard import SDOff, SDVerdict, guards_sd
from workbench.contracts.policy import DrafterKind, Policy


@dataclass(frozen=True)
class EngineState:
    policy: Policy  # as the user wrote it
    kind: DrafterKind  # the drafter the engines run: "ngram", "eagle" or "none"
    sd_off: SDOff | None = None  # why SD is off (None: it is on, or the policy has none)
    # drafter kind -> draft length per row
    start_tables: Mapping[DrafterKind, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def initial(cls, policy: Policy, start_tables: Mapping[str, Sequence[int]] | None = None) -> EngineState:
        """A fresh run's engines: the policy's drafter, except that a cold learned drafter with
        `ngram_fallback` starts behind n-gram (the switch rule brings it in once it is better)."""
        d = policy.drafter
        cold = d.kind == DrafterKind.EAGLE and d.ngram_fallback and not d.warm_start
        kind = DrafterKind.NGRAM if cold else d.kind
        tables = {DrafterKind(k): tuple(int(x) for x in v) for k, v in (start_tables or {}).items()}
        return cls(policy, kind, None, tables)

    @property
    def switches(self) -> bool:
        """Whether the engines switch between n-gram and the learned drafter (the drafters are checked every step)."""
        return self.policy.drafter.kind == DrafterKind.EAGLE and self.policy.drafter.ngram_fallback

    @property
    def guarded(self) -> bool:
        """Whether SD is judged against a plain engine and turned off where it loses (real/run/sd_guard.py)."""
        return guards_sd(self.policy)

    def engine_policy(self) -> Policy:
        """The policy an engine is built from: the user's, running this state's drafter."""
        if self.kind == self.policy.drafter.kind:
            return self.policy
        return replace(self.policy, drafter=replace(self.policy.drafter, kind=self.kind))

    def start_table(self) -> tuple[int, ...] | None:
        """The draft length each schedule row starts at for this state's drafter (None: the schedule's)."""
        return self.start_tables.get(self.kind)

    def next(self, check: DrafterCheck | None, verdict: SDVerdict | None, has_drafter: bool) -> EngineState:
        """What the engines run after a step that ran this state: `check` the drafters checked this
        step (None: not checked), `verdict` SD against a plain engine on its rollout (None: not judged)."""
        choice = next_engines(self.kind, self.sd_off, check, verdict, switches=self.switches,
                              margin=self.policy.drafter.switch_margin, has_drafter=has_drafter)
        return replace(self, kind=choice.kind, sd_off=choice.sd_off)

    def without_sd(self, why: SDOff) -> EngineState:
        return replace(self, kind=DrafterKind.NONE, sd_off=why)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (the policy and start tables come from the run's settings)."""
        return {"kind": self.kind, "sd_off": _sd_off_dict(self.sd_off)}

    def load_state_dict(self, state: Mapping[str, Any]) -> EngineState:
        off = state.get("sd_off")
        sd_off = None
        if off:
            sd_off = SDOff(DrafterKind(off["kind"]), off["speedup"], off["estimate"],
                           tuple(off.get("recent", ())))
        return replace(self, kind=DrafterKind(state["kind"]), sd_off=sd_off)


def _sd_off_dict(off: SDOff | None) -> dict[str, Any] | None:
    if off is None:
        return None
    return {"kind": off.kind, "speedup": off.speedup, "estimate": off.estimate, "recent": list(off.recent)}
