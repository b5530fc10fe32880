"""Public measurements of real rollout tails, each simulated in its own set-up over its unknowns.

`traces/published/tail-evidence.yaml` declares, per item of the evidence, whether its set-up is
known well enough to simulate (and why not where it is not), the workload, engine and policy it is
simulated with, the cases its unknowns take (their plausible range) and what it measured: points
of its completion curve and shares of engine-time at running batches. `check_item` simulates every
case on a few seeds and reads each rollout's drain (workbench/contracts/drain.py) exactly as a
real rollout's would be read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from sim.simulator import simulate
from workbench.calibrate.published.shapes import DATASHEETS
from workbench.contracts.drain import Drain, batch_time, drain_from_timeline, gap_to_points
from workbench.contracts.policy import Policy, load_policy
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import ConfigError, from_mapping
from workbench.contracts.timeline import DECODE_STATES
from workbench.contracts.workload import LengthModel, Workload
from workbench.validate.agentic_engine import carried

EVIDENCE = Path(__file__).resolve().parents[2] / "traces" / "published" / "tail-evidence.yaml"
SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Running:
    """A range of running batches per engine, `low` to `high` (None: no upper end)."""

    low: int
    high: int | None

    @property
    def label(self) -> str:
        return f"{self.low}+" if self.high is None else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class MeasuredShare(Running):
    """The share of engine-time spent running that many sequences."""

    share: float


@dataclass(frozen=True)
class MeasuredSpeed(Running):
    """Tokens per second per engine while it ran that many sequences."""

    tokens_per_s: tuple[float, float] | None  # the range the source gives (None: not given)


@dataclass(frozen=True)
class Case:
    label: str
    lengths: dict[str, float]  # LengthModel fields this case sets


@dataclass(frozen=True)
class Item:
    id: str
    title: str
    source: str
    simulated: bool
    reason: str = ""  # why not simulated
    setup: str = ""
    unknowns: str = ""
    curve: tuple[tuple[float, float], ...] = ()  # measured (time share, done share)
    shares: tuple[MeasuredShare, ...] = ()
    speeds: tuple[MeasuredSpeed, ...] = ()
    note: str = ""
    workload: Workload | None = None
    profile: Profile | None = None
    policy: Policy | None = None
    cases: tuple[Case, ...] = ()


def _engine(spec: dict, where: str) -> tuple[Workload, Profile]:
    spec = dict(spec)
    carry = spec.pop("carry_to", None)
    wl = from_mapping(Workload, spec, where)
    profile = load_profile(wl.profile)
    if carry:
        if carry not in DATASHEETS or profile.cluster is None:
            raise ConfigError(where, "carry_to", carry, f"one of {', '.join(DATASHEETS)}")
        src = DATASHEETS[profile.cluster.gpu]
        profile = carried(profile, src, DATASHEETS[carry], f"{profile.name}-on-{carry}")
        profile = replace(profile, cluster=replace(profile.cluster, gpu=carry))
    return wl, profile


def _item(d: dict, where: str) -> Item:
    m = d.get("measured") or {}
    base = dict(id=str(d["id"]), title=str(d["title"]), source=str(d["source"]),
                simulated=bool(d["simulated"]), reason=str(d.get("reason", "")).strip(),
                setup=str(d.get("setup", "")).strip(), unknowns=str(d.get("unknowns", "")).strip(),
                curve=tuple((float(t), float(f)) for t, f in m.get("curve", [])),
                shares=tuple(MeasuredShare(int(s["low"]), None if s["high"] is None
                                           else int(s["high"]), float(s["share"]))
                             for s in m.get("batch", [])),
                speeds=tuple(MeasuredSpeed(int(s["low"]), None if s["high"] is None
                                           else int(s["high"]),
                                           None if s["tokens_per_s"] is None
                                           else (float(s["tokens_per_s"][0]),
                                                 float(s["tokens_per_s"][1])))
                             for s in m.get("speed", [])),
                note=str(m.get("note", "")).strip())
    if not base["simulated"]:
        return Item(**base)
    wl, profile = _engine(d["workload"], f"{where}: {base['id']}.workload")
    pol = d["policy"]
    policy = load_policy(pol) if isinstance(pol, str) else from_mapping(Policy, pol, where)
    cases = tuple(Case(str(c["label"]), {k: float(v) for k, v in c["lengths"].items()})
                  for c in d["cases"])
    return Item(**base, workload=wl, profile=profile, policy=policy, cases=cases)


def load_evidence(path: str | Path = EVIDENCE) -> list[Item]:
    """The declared items; a malformed file is refused naming it and the item."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        items = doc["items"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise ConfigError(str(path), "items", "unreadable",
                          f"the tail-evidence YAML (traces/published/tail-evidence.yaml) ({exc})"
                          ) from None
    out = []
    for i, d in enumerate(items):
        try:
            out.append(_item(d, str(path)))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(str(path), f"items[{i}]", repr(exc),
                              "the layout of traces/published/tail-evidence.yaml") from None
    return out


def case_workload(item: Item, case: Case) -> Workload:
    lengths = from_mapping(LengthModel, {**_fields(item.workload.lengths), **case.lengths})
    return replace(item.workload, lengths=lengths)


def _fields(m: LengthModel) -> dict:
    return {k: getattr(m, k) for k in m.__dataclass_fields__}


@dataclass(frozen=True)
class Rollout:
    """One case's first rollout on one seed."""

    drain: Drain
    accept_len: float
    speeds: tuple[float, ...]  # tokens/s per engine at the item's MeasuredSpeed batches


def engine_speed(rows: pd.DataFrame, low: int, high: int | None) -> float:
    """Tokens per second of an engine while it decodes `low` to `high` sequences."""
    dec = rows[rows["state"].astype(str).isin(DECODE_STATES) & (rows["batch"] >= low)
               & (rows["batch"] <= (high if high is not None else np.inf))]
    seconds = float((dec["end_s"] - dec["start_s"]).sum())
    return float(dec["tokens"].sum()) / seconds if seconds > 0 else float("nan")


def simulated_rollout(item: Item, case: Case, seed: int) -> Rollout:
    wl = case_workload(item, case)
    run = simulate(wl, item.policy, item.profile, seed=seed, steps=1)
    rows = run.timeline[run.timeline["rl_step"] == 0]
    return Rollout(drain_from_timeline(rows, wl.workers, wl.sequences_per_step),
                   run.steps[0].mean_accept_len,
                   tuple(engine_speed(rows, s.low, s.high) for s in item.speeds))


@dataclass(frozen=True)
class CaseResult:
    """One case over the seeds: the curve gap to the measured points and the engine-time shares at
    the measured running batches (medians over seeds, and their range)."""

    label: str
    gap: float
    gap_range: tuple[float, float]
    shares: tuple[float, ...]  # in the item's MeasuredShare order
    speeds: tuple[float, ...]  # in the item's MeasuredSpeed order
    rollout_s: float
    accept_len: float
    drains: list[Drain] = field(default_factory=list, repr=False)


def share_of(d: Drain, s: MeasuredShare) -> float:
    bt = batch_time(d)
    return bt.at_least(s.low) if s.high is None else bt.at_most(s.high) - bt.at_most(s.low - 1)


def check_case(item: Item, case: Case, seeds: tuple[int, ...] = SEEDS) -> CaseResult:
    runs = [simulated_rollout(item, case, s) for s in seeds]
    drains = [r.drain for r in runs]
    t, f = [p[0] for p in item.curve], [p[1] for p in item.curve]
    gaps = [gap_to_points(d, t, f) for d in drains]
    shares = tuple(float(np.median([share_of(d, s) for d in drains])) for s in item.shares)
    speeds = tuple(_median_known([r.speeds[i] for r in runs]) for i in range(len(item.speeds)))
    return CaseResult(case.label, float(np.median(gaps)), (min(gaps), max(gaps)), shares, speeds,
                      float(np.median([d.rollout_s for d in drains])),
                      float(np.median([r.accept_len for r in runs])), drains)


def _median_known(values: list[float]) -> float:
    """The median of the values a run has (NaN: no run decoded at that batch)."""
    known = [v for v in values if not np.isnan(v)]
    return float(np.median(known)) if known else float("nan")


def check_item(item: Item, seeds: tuple[int, ...] = SEEDS,
               progress: Callable[[str], None] | None = None) -> list[CaseResult]:
    out = []
    for i, case in enumerate(item.cases):
        if progress:
            progress(f"{item.id}: case {i + 1}/{len(item.cases)} ({case.label})")
        out.append(check_case(item, case, seeds))
    return out
