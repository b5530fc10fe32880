"""All together: `calibrate()` runs every fit and assembles the Profile; `Calibration.report()`
is the calibration report `tlt calibrate` writes next to it (docs/formats.md)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import pandas as pd

from workbench.calibrate.captures.acceptance import (
    AcceptanceFit,
    acceptance_model,
    fit_acceptance,
)
from workbench.calibrate.captures.costs import CV_FOLDS, CostFit, ParamFit, fit_costs
from workbench.calibrate.captures.drift import DRIFT_KEY
from workbench.calibrate.captures.probe_drift import normalise_by_probe
from workbench.calibrate.captures.phases import fit_phases
from workbench.calibrate.captures.trace_view import WARMUP_STEPS, fitted_name, step_frame
from workbench.contracts.fileio import jsonable, sig
from workbench.contracts.profile import Profile
from workbench.contracts.trace import Trace
from workbench.contracts.workload import LengthModel, Workload
from workbench.workloads.tobit import TobitFit, fit_tobit

SCHEMA = "tlt-calibration/1"


@dataclass
class Calibration:
    profile: Profile
    lengths: LengthModel | None
    errors: dict[str, float]  # per-part fit errors (see `report`)
    # every fitted-or-kept profile parameter, with the profile's value, in table order
    params: list[ParamFit]
    residuals: pd.DataFrame  # per used engine step: measured, predicted, error
    costs: CostFit
    acceptance: dict[str, AcceptanceFit]
    length_fit: TobitFit | None
    notes: list[str]

    def report(self, base: Profile) -> dict:
        """Everything the fit found, JSON-ready (`tlt calibrate` writes it next to the profile)."""
        c = self.costs
        params = {p.key: {"value": p.value, "base": getattr(getattr(base, p.part), p.name),
                          "fitted": p.fitted,
                          "rel_se": p.rel_se, "why_not_fitted": p.why_not_fitted}
                  for p in self.params}
        lf = self.length_fit
        return jsonable({
            "schema": SCHEMA, "profile": self.profile.name, "base_profile": base.name,
            "fitted_on": list(self.profile.fitted_on), "fit_error_pct": self.profile.fit_error_pct,
            "errors": self.errors, "parameters": params,
            "decode": {"steps_used": c.steps_used, "steps_dropped": c.steps_dropped,
                       "outliers": c.outliers,
                       "knee_tokens": c.knee_tokens, "soft_l1_scale": c.f_scale,
                       "mean_scale": c.mean_scale, "finish_s": c.finish_s,
                       "finish_s_stored": False,  # a Profile has no per-finish cost
                       "warmup_excess_s": c.warmup_excess_s, "mdape_pct": c.mdape_pct,
                       "cv_mdape_pct": c.cv_mdape_pct, "bias_pct": c.bias_pct},
            "acceptance": {k: {"alpha": a.alpha, "shape": a.shape, "shape_fitted": a.shape_fitted,
                               "r": a.r, "offered": a.offered, "r_per_draft": a.r_per_draft,
                               "r_fitted": a.curve(), "sd_steps": a.sd_steps, "rmse": a.rmse,
                               "tokens_per_pass": a.tokens_per_pass}
                           for k, a in self.acceptance.items()},
            "lengths": None if lf is None else {
                "model": {f: getattr(lf.model, f)
                          for f in ("clip_ratio", "sigma", "group_correlation", "mean_accuracy",
                                    "accuracy_concentration", "wrong_factor", "drift_per_step")},
                "fitted": lf.fitted, "responses": lf.responses, "groups": lf.groups, "cap": lf.cap,
                "clip_ratio_observed": lf.clip_ratio_observed,
                "clip_ratio_implied": lf.clip_ratio_implied,
                "median_fit": math.exp(lf.log_median_fit),
                "median_model": math.exp(lf.log_median_model)},
            "notes": self.notes,
        })

    def param_rows(self, base: Profile) -> list[list[str]]:
        """The parameter table: parameter, value, the base's value, how it was set."""
        rows = []
        for p in self.params:
            old = getattr(getattr(base, p.part), p.name)
            se = p.rel_se
            se_text = f" ±{100 * se:.0f}%" if p.fitted and math.isfinite(se) else ""
            how = "fitted" + se_text if p.fitted else "base"
            rows.append([p.key, f"{p.value:.4g}", f"{old:.4g}", how])
        return rows


def _source(traces: Sequence[Trace], base: Profile, costs: CostFit,
            acc_fits: dict[str, AcceptanceFit],
            kept: list[str], warmup_steps: int, target: str) -> str:
    """The profile's `source`: how it was made."""
    names = tuple(fitted_name(t) for t in traces)
    return (f"tlt calibrate on {len(traces)} trace(s) ({', '.join(names)}), {costs.steps_used} "
            "engine steps: decode and drafter costs by a robust (soft-l1, relative residual) "
            f"non-negative least-squares fit of sim/costs.py's form to each step's "
            f"{'wall time plus the gap to the next step' if target == 'cycle' else 'wall time'}, "
            f"1-D search over weights_s/compute (knee {costs.knee_tokens:.0f} tokens), first "
            f"{warmup_steps} steps per engine "
            f"dropped as warm-up; acceptance alpha**(i**shape) fitted per drafter kind "
            f"({', '.join(acc_fits) or 'none traced'}); "
            f"kept from base profile {base.name}: {', '.join(kept) or 'nothing'}. "
            f"fit_error_pct: median |error| of per-step latency on held-out steps ({CV_FOLDS}-fold "
            "cross-validation)")


def _errors(costs: CostFit, acc_fits: dict[str, AcceptanceFit],
            length_fit: TobitFit | None) -> dict[str, float]:
    errors = {"decode_mdape_pct": costs.mdape_pct, "decode_cv_mdape_pct": costs.cv_mdape_pct}
    for kind, a in acc_fits.items():
        errors[f"acceptance_{kind}_rmse"] = a.rmse
    if length_fit:
        gap = length_fit.clip_ratio_observed - length_fit.clip_ratio_implied
        errors["lengths_clip_ratio_gap"] = abs(gap)
    return errors


# Step slowness = probe slowness ** exponent: the candidates `tlt calibrate` tries on captures that
# timed the machine, keeping the one whose fit explains the steps best (1 on a tie).
PROBE_EXPONENTS = (1.0, 0.75, 1.25, 1.5, 1.75, 2.0)


def _normalised_fit(traces: Sequence[Trace], base: Profile, warmup_steps: int, target: str,
                    by_probe: bool = True) -> tuple[list[Trace], float | None, float, CostFit]:
    """The cost fit on the traces brought to one machine speed by their probes, at the exponent
    whose fit has the lowest held-out step error; without probes (or `by_probe` off), the fit on
    the traces as given."""
    best = None
    for exponent in PROBE_EXPONENTS:
        if by_probe:
            normed, probe_ms = normalise_by_probe(traces, exponent)
        else:
            normed, probe_ms = list(traces), None
        costs = fit_costs(step_frame(normed, warmup_steps, target), base)
        if best is None or costs.cv_mdape_pct < best[3].cv_mdape_pct - 0.1:
            best = (normed, probe_ms, exponent, costs)
        if probe_ms is None:  # nothing to warp: one fit is all there is
            break
    return best


def calibrate(traces: Sequence[Trace], base: Profile, name: str | None = None,
              warmup_steps: int = WARMUP_STEPS,
              target: str = "cycle", by_probe: bool = True) -> Calibration:
    """Fit a Profile (on `base`: what the traces cannot identify is kept) and a LengthModel.

    Traces whose captures timed the machine's speed (meta["speed"]) are first scaled to the median
    speed among them (`normalise_by_probe`: each stretch of a capture at its probe's speed), and
    the profile records that speed (`by_probe=False`: the raw times, what not normalising gives)."""
    if not traces:
        raise ValueError("calibration needs at least one trace")
    notes: list[str] = []
    traces, probe_ms, exponent, costs = _normalised_fit(traces, base, warmup_steps, target,
                                                        by_probe)
    if probe_ms is not None:
        factors = ", ".join(f"{t.meta[DRIFT_KEY]['factor']:.3f}" for t in traces)
        notes.append("each trace brought to the traces' median machine speed (speed probe "
                     f"{probe_ms:.2f} ms, step slowness = probe slowness ^ {exponent}: the "
                     f"exponent that fits the steps best; mean factors {factors}; "
                     "workbench/calibrate/captures/probe_drift.py)")
    machines = {json.dumps(t.meta.get("machine"), sort_keys=True, default=str) for t in traces}
    models = {json.dumps(t.meta.get("model"), sort_keys=True, default=str) for t in traces}
    if len(machines) > 1 or len(models) > 1:
        notes.append("the traces come from more than one machine or model: one profile describes "
                     "one engine on one machine")
    scaled = [t.name for t in traces if (t.meta.get("drift") or {}).get("applied")]
    if scaled:
        notes.append(f"times of {len(scaled)} trace(s) scaled by the drift factor their meta "
                     "records (tlt calibrate --model; workbench/calibrate/captures/drift.py): "
                     f"{', '.join(scaled)}")
    decode = costs.decode()
    if decode.overhead_s + decode.weights_s + decode.per_seq_s <= 0:
        decode = replace(decode, overhead_s=base.decode.overhead_s)
        notes.append("the fit found no fixed step cost; overhead_s kept from the base")

    acc_fits = fit_acceptance(traces, base)
    acc, acc_params, acc_notes = acceptance_model(base.acceptance, acc_fits)
    notes += acc_notes
    phases, phase_params = fit_phases(traces, base.phases)
    try:
        length_fit = fit_tobit(traces)
        notes += length_fit.notes
    # a length model the traces cannot support (e.g. every response at the cap)
    except Exception as exc:
        length_fit = None
        notes.append(f"length model not fitted: {exc}")

    params = [*costs.params, *acc_params, *phase_params]
    names = tuple(fitted_name(t) for t in traces)
    source = _source(traces, base, costs, acc_fits, [p.key for p in params if not p.fitted],
                     warmup_steps, target)
    cv = costs.cv_mdape_pct if math.isfinite(costs.cv_mdape_pct) else costs.mdape_pct
    profile = Profile(name=name or f"{base.name}-calibrated", decode=decode,
                      drafter=costs.drafter(), acceptance=acc,
                      learning=base.learning, phases=phases,
                      description=f"Calibrated on {', '.join(names)} (base {base.name}).",
                      source=source, fitted_on=names, fit_error_pct=round(float(cv), 3),
                      speed_probe_ms=None if probe_ms is None else sig(probe_ms),
                      speed_probe_exponent=exponent)
    profile.check()
    # The values as stored (the base's overhead_s where the fit found no fixed step cost).
    params = [replace(p, value=getattr(getattr(profile, p.part), p.name)) for p in params]
    return Calibration(profile, length_fit.model if length_fit else None,
                       _errors(costs, acc_fits, length_fit), params,
                       costs.residuals, costs, acc_fits, length_fit, notes)


def trace_workload_spec(trace: Trace, lengths: LengthModel, profile_path, workload_path,
                        profile_name: str) -> Workload:
    """A Workload with the trace's shape, the fitted length model and the fitted profile (by its
    path, relative to the workload file, as `load_workload` reads it)."""
    eng = trace.meta.get("engine") or {}
    rel = os.path.relpath(Path(profile_path).resolve(), Path(workload_path).resolve().parent)
    wl = Workload(name=f"{profile_name}-workload", profile=rel,
                  workers=int(trace.steps["worker"].nunique()),
                  prompts_per_step=int(trace.meta["prompts"]),
                  group_size=int(trace.meta["samples"]),
                  max_response_tokens=int(trace.meta["max_tokens"]),
                  prompt_tokens=max(1, int(round(float(trace.requests["prompt_tokens"].mean())))),
                  max_batch=int(eng.get("max_num_seqs") or trace.steps["batch_size"].max()),
                  steps=max(1, int(trace.requests["rl_step"].nunique())),
                  gpus_per_worker=int(eng.get("tensor_parallel_size", 1) or 1), lengths=lengths,
                  description=f"Shape of trace {trace.name}; length model fitted by tlt calibrate.",
                  source=f"tlt calibrate (lengths fitted on the traces; profile {profile_name})")
    wl.check()
    return wl
