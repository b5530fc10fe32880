"""The engine of a traced agentic run, where no measured database holds it: a measured profile
carried to the trace's GPU by datasheet ratios, then two run-level factors fitted on some of the
trace's steps (the others are predictions).

The two factors, each with a declared range and a standard error:
- `per_seq_s`: the engine's cost per sequence per decode step (DecodeCost.per_seq_s). A measured
  flashinfer/FlashAttention engine has next to none; an engine whose attention loops over the
  batch's sequences in Python (SGLang's `torch_native` backend, which PolyTrace's Search-R1 run
  hard-codes) pays it in every layer of every step;
- `prefill_factor`: a multiplier on the carried prefill cost per token (the same loop over the
  prefilled sequences, and the GPU's achieved FLOP rate, which the datasheet ratio only guesses).
They are fitted by least squares on log moments of the fit steps: the median turn latency at each
turn index and each step's makespan. Standard errors: the sandwich (J'J)^-1 J' S J (J'J)^-1, J the
moments' Jacobian in the log factors (central differences), S the moments' covariance from a
bootstrap over the trace's prompt groups (fixed seed).
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
from workbench.contracts.workload import Workload
from workbench.validate.agentic_trace import matched, measured_steps

RANGES = {"per_seq_s": (1e-6, 0.05), "prefill_factor": (0.05, 50.0)}
START = {"per_seq_s": 1e-3, "prefill_factor": 1.0}
MIN_TURNS = 30  # a turn index enters the moments where the fit steps hold this many of its turns
BOOTSTRAP = 200
BOOTSTRAP_SEED = 45
STEP_H = 0.05  # the Jacobian's step in the log factors


@dataclass(frozen=True)
class EngineFit:
    per_seq_s: float
    per_seq_se: float
    prefill_factor: float
    prefill_se: float
    fit_steps: tuple[int, ...]
    evaluations: int
    rms_log_error: float  # of the moments at the fit

    def lines(self) -> list[str]:
        lo, hi = RANGES["per_seq_s"]
        plo, phi = RANGES["prefill_factor"]
        return [f"per_seq_s {self.per_seq_s * 1e3:.3f} ms (se {self.per_seq_se * 1e3:.3f}; range "
                f"{lo * 1e3:g}-{hi * 1e3:g} ms)",
                f"prefill_factor {self.prefill_factor:.3f} (se {self.prefill_se:.3f}; range "
                f"{plo:g}-{phi:g})",
                f"fitted on step(s) {list(self.fit_steps)} in {self.evaluations} simulations; "
                f"moments' rms log error {self.rms_log_error:.3f}"]


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


def with_factors(profile: Profile, per_seq_s: float, prefill_factor: float) -> Profile:
    d = profile.decode
    return replace(profile, decode=replace(d, per_seq_s=per_seq_s,
                                           prefill_s_per_token=_sig(d.prefill_s_per_token
                                                                    * prefill_factor)))


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


def fit_engine(workload: Workload, profile: Profile, fit_steps: list[int],
               progress: Callable[[str], None] | None = None) -> EngineFit:
    """The two factors on `profile` (already carried to the trace's GPU) that explain the fit
    steps' turn latencies and makespans best."""
    measured = measured_steps(workload)
    lo = np.log([RANGES["per_seq_s"][0], RANGES["prefill_factor"][0]])
    hi = np.log([RANGES["per_seq_s"][1], RANGES["prefill_factor"][1]])
    state = {"n": 0, "turns": None}

    def frame(theta: np.ndarray) -> pd.DataFrame:
        x = np.exp(np.clip(theta, lo, hi))
        state["n"] += 1
        return matched(workload, with_factors(profile, x[0], x[1]), measured, fit_steps)

    def cost(theta: np.ndarray) -> float:
        m = frame(theta)
        if state["turns"] is None:
            state["turns"] = _indices(m)
        r = _residual(m, state["turns"])
        if progress and state["n"] % 10 == 0:
            progress(f"  fit: {state['n']} simulations, rms log error "
                     f"{math.sqrt(float(np.mean(r * r))):.3f}")
        penalty = float(np.sum(np.maximum(0, theta - hi) + np.maximum(0, lo - theta)))
        return float(np.sum(r * r)) + penalty

    x0 = np.log([START["per_seq_s"], START["prefill_factor"]])
    res = minimize(cost, x0, method="Nelder-Mead",
                   options={"xatol": 0.005, "fatol": 1e-5, "maxfev": 120,
                            "initial_simplex": [x0, x0 + [1.0, 0.0], x0 + [0.0, 1.0]]})
    theta = np.clip(res.x, lo, hi)
    at = frame(theta)
    turns = state["turns"]
    r = _residual(at, turns)
    jac = np.column_stack([
        (_residual(frame(theta + STEP_H * e), turns) - _residual(frame(theta - STEP_H * e), turns))
        / (2 * STEP_H) for e in np.eye(2)])
    bread = np.linalg.pinv(jac.T @ jac)
    cov = bread @ jac.T @ _bootstrap_cov(at, turns) @ jac @ bread
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    x = np.exp(theta)
    return EngineFit(float(f"{x[0]:.4g}"), float(f"{x[0] * se[0]:.2g}"),
                     float(f"{x[1]:.4g}"), float(f"{x[1] * se[1]:.2g}"), tuple(fit_steps),
                     state["n"], math.sqrt(float(np.mean(r * r))))


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
                 progress: Callable[[str], None] | None = None) -> tuple[Profile, EngineFit]:
    """The profile (`name`) of the traced run's engine: `carried_engine`'s costs with the two
    factors fitted on `fit_steps`."""
    prof, note = carried_engine(workload, name)
    if progress:
        progress(f"engine: {note}; fitting per_seq_s and prefill_factor on step(s) {fit_steps}")
    fit = fit_engine(workload, prof, fit_steps, progress)
    out = with_factors(prof, fit.per_seq_s, fit.prefill_factor)
    out = replace(
        out, fitted_on=(f"{workload.name}: steps {list(fit_steps)} of its turns table",),
        description=(f"{workload.model} on {workload.gpus_per_worker}x {workload.gpu}, the engine "
                     f"of the traced run {workload.name}: {note}, with "
                     + "; ".join(fit.lines()[:2])),
        source=(f"tlt workload check {workload.name} --fit-steps "
                f"{','.join(map(str, fit_steps))}: {prof.source}"))
    return out, fit
