"""A GPU check's measurements (`python -m real.gpu_check`, real/gpu_check/) beside what the
simulator uses today: the measured-database profile of the same GPU, model, TP and framework
(workbench/calibrate/database/profile.py), its draft-step overhead model, and the TLT paper.

- `engine`: every measured decode, verify, drafter and prefill point over the database's own step
  at that point and over the derived profile's prediction of it (what the simulator sees), with
  the median ratio per op and timing mode. The profiler times one rank's operators (one layer x
  layers + head, random weights) with no engine around them: graph-replayed steps are what an
  engine's captured step costs at least, eager ones add the host's launches.
- `draft`: each measured EAGLE draft step (graph and eager) beside the database's drafter kernels
  and the overhead the profiles add per draft step (`draft_overhead_s`, not in the database);
  eager minus graph is the launch cost a step without graphs pays, one part of that overhead.
- `training`: the GRPO update's tokens/s beside the database's forward cost of the same model
  (our step: a no-grad pass and a forward+backward, 4 forwards per token), and spot training's
  samples/s beside the paper's (plain 13.3, packed 29.6) and the profile's drafter tokens/s.
- `changes`: the simulator inputs a profile fitted to the measured engine points
  (workbench/calibrate/captures/operators.py, the database profile as its base, the draft-step
  overhead
  model kept on top) would change, and by how much. Nothing is written unless asked
  (`fitted_profile`): feeding a measurement into a profile is a new, declared profile file.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from real.profiler.table import Measurements
from sim.costs import draft_step_s, verify_step_s
from workbench.calibrate.database.catalog import disk_cached_profile
from workbench.calibrate.gpu_check.check_file import (
    MeasuredCheck,
    arch_spec,
    engine_measurements,
    gpu_key,
)
from workbench.calibrate.gpu_check.throughput import ThroughputRow, drafter_rows, grpo_rows
from workbench.calibrate.database.aiconfigurator import Engine
from workbench.calibrate.database.profile import (
    PROFILE_OVERHEADS,
    draft_overhead_s,
    with_draft_overhead,
)
from workbench.calibrate.captures.operators import fit_operators, predict_point
from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import Profile

# Acceptance and learning curve of the database profiles compared with (not compared themselves).
BASE_PROFILE = "h100-qwen2.5-7b-tp1"
@dataclass(frozen=True)
class PointRatio:
    op: str
    mode: str
    batch: int
    context: int
    tokens: int
    topk: int
    measured_s: float
    database_s: float  # the database's step at this point (drafter: its kernels alone)
    profile_s: float  # the derived profile's prediction (drafter: with the draft-step overhead)

    @property
    def vs_database(self) -> float:
        return self.measured_s / self.database_s

    @property
    def vs_profile(self) -> float:
        return self.measured_s / self.profile_s


@dataclass(frozen=True)
class EngineComparison:
    arch: str
    tp: int
    profile: Profile  # the measured-database profile of (arch, GPU, TP, framework)
    points: list[PointRatio]
    overhead_s: float  # the profile's draft-step overhead (draft_overhead_s of its decode cost)

    def medians(self) -> list[tuple[str, str, int, float, float]]:
        """(op, mode, points, median measured/database, median measured/profile)."""
        keys = sorted({(p.op, p.mode) for p in self.points})
        out = []
        for op, mode in keys:
            ps = [p for p in self.points if (p.op, p.mode) == (op, mode)]
            out.append(
                (
                    op,
                    mode,
                    len(ps),
                    statistics.median(p.vs_database for p in ps),
                    statistics.median(p.vs_profile for p in ps),
                )
            )
        return out


def _database_s(eng: Engine, op: str, b: int, c: int, t: int, k: int) -> float:
    if op == "decode":
        return eng.decode(b, c)[0]
    if op == "verify":
        return eng.verify(b, c, t)[0]
    if op == "drafter":
        return eng.drafter(b, k, c)[0]
    return eng.prefill(t)[0]


def compare_engine(
    m: Measurements, spec: str, tp: int, gpu: str, framework: str
) -> EngineComparison:
    prof = disk_cached_profile(spec, gpu, tp, framework, BASE_PROFILE)
    eng = Engine(spec, gpu, tp, framework, prof.cluster.framework_version if prof.cluster else "")
    rows = m.rows[m.rows["op"].isin(("decode", "verify", "drafter", "prefill"))]
    pts = [
        PointRatio(
            r.op,
            r.mode,
            int(r.batch),
            int(r.context),
            int(r.tokens),
            int(r.topk),
            float(r.step_s),
            _database_s(eng, r.op, int(r.batch), int(r.context), int(r.tokens), int(r.topk)),
            predict_point(prof, r.op, r.batch, r.context, r.tokens, r.topk),
        )
        for r in rows.itertuples()
    ]
    return EngineComparison(
        str(m.meta.get("architecture")), tp, prof, pts, draft_overhead_s(prof.decode)
    )


@dataclass(frozen=True)
class InputChange:
    name: str  # the profile field or the step it sets
    unit: str
    shipped: float  # the measured-database profile's value
    measured: float  # the measurement-fitted profile's value

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.measured / self.shipped - 1.0) if self.shipped else math.nan


def fitted_profile(m: Measurements, base: Profile, name: str, source_file: Path) -> Profile:
    """A profile whose decode, drafter and training costs are fitted to the measured engine points
    (base: the database profile, for what operators cannot measure), with the database profiles'
    draft overheads kept on top (the profiler measures the drafter's kernels only)."""
    fit = fit_operators(m, base, name)
    o = PROFILE_OVERHEADS.scaled(fit.profile.decode)
    prof = with_draft_overhead(fit.profile, o)
    return replace(
        prof,
        source=f"tlt gpu-check --measured {source_file.name}: {prof.source}; the engine's draft "
        f"overheads added as the measured-database profiles do ({1e3 * o.step_s:.3f} ms a draft "
        f"step, {1e3 * o.eagle_pass_s:.3f} ms a pass, {1e3 * o.tree_pass_s:.3f} ms a tree's pass)",
    )


STEPS = (
    ("decode step B=1 C=2048", 1, 2048, 0),
    ("decode step B=64 C=8192", 64, 8192, 0),
    ("verify 48 tokens B=1 C=2048", 1, 2048, 47),
)


def input_changes(shipped: Profile, fitted: Profile) -> list[InputChange]:
    out = [
        InputChange(f"decode.{k}", "s", getattr(shipped.decode, k), getattr(fitted.decode, k))
        for k in (
            "overhead_s",
            "per_seq_s",
            "weights_s",
            "compute_s_per_token",
            "kv_s_per_token",
            "prefill_s_per_token",
        )
    ]
    out += [
        InputChange(f"drafter.{k}", "s", getattr(shipped.drafter, k), getattr(fitted.drafter, k))
        for k in ("eagle_step_s", "eagle_s_per_seq")
    ]
    out += [
        InputChange(
            "phases.train_gpu_s_per_token",
            "s",
            shipped.phases.train_gpu_s_per_token,
            fitted.phases.train_gpu_s_per_token,
        ),
        InputChange(
            "learning.train_tokens_per_s",
            "tokens/s",
            shipped.learning.train_tokens_per_s,
            fitted.learning.train_tokens_per_s,
        ),
    ]
    out += [
        InputChange(
            label,
            "s",
            verify_step_s(shipped.decode, b, c, Strategy.chain(k)),
            verify_step_s(fitted.decode, b, c, Strategy.chain(k)),
        )
        for label, b, c, k in STEPS
    ]
    tree = Strategy(1, 4, 5)
    out.append(
        InputChange(
            "EAGLE draft step B=1 top-k 4",
            "s",
            draft_step_s(shipped.drafter, DrafterKind.EAGLE, 1, tree),
            draft_step_s(fitted.drafter, DrafterKind.EAGLE, 1, tree),
        )
    )
    return out


@dataclass
class Comparison:
    check: MeasuredCheck
    gpu: str  # the database GPU compared with
    framework: str
    notes: list[str] = field(default_factory=list)
    engine: list[EngineComparison] = field(default_factory=list)
    training: list[ThroughputRow] = field(default_factory=list)
    changes: list[InputChange] = field(default_factory=list)
    fitted: Profile | None = None  # fitted to the engine points of `fitted_on` (arch, TP)
    fitted_on: tuple[str, int] | None = None
    skipped: list[str] = field(default_factory=list)  # sections not compared, and why


def _main_engine(meas: dict[tuple[str, int], Measurements]) -> tuple[str, int] | None:
    """The (arch, TP) with decode, verify and prefill points (what a profile is fitted to)."""
    full = [k for k, m in meas.items() if {"decode", "verify", "prefill"} <= set(m.rows["op"])]
    return max(full, key=lambda k: len(meas[k].rows)) if full else None


def _notes(check: MeasuredCheck, gpu: str | None, key: str) -> list[str]:
    measured_gpu = gpu_key(check.machine)
    if check.machine.get("device") != "cuda":
        return [
            f"measured on a CPU ({check.machine.get('cpu')}): the ratios set a CPU beside {key}'s "
            "database rows; they test the pipeline, not a GPU"
        ]
    if measured_gpu is None or (gpu and gpu != measured_gpu):
        return [f"measured on {check.machine.get('gpu')}; compared with the database's {key}"]
    return []


# What the database or a fit may refuse (no rows for a shape, a framework not measured on a GPU,
# too few points): that comparison is skipped with the reason, the others still print.
REFUSED = (ValueError, KeyError, RuntimeError)


def _engines(out: "Comparison", meas: dict[tuple[str, int], Measurements]) -> None:
    check, key, fw = out.check, out.gpu, out.framework
    for (arch, tp), m in meas.items():
        spec = arch_spec(arch, "sections.*.runs.arch", check.path)  # a bad name is a bad file
        try:
            out.engine.append(replace(compare_engine(m, spec, tp, key, fw), arch=arch))
        except REFUSED as exc:
            out.skipped.append(
                f"engine {arch} TP{tp}: no database comparison on {key} {fw} ({exc})"
            )
    main = _main_engine(meas)
    shipped = next((e.profile for e in out.engine if (e.arch, e.tp) == main), None)
    if main is None or shipped is None:
        return
    try:
        out.fitted = fitted_profile(meas[main], shipped, f"measured-{check.path.stem}", check.path)
    except REFUSED as exc:
        out.skipped.append(f"the fit to {main[0]} TP{main[1]}'s engine points: {exc}")
        return
    out.fitted_on, out.changes = main, input_changes(shipped, out.fitted)


def compare(check: MeasuredCheck, gpu: str | None = None, framework: str = "sglang") -> Comparison:
    """Every comparison the file allows (sections that did not finish are listed in `skipped`)."""
    key = gpu or gpu_key(check.machine) or "h100"
    out = Comparison(check, key, framework, notes=_notes(check, gpu, key))
    for name, sec in check.sections.items():
        if sec.get("status") not in ("ok", "partial"):
            out.skipped.append(f"{name}: {sec.get('status')} {sec.get('error') or ''}".strip())
    _engines(out, engine_measurements(check))
    for name, sec in check.sections.items():
        if sec.get("kind") == "grpo" and sec.get("tokens"):
            spec = arch_spec(str(sec.get("model")), f"sections.{name}.model", check.path)
            out.training += grpo_rows(sec, spec, key, framework)
        if sec.get("kind") == "drafter" and sec.get("batch"):
            prof = next(
                (e.profile for e in out.engine if e.arch == sec.get("target") and e.tp == 1), None
            )
            out.training += drafter_rows(sec, prof)
    return out
