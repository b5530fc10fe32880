"""What every rollout engine of a `tlt train` run runs next: the one owner of the drafter kind,
SD on or off and why, and the start tables.

The coordinator holds the run's `EnginePlan` and asks it what the engines run after each RL step
(`EnginePlan.next`) and after the probe before step 0 (`after_probe`); the workers obey the plan
they are handed (`RolloutWorker.run_engine`). The policy stays as the user wrote it; the start
tables (one per drafter kind, workbench/schedule.py) travel beside it, never written into it.

Two rules decide the drafter, both with the policy's `drafter.switch_margin` as hysteresis,
since every change restarts every worker's engine:
- `choose_drafter` (runs with `ngram_fallback`): n-gram or the learned drafter, whichever's
  estimated tokens per verify pass (`DrafterCheck`) beats the other's by the margin;
- the SD guard (`sd_next`; adaptive policies, `guards_sd`): no drafter while SD decodes slower
  than a plain engine (the verdict of real/run/sd_pricing.py), and the drafter back once its
  estimates predict SD wins. vLLM fixes the drafter when an engine starts, so "SD off" is a
  restart, decided between RL steps.

`sd_next`: SD off when the speedup is below 1 / (1 + margin), and back on once the speedup it
had, scaled by the drafter's estimated tokens per verify pass now over then (`DrafterCheck`,
checked by idle workers every step), reaches 1 + margin: a pass costs about the same whatever it
accepts. "Now" is the mean of the last RECENT estimates, at least MIN_RECENT of them, since one
step's estimate on a few fresh responses is noisy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from real.run.records import DrafterCheck
from real.run.sd_pricing import SDVerdict
from workbench.contracts.policy import DrafterKind, Policy

# Estimates judged while SD is off that the return rule averages (the newest), and the fewest
# it needs.
RECENT = 3
MIN_RECENT = 2


@dataclass(frozen=True)
class SDOff:
    """Why SD is off: the drafter that ran, its measured speedup and estimated tokens per pass
    then, and the estimates judged since (the newest RECENT)."""

    kind: DrafterKind  # "eagle" or "ngram": what the engines return to
    speedup: float
    # NaN: not judged yet (the probe turned SD off before step 0); the first estimate judged is
    # taken.
    estimate: float
    recent: tuple[float, ...] = ()


def guards_sd(policy: Policy) -> bool:
    """Whether a run of `policy` is guarded: adaptive SD (a bandit other than `fixed`), whose
    bandit is there to never lose to no SD."""
    return policy.drafter.kind != DrafterKind.NONE and policy.bandit.algorithm != "fixed"


def sd_next(off: SDOff | None, verdict: SDVerdict | None, kind: DrafterKind, estimate: float,
            margin: float) -> SDOff | None:
    """SD's state for the next RL step (None: on). `kind`: the drafter that ran (or that SD would
    return to, while off); `estimate`: its tokens per verify pass judged this step (NaN: not
    judged)."""
    if off is None:
        if verdict is not None and verdict.speedup * (1.0 + margin) < 1.0:
            return SDOff(kind, verdict.speedup, estimate)
        return None
    if math.isnan(off.estimate) or off.estimate <= 0:
        # Turned off before any estimate (by the probe, before step 0): the first one judged, on
        # the drafter that lost, is what later ones are compared with.
        return off if math.isnan(estimate) or estimate <= 0 else replace(off, estimate=estimate)
    recent = off.recent if math.isnan(estimate) else (off.recent + (estimate,))[-RECENT:]
    off = replace(off, recent=recent)
    if len(recent) < MIN_RECENT:
        return off
    predicted = off.speedup * (sum(recent) / len(recent)) / off.estimate
    return None if predicted >= 1.0 + margin else off


def choose_drafter(current: DrafterKind, check: DrafterCheck, margin: float) -> DrafterKind:
    """The drafter the engines run next step: the other one of "ngram" and "eagle" once its
    estimated tokens per pass beat the running one's by the relative `margin`, else `current`.
    The margin works both ways, so estimates that differ by less never flip the engines back and
    forth (each switch restarts them); a NaN estimate never wins."""
    if current == DrafterKind.NGRAM and check.eagle > check.ngram * (1.0 + margin):
        return DrafterKind.EAGLE
    if current == DrafterKind.EAGLE and check.ngram > check.eagle * (1.0 + margin):
        return DrafterKind.NGRAM
    return current


@dataclass(frozen=True)
class EngineChoice:
    kind: DrafterKind  # "ngram", "eagle" or "none"
    sd_off: SDOff | None  # why SD is off (None: it is on, or the policy has none)


def next_engines(ran: DrafterKind, sd_off: SDOff | None, check: DrafterCheck | None,
                 verdict: SDVerdict | None, *, switches: bool, margin: float,
                 has_drafter: bool) -> EngineChoice:
    """What the engines run after a step that ran `ran` (SD off for `sd_off` when "none").
    `check`: the drafters judged this step (None: not judged); `verdict`: SD against a plain
    engine on this rollout (None: not judged or not guarded); `switches`: the policy switches
    between n-gram and EAGLE; `has_drafter`: a learned drafter exists to switch to."""
    def pick(k: DrafterKind) -> DrafterKind:
        return choose_drafter(k, check, margin) if check is not None and switches else k

    def estimate(k: DrafterKind) -> float:
        return check.estimate(k) if check is not None else math.nan

    if ran == DrafterKind.NONE:
        if sd_off is None:  # a policy without SD
            return EngineChoice(DrafterKind.NONE, None)
        # Estimates are compared with the reference of the drafter SD returns to, never across
        # drafters.
        off = sd_next(sd_off, None, sd_off.kind, estimate(sd_off.kind), margin)
        nxt, sd_off = (pick(sd_off.kind), sd_off) if off is None else (DrafterKind.NONE, off)
    else:
        nxt = pick(ran)
        off = sd_next(None, verdict, nxt, estimate(nxt), margin)
        if off is not None:
            nxt, sd_off = DrafterKind.NONE, off
    if nxt == DrafterKind.EAGLE and not has_drafter:
        nxt = ran
    return EngineChoice(nxt, sd_off if nxt == DrafterKind.NONE else None)


@dataclass(frozen=True)
class EnginePlan:
    policy: Policy  # as the user wrote it
    kind: DrafterKind  # the drafter the engines run: "ngram", "eagle" or "none"
    sd_off: SDOff | None = None  # why SD is off (None: it is on, or the policy has none)
    # drafter kind -> draft length per row
    start_tables: Mapping[DrafterKind, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def initial(cls, policy: Policy,
                start_tables: Mapping[str, Sequence[int]] | None = None) -> EnginePlan:
        """A fresh run's engines: the policy's drafter, except that a cold learned drafter with
        `ngram_fallback` starts behind n-gram (the switch rule brings it in once it is better)."""
        d = policy.drafter
        cold = d.kind == DrafterKind.EAGLE and d.ngram_fallback and not d.warm_start
        kind = DrafterKind.NGRAM if cold else d.kind
        tables = {
            DrafterKind(k): tuple(int(x) for x in v) for k, v in (start_tables or {}).items()
        }
        return cls(policy, kind, None, tables)

    @property
    def switches(self) -> bool:
        """Whether the engines switch between n-gram and the learned drafter (the drafters are
        checked every step)."""
        d = self.policy.drafter
        return d.kind == DrafterKind.EAGLE and d.ngram_fallback

    @property
    def guarded(self) -> bool:
        """Whether SD is judged against a plain engine and turned off where it loses."""
        return guards_sd(self.policy)

    def engine_policy(self) -> Policy:
        """The policy an engine is built from: the user's, running this plan's drafter."""
        if self.kind == self.policy.drafter.kind:
            return self.policy
        return replace(self.policy, drafter=replace(self.policy.drafter, kind=self.kind))

    def start_table(self) -> tuple[int, ...] | None:
        """The draft length each schedule row starts at for this plan's drafter (None: the
        schedule's)."""
        return self.start_tables.get(self.kind)

    def next(self, check: DrafterCheck | None, verdict: SDVerdict | None,
             has_drafter: bool) -> EnginePlan:
        """What the engines run after a step that ran this plan: `check` the drafters checked
        this step (None: not checked), `verdict` SD against a plain engine on its rollout (None:
        not judged)."""
        choice = next_engines(self.kind, self.sd_off, check, verdict, switches=self.switches,
                              margin=self.policy.drafter.switch_margin, has_drafter=has_drafter)
        return replace(self, kind=choice.kind, sd_off=choice.sd_off)

    def after_probe(self, probe: SDVerdict) -> EnginePlan:
        """What the engines run from step 0 after the probe's verdict: this plan, or no drafter
        where SD loses (no estimate judged yet)."""
        off = sd_next(None, probe, self.kind, math.nan, self.policy.drafter.switch_margin)
        return self if off is None else self.without_sd(off)

    def without_sd(self, why: SDOff) -> EnginePlan:
        return replace(self, kind=DrafterKind.NONE, sd_off=why)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (the policy and start tables come from the run's settings)."""
        return {"kind": self.kind, "sd_off": _sd_off_dict(self.sd_off)}

    def load_state_dict(self, state: Mapping[str, Any]) -> EnginePlan:
        off = state.get("sd_off")
        sd_off = None
        if off:
            sd_off = SDOff(DrafterKind(off["kind"]), off["speedup"], off["estimate"],
                           tuple(off.get("recent", ())))
        return replace(self, kind=DrafterKind(state["kind"]), sd_off=sd_off)


def _sd_off_dict(off: SDOff | None) -> dict[str, Any] | None:
    if off is None:
        return None
    return {"kind": off.kind, "speedup": off.speedup, "estimate": off.estimate,
            "recent": list(off.recent)}
