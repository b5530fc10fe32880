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

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from sim.acceptance import stats_for
from sim.costs import segment_s
from sim.results import PolicyRun
from sim.sweep import sweep
from workbench.calibrate.published import NO_SD, Published, PublishedFit
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile, profile_presets
from workbench.contracts.workload import Workload, load_workload
from workbench.paper.profiles import CASES

# Table A's models -> the evaluation workload presets; systems -> policy presets.
WORKLOADS = {"qwen2.5-7b": "tlt-eval-qwen2.5-7b", "r1-distill-qwen-7b": "tlt-eval-r1-distill-7b",
             "qwen2.5-32b": "tlt-eval-qwen2.5-32b", "llama3.3-70b": "tlt-eval-llama3.3-70b"}
SYSTEMS = {"tlt-base": "tlt-base", "tlt": "tlt"}
BASELINE = "baseline"
BATCH_BUCKETS = (0, 1, 4, 20, 32, 64, 1 << 30)  # FastRL's strategy buckets, then SD off above 32
TABLE_G_WORKLOAD = "qwen2.5-7b"


@dataclass(frozen=True)
class PaperRow:
    table: str
    case: str
    published: float
    predicted: float
    basis: str  # "fit" or "predicted"
    unit: str = "x"

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.published - 1.0)


@dataclass(frozen=True)
class Explanation:
    """What a Table A case's simulation says about where the time goes."""

    case: str
    baseline_step_s: float
    baseline_rollout_share: float  # rollout / step (the paper: ~85%)
    rollout_speedup: float  # for the `tlt` system
    critical_decode_share: dict[str, float] = field(default_factory=dict)  # batch bucket -> share, baseline's slowest engine
    mean_accept_len: float = 1.0  # `tlt`, tokens per sequence-verify pass


@dataclass
class Reproduction:
    rows: list[PaperRow]
    explanations: list[Explanation]
    steps: int
    seeds: list[int]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"table": r.table, "case": r.case, "published": r.published, "predicted": r.predicted,
                              "error_pct": r.error_pct, "basis": r.basis} for r in self.rows])


def fit_rows(fit: PublishedFit, pub: Published) -> list[PaperRow]:
    """Tables C and E: the fitted microbenchmarks, as the shipped profiles reproduce them."""
    rows = [PaperRow("C", f"TV {r.measurement.strategy.verify_tokens}, batch {r.measurement.batch}",
                     r.measurement.value, r.predicted, "fit") for r in fit.rows if r.measurement.table == "C"]
    profile = load_profile(next(c.profile for c in CASES if c.model == pub.table_e_model and c.tp == 1))
    d, ctx, strategy = profile.decode, fit.fitted.context, pub.table_e_strategy
    without = 1.0 / segment_s(d, profile.drafter, "none", 1, ctx, NO_SD)
    accept = stats_for(profile.acceptance, "eagle", 1.0, strategy).mean
    with_sd = accept / segment_s(d, profile.drafter, "eagle", 1, ctx, strategy)
    published_without, published_with = pub.table_e_tokens_per_s
    rows.append(PaperRow("E", "H100 Qwen2.5-7B, without SD", published_without, without, "fit", "tokens/s"))
    rows.append(PaperRow("E", f"H100 Qwen2.5-7B, with SD ({strategy.name})", published_with, with_sd, "fit", "tokens/s"))
    return rows


def _critical_shares(run: PolicyRun) -> dict[str, float]:
    """Per batch bucket, the share of decode time of the engine that finished last, over all steps."""
    tl = run.timeline
    dec = tl[tl["state"].isin(["decode", "decode_sd"])].copy()
    dec["dur"] = dec["end_s"] - dec["start_s"]
    parts = []
    for _, s in dec.groupby("rl_step"):
        last = s.groupby("worker")["end_s"].max().idxmax()
        parts.append(s[s["worker"] == last])
    crit = pd.concat(parts)
    edges = list(BATCH_BUCKETS)
    labels = [(str(hi) if hi == lo + 1 else f"{lo + 1}-{hi}") if hi < (1 << 30) else f">{lo}"
              for lo, hi in zip(edges, edges[1:])]
    share = crit.groupby(pd.cut(crit["batch"], edges, labels=labels), observed=False)["dur"].sum() / crit["dur"].sum()
    return {str(k): round(float(v), 4) for k, v in share.items()}


def fitted_counterpart(profile: str) -> str | None:
    """The paper-fitted preset of a measured-database preset's cluster (`h100-M-tpN-sglang` -> `h100-M-tpN`)."""
    stem = profile.removesuffix("-sglang")
    return stem if stem != profile and stem in profile_presets() else None


def table_a(pub: Published, steps: int, seeds: list[int],
            on_progress: Callable[[str], None] | None = None) -> tuple[list[PaperRow], list[Explanation], dict]:
    """Table A rows, their explanations, and the `tlt` runs per model (Table G reads them)."""
    rows, expl, tlt_runs = [], [], {}
    for model, wl_name in WORKLOADS.items():
        wl = load_workload(wl_name)
        policies = [load_policy(BASELINE)] + [load_policy(p) for p in SYSTEMS.values()]
        # The workload's profile (measured database) predicts; the paper-fitted one of the same
        # cluster runs beside it as a check.
        for prof_name, basis in ((wl.profile, "predicted"), (fitted_counterpart(wl.profile), "check: paper-fitted")):
            if prof_name is None:
                continue
            profile = load_profile(prof_name)
            runs = {(r.policy.name, r.seed): r.run for r in sweep(wl, policies, profile, seeds, steps)}
            base = [runs[(BASELINE, s)] for s in seeds]
            for system, name in SYSTEMS.items():
                pol = [runs[(name, s)] for s in seeds]
                speedup = float(np.mean([b.mean("step_time_s") / p.mean("step_time_s") for b, p in zip(base, pol)]))
                published = next(e.speedup for e in pub.table_a if e.model == model and e.system == system)
                rows.append(PaperRow("A", f"{model}, {system} [{prof_name}]", published, speedup, basis))
            if basis == "predicted":
                measured_runs = (base, runs)
        base, runs = measured_runs
        tlt_runs[model] = [runs[(SYSTEMS["tlt"], s)] for s in seeds]
        expl.append(_explain(model, wl, base, tlt_runs[model]))
        if on_progress:
            on_progress(f"{model}: simulated {len(policies)} policies x {len(seeds)} seed(s) x {steps} steps")
    return rows, expl, tlt_runs


def _explain(model: str, wl: Workload, base: list[PolicyRun], tlt: list[PolicyRun]) -> Explanation:
    b = base[0]
    share = float(np.mean([s.rollout_time_s / s.step_time_s for r in base for s in r.steps]))
    roll = float(np.mean([x.mean("rollout_time_s") / y.mean("rollout_time_s") for x, y in zip(base, tlt)]))
    return Explanation(model, b.mean("step_time_s"), share, roll, _critical_shares(b),
                       float(np.mean([r.mean("mean_accept_len") for r in tlt])))


def table_g(pub: Published, tlt_runs: dict[str, list[PolicyRun]]) -> list[PaperRow]:
    """The `tlt` drafter's accepted length during RL (tokens per sequence-verify pass): in the first
    step (the warm start, aligned with the base model) and after spot training (the later steps)."""
    runs = tlt_runs[TABLE_G_WORKLOAD]
    first = float(np.mean([r.steps[0].mean_accept_len for r in runs]))
    later = float(np.mean([np.mean([s.mean_accept_len for s in r.steps[1:]]) for r in runs if len(r.steps) > 1]))
    return [PaperRow("G", f"{TABLE_G_WORKLOAD}, base-aligned drafter (first step)", pub.table_g["rl_base_aligned"],
                     first, "predicted", "tokens/pass"),
            PaperRow("G", f"{TABLE_G_WORKLOAD}, RL-adapted drafter (later steps)", pub.table_g["rl_adapted"],
                     later, "predicted", "tokens/pass")]


def reproduce(fit: PublishedFit, pub: Published, steps: int = 20, seeds: list[int] | None = None,
              on_progress: Callable[[str], None] | None = None) -> Reproduction:
    seeds = seeds or [0]
    a_rows, expl, tlt_runs = table_a(pub, steps, seeds, on_progress)
    return Reproduction(a_rows + fit_rows(fit, pub) + table_g(pub, tlt_runs), expl, steps, seeds)
