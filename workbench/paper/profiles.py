"""GPU profiles of the TLT paper's models, fitted to its microbenchmarks and carried by shape.

`build_profiles` turns one `PublishedFit` (workbench/calibrate/published/microbenchmarks.py) into a
Profile per
(model, TP) the evaluation uses. Fitted: the RL-adapted drafter's acceptance (alpha, shape,
tree width gain) and the engine factors; carried by shape (workbench/calibrate/published/shapes.py):
every cost. Derived from Table G: the quality of a drafter aligned with the base model (a
warm start). Assumed, and stated in each profile's `source`: the n-gram drafter's acceptance
(our own measurement on a reasoning task), the learning curve and staleness of spot training,
the policy update's cost (training FLOPs at an assumed MFU) and the weight sync.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sim.acceptance import stats_for
from workbench.calibrate.published.microbenchmarks import (
    PUBLISHED,
    Published,
    PublishedFit,
    fit_published,
    load_published,
)
from workbench.calibrate.published.shapes import GPU, H100_SXM, decode_cost, drafter_cost
from workbench.contracts.fileio import sig
from workbench.contracts.architecture import Architecture, load_architecture
from workbench.contracts.cluster import Cluster
from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import (
    AcceptanceModel,
    DrafterLearning,
    PhaseCost,
    Profile,
)

# Assumptions (not measured here; each is written into the profiles' `source`).
TRAIN_MFU = 0.40  # policy update: forward + backward with recomputation + old/ref log-prob forwards
# 6 (fwd+bwd) + 2 (recompute) + 2 + 2 (old and reference log-prob forwards)
TRAIN_FLOPS_PER_PARAM = 12
SYNC_BYTES_PER_S = 10e9  # resharding and pushing bf16 weights to the rollout engines, effective
# cpu-tiny's fit: n-gram on our reasoning task
NGRAM = {"ngram_alpha": 0.2597, "ngram_shape": 0.4781}
COLD_ALPHA = 0.05  # an untrained drafter: almost nothing accepted
# drafter quality lost per policy update (Table G: dips and recovers in a few steps)
STALENESS = 0.01
# Spot training's learning curve (hand-set; the paper gives no curve). The best learning rate is
# FastRL's drafter lr (1e-6), taken as the one its authors found to work.
LEARNING = DrafterLearning(train_tokens_per_s=15000.0, tokens_per_step=32768, learn_tokens=5.0e6,
                           useful_epochs=2.0, lr_best=1.0e-6, lr_tolerance=1.0)
NGRAM_S_PER_SEQ = 2.0e-6  # a CPU trie lookup per sequence per pass
WARM_START_STRATEGY = Strategy(8, 4, 48)  # FastRL's default strategy, where Table G's ratio is read


@dataclass(frozen=True)
class Case:
    """One engine shape of the evaluation: a model on `tp` GPUs."""

    profile: str
    model: str  # architecture preset
    tp: int


CASES = (
    Case("h100-qwen2.5-7b-tp1", "qwen2.5-7b", 1),
    Case("h100-qwen2.5-7b-tp4", "qwen2.5-7b", 4),
    Case("h100-r1-distill-qwen-7b-tp4", "r1-distill-qwen-7b", 4),
    Case("h100-qwen2.5-32b-tp4", "qwen2.5-32b", 4),
    Case("h100-qwen2.5-32b-tp8", "qwen2.5-32b", 8),
    Case("h100-llama3.3-70b-tp8", "llama3.3-70b", 8),
)


def warm_start_quality(acc: AcceptanceModel, base_aligned: float, adapted: float) -> float:
    """The quality q whose accepted length is Table G's base-aligned share of the adapted one, at
    FastRL's default strategy (bisection: accepted length rises with quality)."""
    aligned = stats_for(acc, DrafterKind.EAGLE, 1.0, WARM_START_STRATEGY).mean
    target = aligned * base_aligned / adapted
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if stats_for(acc, DrafterKind.EAGLE, mid, WARM_START_STRATEGY).mean < target:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def acceptance_model(fit: PublishedFit, pub: Published) -> AcceptanceModel:
    a = fit.fitted.acceptance
    acc = AcceptanceModel(eagle_alpha_fresh=round(a.eagle_alpha_fresh, 4),
                          eagle_alpha_cold=COLD_ALPHA, eagle_shape=round(a.eagle_shape, 4),
                          staleness_per_update=STALENESS,
                          tree_width_gain=round(a.tree_width_gain, 4), **NGRAM)
    q = warm_start_quality(acc, pub.table_g["rl_base_aligned"], pub.table_g["rl_adapted"])
    return replace(acc, warm_start_quality=q)


def phases(arch: Architecture, gpu: GPU) -> PhaseCost:
    per_token = TRAIN_FLOPS_PER_PARAM * arch.params / (gpu.bf16_flops * TRAIN_MFU)
    return PhaseCost(train_gpu_s_per_token=sig(per_token),
                     weight_sync_s=sig(2 * arch.params / SYNC_BYTES_PER_S))


def build_profile(case: Case, arch: Architecture, gpu: GPU, fit: PublishedFit,
                  pub: Published) -> Profile:
    f = fit.fitted.factors
    dec = decode_cost(arch, gpu, case.tp, f)
    dr = drafter_cost(arch, gpu, case.tp, f, NGRAM_S_PER_SEQ)
    return Profile(
        name=case.profile,
        decode=replace(dec, overlap=round(dec.overlap, 4),
                       **{k: sig(getattr(dec, k))
                          for k in ("overhead_s", "per_seq_s", "weights_s", "compute_s_per_token",
                                    "kv_s_per_token", "prefill_s_per_token")}),
        drafter=replace(dr, **{k: sig(getattr(dr, k))
                               for k in ("eagle_step_s", "eagle_s_per_seq", "ngram_s_per_seq")}),
        acceptance=acceptance_model(fit, pub), learning=LEARNING, phases=phases(arch, gpu),
        description=f"{arch.name} ({arch.params / 1e9:.1f}B), bf16, {case.tp}x {gpu.name}, "
                    "SGLang-class engine with EAGLE trees; fitted to the TLT paper's "
                    "microbenchmarks, carried by shape.",
        source=_source(case, arch, gpu, fit, pub),
        fitted_on=("tlt-paper:table_c", "tlt-paper:table_d", "tlt-paper:depth_tv",
                   "tlt-paper:table_e"),
        fit_error_pct=round(fit.median_abs_error_pct, 3),
        cluster=Cluster(model=case.model, gpu="h100", tp=case.tp, framework="sglang"))


def _source(case: Case, arch: Architecture, gpu: GPU, fit: PublishedFit, pub: Published) -> str:
    f = fit.fitted.factors
    return (f"tlt paper --refit: least squares on log error over {len(fit.rows)} published "
            f"microbenchmarks ({pub.source}; Tables C, D, depth x TV, E), median |error| "
            f"{fit.median_abs_error_pct:.1f}%, max {fit.max_abs_error_pct:.1f}%. Fitted: "
            "acceptance alpha/shape/tree_width_gain of the RL-adapted drafter; verify MFU "
            f"{f.verify_mfu:.3f}, overlap {f.overlap:.3f}, drafter step fixed cost "
            f"{1e3 * f.drafter_launch_s:.3f} ms, drafter MFU {f.drafter_mfu:.3f}, benchmark "
            f"context {fit.fitted.context:.0f} tokens (a nuisance). From Table E's no-SD rate: "
            f"launch overhead {1e3 * f.launch_overhead_s:.3f} ms. Carried to {arch.name} "
            f"TP{case.tp} by shape ({gpu.source}; assumed: HBM efficiency {f.hbm_efficiency}, "
            f"all-reduce {1e6 * f.allreduce_s:.0f} us, per-sequence work {1e6 * f.per_seq_s:.0f} "
            f"us). warm_start_quality from Table G ({pub.table_g['rl_base_aligned']} vs "
            f"{pub.table_g['rl_adapted']} tokens per pass at 8_4_48). Assumed: n-gram acceptance = "
            "cpu-tiny's fit on our reasoning task; learning curve and staleness hand-set; policy "
            f"update {TRAIN_FLOPS_PER_PARAM} FLOPs/param/token at MFU {TRAIN_MFU}; weight sync "
            f"{2 * arch.params / 1e9:.0f} GB at {SYNC_BYTES_PER_S / 1e9:.0f} GB/s.")


def refit(published: str | Path = PUBLISHED,
          gpu: GPU = H100_SXM) -> tuple[PublishedFit, list[Profile]]:
    """Fit the published microbenchmarks and build every case's profile (what the presets hold)."""
    pub = load_published(published)
    archs = {c.model: load_architecture(c.model) for c in CASES}
    base = AcceptanceModel(eagle_alpha_fresh=0.8, eagle_alpha_cold=COLD_ALPHA, eagle_shape=0.8,
                           staleness_per_update=STALENESS, **NGRAM)
    fit = fit_published(pub, archs, gpu, base)
    return fit, [build_profile(c, archs[c.model], gpu, fit, pub) for c in CASES]
