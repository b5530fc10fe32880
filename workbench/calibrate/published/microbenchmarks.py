"""Published microbenchmarks as measurements: fit the GPU cost and tree-acceptance model to them.

`traces/published/tlt-paper.yaml` holds the TLT paper's tables. Its microbenchmarks (Table C:
SD speedup vs batch for 16-64 tokens to verify; Table D and the depth x tokens grid: accepted
length and speedup at batch 1; Table E: Qwen2.5-7B decode tokens/s at batch 1 with and without
SD) are to a profile what traces are: measurements of an engine. `fit_published` fits, in the
simulator's own forms (sim/costs.py, sim/acceptance.py):

- the acceptance model of the RL-adapted EAGLE drafter: alpha, shape and tree_width_gain;
- the engine factors the shapes cannot give (workbench/calibrate/published/shapes.py): verify MFU,
  overlap of weight reading and compute, the drafter step's fixed cost and the drafter's MFU;
- a nuisance: the benchmarks' mean context (not published; it sets the KV reading per sequence).

The absolute scale comes from Table E's no-SD rate (Qwen2.5-7B, TP1, batch 1): the launch
overhead is what is left of its step after reading the weights and the KV cache, and carries
to the other models with an all-reduce term for TP. Residuals are log ratios, all weighted
alike. The end-to-end tables (A) and Table G's RL accepted lengths are what the simulator then
predicts (workbench/paper/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from sim.acceptance import stats_for
from sim.costs import segment_s
from workbench.calibrate.published.shapes import (
    GPU,
    EngineFactors,
    decode_cost,
    drafter_cost,
    kv_s_per_token,
    weights_s,
)
from workbench.contracts.architecture import Architecture
from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import AcceptanceModel
from workbench.contracts.schema import ConfigError

PUBLISHED = Path(__file__).resolve().parents[3] / "traces" / "published" / "tlt-paper.yaml"
NO_SD = Strategy.chain(0)


@dataclass(frozen=True)
class Measurement:
    """One published microbenchmark number."""

    table: str  # "C", "D", "depth_tv", "E"
    kind: str  # "accepted_length" or "speedup" (SD over no SD, same batch)
    model: str  # the architecture preset it was measured on
    tp: int
    batch: int
    strategy: Strategy
    value: float


@dataclass(frozen=True)
class EndToEnd:
    model: str
    system: str
    speedup: float


@dataclass(frozen=True)
class Published:
    source: str
    measurements: tuple[Measurement, ...]
    table_a: tuple[EndToEnd, ...]
    table_e_tokens_per_s: tuple[float, float]  # (without SD, with SD), batch 1
    table_e_model: str
    table_e_strategy: Strategy
    table_g: dict[str, float]  # rl_base_aligned, rl_adapted, serving_*


def load_published(path: str | Path = PUBLISHED) -> Published:
    """The published tables as measurements; a malformed file is refused naming the table."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return _parse(data)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), "<file>", "unreadable",
                          f"the published-tables YAML ({exc})") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(str(path), "<tables>", repr(exc),
                          "the layout of traces/published/tlt-paper.yaml") from None


def _parse(d: dict) -> Published:
    rows: list[Measurement] = []
    c = d["table_c"]
    for tokens, values in c["speedup"].items():
        for batch, v in zip(c["batches"], values):
            rows.append(Measurement("C", "speedup", c["model"], int(c["tp"]), int(batch),
                                    Strategy(int(c["steps"]), int(c["topk"]), int(tokens)),
                                    float(v)))
    t = d["table_d"]
    for r in t["rows"]:
        s = Strategy(int(t["steps"]), int(r["topk"]), int(t["tokens"]))
        rows.append(Measurement("D", "accepted_length", c["model"], int(c["tp"]), 1, s,
                                float(r["accepted_length"])))
        rows.append(Measurement("D", "speedup", c["model"], int(c["tp"]), 1, s,
                                float(r["speedup"])))
    for r in d["depth_tv"]:
        s = Strategy(int(r["steps"]), int(r["topk"]), int(r["tokens"]))
        kind = "accepted_length" if "accepted_length" in r else "speedup"
        rows.append(Measurement("depth_tv", kind, c["model"], int(c["tp"]), 1, s, float(r[kind])))
    e = d["table_e"]
    strategy = Strategy.parse(e["strategy"])
    without, with_sd = float(e["without_sd_tokens_per_s"]), float(e["with_sd_tokens_per_s"])
    rows.append(Measurement("E", "speedup", e["model"], int(e["tp"]), 1, strategy,
                            with_sd / without))
    a = tuple(EndToEnd(r["model"], r["system"], float(r["speedup"])) for r in d["table_a"])
    return Published(str(d.get("source", "")), tuple(rows), a, (without, with_sd), e["model"],
                     strategy, {k: float(v) for k, v in d["table_g"].items()})


@dataclass(frozen=True)
class Fitted:
    """What the fit found: the drafter's acceptance, the engine factors and the benchmarks'
    context."""

    acceptance: AcceptanceModel
    factors: EngineFactors
    context: float  # the microbenchmarks' mean context, tokens (a nuisance: not published)


@dataclass(frozen=True)
class FitRow:
    measurement: Measurement
    predicted: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.measurement.value - 1.0)


@dataclass(frozen=True)
class PublishedFit:
    fitted: Fitted
    rows: tuple[FitRow, ...]

    @property
    def median_abs_error_pct(self) -> float:
        return float(np.median([abs(r.error_pct) for r in self.rows]))

    @property
    def max_abs_error_pct(self) -> float:
        return float(max(abs(r.error_pct) for r in self.rows))


_NAMES = ("alpha", "shape", "width_gain", "verify_mfu", "overlap", "drafter_launch_s",
          "drafter_mfu", "context")
_START = (0.8, 0.8, 0.4, 0.4, 0.5, 3e-4, 0.3, 4000.0)
_LOW = (0.05, 0.1, 0.0, 0.02, 0.0, 0.0, 0.01, 0.0)
_HIGH = (0.999, 2.0, 3.0, 1.0, 1.0, 0.01, 1.0, 32768.0)


def launch_overhead_s(pub: Published, arch: Architecture, gpu: GPU, factors: EngineFactors,
                      context: float) -> float:
    """Table E's batch-1 no-SD step (TP1) less reading the weights and the KV cache and the
    per-sequence work."""
    step = 1.0 / pub.table_e_tokens_per_s[0]
    kv = kv_s_per_token(arch, gpu, 1, factors) * context
    rest = step - weights_s(arch, gpu, 1, factors) - kv - factors.per_seq_s
    if rest <= 0:
        raise ValueError(f"Table E's no-SD step ({1e3 * step:.2f} ms) is shorter than reading "
                         f"{arch.name}'s weights at the assumed bandwidth efficiency: the shape "
                         "assumptions do not hold")
    return rest


def unpack(x: np.ndarray, pub: Published, archs: dict[str, Architecture], gpu: GPU,
           base: AcceptanceModel) -> Fitted:
    p = dict(zip(_NAMES, (float(v) for v in x)))
    acceptance = replace(base, eagle_alpha_fresh=p["alpha"], eagle_shape=p["shape"],
                         tree_width_gain=p["width_gain"],
                         eagle_alpha_cold=min(base.eagle_alpha_cold, p["alpha"]))
    factors = EngineFactors(launch_overhead_s=0.0, verify_mfu=p["verify_mfu"], overlap=p["overlap"],
                            drafter_launch_s=p["drafter_launch_s"], drafter_mfu=p["drafter_mfu"])
    launch = launch_overhead_s(pub, archs[pub.table_e_model], gpu, factors, p["context"])
    return Fitted(acceptance, replace(factors, launch_overhead_s=launch), p["context"])


def predict(m: Measurement, fitted: Fitted, arch: Architecture, gpu: GPU) -> float:
    """The simulator's value for one microbenchmark: tokens per pass, or the goodput ratio
    (B x E[L] / segment time) with SD over without, at the same batch and context."""
    accept = stats_for(fitted.acceptance, DrafterKind.EAGLE, 1.0, m.strategy).mean
    if m.kind == "accepted_length":
        return accept
    dec = decode_cost(arch, gpu, m.tp, fitted.factors)
    dr = drafter_cost(arch, gpu, m.tp, fitted.factors, 0.0)
    with_sd = segment_s(dec, dr, DrafterKind.EAGLE, m.batch, fitted.context, m.strategy)
    without = segment_s(dec, dr, DrafterKind.NONE, m.batch, fitted.context, NO_SD)
    return accept * without / with_sd


def fit_published(pub: Published, archs: dict[str, Architecture], gpu: GPU,
                  base: AcceptanceModel) -> PublishedFit:
    """Least squares on log(predicted / published) over every microbenchmark."""
    meas = pub.measurements

    def resid(x: np.ndarray) -> np.ndarray:
        try:
            f = unpack(x, pub, archs, gpu, base)
        except ValueError:
            return np.full(len(meas), 10.0)
        return np.array([math.log(predict(m, f, archs[m.model], gpu) / m.value) for m in meas])

    res = least_squares(resid, np.array(_START), bounds=(np.array(_LOW), np.array(_HIGH)),
                        x_scale="jac")
    fitted = unpack(res.x, pub, archs, gpu, base)
    rows = tuple(FitRow(m, predict(m, fitted, archs[m.model], gpu)) for m in meas)
    return PublishedFit(fitted, rows)
