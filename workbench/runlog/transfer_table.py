"""The transfer table (`tlt runlog transfer`): every shipped log calibrated on its first steps and
checked on its own later steps, then predicting each other log of the same cluster or recipe
(another algorithm, TP, cap, batch, n; across model sizes of one recipe) from those steps alone,
and what TLT would do to each calibrated run.

The logs and how to read them are a manifest (traces/published/verl-runs/transfer.json): each
log's file, the shape flags its log lacks (`gpu`, `arch`, `group_size`), its cluster, its recipe
and its model, and the steps it is fitted on. A pair is every ordered pair of logs sharing a
cluster, a recipe or a model; its kind says what differs beyond the run's settings: "change"
(nothing: the same cluster, backend and model), else the list of what does: "cluster" (another
machine: its GPU, its interconnect, its software), "backend" (another training strategy: FSDP,
FSDP2, Megatron), "model" (another model of about the same size, within SIZE_RATIO in parameters)
or "size" (another size).

The model's error under a change of run (predictive.py MODEL_ERROR) is estimated here: the root
mean square of every pair's median log-errors of the rollout and of the whole step. Each pair's
coverage under the change is computed with that term estimated from the other pairs alone (those
predicting another log): what the pair says never sets its own interval.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.contracts.architecture import load_architecture
from workbench.contracts.policy import load_policy
from workbench.contracts.schema import ConfigError, save
from workbench.contracts.workload import load_workload
from workbench.runlog import calibrate as cal
from workbench.runlog import predictive
from workbench.runlog.prepared import Prepared, prepare
from workbench.runlog.run_workload import run_workloads
from workbench.runlog.shape import ShapeFlags
from workbench.runlog.transfer import LeftOut, predict_with

FLAG_FIELDS = ("gpu", "arch", "group_size", "gpus", "tp", "max_response_tokens")
SIZE_RATIO = 1.5  # models within this ratio of parameters are "about the same size"


@dataclass(frozen=True)
class TableLog:
    path: Path
    cluster: str
    recipe: str
    model: str
    fit_steps: int
    flags: ShapeFlags
    label: str = ""  # the run in words (model, algorithm, GPUs, cap)
    why: str = ""  # why a flag is given (what the log lacks)

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class OwnRow:
    """One log calibrated on its first steps, checked on the rest, and TLT on the run."""

    log: TableLog
    steps: int
    heldout: cal.PhaseErrors
    coverage: predictive.Coverages | None
    tlt: tuple[float, float, float] | None  # end-to-end speedup: value, 90% low, high


@dataclass(frozen=True)
class PairRow:
    source: TableLog
    target: TableLog
    kind: str  # change or size
    result: LeftOut
    model_error: float  # the term its interval took (estimated without its target)


@dataclass(frozen=True)
class TransferTable:
    own: tuple[OwnRow, ...]
    pairs: tuple[PairRow, ...]
    model_error: float  # estimated from every pair
    declared: float  # predictive.MODEL_ERROR


def load_manifest(path: str | Path) -> list[TableLog]:
    """The manifest's logs (module docstring), their paths beside it."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
        out = []
        for e in doc["logs"]:
            flags = ShapeFlags(**{k: e["flags"][k] for k in FLAG_FIELDS if k in e["flags"]})
            out.append(TableLog(p.parent / e["file"], e["cluster"], e["recipe"], e["model"],
                                int(e["fit_steps"]), flags, e.get("label", ""),
                                e.get("why", "")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(str(p), "logs", f"unreadable ({exc})",
                          "a manifest as docs/formats.md describes (logs: file, cluster, recipe, "
                          "model, fit_steps, flags)") from None
    return out


def pair_kind(a: TableLog, b: TableLog, params: tuple[float, float],
              backends: tuple[str, str]) -> str:
    """What differs between two logs beyond the run's settings (module docstring)."""
    out = ["cluster"] if a.cluster != b.cluster else []
    out += ["backend"] if backends[0] != backends[1] else []
    if a.model != b.model:
        out.append("size" if max(params) > SIZE_RATIO * min(params) else "model")
    return ", ".join(out) or "change"


def pairs_of(logs: list[TableLog], params: list[float],
             backends: list[str]) -> list[tuple[int, int, str]]:
    """Every ordered pair sharing a cluster, a recipe or a model, with its kind; `params` and
    `backends`: each log's model's parameters and training strategy."""
    return [(i, j, pair_kind(a, b, (params[i], params[j]), (backends[i], backends[j])))
            for i, a in enumerate(logs) for j, b in enumerate(logs)
            if i != j and (a.cluster == b.cluster or a.recipe == b.recipe or a.model == b.model)]


def _rms(x: list[float]) -> float:
    x = [v for v in x if np.isfinite(v)]
    return float(np.sqrt(np.mean(np.square(x)))) if x else predictive.MODEL_ERROR


def tlt_speedup(c: cal.RunCalibration, seeds: int, steps: int) -> tuple[float, float, float]:
    """TLT's end-to-end speedup on the calibrated run (a sample of its steps, replayed), with the
    calibration's 90% interval: what `tlt compare` prints on the calibrated workload."""
    from workbench.compare.policies import compare
    from workbench.workloads.build import write_workload

    with tempfile.TemporaryDirectory(prefix="tlt-transfer-") as tmp:
        prof_path = Path(tmp) / "calibrated.yaml"
        save(c.profile, prof_path)
        wl, obs = run_workloads(c, "run", prof_path.name)[0]
        write_workload(wl, obs, Path(tmp) / "run.yaml")
        wl = load_workload(Path(tmp) / "run.yaml")
        res = compare(wl, [load_policy("baseline"), load_policy("tlt")], c.profile, seeds,
                      steps=min(steps, wl.steps))
    pi = next(p for p in res.intervals or [] if p.policy == "tlt")
    return pi.speedup.center, pi.speedup.low, pi.speedup.high


def build(logs: list[TableLog], say: Callable[[str], None] = lambda _: None,
          seeds: int = 2, sample_steps: int = 12) -> TransferTable:
    """Every log's own row, every pair (module docstring); `seeds` 0: no TLT simulation."""
    preps: list[Prepared] = []
    own, factors = [], []
    for t in logs:
        say(f"{t.name}: reading and working out its steps, then its calibration ...")
        p = prepare(t.path, t.flags, fit_steps=t.fit_steps)
        preps.append(p)
        c = cal.calibrate(p, t.fit_steps, Path(t.name).stem)
        factors.append(c.profile.run_factors)
        speed = tlt_speedup(c, seeds, sample_steps) if seeds else None
        own.append(OwnRow(t, p.log.steps, c.heldout, c.coverage, speed))
        say(f"{t.name}: held out {c.heldout.gen.median:.1f}% rollout, "
            f"{c.heldout.step.median:.1f}% step")
    pairs = pairs_of(logs, [float(load_architecture(p.shape.arch).params) for p in preps],
                     [p.training.strategy for p in preps])
    raw = {(i, j): predict_with(factors[i], (logs[i].name,), preps[j]) for i, j, _ in pairs}
    biases = {k: [r.gen_log_bias, r.step_log_bias] for k, r in raw.items()}
    rows = []
    for i, j, kind in pairs:
        me = _rms([b for (_, t), v in biases.items() if t != j for b in v])
        res = predict_with(factors[i], (logs[i].name,), preps[j], me)
        rows.append(PairRow(logs[i], logs[j], kind, res, me))
        say(f"{logs[i].name} -> {logs[j].name}: rollout {res.gen.median:.1f}%, step "
            f"{res.step.median:.1f}%")
    every = _rms([b for v in biases.values() for b in v])
    return TransferTable(tuple(own), tuple(rows), every, predictive.MODEL_ERROR)


def _p(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.1f}%"


def _share(c: predictive.Coverages | None, group: str) -> str:
    x = getattr(c, group) if c is not None else None
    return "n/a" if x is None else f"{x.step_share:.0%}"


def table_lines(t: TransferTable) -> list[str]:
    """The two markdown tables and the model-error line (docs/results.md, "Transfer table")."""
    lines = ["| log | run | held-out steps | rollout | update | whole step | each phase | "
             "90% intervals hold (rollout / step) | TLT end to end (90%) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in t.own:
        e = r.heldout
        phases = ", ".join(f"{n} {_p(x.median)}" for n, x in e.phases if n != "gen")
        tlt = "n/a" if r.tlt is None else f"{r.tlt[0]:.2f}x ({r.tlt[1]:.2f}-{r.tlt[2]:.2f}x)"
        lines.append(f"| `{r.log.name}` | {r.log.label} | {e.gen.steps} of {r.steps} (fit on "
                     f"{r.log.fit_steps}) | {_p(e.gen.median)} | {_p(e.update.median)} | "
                     f"{_p(e.step.median)} | {phases} | {_share(r.coverage, 'gen')} / "
                     f"{_share(r.coverage, 'step')} | {tlt} |")
    lines += ["", "| predicted | from the first steps of | kind | rollout (bias) | update | "
              "whole step (bias) | 90% intervals hold (rollout / step) | model error used |",
              "|---|---|---|---|---|---|---|---|"]
    for r in t.pairs:
        x = r.result
        lines.append(f"| `{r.target.name}` | `{r.source.name}` ({r.source.fit_steps}) | "
                     f"{r.kind} | {_p(x.gen.median)} ({x.gen_bias_pct:+.1f}%) | "
                     f"{_p(x.errors.update.median)} | {_p(x.step.median)} "
                     f"({x.step_bias_pct:+.1f}%) | {_share(x.coverage, 'gen')} / "
                     f"{_share(x.coverage, 'step')} | {r.model_error:.3f} |")
    lines += ["", f"Model error under a change of run, from the {len(t.pairs)} pairs' median "
              f"log-errors (rollout and whole step): {t.model_error:.3f} (declared in "
              f"workbench/runlog/predictive.py: {t.declared:.3f}); "
              + "; ".join(f"the {n} pairs {k}: {e:.3f}" for n, k, e in _by_cluster(t)) + "."]
    inside = _medians_inside(t.pairs)
    lines.append(f"The measured median inside its 90% interval under a change (each pair's term "
                 f"estimated without its target): {inside[0]} of {inside[1]} (pair, rollout and "
                 f"whole step); the {len(_same(t.pairs))} pairs of one cluster "
                 f"{_medians_inside(_same(t.pairs))[0]} of {2 * len(_same(t.pairs))}.")
    return lines


def _same(pairs: tuple[PairRow, ...]) -> tuple[PairRow, ...]:
    return tuple(r for r in pairs if not r.kind.startswith("cluster"))


def _by_cluster(t: TransferTable) -> list[tuple[int, str, float]]:
    """The model error from the pairs of one cluster and from those across clusters."""
    def rms(rows: list[PairRow]) -> float:
        return _rms([b for r in rows for b in (r.result.gen_log_bias, r.result.step_log_bias)])

    same = list(_same(t.pairs))
    other = [r for r in t.pairs if r not in same]
    return [(len(rows), name, rms(rows)) for rows, name in ((same, "within one cluster"),
                                                             (other, "across clusters")) if rows]


def _medians_inside(pairs: tuple[PairRow, ...]) -> tuple[int, int]:
    """How many of the pairs' run medians (rollout, whole step) fall inside their intervals."""
    got = [getattr(r.result.coverage, g) for r in pairs for g in ("gen", "step")
           if r.result.coverage is not None]
    return sum(c.median_inside for c in got if c is not None), len(got)


def table_json(t: TransferTable) -> dict:
    def errs(e: cal.PhaseErrors) -> dict:
        return {"gen": e.gen.median, "update": e.update.median, "step": e.step.median,
                "phases": {n: x.median for n, x in e.phases}}

    inside = _medians_inside(t.pairs)
    return {
        "model_error": t.model_error, "declared_model_error": t.declared,
        "model_error_by_cluster": {name: e for _, name, e in _by_cluster(t)},
        "medians_inside": {"inside": inside[0], "of": inside[1]},
        "own": [{"log": r.log.name, "steps": r.steps, "fit_steps": r.log.fit_steps,
                 "heldout_median_abs_error_pct": errs(r.heldout),
                 "coverage": {g: getattr(getattr(r.coverage, g, None), "step_share", None)
                              for g in ("gen", "update", "step")},
                 "tlt_speedup": list(r.tlt) if r.tlt else None} for r in t.own],
        "pairs": [{"target": r.target.name, "source": r.source.name, "kind": r.kind,
                   "median_abs_error_pct": errs(r.result.errors),
                   "gen_bias_pct": r.result.gen_bias_pct, "step_bias_pct": r.result.step_bias_pct,
                   "coverage": {g: getattr(getattr(r.result.coverage, g, None), "step_share",
                                           None) for g in ("gen", "update", "step")},
                   "median_inside": {g: getattr(getattr(r.result.coverage, g, None),
                                                "median_inside", None) for g in ("gen", "step")},
                   "model_error": r.model_error} for r in t.pairs],
    }
