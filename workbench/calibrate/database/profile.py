"""A Profile for any (model, GPU, TP, framework) from NVIDIA's measured operator database.

`aiconfigurator-core` ships latencies of GEMMs, attention (decode, and prefill with a cached
prefix), all-reduce and the small element-wise ops, measured with vLLM, SGLang and TensorRT-LLM
on H100, H200, B200, B300, GB200, GB300, A100, L40S and more, and a compiled engine that walks a
model's op list at a given shape, interpolating between measured rows. `measure_grid`
(aiconfigurator.py) asks it for every engine step the simulator's cost model needs, on one TP rank:

- decode (B, C): one token for each of B sequences at context C (the generation op list);
- verify (B, C, T): T tokens per sequence on top of a C-token prefix, i.e. the context op list
  at s=T with prefix C (what SGLang and vLLM run for a draft tree: an "extend"), its LM head
  over all B x T tokens (the context list's head covers one token per sequence), its attention
  at least the decode attention of (B, C) (reading every sequence's KV cache once);
- drafter (B, top-k): one EAGLE forward, a 1-layer model of the same shape over B x top-k
  candidates plus its fc (2H -> H), taken as two o-projection GEMMs of the same token count;
- prefill (P): the context op list over P prompt tokens;
- training: one forward over a packed 4,096-token sequence on the unsharded model, per token.

`fit_grid` fits the simulator's forms (sim/costs.py) to those points by least squares on log
ratios and `derive_profile` writes a Profile whose `source` says what was silicon (measured
rows), interpolated, empirical (the package's formulas) or extrapolated past the attention
sweep, and which `fit_error_pct` is the median |error| of the form against the points.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from sim.costs import draft_forward_s, prefill_s, verify_step_s
from workbench.calibrate.database.aiconfigurator import (
    DECODE_BATCHES,
    DECODE_CONTEXTS,
    DRAFTER_CANDIDATES,
    DRAFTER_CONTEXT,
    TRAIN_TOKENS,
    VERIFY_TOKENS,
    Engine,
    Point,
    measure_grid,
    package_version,
)
from workbench.calibrate.database.attention_coverage import Coverage, sweep_sentence
from workbench.calibrate.database.engine_versions import mechanisms_for
from workbench.calibrate.database.experts import drafter_sentence, moe_sentence
from workbench.calibrate.captures.operators import fit_drafter
from workbench.contracts.fileio import sig
from workbench.contracts.architecture import Architecture, load_architecture
from workbench.contracts.cluster import Cluster
from workbench.contracts.energy import GpuPower
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import DecodeCost, DrafterCost, ExpertRouting, Profile
from workbench.contracts.provenance import DATABASE_PREFIX

# Training: forward + backward (3 forwards' worth) + activation recomputation (1) + the old and the
# reference policy's log-prob forwards (2): 6 forwards per token (as the paper-fitted profiles' 12
# FLOPs/param: 2 per forward). The drafter's own training: forward + backward, 3 forwards.
TRAIN_FORWARDS = 6
DRAFTER_TRAIN_FORWARDS = 3
# Energy by state (the database's rows carry no energy for these engines): a stated share of the
# board power. Decoding is memory-bound (about 60% of board power on H100-class GPUs in published
# inference power traces), training compute-bound, idle what a GPU holding its memory draws.
DECODE_POWER_SHARE, TRAIN_POWER_SHARE, IDLE_POWER_SHARE = 0.6, 0.9, 0.15
LONG_CONTEXT = 32768
# Weight sync: resharding and pushing the bf16 weights to the rollout engines at an assumed
# effective 10 GB/s (the paper-fitted profiles' assumption; no database measures it).
SYNC_BYTES_PER_S = 10e9
# Bumped whenever a derived profile's numbers change for the same database (keys the disk cache).
DERIVATION = 6
# The engine costs the operator database cannot hold, all work outside the kernels it prices: each
# EAGLE draft step's (launches, top-k, candidate bookkeeping), a learned drafter's once a pass
# (DrafterCost.eagle_pass_s: its forward over the accepted tokens and the proposals' bookkeeping,
# whatever the depth), a tree's once a pass on top (DrafterCost.tree_pass_s: building and
# verifying it; chains skip it), and the host's per sequence (below). On the TLT paper's own
# engine at batch 1 (Qwen2.5-32B TP4, H100, SGLang), Table D's six rows (depth 12, 64 tokens, top-k
# 4-16) and the depth x TV grid's two depth-8 speedups (top-k 8, 48 and 64 tokens) differ by four
# draft steps with the tree alike: they decide the step's and the tree pass's levels
# (`database_check.fit_draft_overheads`); the pass's level is decided with the host work on the
# EAGLE-3 paper's SGLang chains (below). The database puts that engine's target decode step at
# batch 1 (context MICROBENCH_CONTEXT) at DRAFT_OVERHEAD_REF_STEP_S. Table E's SD speedups across
# GPUs show the overheads neither fixed in ms nor proportional to the target's step, so all three
# scale as (target step / reference step) ** DRAFT_OVERHEAD_EXPONENT, the exponent fitted to those
# speedups on A100, H100 and B200 alone (Qwen2.5-7B TP1, target steps 3.4-11.3 ms;
# `database_check.fit_overhead_exponent`). Table C stays a prediction; on other models and TP
# degrees the exponent is an extrapolation. The EAGLE-3 chains are priced with their engine
# release's mechanisms (SGLang 0.4.4: SD graphs to batch 32, the draft extend eager) and their
# drafter's 32,000-token vocabulary (engine_versions.py). `tlt gpu-check` refits all of it, with
# the host's launch and per-step costs (`workbench/calibrate/published/sd_mechanisms.py`).
DRAFT_STEP_OVERHEAD_S = 0.000196
EAGLE_PASS_OVERHEAD_S = 0.00327
TREE_PASS_OVERHEAD_S = 0.00136
MICROBENCH_CONTEXT = 2048  # the microbenchmarks' context (not published)
DRAFT_OVERHEAD_REF_STEP_S = 0.008246
DRAFT_OVERHEAD_EXPONENT = 0.68
# The host work per sequence in every SD pass, which SGLang and vLLM overlap with the GPU when
# decoding plainly and not when speculating (DrafterCost.sd_host_s_per_seq). Fitted with the
# pass's level on the EAGLE-3 paper's SGLang speedups by batch (traces/published/sd-by-batch.yaml,
# its `fit` series: the small batches decide the pass, the fall with the batch the host work);
# the same in ms on every GPU, model and TP degree (work on the host: an extrapolation, stated).
SD_HOST_S_PER_SEQ = 3.45e-05


@dataclass(frozen=True)
class DraftOverheads:
    """An engine's draft work outside the kernels, in seconds: each draft step's, a learned
    drafter's once a pass, a tree's once a pass on top (DrafterCost's eagle_step_s share,
    eagle_pass_s, tree_pass_s)."""

    step_s: float
    eagle_pass_s: float = 0.0
    tree_pass_s: float = 0.0

    def scaled(self, dec: DecodeCost, exponent: float = DRAFT_OVERHEAD_EXPONENT
               ) -> "DraftOverheads":
        """These overheads, given at Table D's engine, carried to an engine whose target decode cost
        is `dec`."""
        k = overhead_scale(dec, exponent)
        return DraftOverheads(self.step_s * k, self.eagle_pass_s * k, self.tree_pass_s * k)


PROFILE_OVERHEADS = DraftOverheads(DRAFT_STEP_OVERHEAD_S, EAGLE_PASS_OVERHEAD_S,
                                   TREE_PASS_OVERHEAD_S)
NO_OVERHEADS = DraftOverheads(0.0)


def overhead_scale(dec: DecodeCost, exponent: float = DRAFT_OVERHEAD_EXPONENT) -> float:
    """(this engine's target step at batch 1 / Table D engine's) ** exponent."""
    step = verify_step_s(dec, 1, MICROBENCH_CONTEXT, Strategy.chain(0))
    return (step / DRAFT_OVERHEAD_REF_STEP_S) ** exponent


def draft_overhead_s(dec: DecodeCost, at_reference_s: float = DRAFT_STEP_OVERHEAD_S,
                     exponent: float = DRAFT_OVERHEAD_EXPONENT) -> float:
    """Each draft step's engine overhead on an engine whose target decode cost is `dec`."""
    return at_reference_s * overhead_scale(dec, exponent)


def predict(c: DecodeCost, d: DrafterCost, p: Point) -> float:
    """A point's time in the simulator's own functions (sim/costs.py)."""
    if p.op == "drafter":
        return draft_forward_s(d, p.batch, p.topk)  # one forward, as the database times it
    if p.op == "prefill":
        return prefill_s(c, p.tokens) + verify_step_s(c, 0, 0.0, 0)
    return verify_step_s(c, p.batch, p.context, Strategy.chain(p.tokens - 1))


_DECODE = ("overhead_s", "per_seq_s", "weights_s", "compute_s_per_token", "kv_s_per_token",
           "overlap")


def fit_decode(points: list[Point], experts: tuple[int, int] | None = None) -> DecodeCost:
    """DecodeCost by least squares on log(predicted / database) over the decode and verify points;
    prefill_s_per_token is the marginal cost between the two prefill lengths. `experts` (count,
    per token): a mixture of experts, whose routed experts' weights are fitted apart from the rest
    (ExpertRouting), read in the share the pass's tokens touch."""
    steps = [p for p in points if p.op in ("decode", "verify")]
    pre = sorted((p for p in points if p.op == "prefill"), key=lambda p: p.tokens)
    per_prompt_token = (pre[-1].step_s - pre[0].step_s) / (pre[-1].tokens - pre[0].tokens)
    y = np.array([p.step_s for p in steps])
    n = 7 if experts else 6
    scale = np.array([1e-3, 1e-5, 1e-3, 1e-6, 1e-8, 1.0, 1e-3][:n])

    def cost(x: np.ndarray) -> DecodeCost:
        v = x * scale
        routing = ExpertRouting(experts[0], experts[1], float(v[6])) if experts else None
        return DecodeCost(*(float(a) for a in v[:5]), prefill_s_per_token=per_prompt_token,
                          overlap=float(v[5]), experts=routing)

    def resid(x: np.ndarray) -> np.ndarray:
        c = cost(x)
        return np.log(np.array([predict(c, DrafterCost(0, 0, 0), p) for p in steps]) / y)

    b1 = min(p.step_s for p in steps)
    start = [0.2 * b1, 1e-6, 0.8 * b1, 1e-6, 1e-8, 0.5]
    if experts:  # half the batch-1 step from the k experts one token reads
        start = start[:2] + [0.3 * b1] + start[3:] + [0.5 * b1 * experts[0] / experts[1]]
    upper = np.array([np.inf] * 5 + [1.0] + [np.inf] * (n - 6))
    res = least_squares(resid, np.array(start) / scale, bounds=(np.zeros(n), upper),
                        x_scale="jac")
    return cost(res.x)


def _rounded(c: DecodeCost) -> DecodeCost:
    """Fixed significant digits; a parameter the fit drove to its bound (below a picosecond) is
    0."""
    keep = lambda v: sig(v) if v > 1e-12 else 0.0
    names = _DECODE[:5] + ("prefill_s_per_token",)
    experts = replace(c.experts, weights_s=keep(c.experts.weights_s)) if c.experts else None
    return replace(c, overlap=round(c.overlap, 3), experts=experts,
                   **{k: keep(getattr(c, k)) for k in names})


@dataclass(frozen=True)
class MeasuredProfile:
    profile: Profile
    points: list[Point]
    errors_pct: list[float]  # the fitted form against each decode/verify/drafter/prefill point
    coverage: Coverage

    @property
    def median_abs_error_pct(self) -> float:
        return float(np.median(np.abs(self.errors_pct)))

    @property
    def max_abs_error_pct(self) -> float:
        return float(np.max(np.abs(self.errors_pct)))


def with_draft_overhead(prof: Profile, o: DraftOverheads) -> Profile:
    """A database-only profile with the engine's draft overheads (this engine's) added."""
    keep = lambda v: sig(v) if v else 0.0
    return replace(prof, drafter=replace(prof.drafter,
                                         eagle_step_s=sig(prof.drafter.eagle_step_s + o.step_s),
                                         eagle_pass_s=keep(o.eagle_pass_s),
                                         tree_pass_s=keep(o.tree_pass_s)))


def derive_profile(arch: str, gpu: str, tp: int, framework: str, base: Profile, name: str,
                   version: str = "", overheads: DraftOverheads = PROFILE_OVERHEADS,
                   overhead_exponent: float = DRAFT_OVERHEAD_EXPONENT,
                   sd_host_s_per_seq: float = SD_HOST_S_PER_SEQ,
                   ep: int | None = None, mechanisms: str | None = "") -> MeasuredProfile:
    """The Profile of (arch, gpu, tp, framework): every cost from the database; what it cannot give
    (acceptance, the drafter's learning curve's shape, n-gram lookups) is `base`'s, the weight sync
    an assumed bandwidth, the engine's draft overheads (`overheads`, given at Table D's engine and
    scaled to this one; NO_OVERHEADS: none) and the SD pass's host work per sequence. `ep`: a
    mixture of experts' expert-parallel degree (None: the framework's default). `mechanisms`: the
    engine release whose speculative-pass mechanisms the profile prices ("": the database's
    release, as `engine_versions` lists it; None: none, the database's kernels alone)."""
    a = load_architecture(arch)
    eng = Engine(arch, gpu, tp, framework, version, ep)
    try:
        pts = measure_grid(eng)
    except RuntimeError as exc:  # the package's PerfDataNotAvailableError: a shape never measured
        raise eng.refusal(exc, f"{gpu} {framework} {eng.version}") from None
    e = eng.arch.experts
    dec = _rounded(fit_decode(pts, (e.count, e.per_token) if e else None))
    # The kernels first: the host work is added with the overhead, after the form's errors.
    dr = replace(fit_drafter(_drafter_frame(pts), base.drafter), sd_host_s_per_seq=0.0)
    by = {p.op: p for p in pts if p.op in ("train", "drafter_train")}
    train_fwd = by["train"].step_s / by["train"].tokens
    drafter_fwd = by["drafter_train"].step_s / by["drafter_train"].tokens
    phases = replace(base.phases, train_gpu_s_per_token=sig(TRAIN_FORWARDS * train_fwd),
                     weight_sync_s=sig(2 * a.params / SYNC_BYTES_PER_S))
    learning = replace(base.learning,
                       train_tokens_per_s=sig(1.0 / (DRAFTER_TRAIN_FORWARDS * drafter_fwd)))
    watts = float(eng.db.system_spec["gpu"]["power"])
    power = GpuPower(decode_w=sig(DECODE_POWER_SHARE * watts), idle_w=sig(IDLE_POWER_SHARE * watts),
                     train_w=sig(TRAIN_POWER_SHARE * watts),
                     source=f"board power {watts:g} W (aiconfigurator-core's system spec) x "
                            f"assumed shares {DECODE_POWER_SHARE} decoding, {IDLE_POWER_SHARE} "
                            f"idle, {TRAIN_POWER_SHARE} training")
    cluster = Cluster(model=model_name(arch), gpu=gpu, tp=tp, framework=framework,
                      framework_version=eng.version, ep=eng.ep)
    cov = eng.coverage(eng.arch, tp, framework)
    prof = replace(base, name=name, decode=dec, drafter=dr, phases=phases, learning=learning,
                   cluster=cluster, power=power, trace_fit=None,
                   fitted_on=(f"{DATABASE_PREFIX}{cluster.label}, aiconfigurator-core "
                              f"{package_version()}",))
    errs = [100.0 * (predict(prof.decode, prof.drafter, p) / p.step_s - 1.0)
            for p in pts if p.op in ("decode", "verify", "drafter", "prefill")]
    fit = MeasuredProfile(prof, pts, errs, cov)
    here = overheads.scaled(dec, overhead_exponent)
    prof = with_draft_overhead(prof, here)
    prof = replace(prof, drafter=replace(prof.drafter, sd_host_s_per_seq=sd_host_s_per_seq))
    if mechanisms is not None:
        prof = replace(prof, mechanisms=mechanisms_for(
            framework, mechanisms or eng.version, a.layers, tp,
            sig(eng.drafter_head_s(DRAFTER_CONTEXT))))
    fit = replace(fit, profile=prof)
    prof = replace(prof, fit_error_pct=sig(fit.median_abs_error_pct, 4),
                   source=describe(fit, a, eng, here.step_s),
                   description=f"{model_name(arch)} ({a.params / 1e9:.1f}B), {_weights(a)}, "
                               f"{tp}x {gpu}{f' EP{eng.ep}' if eng.ep > 1 else ''}, "
                               f"{framework} {eng.version}: costs "
                               "from NVIDIA's measured operator database (aiconfigurator-core "
                               f"{package_version()}); acceptance and learning curve from "
                               f"{base.name}")
    prof.check()
    return replace(fit, profile=prof)


def _drafter_frame(pts: list[Point]):
    import pandas as pd

    d = [p for p in pts if p.op == "drafter"]
    return pd.DataFrame({"step_s": [p.step_s for p in d], "batch": [p.batch for p in d],
                         "topk": [p.topk for p in d]})


def describe(fit: MeasuredProfile, a: Architecture, eng: Engine, overhead: float) -> str:
    """The profile's `source`: package, GPU, framework and version; measured vs interpolated vs
    extrapolated; the form's fit error; what was assumed."""
    pts, cov, c, d = fit.points, fit.coverage, fit.profile.cluster, fit.profile.drafter
    silicon = float(np.average([p.silicon_share for p in pts], weights=[p.step_s for p in pts]))
    ar = max((p.allreduce_s for p in pts if p.op == "decode" and p.batch == 1), default=0.0)
    sweep = (sweep_sentence(cov, eng.arch, eng.attention_dir(c.framework), eng.decode, LONG_CONTEXT,
                            DECODE_BATCHES) if a.mla is None else
             "Attention: the package's multi-head latent attention (MLA) rows.")
    return ("derived by workbench/calibrate/database/profile.py from aiconfigurator-core "
            f"{package_version()} (NVIDIA's measured operator latencies) for {eng.system}, "
            f"{c.framework} {c.framework_version}, TP{c.tp} (one rank's shapes: {cov.heads} heads, "
            f"{cov.kv_heads} KV heads), {_weights(a)}. {len(pts)} database steps: decode B "
            f"{DECODE_BATCHES[0]}-{DECODE_BATCHES[-1]} x C "
            f"{DECODE_CONTEXTS[0]}-{DECODE_CONTEXTS[-1]}, verify of "
            f"{VERIFY_TOKENS[0]}-{VERIFY_TOKENS[-1]} tokens (an extend over the prefix), EAGLE "
            "drafter (1 layer + LM head; fc as 2 o-projections) at B x top-k "
            f"{DRAFTER_CANDIDATES[0][0]}-{64 * 8}, prefill, training forward. Time-weighted "
            f"{100 * silicon:.0f}% from measured (silicon) rows, interpolated between them by "
            "shape; the rest from the package's empirical formulas (norms, activations, "
            f"embedding) and its prefix-attention blend. {sweep} TP all-reduces {1e3 * ar:.3f} ms "
            "per decode step at B=1 (measured custom all-reduce). Form fitted by least squares on "
            f"log ratios: median |error| {fit.median_abs_error_pct:.1f}%, max "
            f"{fit.max_abs_error_pct:.1f}% over {len(fit.errors_pct)} points. Training: "
            f"{TRAIN_FORWARDS} forwards per token (fwd+bwd, recompute, old and reference "
            f"log-probs) of the unsharded model at {TRAIN_TOKENS} packed tokens; drafter training "
            f"{DRAFTER_TRAIN_FORWARDS} forwards of its layer + head. Weight sync: "
            f"{2 * a.params / 1e9:.0f} GB at an assumed {SYNC_BYTES_PER_S / 1e9:.0f} GB/s. Energy: "
            f"board power {eng.db.system_spec['gpu']['power']} W (package's system spec) x assumed "
            f"shares {DECODE_POWER_SHARE} decoding, {TRAIN_POWER_SHARE} training, "
            f"{IDLE_POWER_SHARE} idle (the database's rows carry no energy for these engines). Not "
            "in the database: each EAGLE draft step's engine work outside its kernels, added to "
            f"eagle_step_s: {1e3 * overhead:.3f} ms; a learned drafter's work per pass, "
            f"eagle_pass_s {1e3 * d.eagle_pass_s:.3f} ms, and a tree's on top (top-k > 1), "
            f"tree_pass_s {1e3 * d.tree_pass_s:.3f} ms (at the TLT paper's Table D engine "
            f"{1e3 * DRAFT_STEP_OVERHEAD_S:.3f}, {1e3 * EAGLE_PASS_OVERHEAD_S:.2f} and "
            f"{1e3 * TREE_PASS_OVERHEAD_S:.2f} ms, fitted on its Table D, its depth x TV grid and "
            "SGLang's chains; scaled by this engine's target step to the power "
            f"{DRAFT_OVERHEAD_EXPONENT}, fitted to its Table E); and the host work per sequence of "
            f"every SD pass, sd_host_s_per_seq {1e3 * d.sd_host_s_per_seq:.3f} ms (not overlapped "
            "with the GPU when speculating; fitted on SGLang's SD speedups by batch)."
            + _extra_sentences(fit, a, eng))


def _weights(a: Architecture) -> str:
    return {"fp8": "FP8 weights (bf16 KV cache)",
            "mxfp4": "MXFP4 experts, bf16 elsewhere"}.get(a.quant, "bf16")


def _extra_sentences(fit: MeasuredProfile, a: Architecture, eng: Engine) -> str:
    """A stand-in's, a mixture of experts' and its dense drafter's sentences ("" for a dense
    model the database lists)."""
    out = [eng.priced.sentence] if eng.priced.stand_in else []
    dec, c = fit.profile.decode, fit.profile.cluster
    if dec.experts is not None:
        out.append(moe_sentence(eng.arch, c.tp, c.ep, dec.experts.weights_s,
                                eng.model.config.moe_quant_mode.name, eng.ep_default))
    if eng.arch.is_moe or a.mla is not None:
        out.append(drafter_sentence(eng.arch))
    return "".join(" " + s for s in out)


def model_name(arch: str) -> str:
    """A model's short name: the preset's, or a config file's (the package's
    `Org--Name_config.json`)."""
    p = Path(arch)
    if not p.is_file():
        return arch  # a preset name (its dots are not a suffix: qwen2.5-7b)
    stem = p.parent.name if p.name == "config.json" else p.stem
    return stem.removesuffix("_config")
