"""What a run-log calibration prints of its factors: each with its standard error, its prior and
declared range and why, whether the data identify it (and if not, the measurement that would), the
engine settings the priors rest on, the alternative splits, the intervals' coverage and, with
several logs, each one predicted from the others."""

from __future__ import annotations

import math
from typing import Any

from workbench.contracts.run_factors import RunFactors
from workbench.runlog.engine_config import EngineConfig
from workbench.runlog.fit import Posterior
from workbench.runlog.predictive import Coverage, Coverages
from workbench.runlog.priors import FACTORS, RunPriors
from workbench.runlog.run_profile import SPLIT_NAMES

# What would pin each factor down where one log cannot.
IDENTIFY = {
    "decode_speed": "an engine sweep of the run's engine on the same GPU (`tlt engine-sweep`, then "
                    "--engine-profile), or a `tlt capture` there",
    "step_overhead_s": "a log of the cluster at another response cap (its engine steps change, "
                       "its tokens per step do not), or an engine sweep at batch 1 in the run's "
                       "eager mode",
    "rl_step_s": "a second log of the cluster at another cap or batch (--run-log A --run-log B), "
                 "or veRL's own timing of the weight sync (timing_s/update_weights in newer veRL)",
    "train_speed": "a log of the recipe at another cap or micro-batch (a padded run's tokens "
                   "per micro-batch change, its micro-batches do not)",
    "launch_s": "a log at another micro-batch size (ppo_micro_batch_size[_per_gpu]) or of "
                "a model with another number of layers",
    "gather_s_per_gb": "a log of the recipe on another number of GPUs (its weights gathered "
                       "from more ranks)",
    "offload_s_per_gb": "a log with the offload switched (fsdp_config.param_offload), or a phase "
                        "of the same model with and without it",
    "phase_s": "a log of the recipe at another batch size (its phases' work moves, their "
               "dispatch does not)",
    "reward_s": "a log at another number of responses per step",
}
UNITS = {"decode_speed": ("x", 1.0), "step_overhead_s": (" ms", 1e3), "rl_step_s": (" s", 1.0),
         "train_speed": ("x", 1.0), "launch_s": (" ms", 1e3),
         "gather_s_per_gb": (" s/GB", 1.0),
         "offload_s_per_gb": (" s/GB", 1.0), "phase_s": (" s", 1.0), "reward_s": (" ms", 1e3)}


def _v(name: str, x: float) -> str:
    unit, k = UNITS[name]
    return f"{k * x:.3g}{unit}"


def engine_lines(eng: EngineConfig) -> list[str]:
    """The settings the priors rest on, each with where it was read."""
    shown = [f"{s.name} {s.value}" + (f" ({s.source})" if s.value is not None else "")
             for s in eng.settings if s.value is not None]
    missing = [s.name for s in eng.settings if s.value is None]
    lines = ["engine, as the log says: " + ("; ".join(shown) if shown else "nothing printed")]
    if missing:
        lines.append(f"  not in the log: {', '.join(missing)} (the priors resting on them widen)")
    return lines


def factor_lines(post: Posterior, priors: RunPriors, f: RunFactors) -> list[str]:
    values = f.values
    lines = [f"  {'factor':<16} {'value':>9}  {'+- s.e.':>9}  {'prior':>9}  "
             f"{'declared range':<17} status"]
    unplaced = []
    for j, (name, value) in enumerate(zip(FACTORS, values)):
        pr = priors[name]
        status = post.status(j)
        word = {"identified": "identified by the data",
                "prior": "NOT IDENTIFIED: its prior sets it",
                "edge": f"AT THE {'TOP' if post.z[j] > 0 else 'BOTTOM'} of its range: the data "
                        "pull it further"}[status]
        span = _v(name, pr.lower) + "-" + _v(name, pr.upper)
        lines.append(f"  {name:<16} {_v(name, value):>9}  {_v(name, value * post.sd[j]):>9}  "
                     f"{_v(name, pr.median):>9}  {span:<17} {word}")
        if status != "identified":
            unplaced.append((name, status))
    lines.append("  priors (from what the engine is): " + "; ".join(
        f"{p.name}: {p.why}" for p in priors.factors))
    for name, status in unplaced:
        how = "bounded by its declared range" if status == "edge" else "set by its prior"
        lines.append(f"  {name}: {how}; would identify it: {IDENTIFY[name]}")
    return lines


def split_lines(f: RunFactors, splits: tuple[RunFactors, ...]) -> list[str]:
    lines = ["if the cost the data cannot place were (each within its declared range):"]
    for name, s in zip(SPLIT_NAMES, splits):
        lines.append(f"  {name}: decode {s.decode_speed:.3g}x, {1e3 * s.step_overhead_s:.3g} ms "
                     f"per engine step, {s.rl_step_s:.3g} s per RL step")
    return lines


def coverage_line(label: str, c: Coverages | None) -> list[str]:
    """The intervals' coverage, rollout and whole step (and the model's error added, if any)."""
    if c is None:
        return []
    lines = []
    for name, x in (("rollout", c.gen), ("whole step", c.step)):
        if x is None:
            continue
        lo, hi = x.median_interval
        inside = "inside" if x.median_inside else "OUTSIDE"
        lines.append(f"{label}, {name}: {x.level:.0%} intervals hold {x.step_share:.0%} of "
                     f"{x.steps} steps; median {x.median_measured:.1f} s measured, predicted "
                     f"{x.median_predicted:.1f} s ({x.level:.0%}: {lo:.1f}-{hi:.1f} s, {inside})")
    if c.model_error:
        lines.append(f"  (a change of run: the model's error, log-sd {c.model_error:.3f}, added "
                     "to every interval; workbench/runlog/predictive.py MODEL_ERROR)")
    return lines


def left_out_lines(left_out: tuple) -> list[str]:
    if not left_out:
        return []
    lines = ["LEAVE ONE RUN OUT (fit on the other logs' first steps, every step of the one left "
             "out predicted):"]
    for lo in left_out:
        e = lo.errors
        lines.append(f"  {lo.log} from {', '.join(lo.fitted_on)}: rollout median |error| "
                     f"{e.gen.median:.1f}% (bias {lo.gen_bias_pct:+.1f}%), update "
                     f"{e.update.median:.1f}%, whole step {e.step.median:.1f}% (bias "
                     f"{lo.step_bias_pct:+.1f}%)")
        lines.append("    each phase: " + ", ".join(f"{n} {x.median:.1f}%" for n, x in e.phases))
        lines += ["    " + x for x in coverage_line("intervals", lo.coverage)]
    return lines


def _coverage_one(c: Coverage | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"steps": c.steps, "step_share": round(c.step_share, 4), "level": c.level,
            "median_measured_s": round(c.median_measured, 3),
            "median_predicted_s": round(c.median_predicted, 3),
            "median_interval_s": [round(x, 3) for x in c.median_interval],
            "median_inside": c.median_inside}


def coverage_json(c: Coverages | None) -> dict[str, Any] | None:
    """The rollout's coverage (as before) with the update's and the step's beside it."""
    if c is None:
        return None
    out = _coverage_one(c.gen) or {}
    out.update({"update": _coverage_one(c.update), "step": _coverage_one(c.step),
                "model_error": c.model_error})
    return out


def factor_summary(post: Posterior, priors: RunPriors, f: RunFactors, splits: tuple,
                   coverage: Coverages | None, left_out: tuple) -> dict[str, Any]:
    return {
        "factor_standard_errors": {n: float(f"{v * s:.4g}")
                                   for n, v, s in zip(FACTORS, f.values, post.sd)},
        "factor_status": {n: post.status(j) for j, n in enumerate(FACTORS)},
        "factor_priors": {p.name: {"median": float(f"{p.median:.4g}"),
                                   "range": [float(f"{p.lower:.4g}"), float(f"{p.upper:.4g}")]}
                          for p in priors.factors},
        "splits": {name: {"decode_speed": s.decode_speed, "step_overhead_s": s.step_overhead_s,
                          "rl_step_s": s.rl_step_s} for name, s in zip(SPLIT_NAMES, splits)},
        "heldout_coverage": coverage_json(coverage),
        "leave_one_out": [{"log": lo.log, "fitted_on": list(lo.fitted_on),
                           "gen_median_abs_error_pct": _r(lo.gen.median),
                           "update_median_abs_error_pct": _r(lo.errors.update.median),
                           "step_median_abs_error_pct": _r(lo.step.median),
                           "gen_bias_pct": _r(lo.gen_bias_pct),
                           "step_bias_pct": _r(lo.step_bias_pct),
                           "phase_median_abs_error_pct": {n: _r(x.median)
                                                          for n, x in lo.errors.phases},
                           "coverage": coverage_json(lo.coverage)}
                          for lo in left_out],
    }


def _r(x: float) -> float | None:
    return None if not math.isfinite(x) else round(float(x), 2)
