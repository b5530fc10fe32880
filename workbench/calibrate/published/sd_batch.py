"""SD's speedup by batch on measured engines: the host work per sequence that the operator database
cannot hold, fitted on the declared series, and every public figure beside its prediction.

The database prices kernels. On its costs a chain of 3 drafts plus its 4-token verify costs about
the same multiple of a plain decode step at batch 1 and at batch 64 (the verify's GEMMs stay
memory-bound up to a few hundred tokens), so SD's speedup would stay flat with the batch. Measured
engines lose it as the batch grows (SGLang: 1.81x at batch 2, 1.38x at 64 for the same drafter).
What the kernels leave out grows with the batch and is paid only when speculating: the engine's
host work per sequence (accepting tokens, freeing rejected KV slots, checking stop conditions),
which SGLang and vLLM overlap with the GPU's work in a plain step but run between the GPU's steps
in an SD pass (sglang PR 9588: "Speculative decoding currently does not support overlap
scheduling"). One constant, seconds per sequence per SD pass (`DrafterCost.sd_host_s_per_seq`).

It is fitted with the learned drafter's work per pass (`DrafterCost.eagle_pass_s`) on the `fit`
series of `traces/published/sd-by-batch.yaml` (a chain: its small batches decide the pass, the fall
with the batch the host work), jointly with the engine's other draft overheads, each on its own
declared figures (`database_check`): the draft step's and the tree pass's levels on Table D and the
depth x TV grid's depth-8 speedups (batch 1), the exponent of their scaling on Table E's SD
speedups (batch 1). They interact weakly, so a few rounds of fitting each with the others fixed
reach the joint fit. Everything else is predicted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.optimize import least_squares

from sim.costs import segment_s
from workbench.calibrate.database.catalog import bare_profile, model_choices, with_sd_host
from workbench.calibrate.database.engine_versions import HostCosts, mechanisms_for
from workbench.calibrate.published.database_check import (
    BASE_PROFILE,
    fit_draft_overheads,
    fit_overhead_exponent,
    table_e_engines,
)
from workbench.calibrate.database.profile import DraftOverheads, with_draft_overhead
from workbench.calibrate.published.sd_series import (
    SdPoint,
    SdPublished,
    SdSeries,
    load_sd_published,
)
from workbench.contracts.architecture import load_architecture
from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import Profile

NO_SD = Strategy.chain(0)
HOST_BOUNDS_S = (
    0.0,
    2e-3,
)  # per sequence per pass: up to 2 ms (a batch of 64 would then wait 128 ms)
PASS_BOUND_S = 20e-3  # a learned drafter's work per pass at Table D's engine: up to 20 ms
ROUNDS = 5


@dataclass(frozen=True)
class EngineConstants:
    """The engine costs outside the kernels: the draft overheads (at Table D's engine, one exponent
    of their scaling with the target's step), the SD pass's host work per sequence, and the host's
    costs the engine releases' mechanisms are priced with (eager launches, work per draft step)."""

    overheads: DraftOverheads
    overhead_exponent: float
    sd_host_s_per_seq: float
    host: HostCosts = HostCosts()


@dataclass(frozen=True)
class SdCheck:
    """One published figure beside the prediction."""

    series: str
    role: str
    batch: int
    strategy: str
    tp: int
    measure: str  # speedup, tokens_per_s, ratio (TP4 speedup over TP1's)
    published: float
    predicted: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.published - 1.0)


def engine(series: SdSeries, constants: EngineConstants, tp: int | None = None) -> Profile:
    """The series' engine from the database with the engine constants, pricing the mechanisms of
    the series' engine release (its stated version, else the database's) as the run set them
    (`graph_max`), with its drafter's vocabulary (`draft_vocab`)."""
    tp = tp or series.tp
    model, layers, vocab = _shape(series.model)
    bare = bare_profile(model, series.gpu, tp, series.framework, BASE_PROFILE)
    here = constants.overheads.scaled(bare.decode, constants.overhead_exponent)
    prof = with_sd_host(with_draft_overhead(bare, here), constants.sd_host_s_per_seq)
    share = min(1.0, series.draft_vocab / vocab) if series.draft_vocab else 1.0
    m = mechanisms_for(series.framework, series.version or bare.mechanisms.version, layers, tp,
                       bare.mechanisms.draft_head_s, constants.host, graph_max=series.graph_max,
                       draft_vocab_share=share)
    return replace(prof, mechanisms=m)


@lru_cache(maxsize=32)
def _shape(model: str) -> tuple[str, int, int]:
    """A series' model as the database derives it (a preset or the package's config path), its
    layers and vocabulary."""
    path = model_choices().get(model, model)
    arch = load_architecture(path)
    return path, arch.layers, arch.vocab


def speedup(
    prof: Profile, kind: DrafterKind, batch: int, context: float, strategy: Strategy,
    accepted: float
) -> float:
    """SD's throughput over the same engine decoding plainly (no drafter) at one batch."""
    m = prof.mechanisms
    plain = segment_s(prof.decode, prof.drafter, DrafterKind.NONE, batch, context, NO_SD, m=m)
    return accepted * plain / segment_s(prof.decode, prof.drafter, kind, batch, context, strategy,
                                        m=m)


def predict_point(prof: Profile, series: SdSeries, p: SdPoint) -> float:
    if p.measure == "tokens_per_s":
        return p.batch / segment_s(
            prof.decode, prof.drafter, DrafterKind.NONE, p.batch, series.context, NO_SD,
            m=prof.mechanisms)
    if p.accepted is None:
        raise ValueError(f"{series.name}: a speedup needs the accepted length to be predicted")
    return speedup(prof, series.drafter, p.batch, series.context, p.strategy, p.accepted)


def fit_pass_and_host(
    fit_series: tuple[SdSeries, ...], overheads: DraftOverheads, overhead_exponent: float,
    host: HostCosts = HostCosts()
) -> tuple[float, float]:
    """The learned drafter's work per pass (at Table D's engine) and the host work per sequence
    per SD pass with the least squared log error over the fit series' speedups, the other draft
    overheads fixed: (eagle_pass_s, sd_host_s_per_seq)."""
    pts = [(s, p) for s in fit_series for p in s.points if p.measure == "speedup"]
    if not pts:
        raise ValueError("no `fit` series with speedups: nothing decides sd_host_s_per_seq")

    def resid(x: np.ndarray) -> list[float]:
        o = replace(overheads, eagle_pass_s=float(x[0]) * 1e-3)
        c = EngineConstants(o, overhead_exponent, float(x[1]) * 1e-3, host)
        return [math.log(predict_point(engine(s, c, p.tp), s, p) / p.value) for s, p in pts]

    hi = [PASS_BOUND_S * 1e3, HOST_BOUNDS_S[1] * 1e3]
    # steps of 0.1%: the profiles' costs keep five significant digits
    res = least_squares(resid, np.array([0.5, 0.05]), bounds=([0.0, 0.0], hi), diff_step=1e-3)
    return float(res.x[0]) * 1e-3, float(res.x[1]) * 1e-3


def fit_constants(pub: SdPublished | None = None, framework: str = "sglang",
                  host_costs: HostCosts = HostCosts(), rounds: int = ROUNDS,
                  start: EngineConstants | None = None) -> EngineConstants:
    """The engine constants, each on its declared figures, in rounds until they agree (the host's
    launch and per-step costs given: sd_mechanisms.py fits those around this)."""
    pub = pub or load_sd_published()
    host = start.sd_host_s_per_seq if start else 0.0
    exponent = start.overhead_exponent if start else 0.0
    o = start.overheads if start else DraftOverheads(0.0)
    for _ in range(rounds):
        o = fit_draft_overheads(framework, sd_host_s_per_seq=host, eagle_pass_s=o.eagle_pass_s)
        exponent, _ = fit_overhead_exponent(table_e_engines(framework, host), at_reference=o)
        eagle_pass, host = fit_pass_and_host(pub.by_role("fit"), o, exponent, host_costs)
        o = replace(o, eagle_pass_s=eagle_pass)
    return EngineConstants(o, exponent, host, host_costs)


def series_checks(
    pub: SdPublished,
    constants: EngineConstants,
    roles: tuple[str, ...] = ("fit", "held_out"),
    context: float | None = None,
) -> list[SdCheck]:
    """Every point of the series with those roles beside its prediction (`context` overrides the
    series' stated context: a sensitivity)."""
    out = []
    for s in (s for s in pub.series if s.role in roles):
        s = replace(s, context=context) if context is not None else s
        for p in s.points:
            if p.accepted is None and p.measure == "speedup":
                continue
            pred = predict_point(engine(s, constants, p.tp), s, p)
            out.append(
                SdCheck(s.name, s.role, p.batch, p.strategy.name, p.tp, p.measure, p.value, pred)
            )
    return out


def tp_ratio_check(series: SdSeries, constants: EngineConstants) -> SdCheck:
    """A series measured at two TP degrees with an unknown acceptance: the ratio of its speedups
    acceptance cancels)."""
    lo, hi = sorted(series.points, key=lambda p: p.tp)
    pred = [
        speedup(
            engine(series, constants, p.tp),
            series.drafter,
            p.batch,
            series.context,
            p.strategy,
            1.0,
        )
        for p in (lo, hi)
    ]
    return SdCheck(
        series.name,
        series.role,
        hi.batch,
        hi.strategy.name,
        hi.tp,
        f"ratio TP{hi.tp}/TP{lo.tp}",
        hi.value / lo.value,
        pred[1] / pred[0],
    )


def specdecode_checks(
    pub: SdPublished,
    constants: EngineConstants,
    k: int = 3,
    batches: tuple[int, ...] = (1, 8, 16, 32, 64),
) -> list[SdCheck]:
    """SpecDecode-Bench's fitted vLLM step model's speedup by batch (a chain of K, its GSM8K
    beside ours for the same engine (vLLM, H100, Llama-3.1-8B)."""
    m = pub.specdecode_bench
    s = SdSeries(
        "specdecode-bench-fit",
        "context",
        "",
        "vllm",
        "h100",
        "llama3.1-8b",
        1,
        DrafterKind.EAGLE,
        m.context,
        (),
    )
    prof = engine(s, constants)
    strategy, accepted = Strategy.chain(k), m.accepted_by_k[k - 1]
    return [
        SdCheck(
            s.name,
            s.role,
            b,
            strategy.name,
            1,
            "speedup",
            m.speedup(b, k),
            speedup(prof, DrafterKind.EAGLE, b, m.context, strategy, accepted),
        )
        for b in batches
    ]


def median_abs_error(checks: list[SdCheck]) -> float:
    return float(np.median([abs(c.error_pct) for c in checks])) if checks else float("nan")


def first_below_one(batches: list[int], speedups: list[float]) -> int | None:
    """The first batch at which SD stops paying (None: it pays at every batch listed)."""
    return next((b for b, v in zip(batches, speedups) if v < 1.0), None)


@dataclass(frozen=True)
class Crossover:
    series: str
    published: (
        int | None
    )  # the first published batch below 1 (None: none up to the largest measured)
    predicted: int | None  # the first batch (1-512) the model puts below 1
    largest: int  # the largest published batch

    @property
    def agrees(self) -> bool:
        """Within a power of two; where none was published, none predicted up to the largest batch
        measured."""
        if self.published is None:
            return self.predicted is None or self.predicted > self.largest
        if self.predicted is None:
            return False
        return abs(math.log2(self.predicted / self.published)) <= 1.0


def crossover_check(series: SdSeries, constants: EngineConstants, limit: int = 512) -> Crossover:
    """Where the series' speedup first drops below 1, published and predicted."""
    pts = sorted((p for p in series.points if p.measure == "speedup"), key=lambda p: p.batch)
    p0 = pts[0]
    prof = engine(series, constants)
    pred = next(
        (
            b
            for b in range(1, limit + 1)
            if speedup(prof, series.drafter, b, series.context, p0.strategy, p0.accepted) < 1.0
        ),
        None,
    )
    return Crossover(
        series.name,
        first_below_one([p.batch for p in pts], [p.value for p in pts]),
        pred,
        pts[-1].batch,
    )
