"""A GPU check's MoE layers (real/gpu_check/moe.py) beside the simulator's expert-read form.

The simulator prices a pass's routed experts as the weights of the experts its tokens touch,
`sim.costs.experts_touched` (uniform routing: E(1 - (1 - k/E)^T)) times the bytes of one expert.
The check timed one layer of five MoE models at 1-2,048 tokens with random routing. Two checks:
- the experts touched, counted on the device, against the formula (the routing assumption's
  arithmetic, under the random router that makes it uniform);
- the layer's time against the form `floor + touched x expert bytes / bandwidth`: the bandwidth
  is the one the run measured, the floor (launches, router, the shared expert) is fitted on the
  one-token point alone, every other token count up to `MEMORY_BOUND_TOKENS` is a prediction, and
  so is each verify-over-decode ratio (a verify pass of B(K+1) tokens against a decode step of B):
  the ratio that decides what SD costs on a MoE target.
Above `MEMORY_BOUND_TOKENS` the layer turns compute-bound (every expert read, more tokens to
multiply), which the form does not price and the table says.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from real.gpu_check.plan import MOE_SD_BATCHES, MOE_SD_DRAFTS
from sim.costs import experts_touched
from workbench.calibrate.gpu_check.check_file import MeasuredCheck

MEMORY_BOUND_TOKENS = 256


@dataclass(frozen=True)
class LayerPoint:
    tokens: int
    measured_ms: float
    touched: float  # counted on the device (mean over the repeats)
    formula_touched: float
    predicted_ms: float  # floor + touched x bytes / bandwidth (the formula's touched)


@dataclass(frozen=True)
class SdRatio:
    batch: int
    drafts: int
    measured: float  # the layer's time at B(K+1) tokens over its time at B
    predicted: float


@dataclass(frozen=True)
class MoeLayerCheck:
    label: str
    experts: int
    top_k: int
    floor_ms: float  # fitted on the one-token point
    bandwidth_gbs: float
    points: list[LayerPoint]
    ratios: list[SdRatio]

    def time_error_pct(self) -> float:
        """Median |error| of the predicted time over the token counts the form covers, the fitted
        one-token point left out."""
        errs = [abs(p.predicted_ms / p.measured_ms - 1) for p in self.points
                if 1 < p.tokens <= MEMORY_BOUND_TOKENS]
        return 100 * statistics.median(errs) if errs else float("nan")

    def touched_error_pct(self) -> float:
        return 100 * max(abs(p.touched / p.formula_touched - 1) for p in self.points)

    def ratio_error_pct(self) -> float:
        errs = [abs(r.predicted / r.measured - 1) for r in self.ratios]
        return 100 * statistics.median(errs) if errs else float("nan")


def _shape_check(sh: dict) -> MoeLayerCheck | None:
    pts = sorted(sh.get("points", []), key=lambda p: p["tokens"])
    bw = sh.get("bandwidth_gbs")
    if not pts or not bw or pts[0]["tokens"] != 1:
        return None
    e, k = sh["experts"], sh["top_k"]
    read_ms = lambda touched: touched * sh["expert_mib"] * 2**20 / (bw * 1e9) * 1e3
    floor = max(pts[0]["ms"] - read_ms(experts_touched(1, k, e)), 0.0)
    points = [LayerPoint(p["tokens"], p["ms"], p["experts_touched"],
                         experts_touched(p["tokens"], k, e),
                         floor + read_ms(experts_touched(p["tokens"], k, e))) for p in pts]
    by = {p.tokens: p for p in points}
    ratios = [SdRatio(b, d, by[b * (d + 1)].measured_ms / by[b].measured_ms,
                      by[b * (d + 1)].predicted_ms / by[b].predicted_ms)
              for b in MOE_SD_BATCHES for d in MOE_SD_DRAFTS
              if b in by and b * (d + 1) in by and b * (d + 1) <= MEMORY_BOUND_TOKENS]
    return MoeLayerCheck(sh["label"], e, k, floor, bw, points, ratios)


def moe_layer_checks(check: MeasuredCheck) -> list[MoeLayerCheck]:
    """Every MoE shape the check timed (none: an older check without the section)."""
    shapes = [sh for s in check.sections.values() if s.get("kind") == "moe"
              for sh in s.get("moe", [])]
    return [c for c in (_shape_check(sh) for sh in shapes) if c is not None]
