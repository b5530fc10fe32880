"""The paper's figures beside the simulator's: one row per published number.

Rows are marked by how the simulator's value relates to the published one:
- `fit`: a microbenchmark the GPU profiles were fitted to (Tables C and E): the row shows the
  fit's residual, not a prediction;
- `predicted`: an end-to-end result the simulator predicts from the fitted profiles and the
  pre-registered workloads (Table A), or a quantity of the RL runs it was not fitted to (Table G).

Table A simulates each `tlt-eval-*` workload under `baseline` (veRL, no SD), `tlt-base` (n-gram
drafts, TLT's adaptive rules) and the paper's `tlt`, on the same seeds (common random numbers),
and records what explains each result: the baseline's rollout share of the step and the share of
the slowest engine's decode time per batch bucket (above the SD threshold SD is off).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from sim.acceptance import stats_for
from sim.costs import segment_s
from sim.results import PolicyRun
from sim.sweep import sweep
from workbench.calibrate.published.microbenchmarks import NO_SD, Published, PublishedFit
from workbench.contracts.policy import DrafterKind, load_policy
from workbench.contracts.profile import load_profile, profile_presets
from workbench.contracts.workload import Workload, load_workload
from workbench.paper.calibration import (
    Round,
    Split,
    best_point,
    calibrated,
    evaluate_grid,
    leave_one_out,
    measured_parts,
    simulate_case,
)
from workbench.paper.explain import Explanation, explain
from workbench.paper.measured_lengths import VARIANT, declared, simulate_rows
from workbench.paper.profiles import CASES

# Table A's models -> the evaluation workload presets; systems -> policy presets.
WORKLOADS = {"qwen2.5-7b": "tlt-eval-qwen2.5-7b", "r1-distill-qwen-7b": "tlt-eval-r1-distill-7b",
             "qwen2.5-32b": "tlt-eval-qwen2.5-32b", "llama3.3-70b": "tlt-eval-llama3.3-70b"}
SYSTEMS = {"tlt-base": "tlt-base", "tlt": "tlt"}
BASELINE = "baseline"
TABLE_G_WORKLOAD = "qwen2.5-7b"


@dataclass(frozen=True)
class PaperRow:
    table: str
    case: str
    published: float
    predicted: float
    basis: str  # "fit" or "predicted"
    unit: str = "x"
    # the measured-parts prediction (no fitting); None: not simulated so
    measured_parts: float | None = None
    # under the calibration split (Table A: leave-one-model-out; G: fit on all of A)
    calibrated: float | None = None
    # Table A on measured lengths (workbench/paper/measured_lengths.py); None: the row has none
    measured_lengths: float | None = None

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.published - 1.0)


@dataclass
class Reproduction:
    rows: list[PaperRow]
    explanations: list[Explanation]
    steps: int
    seeds: list[int]
    split: str = ""  # the calibration split's name (empty: not calibrated)
    rounds: list[Round] = field(default_factory=list)
    calib_steps: int = 0
    # Table G's figure counted several ways
    accept_counts: list[AcceptCount] = field(default_factory=list)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"table": r.table, "case": r.case, "published": r.published,
                              "pre-registered": r.predicted,
                              "measured lengths": r.measured_lengths,
                              "measured parts": r.measured_parts, "calibrated (LOO)": r.calibrated,
                              "error_pct": r.error_pct,
                              "lengths_error_pct": _err(r.measured_lengths, r.published),
                              "measured_error_pct": _err(r.measured_parts, r.published),
                              "calibrated_error_pct": _err(r.calibrated, r.published),
                              "basis": r.basis}
                             for r in self.rows])


def _err(value: float | None, published: float) -> float | None:
    return None if value is None else 100.0 * (value / published - 1.0)


def fit_rows(fit: PublishedFit, pub: Published) -> list[PaperRow]:
    """Tables C and E: the fitted microbenchmarks, as the shipped profiles reproduce them."""
    rows = [PaperRow("C", f"TV {r.measurement.strategy.verify_tokens}, batch {r.measurement.batch}",
                     r.measurement.value, r.predicted, "fit") for r in fit.rows
                     if r.measurement.table == "C"]
    profile = load_profile(next(c.profile for c in CASES if c.model == pub.table_e_model
                                and c.tp == 1))
    d, ctx, strategy = profile.decode, fit.fitted.context, pub.table_e_strategy
    without = 1.0 / segment_s(d, profile.drafter, DrafterKind.NONE, 1, ctx, NO_SD)
    accept = stats_for(profile.acceptance, DrafterKind.EAGLE, 1.0, strategy).mean
    with_sd = accept / segment_s(d, profile.drafter, DrafterKind.EAGLE, 1, ctx, strategy)
    published_without, published_with = pub.table_e_tokens_per_s
    rows.append(PaperRow("E", "H100 Qwen2.5-7B, without SD", published_without, without, "fit",
                         "tokens/s"))
    rows.append(PaperRow("E", f"H100 Qwen2.5-7B, with SD ({strategy.name})", published_with,
                         with_sd, "fit", "tokens/s"))
    return rows


def fitted_counterpart(profile: str) -> str | None:
    """The paper-fitted preset of a measured-database preset's cluster (`h100-M-tpN-sglang` ->
    `h100-M-tpN`)."""
    stem = profile.removesuffix("-sglang")
    return stem if stem != profile and stem in profile_presets() else None


def table_a(pub: Published, steps: int, seeds: list[int],
            on_progress: Callable[[str], None] | None = None,
            ) -> tuple[list[PaperRow], list[Explanation], dict]:
    """Table A rows, their explanations, and the `tlt` runs per model (Table G reads them)."""
    rows, expl, tlt_runs = [], [], {}
    for model, wl_name in WORKLOADS.items():
        wl = load_workload(wl_name)
        policies = [load_policy(BASELINE)] + [load_policy(p) for p in SYSTEMS.values()]
        # The workload's profile (measured database) predicts; the paper-fitted one of the same
        # cluster runs beside it as a check.
        for prof_name, basis in ((wl.profile, "predicted"),
                                 (fitted_counterpart(wl.profile), "check: paper-fitted")):
            if prof_name is None:
                continue
            profile = load_profile(prof_name)

            def tick(done: int, total: int, name: str, seed: int, m: str = model,
                     b: str = basis) -> None:
                on_progress(f"{m} ({b}): {name}, seed {seed} ({done}/{total})")

            progress = tick if on_progress else None
            runs = {(r.policy.name, r.seed): r.run
                    for r in sweep(wl, policies, profile, seeds, steps, progress)}
            base = [runs[(BASELINE, s)] for s in seeds]
            for system, name in SYSTEMS.items():
                pol = [runs[(name, s)] for s in seeds]
                speedup = float(np.mean([b.mean("step_time_s") / p.mean("step_time_s")
                                         for b, p in zip(base, pol)]))
                published = next(e.speedup for e in pub.table_a if e.model == model
                                 and e.system == system)
                rows.append(PaperRow("A", f"{model}, {system} [{prof_name}]", published, speedup,
                                     basis))
            if basis == "predicted":
                measured_runs = (base, runs)
        base, runs = measured_runs
        tlt_runs[model] = [runs[(SYSTEMS["tlt"], s)] for s in seeds]
        expl.append(explain(model, wl, base, tlt_runs[model]))
    return rows, expl, tlt_runs


def progress_messages(seeds: int, split: Split | None = None) -> int:
    """How many messages `reproduce` sends its `on_progress` (a page shows the fraction done): one
    per Table A simulation, then with a split one for the measured parts, one per grid point, one
    per held-out model."""
    per_model = sum(2 if fitted_counterpart(load_workload(w).profile) else 1
                    for w in WORKLOADS.values())
    table_a_sims = per_model * (1 + len(SYSTEMS)) * seeds
    lengths = len(declared(list(WORKLOADS))) * (1 + len(SYSTEMS)) * seeds
    return table_a_sims + lengths + (0 if split is None
                                     else 1 + len(split.points()) + len(WORKLOADS))


def _g_values(runs: list[PolicyRun]) -> tuple[float, float]:
    first = float(np.mean([r.steps[0].mean_accept_len for r in runs]))
    later = [np.mean([s.mean_accept_len for s in r.steps[1:]]) for r in runs if len(r.steps) > 1]
    return first, float(np.mean(later)) if later else first


@dataclass(frozen=True)
class AcceptCount:
    """Table G's accepted length counted one way: in the first RL step and over the later ones."""

    how: str
    first: float
    later: float


def _pooled(run: PolicyRun, later: bool, per_engine_step: bool) -> float:
    """Tokens per pass over the run's SD segments (first step, or the later ones pooled): per
    sequence-verify pass (SGLang's scheduler: sum of accepted + 1 over requests and decode steps /
    sum of batch sizes), or per engine step (each decode step weighs the same, whatever its
    batch)."""
    tl = run.timeline
    sd = tl[(tl["state"] == "decode_sd") & ((tl["rl_step"] > 0) if later else (tl["rl_step"] == 0))]
    if sd.empty:
        return float("nan")
    if per_engine_step:
        return float((sd["tokens"] / sd["batch"]).sum() / (sd["passes"] / sd["batch"]).sum())
    return float(sd["tokens"].sum() / sd["passes"].sum())


def accept_counts(runs: list[PolicyRun]) -> list[AcceptCount]:
    """Table G's figure as `tlt paper` reports it (the mean of each step's accepted length), as
    SGLang's scheduler counts it (FastRL's logs: pooled over the SD decode steps, per
    sequence-verify pass), and per engine step (what a mean of per-interval log lines weighted by
    decode steps gives)."""
    today = _g_values(runs)
    out = [AcceptCount("mean of each step's (tlt paper's rows)", *today)]
    for how, per_step in (("SGLang's scheduler: pooled, per sequence-verify pass", False),
                          ("pooled, per engine step (every decode step weighs the same)", True)):
        out.append(AcceptCount(how, float(np.nanmean([_pooled(r, False, per_step) for r in runs])),
                               float(np.nanmean([_pooled(r, True, per_step) for r in runs]))))
    return out


def table_g(pub: Published, tlt_runs: dict[str, list[PolicyRun]]) -> list[PaperRow]:
    """The `tlt` drafter's accepted length during RL (tokens per sequence-verify pass): in the first
    step (the warm start, aligned with the base model) and after spot training (the later steps)."""
    first, later = _g_values(tlt_runs[TABLE_G_WORKLOAD])
    return [PaperRow("G", f"{TABLE_G_WORKLOAD}, base-aligned drafter (first step)",
                     pub.table_g["rl_base_aligned"], first, "predicted", "tokens/pass"),
            PaperRow("G", f"{TABLE_G_WORKLOAD}, RL-adapted drafter (later steps)",
                     pub.table_g["rl_adapted"], later, "predicted", "tokens/pass")]


@dataclass(frozen=True)
class Variant:
    """Table A's speedups and Table G's accepted lengths under one set of inputs."""

    speedups: dict[tuple[str, str], float]  # (model, system) -> speedup
    table_g: tuple[float, float]  # first step, later steps
    rounds: list[Round] = field(default_factory=list)
    explanations: list[Explanation] = field(default_factory=list)


def case_inputs(model: str, params: dict[str, float]) -> tuple[Workload, object]:
    """A Table A case's measured parts, with the split's parameters applied (none: the measured
    parts alone)."""
    wl = load_workload(WORKLOADS[model])
    return calibrated(measured_parts(wl), load_profile(wl.profile), params)


def run_case(model: str, params: dict[str, float], steps: int, seeds: list[int]):
    wl, profile = case_inputs(model, params)
    return simulate_case(model, wl, profile, SYSTEMS, BASELINE, steps, seeds)


def measured_variant(steps: int, seeds: list[int]) -> Variant:
    """The measured-parts prediction: nothing fitted to any end-to-end figure."""
    cases = {m: run_case(m, {}, steps, seeds) for m in WORKLOADS}
    return Variant({(m, s): v for m, c in cases.items() for s, v in c.speedups.items()},
                   _g_values(cases[TABLE_G_WORKLOAD].tlt),
                   explanations=[explain(m, None, c.base, c.tlt, "measured parts")
                                 for m, c in cases.items()])


def published_a(pub: Published) -> dict[tuple[str, str], float]:
    return {(e.model, e.system): e.speedup for e in pub.table_a}


def calibrated_variant(pub: Published, split: Split, steps: int, seeds: list[int], calib_steps: int,
                       on_progress: Callable[[str], None] | None = None) -> Variant:
    """Leave-one-model-out on the split's grid (simulated at `calib_steps`); each held-out model is
    then simulated at `steps` with its round's parameters. Table G under the fit on all four
    models."""
    models = list(WORKLOADS)
    grid = evaluate_grid(split, models,
                         lambda m, p: run_case(m, p, calib_steps, seeds[:1]).speedups, on_progress)
    published = published_a(pub)
    rounds = leave_one_out(grid, published, models)
    speedups, expl = {}, []
    for r in rounds:
        case = run_case(r.held_out, r.params, steps, seeds)
        if on_progress:
            on_progress(f"calibrated: {r.held_out} held out, simulated")
        speedups.update({(r.held_out, s): v for s, v in case.speedups.items()})
        expl.append(explain(r.held_out, None, case.base, case.tlt, "calibrated (held out)"))
    everything = best_point(grid, published, models).params
    return Variant(speedups, _g_values(run_case(TABLE_G_WORKLOAD, everything, steps, seeds).tlt),
                   rounds, expl)


def lengths_variant(steps: int, seeds: list[int],
                    on_progress: Callable[[str], None] | None = None) -> Variant:
    """Table A on measured lengths: each model whose declared workload exists, simulated."""
    cases = simulate_rows(list(WORKLOADS), SYSTEMS, BASELINE, steps, seeds, on_progress)
    return Variant({(m, s): v for m, c in cases.items() for s, v in c.speedups.items()},
                   (float("nan"), float("nan")),
                   explanations=[explain(m, None, c.base, c.tlt, VARIANT)
                                 for m, c in cases.items()])


def _key(r: PaperRow) -> tuple[str, str]:
    """A Table A row's (model, system)."""
    return r.case.split(",")[0], r.case.split(",")[1].split("[")[0].strip()


def _with_lengths(rows: list[PaperRow], lengths: Variant) -> list[PaperRow]:
    return [replace(r, measured_lengths=lengths.speedups.get(_key(r)))
            if r.table == "A" and r.basis == "predicted" else r for r in rows]


def _with_variants(rows: list[PaperRow], measured: Variant | None,
                   calib: Variant | None) -> list[PaperRow]:
    """The pre-registered rows with the measured-parts and calibrated values beside them."""
    out = []
    for r in rows:
        if r.basis != "predicted":
            out.append(r)
            continue
        if r.table == "A":
            key = _key(r)
            mp = measured.speedups[key] if measured else None
            cal = calib.speedups[key] if calib else None
        else:
            i = 0 if "first step" in r.case else 1
            mp = measured.table_g[i] if measured else None
            cal = calib.table_g[i] if calib else None
        out.append(replace(r, measured_parts=mp, calibrated=cal))
    return out


def reproduce(fit: PublishedFit, pub: Published, steps: int = 20, seeds: list[int] | None = None,
              on_progress: Callable[[str], None] | None = None, split: Split | None = None,
              calib_steps: int = 4) -> Reproduction:
    """Pre-registered rows and Table A on measured lengths; with a split, also the measured-parts
    and leave-one-model-out columns."""
    seeds = seeds or [0]
    a_rows, expl, tlt_runs = table_a(pub, steps, seeds, on_progress)
    lengths = lengths_variant(steps, seeds, on_progress)
    expl = expl + lengths.explanations
    rows = _with_lengths(a_rows, lengths) + fit_rows(fit, pub) + table_g(pub, tlt_runs)
    counts = accept_counts(tlt_runs[TABLE_G_WORKLOAD])
    if split is None:
        return Reproduction(rows, expl, steps, seeds, accept_counts=counts)
    measured = measured_variant(steps, seeds)
    if on_progress:
        on_progress("measured parts: simulated")
    calib = calibrated_variant(pub, split, steps, seeds, calib_steps, on_progress)
    return Reproduction(_with_variants(rows, measured, calib),
                        expl + measured.explanations + calib.explanations, steps, seeds, split.name,
                        calib.rounds, calib_steps, counts)
