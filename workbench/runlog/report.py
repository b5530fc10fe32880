"""What `tlt calibrate --run-log` and `tlt validate --run-log` print and write: the shape and
where it came from, the factors, the errors (fit and held out, median and p90), the baselines, the
drift, the per-step JSON and the predicted-against-measured figure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from workbench.contracts.profile import Profile
from workbench.contracts.training_shape import Offload
from workbench.runlog.calibrate import RunCalibration, RunValidation
from workbench.runlog.engine import Predicted
from workbench.runlog import factor_report as fr
from workbench.runlog.errors import Errors, PhaseErrors
from workbench.runlog.log_report import framework_lines, framework_summary, running_check
from workbench.runlog.prepared import Prepared
from workbench.runlog.sd_acceptance import lines as sd_lines

SCHEMA = "tlt-runlog/1"
PHASES = (
    ("gen", "rollout (timing_s/gen)"),
    ("update", "update (the rest of the step)"),
    ("step", "whole step (testing and checkpoints out)"),
)


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1f}%"


def shape_lines(p: Prepared) -> list[str]:
    s, sk = p.shape, p.log.skipped
    lines = [
        f"read {p.log.path}: {p.log.steps} timed steps ({p.log.kind}"
        + (", older timing/ names read as timing_s/" if p.log.old_names else "")
        + f"); {sk.describe()}",
        f"shape: {s.engines} engines = {s.gpus} GPUs / TP{s.tp}, {s.prompts_per_step} prompts x "
        f"{s.group_size}, cap {s.max_response_tokens}, batch cap {s.max_batch}, {s.framework}",
    ]
    lines += framework_lines(p.log, p.stats)
    lines += [f"  {t.field:<20} {t.value:<34} <- {t.source}" for t in s.taken]
    lines += training_lines(p)
    lines.append(
        f"engine: {p.database.name} (measured database; what its attention rows cover for this "
        "shape: the profile's source)"
    )
    ln = p.lengths
    lines += running_check(p.log, ln, p.work.passes, s.engines)
    lines.append(
        f"lengths: each step's modelled from its mean, max, min and clip ratio; "
        f"{int((ln.at_cap > 0).sum())} steps have responses at the cap (their body's spread: the "
        f"run's median {ln.pooled_spread:.3f})"
    )
    return lines


def training_lines(p: Prepared) -> list[str]:
    """How the run trains, as the log says (workbench/runlog/training.py; another framework's
    reader: workbench/runlog/frameworks/train_config.py)."""
    t = p.training
    lines = [f"training: {t.strategy}, {t.gpus} GPUs (TP{t.tp} PP{t.pp} DP{t.dp}), sequences "
             + ("packed" if t.remove_padding else
                f"padded to {t.max_prompt_tokens} + {t.max_response_tokens} tokens")
             + (", logits padded back to the caps" if t.logits_padded else "")
             + (", old log-probs inside the rollout's timer" if t.log_probs_in_gen else "")]
    for m in t.models:
        lines.append(f"  model {m.role:<7} {m.arch}" + (" (value head)" if m.value_head else "")
                     + (", checkpointing" if m.checkpointing else "")
                     + (f", LoRA rank {m.lora_rank}" if m.lora_rank else "")
                     + (f", weights offloaded ({m.param_offload})"
                        if m.param_offload != Offload.NONE else "")
                     + (", optimizer offloaded" if m.optimizer_offload else ""))
    for ph in t.phases:
        size = (f"{ph.micro_batch} sequences" if ph.micro_batch else
                f"dynamic, {ph.max_tokens} tokens")
        lines.append(f"  phase {ph.phase:<14} {ph.role:<6} micro-batch {size} per GPU"
                     + (f", update x {ph.epochs} epoch(s), {ph.mini_batches} optimizer steps"
                        if ph.update else ""))
    lines += [f"    {x.field:<52} {x.value:<10} <- {x.source}" for x in t.taken]
    return lines


def _errors_row(label: str, e: Errors) -> str:
    return f"{label:<44} median {_pct(e.median):>6}  p90 {_pct(e.p90):>6}  ({e.steps} steps)"


def error_lines(errors: PhaseErrors, what: str) -> list[str]:
    """The rollout, the update and the step, then each phase the log times."""
    out = [_errors_row(f"{name} {what}", getattr(errors, key)) for key, name in PHASES]
    out += [_errors_row(f"  timing_s/{n} {what}", e) for n, e in errors.phases if n != "gen"]
    return out


def calibration_lines(cal: RunCalibration) -> list[str]:
    p = cal.prepared
    lines = fr.engine_lines(p.engine)
    lines.append(f"factors: a MAP under their priors, fitted on the first {cal.fit_steps} steps "
                 f"only ({p.steps[0]}-{p.steps[cal.fit_steps - 1]}"
                 + (f", and of {len(cal.also)} more log(s)" if cal.also else "") + "):")
    lines += fr.factor_lines(cal.posterior, p.priors, cal.profile.run_factors)
    lines += fr.split_lines(cal.profile.run_factors, cal.splits)
    lines += error_lines(cal.fitted, "fit") + error_lines(cal.heldout, "HELD OUT")
    lines += fr.coverage_line("held out", cal.coverage)
    for lf in cal.also:  # the other logs fitted alongside, each over its own engine
        lines.append(f"{Path(lf.prepared.log.path).name} ({lf.prepared.database.name}):")
        lines += error_lines(lf.fitted, "  fit") + error_lines(lf.heldout, "  HELD OUT")
        lines += ["  " + x for x in fr.coverage_line("held out", lf.coverage)]
    lines += fr.left_out_lines(cal.left_out)
    b = cal.baselines
    lines.append(_errors_row("baseline: first steps' median gen, held out", b.first_median))
    lines.append(_errors_row("baseline: gen linear in mean length, held out", b.linear_mean))
    lines += tail_lines(cal) + sd_lines(cal.acceptance)
    lines.append("held-out error by block of steps, then the last 200 (drift shows as a trend):")
    lines += [
        f"  steps {r.first_step}-{r.last_step}: gen median {_pct(r.gen.median)} "
        f"p90 {_pct(r.gen.p90)}, bias {r.gen_bias_pct:+.1f}%; step median {_pct(r.step.median)}"
        for r in cal.drift
    ]
    return lines


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1]) if np.std(a) > 0 and np.std(b) > 0 else math.nan


def tail_lines(cal: RunCalibration) -> list[str]:
    """What moves the predicted rollout over the held-out steps (the longest response or the mean),
    and the held-out rollout error split by whether the step's longest response hit the cap."""
    p, held = cal.prepared, slice(cal.fit_steps, None)
    pred, meas = cal.predicted.gen_s[held], p.measured.gen_s[held]
    top, mean = p.stats.max[held], p.stats.mean[held]
    capped = top >= p.shape.max_response_tokens
    lines = [f"predicted rollout vs the step's longest response: correlation "
             f"{_corr(pred, top):.2f}; vs its mean length: {_corr(pred, mean):.2f} (held out)"]
    for label, rows in (("held out, longest at the cap", capped),
                        ("held out, longest below the cap", ~capped)):
        lines.append(_errors_row(label, Errors.of(pred[rows], meas[rows])))
    return lines


def _phase_fields(prefix: str, errors: PhaseErrors) -> dict[str, Any]:
    out = {}
    for key, _ in PHASES:
        e = getattr(errors, key)
        out[f"{key}_{prefix}median_abs_error_pct"] = _round(e.median)
        out[f"{key}_{prefix}p90_abs_error_pct"] = _round(e.p90)
    out[f"phases_{prefix}median_abs_error_pct"] = {n: _round(e.median) for n, e in errors.phases}
    return out


def _round(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 2)


def calibration_summary(cal: RunCalibration) -> dict[str, Any]:
    """The JSON line `tlt calibrate --run-log` ends with."""
    f = cal.profile.run_factors
    return {
        "steps": int(cal.prepared.log.steps),
        "fit_steps": cal.fit_steps,
        **_phase_fields("heldout_", cal.heldout),
        **_phase_fields("fit_", cal.fitted),
        "baseline_first_median_gen_heldout_median_abs_error_pct": _round(
            cal.baselines.first_median.median
        ),
        "baseline_linear_mean_gen_heldout_median_abs_error_pct": _round(
            cal.baselines.linear_mean.median
        ),
        "factors": {**dict(zip(f.names, f.values)), "train_forwards": f.train_forwards},
        "model_error": f.model_error,
        **fr.factor_summary(cal.posterior, cal.prepared.priors, f, cal.splits, cal.coverage,
                            cal.left_out),
        "also": [{"log": lf.prepared.log.path, "steps": int(lf.prepared.log.steps),
                  **_phase_fields("heldout_", lf.heldout), **_phase_fields("fit_", lf.fitted)}
                 for lf in cal.also],
        "framework": framework_summary(cal.prepared.log, cal.acceptance),
    }


def validation_summary(v: RunValidation) -> dict[str, Any]:
    """The JSON line `tlt validate --run-log` ends with."""
    e = v.errors
    return {
        "steps": int(v.prepared.log.steps),
        "in_sample": v.in_sample,
        "gen_median_abs_error_pct": _round(e.gen.median),
        "gen_p90_abs_error_pct": _round(e.gen.p90),
        "update_median_abs_error_pct": _round(e.update.median),
        "update_p90_abs_error_pct": _round(e.update.p90),
        "step_median_abs_error_pct": _round(e.step.median),
        "step_p90_abs_error_pct": _round(e.step.p90),
        "gen_bias_pct": _round(_bias(v.predicted.gen_s, v.prepared.measured.gen_s)),
        "step_bias_pct": _round(_bias(v.predicted.step_s, v.prepared.measured.step_s)),
        "phases_median_abs_error_pct": {n: _round(x.median) for n, x in e.phases},
        **(_phase_fields("heldout_", v.heldout) if v.heldout is not None else {}),
        "coverage": fr.coverage_json(v.coverage),
    }


def _bias(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(meas) & (meas > 0)
    return float(np.median((pred[ok] - meas[ok]) / meas[ok]) * 100) if ok.any() else math.nan


def per_step(p: Prepared, pred: Predicted) -> dict[str, list]:
    """Per step, predicted and measured (the app draws these; NaN as None)."""

    def clean(a: np.ndarray) -> list:
        return [None if not np.isfinite(x) else round(float(x), 4) for x in a]

    m = p.measured
    return {
        "step": [int(s) for s in p.steps],
        "gen_predicted_s": clean(pred.gen_s),
        "gen_measured_s": clean(m.gen_s),
        "update_predicted_s": clean(pred.update_s),
        "update_measured_s": clean(m.update_s),
        "step_predicted_s": clean(pred.step_s),
        "step_measured_s": clean(m.step_s),
        "mean_length": clean(p.stats.mean),
        "max_length": clean(p.stats.max),
    }


def calibration_document(cal: RunCalibration) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "log": cal.prepared.log.path,
        "profile": cal.profile.name,
        "summary": calibration_summary(cal),
        "per_step": per_step(cal.prepared, cal.predicted),
        "shape": [
            {"field": t.field, "value": t.value, "source": t.source}
            for t in cal.prepared.shape.taken
        ],
    }


def figure(p: Prepared, pred: Predicted, fit_steps: int, title: str) -> Figure:
    """Predicted against measured per step: rollout, update, whole step (the fitted steps
    shaded)."""
    fig = Figure(figsize=(11, 8))
    axes = fig.subplots(3, 1, sharex=True)
    x = p.steps
    for ax, (key, label) in zip(axes, PHASES):
        ax.plot(x, getattr(p.measured, f"{key}_s"), ".", ms=2, color="0.35", label="measured")
        ax.plot(
            x,
            getattr(pred, f"{key}_s"),
            "-",
            lw=0.8,
            color="tab:blue",
            label="predicted (simulated)",
        )
        if fit_steps:
            ax.axvspan(x[0], x[fit_steps - 1], color="tab:orange", alpha=0.12, label="fitted on")
        ax.set_ylabel(f"{label.split(' (')[0]} s")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(title, fontsize=10)
    axes[-1].set_xlabel("RL step")
    fig.tight_layout()
    return fig


def measured_vs_modelled(profile: Profile, wl=None, steps: int = 0, seeds: int = 0) -> list[str]:
    """For `tlt compare` on a run-log calibration: what it simulated of the run, and which parts
    are measured and which modelled."""
    f = profile.run_factors
    if f is None:
        return []
    what = []
    if wl is not None and wl.lengths.kind == "replay":
        which = wl.description.rsplit("; ", 1)[-1]
        what = [f"simulated: {steps} steps x {seeds} seed(s) of the run ({which}; seed 0 replays "
                "those steps' modelled lengths, other seeds redraw them within each step); the "
                "whole run: the workload's -full twin"]
    return what + [
        f"measured (the run's log, {f.fitted_on}): the step times the factors were fitted to "
        f"(decode {f.decode_speed:.3g}x the database, +{1e3 * f.step_overhead_s:.3g} ms per engine "
        f"step, {f.rl_step_s:.3g} s per RL step, update {f.train_speed:.3g}x) and each step's "
        "length statistics (the lengths themselves modelled from them)",
        "modelled, not in the log: SD's acceptance and the drafter's learning curve (the profile's "
        "acceptance model), the drafter's cost (the database's x the decode factor), spot training "
        "on idle engines",
    ]
