"""The engine of a traced agentic run, where no measured database holds it: a measured profile
carried to the trace's GPU by datasheet ratios, then run-level factors fitted on some of the trace's
steps (the others are predictions). The factors, their ranges and priors: engine_factors.py.

The fit is the MAP of a concentrated Gaussian likelihood of log moments of the fit steps (the median
turn latency at each turn index, then each step's makespan): n log(SSR) plus each prior's -2 log
density, inside the declared ranges. Standard errors: the sandwich A^-1 (J'SJ / s^4 + P) A^-1,
A = J'J / s^2 + P, J the moments' Jacobian in the log factors (central differences), s^2 = SSR / n
at the fit, S the moments' covariance from a bootstrap over the trace's prompt groups (fixed seed),
P the priors' precisions in log space (a flat factor's: a log-uniform over its range's). A factor
is not identified by the trace (its prior, or flat, its range, sets it) where its s.e. is
IDENTIFIED_RATIO of its prior's sd or more, or, for a factor with a prior, where the trace is
explained about as well without it (switched off at its range's bottom, the others refitted: the
data term worse by under NEEDED). The second test sees what the first cannot: the moments of a
simulated trace are rough, and a factor whose local s.e. is small may still trade, along a ridge
with the others, against its absence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from workbench.calibrate.database.catalog import default_base_profile, disk_cached_profile
from workbench.calibrate.database.aiconfigurator import gpu_names
from workbench.calibrate.published.shapes import DATASHEETS, GPU
from workbench.contracts.cluster import Cluster
from workbench.contracts.profile import Profile
from workbench.contracts.trace_fit import STATUS_WORDS, FittedFactor, TraceFit
from workbench.contracts.workload import Workload
from workbench.validate.agentic_trace import matched, measured_steps
from workbench.validate.engine_factors import FIT_FACTORS, FactorSpec, factor_specs, with_factors

MIN_TURNS = 30  # a turn index enters the moments where the fit steps hold this many of its turns
BOOTSTRAP = 200
BOOTSTRAP_SEED = 45
STEP_H = 0.05  # the Jacobian's step in the log factors
IDENTIFIED_RATIO = 0.7  # as the run-log fit's (workbench/runlog/fit.py)
EDGE = 0.02  # within this (in log) of a range's end: at its edge
RESTARTS, RESTART_GAIN = 3, 0.05  # the simplex restarted from its answer (objective units)
MIN_S2 = 1e-8  # the moments' error variance floor (a trace the engine reproduces exactly)
# How much worse (in -2 log likelihood, n log SSR) the trace must be explained with a factor
# switched off for the trace to need it: chi-square's 95% point at one degree of freedom.
NEEDED = 3.84


@dataclass(frozen=True)
class EngineFit:
    fit: TraceFit
    evaluations: int

    def value(self, name: str) -> float:
        return self.fit.factor(name).value

    def values(self) -> dict[str, float]:
        return {f.name: f.value for f in self.fit.factors}

    def lines(self) -> list[str]:
        specs = factor_specs()
        out = []
        for f in self.fit.factors:
            s = specs[f.name]
            out.append(f"{f.name} {f.value / s.unit:.4g} {s.unit_name} (se {f.se / s.unit:.3g}; "
                       f"range {f.low / s.unit:g}-{f.high / s.unit:g} {s.unit_name}; "
                       f"{STATUS_WORDS[f.status]})")
        out.append(f"fitted on step(s) {list(self.fit.fit_steps)} in {self.evaluations} "
                   f"simulations; moments' rms log error {self.fit.moments_rms:.3f}")
        return out


def carried(profile: Profile, src: GPU, dst: GPU, name: str) -> Profile:
    """`profile` (measured on `src`) on `dst`: what reads memory scales with the bandwidths, what
    computes (and trains) with the peak FLOP rates; acceptance, the learning curve's shape and
    the weight sync stay; the power is dropped (the board's watts are another GPU's)."""
    bw, fl = src.hbm_bytes_per_s / dst.hbm_bytes_per_s, src.bf16_flops / dst.bf16_flops
    d, dr, ph = profile.decode, profile.drafter, profile.phases
    dec = replace(d, weights_s=_sig(d.weights_s * bw), kv_s_per_token=_sig(d.kv_s_per_token * bw),
                  compute_s_per_token=_sig(d.compute_s_per_token * fl),
                  prefill_s_per_token=_sig(d.prefill_s_per_token * fl))
    drafter = replace(dr, eagle_step_s=_sig(dr.eagle_step_s * bw),
                      eagle_s_per_seq=_sig(dr.eagle_s_per_seq * fl))
    phases = replace(ph, train_gpu_s_per_token=_sig(ph.train_gpu_s_per_token * fl))
    learning = replace(profile.learning,
                       train_tokens_per_s=_sig(profile.learning.train_tokens_per_s / fl))
    # The board's watts are another GPU's: no energy is reported rather than a wrong one.
    return replace(profile, name=name, decode=dec, drafter=drafter, phases=phases,
                   learning=learning, power=None,
                   description=f"{profile.description}; carried to the {dst.name} by datasheet "
                               "ratios")


def _sig(x: float) -> float:
    """Fixed precision: a derived file reads the same on any machine of our kind."""
    return float(f"{x:.5g}")


def _indices(m: pd.DataFrame) -> list[int]:
    counts = m["turn"].value_counts()
    return sorted(int(k) for k, n in counts.items() if n >= MIN_TURNS)


def moments(m: pd.DataFrame, turns: list[int], latency: str, tool: str) -> np.ndarray:
    """Log median latency at each turn index, then each step's log makespan."""
    med = [math.log(m.loc[m["turn"] == k, latency].median()) for k in turns]
    total = m.assign(t=m[latency] + m[tool].fillna(0.0))
    span = total.groupby(["batch", "group", "member"])["t"].sum().groupby(level=0).max()
    return np.array(med + [math.log(v) for v in span.to_numpy()])


def _residual(m: pd.DataFrame, turns: list[int]) -> np.ndarray:
    return moments(m, turns, "latency", "tool_sim") - moments(m, turns, "engine_s", "tool_s")


def _bootstrap_cov(m: pd.DataFrame, turns: list[int]) -> np.ndarray:
    """The residual moments' covariance over resampled prompt groups (each step's own)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    groups = m.groupby(["batch", "group"]).indices
    by_batch: dict[int, list[np.ndarray]] = {}
    for (b, _), rows in groups.items():
        by_batch.setdefault(int(b), []).append(rows)
    draws = []
    for _ in range(BOOTSTRAP):
        rows = []
        for b in sorted(by_batch):
            pick = rng.integers(len(by_batch[b]), size=len(by_batch[b]))
            rows += [by_batch[b][i] for i in pick]
        s = m.iloc[np.concatenate(rows)]
        # a resampled group appears more than once: number its copies apart
        s = s.assign(member=s["member"] + 1000 * s.groupby(KEY_ROWS).cumcount())
        draws.append(_residual(s, turns))
    return np.cov(np.array(draws).T)


KEY_ROWS = ["batch", "group", "member", "turn"]


class _Objective:
    """-2 log posterior (up to a constant) of the factors `names` (log values) on the fit steps'
    moments: n log(SSR) (the data) plus the priors' penalties, inside the declared ranges."""

    def __init__(self, workload: Workload, profile: Profile, names: tuple[str, ...],
                 fit_steps: list[int], progress: Callable[[str], None] | None):
        all_specs = factor_specs()
        if not names or len(set(names)) != len(names) or not set(names) <= set(all_specs):
            raise ValueError(f"--fit-factors {','.join(names) or '<none>'}: allowed: one or more "
                             f"of {', '.join(all_specs)}, each once")
        self.workload, self.profile, self.names, self.steps = workload, profile, names, fit_steps
        self.specs = [all_specs[n] for n in names]
        self.lo = np.log([s.low for s in self.specs])
        self.hi = np.log([s.high for s in self.specs])
        self.measured = measured_steps(workload)
        self.progress, self.turns, self.n = progress, None, 0

    def frame(self, theta: np.ndarray) -> pd.DataFrame:
        x = np.exp(np.clip(theta, self.lo, self.hi))
        prof = with_factors(self.profile, dict(zip(self.names, x)))
        return matched(self.workload, prof, self.measured, self.steps)

    def residual(self, theta: np.ndarray) -> np.ndarray:
        self.n += 1
        m = self.frame(theta)
        if self.turns is None:
            self.turns = _indices(m)
        return _residual(m, self.turns)

    @staticmethod
    def data(r: np.ndarray) -> float:
        return len(r) * math.log(float(r @ r) + len(r) * MIN_S2)

    def __call__(self, theta: np.ndarray) -> float:
        r = self.residual(theta)
        if self.progress and self.n % 20 == 0:
            self.progress(f"  fit: {self.n} simulations, rms log error "
                          f"{math.sqrt(float(np.mean(r * r))):.3f}")
        inside = np.clip(theta, self.lo, self.hi)
        priors = sum(s.prior.penalty(t) for s, t in zip(self.specs, inside) if s.prior)
        outside = np.maximum(0, theta - self.hi) + np.maximum(0, self.lo - theta)
        return self.data(r) + priors + 100 * float(np.sum(outside))

    def without(self, theta: np.ndarray, j: int) -> float:
        """The data term with factor j switched off (at its range's bottom), the others refitted
        from `theta`."""
        def pinned(t: np.ndarray) -> float:
            return self(np.insert(t, j, self.lo[j]))
        rest = _minimise(pinned, np.delete(theta, j), first_step=0.15)
        return self.data(self.residual(np.insert(rest, j, self.lo[j])))


def fit_engine(workload: Workload, profile: Profile, fit_steps: list[int],
               names: tuple[str, ...] = FIT_FACTORS,
               progress: Callable[[str], None] | None = None) -> EngineFit:
    """The factors `names` on `profile` (already carried to the trace's GPU) that explain the fit
    steps' turn latencies and makespans best under their priors."""
    obj = _Objective(workload, profile, names, fit_steps, progress)
    theta = _minimise(obj, np.log([s.start for s in obj.specs]))
    r = obj.residual(theta)
    jac = np.column_stack([(obj.residual(theta + STEP_H * e) - obj.residual(theta - STEP_H * e))
                           / (2 * STEP_H) for e in np.eye(len(names))])
    cov = _sandwich(jac, r, _bootstrap_cov(obj.frame(theta), obj.turns), obj.specs,
                    np.exp(theta))
    # A factor with a prior the trace cannot tell from none (switched off, the others refitted,
    # the data explained about as well): its prior, not the trace, sets it.
    needed = {}
    for j, s in enumerate(obj.specs):
        if s.prior is not None and len(names) > 1:
            if progress:
                progress(f"  fit: does the trace need {s.name}? (refitting without it)")
            worse = obj.without(theta, j) - obj.data(r)
            needed[j] = worse >= NEEDED
            if progress:
                progress(f"  fit: without {s.name}, -2 log likelihood {worse:+.1f} (the trace "
                         f"needs it from +{NEEDED:g})")
    fit = TraceFit(_factors(obj, theta, cov, needed),
                   tuple(tuple(float(f"{v:.4g}") for v in row) for row in cov),
                   tuple(fit_steps), round(math.sqrt(float(np.mean(r * r))), 5))
    return EngineFit(fit, obj.n)


def _minimise(objective: Callable[[np.ndarray], float], x0: np.ndarray,
              first_step: float = 1.0) -> np.ndarray:
    """Nelder-Mead from `x0` (steps of `first_step` in each log factor), then again from its answer
    with small steps until a restart gains under RESTART_GAIN (at most RESTARTS): a simulated
    objective has flat stretches and steps a single simplex stalls on."""
    k = len(x0)
    opts = {"xatol": 0.005, "fatol": 1e-4}
    res = minimize(objective, x0, method="Nelder-Mead",
                   options=opts | {"maxfev": 70 * k,
                                   "initial_simplex": [x0, *(x0 + first_step * np.eye(k))]})
    for _ in range(RESTARTS):
        again = minimize(objective, res.x, method="Nelder-Mead",
                         options=opts | {"maxfev": 30 * k,
                                         "initial_simplex": [res.x, *(res.x + 0.15 * np.eye(k))]})
        gain, res = res.fun - again.fun, (again if again.fun < res.fun else res)
        if gain < RESTART_GAIN:
            break
    return res.x


def _sandwich(jac: np.ndarray, r: np.ndarray, boot: np.ndarray, specs: list[FactorSpec],
              x: np.ndarray) -> np.ndarray:
    """The factors' covariance in log space (module docstring)."""
    s2 = max(float(r @ r) / len(r), MIN_S2)
    prec = np.diag([1.0 / s.prior_log_sd(v) ** 2 for s, v in zip(specs, x)])
    bread = np.linalg.inv(jac.T @ jac / s2 + prec)
    return bread @ (jac.T @ boot @ jac / s2 ** 2 + prec) @ bread


def _factors(obj: _Objective, theta: np.ndarray, cov: np.ndarray,
             needed: dict[int, bool]) -> tuple[FittedFactor, ...]:
    out = []
    for j, s in enumerate(obj.specs):
        t = float(np.clip(theta[j], obj.lo[j], obj.hi[j]))
        x, se_log = math.exp(t), math.sqrt(max(cov[j, j], 0.0))
        if min(t - obj.lo[j], obj.hi[j] - t) < EDGE:
            status = "edge"
        elif se_log >= IDENTIFIED_RATIO * s.prior_log_sd(x) or not needed.get(j, True):
            status = "prior"
        else:
            status = "identified"
        out.append(FittedFactor(s.name, float(f"{x:.4g}"), float(f"{x * se_log:.2g}"), s.low,
                                s.high, status, s.prior_words()))
    return tuple(out)


def database_gpu(gpu: str) -> str:
    """The measured GPU a profile of `gpu` is carried from: itself where the database holds it,
    else the H100 (datasheet ratios, `carried`)."""
    return gpu if gpu in gpu_names() else "h100"


def carried_engine(workload: Workload, name: str = "") -> tuple[Profile, str]:
    """The measured database's costs for the workload's model, TP and framework, on its GPU (on
    the H100, carried by datasheet ratios, where the database lacks the GPU), and what was done,
    in words."""
    gpu, tp, fw = workload.gpu, workload.gpus_per_worker, workload.framework or "sglang"
    if not workload.model or not gpu:
        raise ValueError(f"workload {workload.name!r}: its model and gpu fields name the traced "
                         "cluster; set them")
    src = database_gpu(gpu)
    if src != gpu and gpu not in DATASHEETS:
        raise ValueError(f"workload {workload.name!r}: gpu {gpu!r} is in no measured database "
                         f"and has no datasheet here ({', '.join(DATASHEETS)})")
    base_name = default_base_profile(workload.model, tp)
    base = disk_cached_profile(workload.model, src, tp, fw, base_name)
    name = name or f"{gpu}-{workload.model}-tp{tp}-{fw}-traced"
    if src == gpu:
        return replace(base, name=name), f"measured costs ({base.name})"
    note = (f"measured costs ({base.name}) carried from {src} to {gpu} by datasheet ratios "
            f"({DATASHEETS[src].source}; {DATASHEETS[gpu].source})")
    prof = carried(base, DATASHEETS[src], DATASHEETS[gpu], name)
    return replace(prof, cluster=Cluster(workload.model, gpu, tp, fw)), note


def trace_engine(workload: Workload, fit_steps: list[int], name: str = "",
                 names: tuple[str, ...] = FIT_FACTORS,
                 progress: Callable[[str], None] | None = None) -> tuple[Profile, EngineFit]:
    """The profile (`name`) of the traced run's engine: `carried_engine`'s costs with the factors
    `names` fitted on `fit_steps`, the fit recorded in its `trace_fit`."""
    prof, note = carried_engine(workload, name)
    if progress:
        progress(f"engine: {note}; fitting {', '.join(names)} on step(s) {fit_steps}")
    fit = fit_engine(workload, prof, fit_steps, names, progress)
    out = with_factors(prof, fit.values())
    flag = "" if tuple(names) == FIT_FACTORS else f" --fit-factors {','.join(names)}"
    out = replace(
        out, fitted_on=(f"{workload.name}: steps {list(fit_steps)} of its turns table",),
        trace_fit=fit.fit,
        description=(f"{workload.model} on {workload.gpus_per_worker}x {workload.gpu}, the engine "
                     f"of the traced run {workload.name}: {note}, with "
                     + "; ".join(fit.lines()[:-1])),
        source=(f"tlt workload check {workload.name} --fit-steps "
                f"{','.join(map(str, fit_steps))}{flag}: {prof.source}"))
    return out, fit
