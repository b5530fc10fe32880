"""The engine releases' mechanisms (traces/published/engine-versions.yaml) against public figures:
the two host costs no source states, each fitted on its declared figures, and the checks of what
they predict.

- The host's time to launch one layer's kernels eagerly (`HostCosts.launch_s_per_layer`) is fitted
  on the catalog's `eager_pairs` with role fit: one engine run with and without CUDA graphs.
- The host's work per sequence and draft step is fitted per framework on the series declaring
  `fits: host_s_per_seq_step` (sd-by-draft-length.yaml: one RL-rollout workload measured at three
  draft lengths); SGLang has no such figure and prices none.
- Both are fitted jointly with the engine constants of `sd_batch.fit_constants` (the draft
  overheads, the pass's host work per sequence): a few rounds, each with the others fixed.

Checks: the crossover of every public SD-by-batch sweep (published within 30%), the held-out
speedups at batch 32-256, and, for every RL-rollout measurement by draft length, the ratio of a
longer draft's speedup to the shortest's (published within 20%). Where an RL series publishes the
tokens per pass of its shortest draft only, a longer draft's are the profile's acceptance shape
(eagle_shape, fitted to the TLT paper's accepted lengths) with its scale set by that figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import brentq, least_squares

from sim.acceptance import alpha_for_mean, cumulative_acceptance
from sim.costs import segment_s
from workbench.calibrate.database.engine_versions import (
    EagerPair,
    EngineCatalog,
    HostCosts,
    load_catalog,
)
from workbench.calibrate.published import sd_batch as sb
from workbench.calibrate.published.database_check import BASE_PROFILE
from workbench.calibrate.published.sd_series import (
    SdPublished,
    SdSeries,
    load_sd_length_published,
    load_sd_published,
)
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import load_profile
from workbench.contracts.strategy import Strategy

LAUNCH_BOUNDS_S = (1e-6, 5e-3)  # per layer: from a microsecond to 5 ms
HOST_STEP_BOUND_S = 1e-3  # per sequence per draft step: up to 1 ms
OUTER_ROUNDS = 3
CROSSOVER_GOAL = 0.30  # the predicted crossover within 30% of the published
RATIO_GOAL = 0.20  # a longer draft's speedup over the shortest's within 20%
LIMIT = 512


def pair_series(p: EagerPair, eager: bool) -> SdSeries:
    """The pair's engine as a series: every pass eager (graphs capped at 0) or the release's."""
    return SdSeries(p.name, p.role, p.source, p.framework, p.gpu, p.model, p.tp,
                    DrafterKind.EAGLE, p.context, (), p.version, p.draft_vocab,
                    0 if eager else None)


def pass_s(series: SdSeries, constants: sb.EngineConstants, strategy: Strategy,
           batch: int = 1) -> float:
    """One SD pass of the series' engine."""
    prof = sb.engine(series, constants)
    return segment_s(prof.decode, prof.drafter, DrafterKind.EAGLE, batch, series.context,
                     strategy, m=prof.mechanisms)


def eager_ratio(p: EagerPair, constants: sb.EngineConstants) -> tuple[float, float]:
    """The pair's SD pass without graphs over with them: (published, predicted)."""
    s = Strategy.parse(p.strategy)
    published = (p.eager_accepted / p.eager_tokens_per_s) / (
        p.graphs_accepted / p.graphs_tokens_per_s)
    return published, pass_s(pair_series(p, True), constants, s) / pass_s(
        pair_series(p, False), constants, s)


def fit_launch(cat: EngineCatalog, constants: sb.EngineConstants) -> float:
    """The launch time per layer at which the fit pair's eager pass is as much slower as
    published."""
    pairs = [p for p in cat.eager_pairs if p.role == "fit"]
    if not pairs:
        raise ValueError(f"{cat.path}: no eager pair with role fit decides launch_s_per_layer")

    def gap(x: float) -> float:
        c = replace(constants, host=replace(constants.host, launch_s_per_layer=x))
        return sum(math.log(pred / pub) for pub, pred in (eager_ratio(p, c) for p in pairs))

    lo, hi = LAUNCH_BOUNDS_S
    if gap(lo) >= 0 or gap(hi) <= 0:
        return lo if gap(lo) >= 0 else hi
    return float(brentq(gap, lo, hi, xtol=1e-8))


@dataclass(frozen=True)
class RatioCheck:
    """A longer draft's speedup over the shortest draft's, at one batch of an RL-rollout series."""

    series: str
    role: str
    batch: int
    strategy: str
    short: str
    accepted: float  # tokens per pass of the longer draft (given or from the shape)
    published: float
    predicted: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.published - 1.0)

    @property
    def met(self) -> bool:
        return abs(self.error_pct) <= 100.0 * RATIO_GOAL


def accepted_by_shape(series: SdSeries) -> dict[Strategy, float]:
    """Tokens per pass of each chain of the series: the given ones, the rest from the profile's
    acceptance shape scaled to its shortest chain's figure."""
    shape = load_profile(BASE_PROFILE).acceptance.eagle_shape
    given = {p.strategy: p.accepted for p in series.points if p.accepted is not None}
    short = min(given, key=lambda s: s.depth)
    a = alpha_for_mean(shape, short.depth, given[short])
    return {p.strategy: given.get(p.strategy) or 1.0 + sum(cumulative_acceptance(
        a, shape, p.strategy.depth)) for p in series.points}


def ratio_checks(series: list[SdSeries], constants: sb.EngineConstants) -> list[RatioCheck]:
    """Every RL-rollout series' longer drafts against its shortest, per batch."""
    out = []
    for s in (s for s in series if s.rl_rollout):
        prof = sb.engine(s, constants)
        el = accepted_by_shape(s)
        for batch in sorted({p.batch for p in s.points}):
            pts = sorted((p for p in s.points if p.batch == batch), key=lambda p: p.strategy.depth)
            short = pts[0]
            base = sb.speedup(prof, s.drafter, batch, s.context, short.strategy, el[short.strategy])
            for p in pts[1:]:
                pred = sb.speedup(prof, s.drafter, batch, s.context, p.strategy, el[p.strategy])
                out.append(RatioCheck(s.name, s.role, batch, p.strategy.name, short.strategy.name,
                                      el[p.strategy], p.value / short.value, pred / base))
    return out


def fit_host_step(series: list[SdSeries], constants: sb.EngineConstants,
                  framework: str) -> float:
    """The host's work per sequence and draft step on `framework` with the least squared log error
    over the ratios of the series declaring `fits: host_s_per_seq_step` (0 where none does)."""
    fit = [s for s in series if s.fits == "host_s_per_seq_step" and s.framework == framework]
    if not fit:
        return 0.0

    def resid(x: np.ndarray) -> list[float]:
        host = replace(constants.host, **{f"host_step_{framework}_s": float(x[0]) * 1e-6})
        c = replace(constants, host=host)
        return [math.log(r.predicted / r.published) for r in ratio_checks(fit, c)]

    res = least_squares(resid, np.array([5.0]), bounds=([0.0], [HOST_STEP_BOUND_S * 1e6]),
                        diff_step=1e-3)
    return float(res.x[0]) * 1e-6


def fit_engine_constants(pub: SdPublished | None = None,
                         length: list[SdSeries] | None = None) -> sb.EngineConstants:
    """Every engine constant on its declared figures (module docstring), jointly in rounds."""
    pub = pub or load_sd_published()
    length = length if length is not None else list(load_sd_length_published().series)
    cat = load_catalog()
    host, c = HostCosts(), None
    for r in range(OUTER_ROUNDS):
        c = sb.fit_constants(pub, host_costs=host, rounds=sb.ROUNDS if r == 0 else 2, start=c)
        host = replace(host, launch_s_per_layer=fit_launch(cat, c))
        c = replace(c, host=host)
        for fw in ("sglang", "vllm"):
            host = replace(host, **{f"host_step_{fw}_s": fit_host_step(length, c, fw)})
        c = replace(c, host=host)
    return c


@dataclass(frozen=True)
class CrossoverCheck:
    series: str
    role: str
    published: int | None  # the first published batch below 1 (None: none measured)
    predicted: int | None  # the first batch (1-512) the model puts below 1
    largest: int  # the largest batch published

    @property
    def error_pct(self) -> float | None:
        if self.published is None or self.predicted is None:
            return None
        return 100.0 * (self.predicted / self.published - 1.0)

    @property
    def met(self) -> bool:
        """Within 30% of the published crossover; where none was published, none predicted up to
        the largest batch measured."""
        if self.published is None:
            return self.predicted is None or self.predicted > self.largest
        return self.error_pct is not None and abs(self.error_pct) <= 100.0 * CROSSOVER_GOAL


def crossover_checks(series: list[SdSeries], constants: sb.EngineConstants
                     ) -> list[CrossoverCheck]:
    """Every series measured at three batches or more with one strategy: its crossover."""
    out = []
    for s in series:
        pts = sorted((p for p in s.points if p.measure == "speedup" and p.accepted is not None),
                     key=lambda p: p.batch)
        if len({p.batch for p in pts}) < 3 or len({p.strategy for p in pts}) != 1:
            continue
        x = sb.crossover_check(s, constants, LIMIT)
        out.append(CrossoverCheck(s.name, s.role, x.published, x.predicted, x.largest))
    return out


def batch_window_checks(checks: list[sb.SdCheck], lo: int = 32, hi: int = 256
                        ) -> list[sb.SdCheck]:
    """The held-out speedups measured at batch lo..hi."""
    return [c for c in checks if c.role == "held_out" and c.measure == "speedup"
            and lo <= c.batch <= hi]
