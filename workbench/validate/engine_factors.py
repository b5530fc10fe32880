"""The run-level factors a traced engine's fit sets (workbench/validate/agentic_engine.py): what
each is, its declared range, its prior where something measured outside the trace speaks for it, and
engines drawn from a fit's uncertainty.

- `per_seq_s`: the cost per sequence per decode step (DecodeCost.per_seq_s). A measured
  flashinfer/FlashAttention engine has next to none; an engine whose attention loops over the
  batch's sequences in Python (SGLang's `torch_native` backend, which PolyTrace's Search-R1 run
  hard-codes) pays it in every layer of every step. Flat over its range.
- `prefill_factor`: a multiplier on the carried prefill cost per token (the same loop over the
  prefilled sequences, and the GPU's achieved FLOP rate, which the datasheet ratio only guesses).
  Flat over its range.
- `overhead_s`: the fixed cost of every decode step (DecodeCost.overhead_s). SGLang turns CUDA
  graphs off with the torch_native backend (its server_args: "Cuda graph is disabled because of
  using torch native attention backend"), so every step launches each layer's kernels from the
  host; the measured database times graph-replayed kernels and has none. Prior: log-normal around
  the one public eager-against-graphs figure of a Qwen2.5-7B decoder found (OVERHEAD_PRIOR).
- `kv_s_per_token`: the cost per sequence per context token of a decode step
  (DecodeCost.kv_s_per_token). torch_native gathers each sequence's KV rows in every layer, so its
  loop grows with the context. Prior: normal, the H100 probe's slope and its standard error
  (`probe_slope`, the probe beside the trace).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from workbench.contracts.profile import Profile
from workbench.contracts.trace_fit import TraceFit

PROBE = (Path(__file__).resolve().parents[2] / "traces" / "published" / "polytrace-search-r1"
         / "torch_native_probe-h100.txt")
OVERHEAD_PRIOR = (
    9.5e-3, math.log(2.0), True,
    "log-normal, median 9.5 ms, log-sd ln 2: Qwen2.5-Omni-7B's thinker (a Qwen2.5-7B decoder) on "
    "vLLM 0.29 and 2x A800 decodes a token in 22-23 ms eager, 13 ms with CUDA graphs "
    "(github.com/vllm-project/vllm-omni/issues/7960); ln 2 for another engine, GPU and TP degree")


@dataclass(frozen=True)
class Prior:
    center: float  # the median (log-normal) or the mean (normal)
    sd: float  # in log (log-normal) or in the factor's unit (normal)
    log: bool
    source: str  # what it is, in words, with where it comes from

    def penalty(self, theta: float) -> float:
        """-2 log prior (up to a constant) at log-value `theta`."""
        if self.log:
            return ((theta - math.log(self.center)) / self.sd) ** 2
        return ((math.exp(theta) - self.center) / self.sd) ** 2

    def log_sd(self, value: float) -> float:
        """The prior's sd in log space at `value` (a normal's, locally)."""
        return self.sd if self.log else self.sd / value


@dataclass(frozen=True)
class FactorSpec:
    name: str
    low: float  # the declared range
    high: float
    start: float  # where the fit starts
    unit: float  # printed in value / unit
    unit_name: str
    prior: Prior | None = None

    def prior_log_sd(self, value: float) -> float:
        """The prior's sd in log space; a flat factor's: a log-uniform over its range's."""
        if self.prior is None:
            return math.log(self.high / self.low) / math.sqrt(12.0)
        return self.prior.log_sd(value)

    def prior_words(self) -> str:
        return self.prior.source if self.prior else ""


def probe_slope(path: Path = PROBE) -> tuple[float, float]:
    """The torch_native probe's cost per sequence per context token, and its standard error: least
    squares over its shapes of t(B, C) = c_C + B (a + b C) on the timings with the lengths read
    back from the GPU (`dev`: as SGLang 0.4.6 reads them)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()
            if line.startswith('{"batch"')]
    if len(rows) < 6:
        raise ValueError(f"{path}: {len(rows)} probe shapes, where the slope needs at least 6 "
                         "(rerun torch_native_probe.py beside it)")
    b = np.array([r["batch"] for r in rows], float)
    c = np.array([r["context"] for r in rows], float)
    t = np.array([r["dev"] for r in rows], float)
    x = np.column_stack([(c == v).astype(float) for v in np.unique(c)] + [b, b * c])
    beta, *_ = np.linalg.lstsq(x, t, rcond=None)
    r = t - x @ beta
    cov = float(r @ r) / (len(t) - x.shape[1]) * np.linalg.inv(x.T @ x)
    return float(beta[-1]), float(math.sqrt(cov[-1, -1]))


def factor_specs() -> dict[str, FactorSpec]:
    """Every factor the fit may set, by name."""
    slope, se = probe_slope()
    kv = Prior(float(f"{slope:.3g}"), float(f"{se:.2g}"), False,
               f"normal, {slope:.3g} s (s.e. {se:.2g}): the torch_native probe's slope over the "
               "context on an H100, attention's kernels only "
               "(traces/published/polytrace-search-r1/torch_native_probe-h100.txt)")
    return {s.name: s for s in (
        FactorSpec("per_seq_s", 1e-6, 0.05, 1e-3, 1e-3, "ms"),
        FactorSpec("prefill_factor", 0.05, 50.0, 1.0, 1.0, "x"),
        FactorSpec("overhead_s", 1e-5, 0.2, OVERHEAD_PRIOR[0], 1e-3, "ms",
                   Prior(*OVERHEAD_PRIOR)),
        FactorSpec("kv_s_per_token", 1e-9, 1e-5, kv.center, 1e-9, "ns", kv))}


FIT_FACTORS = ("per_seq_s", "prefill_factor", "overhead_s", "kv_s_per_token")


def with_factors(profile: Profile, values: Mapping[str, float]) -> Profile:
    """`profile` with the named factors set (`prefill_factor` multiplies its prefill cost)."""
    unknown = set(values) - set(FIT_FACTORS)
    if unknown:
        raise ValueError(f"unknown engine factor {sorted(unknown)[0]!r}; the factors are "
                         + ", ".join(FIT_FACTORS))
    d = profile.decode
    fields = {k: float(v) for k, v in values.items() if k != "prefill_factor"}
    if "prefill_factor" in values:
        prefill = d.prefill_s_per_token * values["prefill_factor"]
        fields["prefill_s_per_token"] = float(f"{prefill:.5g}")
    return replace(profile, decode=replace(d, **fields))


def drawn_engines(profile: Profile, count: int, seed: int) -> list[Profile]:
    """`count` engines drawn from the profile's trace fit (log-normal over its factors, their
    covariance, each inside its range): engines the trace cannot tell from the fitted one."""
    fit: TraceFit | None = profile.trace_fit
    if fit is None:
        return []
    center = np.log([f.value for f in fit.factors])
    cov = np.array(fit.log_covariance, float)
    lo = np.log([f.low for f in fit.factors])
    hi = np.log([f.high for f in fit.factors])
    draws = np.random.default_rng(seed).multivariate_normal(center, cov, size=count,
                                                            method="eigh")
    out = []
    for k, theta in enumerate(np.clip(draws, lo, hi)):
        values = {f.name: float(math.exp(t)) for f, t in zip(fit.factors, theta)}
        if "prefill_factor" in values:  # relative to the fitted engine's own prefill cost
            values["prefill_factor"] /= fit.factor("prefill_factor").value
        out.append(replace(with_factors(profile, values), name=f"{profile.name}-draw-{k}"))
    return out
