"""A Profile for any (model, GPU, TP, framework) from NVIDIA's measured operator database.

`aiconfigurator-core` ships latencies of GEMMs, attention (decode, and prefill with a cached
prefix), all-reduce and the small element-wise ops, measured with vLLM, SGLang and TensorRT-LLM
on H100, H200, B200, B300, GB200, GB300, A100, L40S and more, and a compiled engine that walks a
model's op list at a given shape, interpolating between measured rows. `measure_grid` asks it
for every engine step the simulator's cost model needs, on one TP rank:

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

import hashlib
import json
import logging
import tempfile
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from sim.costs import draft_step_s, prefill_s, verify_step_s
from workbench.calibrate.attention_coverage import Coverage, attention_coverage, sweep_sentence
from workbench.calibrate.operators import fit_drafter
from workbench.contracts.fileio import sig
from workbench.contracts.architecture import Architecture, load_architecture
from workbench.contracts.cluster import Cluster
from workbench.contracts.energy import GpuPower
from workbench.contracts.policy import DrafterKind, Strategy
from workbench.contracts.profile import DATABASE_PREFIX, DecodeCost, DrafterCost, Profile
from workbench.contracts.schema import ConfigError

# Our GPU keys -> the package's system names (systems/<name>.yaml).
GPU_SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200",
               "gb300": "gb300", "a100": "a100_sxm", "l40s": "l40s", "rtx-pro-6000": "rtx_pro_6000_server",
               "h100-pcie": "h100_pcie", "a100-pcie": "a100_pcie", "l4": "l4", "a30": "a30"}
FRAMEWORKS = ("vllm", "sglang")
# The grid (batch x context x tokens to verify): small enough for a profile in a few seconds.
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (512, 2048, 8192, 32768)
VERIFY_BATCHES = (1, 4, 16, 32, 64)
VERIFY_TOKENS = (2, 4, 8, 16, 32, 48, 64)
VERIFY_CONTEXTS = (2048, 8192)
DRAFTER_CANDIDATES = ((1, 1), (1, 4), (1, 8), (4, 4), (16, 4), (32, 4), (64, 4), (64, 8))
DRAFTER_CONTEXT = 2048
PREFILL_TOKENS = (1024, 4096)
TRAIN_TOKENS = 4096
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
# Weight sync: resharding and pushing the bf16 weights to the rollout engines at an assumed effective
# 10 GB/s (the paper-fitted profiles' assumption; no database measures it).
SYNC_BYTES_PER_S = 10e9
# Bumped whenever a derived profile's numbers change for the same database (keys the disk cache).
DERIVATION = 3
# The one engine cost the operator database cannot hold: each EAGLE draft step's work outside the
# drafter's kernels (launches, top-k, tree bookkeeping in the engine). Its level is calibrated on the
# TLT paper's Table D alone (batch 1, Qwen2.5-32B TP4, H100, SGLang: its six rows give 0.571-0.601 ms
# per step, median 0.579; `gpu_validation.draft_overhead_from_table_d`), whose target decode step at
# batch 1 (context MICROBENCH_CONTEXT) the database puts at DRAFT_OVERHEAD_REF_STEP_S. Table E's SD
# speedups across GPUs show it neither fixed in ms nor proportional to the target's step (work on the
# host and on the GPU would do that), so it scales as (target step / reference step) **
# DRAFT_OVERHEAD_EXPONENT, the exponent fitted to those speedups on A100, H100 and B200 alone (Qwen2.5-7B
# TP1, target steps 3.4-11.3 ms; `gpu_validation.fit_overhead_exponent`). Table C (the reference's own
# shape) stays a prediction; on other models and TP degrees the exponent is an extrapolation.
DRAFT_STEP_OVERHEAD_S = 0.000572
MICROBENCH_CONTEXT = 2048  # the microbenchmarks' context (not published)
DRAFT_OVERHEAD_REF_STEP_S = 0.008246
DRAFT_OVERHEAD_EXPONENT = 0.37
# The other engine cost outside the kernels: host work per sequence in every SD pass, which SGLang
# and vLLM overlap with the GPU when decoding plainly and not when speculating
# (DrafterCost.sd_host_s_per_seq). Fitted on the EAGLE-3 paper's SGLang speedups by batch
# (traces/published/sd-by-batch.yaml, its `fit` series), jointly with the two constants above
# (`workbench/calibrate/sd_batch.py`, `tlt gpu-check`); the same in ms on every GPU, model and TP
# degree (work on the host: an extrapolation, stated).
SD_HOST_S_PER_SEQ = 7.9e-05


def draft_overhead_s(dec: DecodeCost, at_reference_s: float = DRAFT_STEP_OVERHEAD_S,
                     exponent: float = DRAFT_OVERHEAD_EXPONENT) -> float:
    """Each draft step's engine overhead on an engine whose target decode cost is `dec`."""
    step = verify_step_s(dec, 1, MICROBENCH_CONTEXT, Strategy.chain(0))
    return at_reference_s * (step / DRAFT_OVERHEAD_REF_STEP_S) ** exponent


@dataclass(frozen=True)
class Point:
    """One engine step the database answered, on one TP rank, in seconds."""

    op: str  # decode, verify, drafter, prefill, train
    batch: int
    context: int
    tokens: int  # verify: tokens per sequence; prefill/train: tokens in all
    topk: int
    step_s: float
    silicon_share: float  # share of the step's time from measured rows (the rest: interpolated/empirical)
    allreduce_s: float  # the TP all-reduces inside the step


def gpu_names() -> list[str]:
    """The GPU keys whose system spec and data the installed package holds."""
    root = _systems_root()
    return [k for k, v in GPU_SYSTEMS.items() if (root / f"{v}.yaml").is_file() and (root / "data" / v).is_dir()]


def _systems_root() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent / "systems"


def system_spec(gpu: str) -> dict:
    """The package's system spec of a GPU key (memory capacity, bandwidth, power, NCCL and other memory)."""
    import yaml

    path = _systems_root() / f"{system_of(gpu)}.yaml"
    if not path.is_file():
        raise ConfigError("--gpu", "gpu", gpu, "one of " + ", ".join(gpu_names()))
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def package_version() -> str:
    return metadata.version("aiconfigurator-core")


def system_of(gpu: str) -> str:
    if gpu not in GPU_SYSTEMS:
        raise ConfigError("--gpu", "gpu", gpu, "one of " + ", ".join(GPU_SYSTEMS))
    return GPU_SYSTEMS[gpu]


def latest_version(gpu: str, framework: str) -> str:
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version

    if framework not in FRAMEWORKS:
        raise ConfigError("--framework", "framework", framework, "one of " + ", ".join(FRAMEWORKS))
    v = get_latest_database_version(system_of(gpu), framework)
    if not v:
        raise ConfigError("--framework", "framework", framework, f"a framework the database measured on {gpu}")
    return v


def _config_dir(arch_name: str) -> str:
    """The package reads a directory holding a config.json: the architecture's, copied once."""
    path = Path(arch_name)
    presets = Path(__file__).resolve().parents[1] / "contracts" / "presets" / "architectures"
    src = path if path.is_file() else presets / f"{arch_name}.json"
    data = json.loads(src.read_text(encoding="utf-8"))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    d = Path(tempfile.gettempdir()) / "tlt-aic-configs" / f"{src.stem}-{digest}"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "config.json").is_file():
        (d / "config.json").write_text(json.dumps({k: v for k, v in data.items() if not k.startswith("_")}))
    return str(d)


class Engine:
    """The package's compiled engine for one cluster: step times in seconds on one TP rank."""

    def __init__(self, arch: str, gpu: str, tp: int, framework: str, version: str = ""):
        from aiconfigurator_core.sdk import config
        from aiconfigurator_core.sdk.models import get_model
        from aiconfigurator_core.sdk.perf_database import get_database

        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        self.version = version or latest_version(gpu, framework)
        self.system = system_of(gpu)
        self.db = get_database(self.system, framework, self.version)
        if self.db is None:
            raise ConfigError("--version", "version", self.version, f"a {framework} version measured on {gpu}")
        cdir = _config_dir(arch)
        try:
            self.model = get_model(cdir, config.ModelConfig(tp_size=tp), framework)
            self.layer = get_model(cdir, config.ModelConfig(tp_size=tp, overwrite_num_layers=1), framework)
            self.full = get_model(cdir, config.ModelConfig(tp_size=1), framework)
        except (ValueError, AssertionError, KeyError) as exc:
            raise ConfigError("--tp", "tp", tp, f"a TP degree the model's heads split into ({exc})") from None

    @staticmethod
    def _ops(model, context: bool) -> list[int]:
        return list(range(len(model.context_ops if context else model.generation_ops)))

    def _gen(self, model, batch: int, s: int, x: int | None = None) -> list[tuple]:
        from aiconfigurator_core.sdk import rust_engine_step as r

        return r.evaluate_generation_ops_with_rust(model, self.db, indices=self._ops(model, False),
                                                   batch_size=batch, s=s, x=x)

    def _ctx(self, model, batch: int, s: int, prefix: int) -> list[tuple]:
        from aiconfigurator_core.sdk import rust_engine_step as r

        return r.evaluate_context_ops_with_rust(model, self.db, indices=self._ops(model, True),
                                                batch_size=batch, s=s, prefix=prefix)

    def decode(self, batch: int, context: int) -> tuple[float, list[tuple]]:
        ops = self._gen(self.model, batch, context)
        return _total(ops), ops

    def verify(self, batch: int, context: int, tokens: int) -> tuple[float, list[tuple]]:
        if tokens == 1:
            return self.decode(batch, context)
        gen = self._gen(self.model, batch, context, x=batch * tokens)
        read_kv = next(o for o in self._gen(self.model, batch, context) if o[0].endswith("attention"))
        ops = [o for o in self._ctx(self.model, batch, tokens, context) if not o[0].endswith("logits_gemm")]
        # Verifying reads each sequence's KV cache at least once, as a decode step does (measured);
        # the extend rows' prefix blend can come out below that at long contexts, so take the larger.
        ops = [max(o, read_kv, key=lambda v: v[1]) if o[0].endswith("attention") else o for o in ops]
        ops += [o for o in gen if o[0].endswith("logits_gemm")]
        return _total(ops), ops

    def drafter(self, batch: int, topk: int, context: int) -> tuple[float, list[tuple]]:
        n = batch * topk
        ops = [o for o in self._gen(self.layer, n, context, x=n) if not o[0].endswith("embedding")]
        proj = [o for o in ops if o[0].endswith("proj_gemm")]
        ops += [("fc_gemm (2 x proj)", 2 * p[1], 2 * p[2], p[3]) for p in proj]
        return _total(ops), ops

    def prefill(self, tokens: int) -> tuple[float, list[tuple]]:
        ops = self._ctx(self.model, 1, tokens, 0)
        return _total(ops), ops

    def train_forward(self, model, tokens: int) -> tuple[float, list[tuple]]:
        """One forward over a packed sequence with the LM head on every token."""
        ops = [o for o in self._ctx(model, 1, tokens, 0) if not o[0].endswith("logits_gemm")]
        ops += [o for o in self._gen(model, 1, tokens, x=tokens) if o[0].endswith("logits_gemm")]
        return _total(ops), ops

    def attention_dir(self, framework: str) -> Path:
        """Where the package keeps this GPU's attention rows for `framework` at this version."""
        return _systems_root() / "data" / self.system / "attention" / framework / self.version

    def coverage(self, arch: Architecture, tp: int, framework: str) -> Coverage:
        return attention_coverage(self.attention_dir(framework), arch, tp)


def _total(ops: list[tuple]) -> float:
    return sum(o[1] for o in ops) / 1e3


def _silicon(ops: list[tuple]) -> float:
    total = sum(o[1] for o in ops)
    return sum(o[1] for o in ops if o[3] == "silicon") / total if total > 0 else 0.0


def _allreduce(ops: list[tuple]) -> float:
    return sum(o[1] for o in ops if "_ar" in o[0] or o[0].endswith("p2p")) / 1e3


def measure_grid(eng: Engine) -> list[Point]:
    """Every step of the grid, answered by the database (a few hundred engine calls, ~1 s)."""
    pts: list[Point] = []

    def add(op: str, b: int, c: int, t: int, k: int, res: tuple[float, list[tuple]]) -> None:
        pts.append(Point(op, b, c, t, k, res[0], _silicon(res[1]), _allreduce(res[1])))

    for b in DECODE_BATCHES:
        for c in DECODE_CONTEXTS:
            add("decode", b, c, 1, 1, eng.decode(b, c))
    for b in VERIFY_BATCHES:
        for c in VERIFY_CONTEXTS:
            for t in VERIFY_TOKENS:
                add("verify", b, c, t, 1, eng.verify(b, c, t))
    for b, k in DRAFTER_CANDIDATES:
        add("drafter", b, DRAFTER_CONTEXT, 1, k, eng.drafter(b, k, DRAFTER_CONTEXT))
    for p in PREFILL_TOKENS:
        add("prefill", 0, 0, p, 1, eng.prefill(p))
    add("train", 1, 0, TRAIN_TOKENS, 1, eng.train_forward(eng.full, TRAIN_TOKENS))
    add("drafter_train", 1, 0, TRAIN_TOKENS, 1, eng.train_forward(eng.layer, TRAIN_TOKENS))
    return pts


def predict(c: DecodeCost, d: DrafterCost, p: Point) -> float:
    """A point's time in the simulator's own functions (sim/costs.py)."""
    if p.op == "drafter":
        return draft_step_s(d, DrafterKind.EAGLE, p.batch, Strategy(1, p.topk, 1 + p.topk))
    if p.op == "prefill":
        return prefill_s(c, p.tokens) + verify_step_s(c, 0, 0.0, 0)
    return verify_step_s(c, p.batch, p.context, Strategy.chain(p.tokens - 1))


_DECODE = ("overhead_s", "per_seq_s", "weights_s", "compute_s_per_token", "kv_s_per_token", "overlap")


def fit_decode(points: list[Point]) -> DecodeCost:
    """DecodeCost by least squares on log(predicted / database) over the decode and verify points;
    prefill_s_per_token is the marginal cost between the two prefill lengths."""
    steps = [p for p in points if p.op in ("decode", "verify")]
    pre = sorted((p for p in points if p.op == "prefill"), key=lambda p: p.tokens)
    per_prompt_token = (pre[-1].step_s - pre[0].step_s) / (pre[-1].tokens - pre[0].tokens)
    y = np.array([p.step_s for p in steps])
    scale = np.array([1e-3, 1e-5, 1e-3, 1e-6, 1e-8, 1.0])

    def cost(x: np.ndarray) -> DecodeCost:
        v = x * scale
        return DecodeCost(*(float(a) for a in v[:5]), prefill_s_per_token=per_prompt_token, overlap=float(v[5]))

    def resid(x: np.ndarray) -> np.ndarray:
        c = cost(x)
        return np.log(np.array([predict(c, DrafterCost(0, 0, 0), p) for p in steps]) / y)

    b1 = min(p.step_s for p in steps)
    start = np.array([0.2 * b1, 1e-6, 0.8 * b1, 1e-6, 1e-8, 0.5]) / scale
    res = least_squares(resid, start, bounds=(np.zeros(6), np.array([np.inf] * 5 + [1.0])), x_scale="jac")
    return cost(res.x)


def _rounded(c: DecodeCost) -> DecodeCost:
    """Fixed significant digits; a parameter the fit drove to its bound (below a picosecond) is 0."""
    keep = lambda v: sig(v) if v > 1e-12 else 0.0
    names = _DECODE[:5] + ("prefill_s_per_token",)
    return replace(c, overlap=round(c.overlap, 3), **{k: keep(getattr(c, k)) for k in names})


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


def with_draft_overhead(prof: Profile, overhead_s: float) -> Profile:
    """A database-only profile with each EAGLE draft step's engine overhead added."""
    return replace(prof, drafter=replace(prof.drafter, eagle_step_s=sig(prof.drafter.eagle_step_s + overhead_s)))


def derive_profile(arch: str, gpu: str, tp: int, framework: str, base: Profile, name: str,
                   version: str = "", overhead_at_reference_s: float = DRAFT_STEP_OVERHEAD_S,
                   overhead_exponent: float = DRAFT_OVERHEAD_EXPONENT,
                   sd_host_s_per_seq: float = SD_HOST_S_PER_SEQ) -> MeasuredProfile:
    """The Profile of (arch, gpu, tp, framework): every cost from the database; what it cannot give
    (acceptance, the drafter's learning curve's shape, n-gram lookups) is `base`'s, the weight sync an
    assumed bandwidth, each draft step's overhead `draft_overhead_s` (0 at reference: none) and
    the SD pass's host work per sequence."""
    a = load_architecture(arch)
    eng = Engine(arch, gpu, tp, framework, version)
    pts = measure_grid(eng)
    dec = _rounded(fit_decode(pts))
    # The kernels first: the host work is added with the overhead, after the form's errors.
    dr = replace(fit_drafter(_drafter_frame(pts), base.drafter), sd_host_s_per_seq=0.0)
    by = {p.op: p for p in pts if p.op in ("train", "drafter_train")}
    train_fwd = by["train"].step_s / by["train"].tokens
    drafter_fwd = by["drafter_train"].step_s / by["drafter_train"].tokens
    phases = replace(base.phases, train_gpu_s_per_token=sig(TRAIN_FORWARDS * train_fwd),
                     weight_sync_s=sig(2 * a.params / SYNC_BYTES_PER_S))
    learning = replace(base.learning, train_tokens_per_s=sig(1.0 / (DRAFTER_TRAIN_FORWARDS * drafter_fwd)))
    watts = float(eng.db.system_spec["gpu"]["power"])
    power = GpuPower(decode_w=sig(DECODE_POWER_SHARE * watts), idle_w=sig(IDLE_POWER_SHARE * watts),
                     train_w=sig(TRAIN_POWER_SHARE * watts),
                     source=f"board power {watts:g} W (aiconfigurator-core's system spec) x assumed shares "
                            f"{DECODE_POWER_SHARE} decoding, {IDLE_POWER_SHARE} idle, {TRAIN_POWER_SHARE} training")
    cluster = Cluster(model=model_name(arch), gpu=gpu, tp=tp, framework=framework, framework_version=eng.version)
    cov = eng.coverage(a, tp, framework)
    prof = replace(base, name=name, decode=dec, drafter=dr, phases=phases, learning=learning, cluster=cluster,
                   power=power,
                   fitted_on=(f"{DATABASE_PREFIX}{cluster.label}, aiconfigurator-core {package_version()}",))
    errs = [100.0 * (predict(prof.decode, prof.drafter, p) / p.step_s - 1.0)
            for p in pts if p.op in ("decode", "verify", "drafter", "prefill")]
    fit = MeasuredProfile(prof, pts, errs, cov)
    overhead = draft_overhead_s(dec, overhead_at_reference_s, overhead_exponent)
    prof = with_draft_overhead(prof, overhead)
    prof = replace(prof, drafter=replace(prof.drafter, sd_host_s_per_seq=sd_host_s_per_seq))
    fit = replace(fit, profile=prof)
    prof = replace(prof, fit_error_pct=sig(fit.median_abs_error_pct, 4),
                   source=describe(fit, a, eng, overhead),
                   description=f"{model_name(arch)} ({a.params / 1e9:.1f}B), bf16, {tp}x {gpu}, {framework} "
                               f"{eng.version}: costs "
                               f"from NVIDIA's measured operator database (aiconfigurator-core {package_version()}); "
                               f"acceptance and learning curve from {base.name}")
    prof.check()
    return replace(fit, profile=prof)


def _drafter_frame(pts: list[Point]):
    import pandas as pd

    d = [p for p in pts if p.op == "drafter"]
    return pd.DataFrame({"step_s": [p.step_s for p in d], "batch": [p.batch for p in d], "topk": [p.topk for p in d]})


def describe(fit: MeasuredProfile, a: Architecture, eng: Engine, overhead: float) -> str:
    """The profile's `source`: package, GPU, framework and version; measured vs interpolated vs
    extrapolated; the form's fit error; what was assumed."""
    pts, cov, c = fit.points, fit.coverage, fit.profile.cluster
    silicon = float(np.average([p.silicon_share for p in pts], weights=[p.step_s for p in pts]))
    ar = max((p.allreduce_s for p in pts if p.op == "decode" and p.batch == 1), default=0.0)
    sweep = sweep_sentence(cov, a, eng.attention_dir(c.framework), eng.decode, LONG_CONTEXT,
                           DECODE_BATCHES)
    return (f"derived by workbench/calibrate/measured_gpu.py from aiconfigurator-core {package_version()} "
            f"(NVIDIA's measured operator latencies) for {eng.system}, {c.framework} {c.framework_version}, TP{c.tp} "
            f"(one rank's shapes: {cov.heads} heads, {cov.kv_heads} KV heads), bf16. {len(pts)} database steps: decode "
            f"B {DECODE_BATCHES[0]}-{DECODE_BATCHES[-1]} x C {DECODE_CONTEXTS[0]}-{DECODE_CONTEXTS[-1]}, verify of "
            f"{VERIFY_TOKENS[0]}-{VERIFY_TOKENS[-1]} tokens (an extend over the prefix), EAGLE drafter (1 layer + LM "
            f"head; fc as 2 o-projections) at B x top-k {DRAFTER_CANDIDATES[0][0]}-{64 * 8}, prefill, training "
            f"forward. "
            f"Time-weighted {100 * silicon:.0f}% from measured (silicon) rows, interpolated between them by shape; "
            f"the rest from the package's empirical formulas (norms, activations, embedding) and its prefix-attention "
            f"blend. {sweep} TP all-reduces "
            f"{1e3 * ar:.3f} ms per decode step at B=1 (measured custom all-reduce). Form fitted by least squares on "
            f"log ratios: median |error| {fit.median_abs_error_pct:.1f}%, max {fit.max_abs_error_pct:.1f}% over "
            f"{len(fit.errors_pct)} points. Training: {TRAIN_FORWARDS} forwards per token (fwd+bwd, recompute, old and "
            f"reference log-probs) of the unsharded model at {TRAIN_TOKENS} packed tokens; drafter training "
            f"{DRAFTER_TRAIN_FORWARDS} forwards of its layer + head. Weight sync: {2 * a.params / 1e9:.0f} GB at an "
            f"assumed {SYNC_BYTES_PER_S / 1e9:.0f} GB/s. Energy: board power "
            f"{eng.db.system_spec['gpu']['power']} W "
            f"(package's system spec) x assumed shares {DECODE_POWER_SHARE} decoding, {TRAIN_POWER_SHARE} training, "
            f"{IDLE_POWER_SHARE} idle (the database's rows carry no energy for these engines). Not in the database: "
            f"each EAGLE draft step's engine work outside its kernels, added to eagle_step_s: "
            f"{1e3 * overhead:.3f} ms ({1e3 * DRAFT_STEP_OVERHEAD_S:.2f} ms at the TLT paper's Table D, scaled by "
            f"this engine's target step to the power {DRAFT_OVERHEAD_EXPONENT}, fitted to its "
            "Table E); "
            "and the host work per sequence of every SD pass, sd_host_s_per_seq "
            f"{1e3 * fit.profile.drafter.sd_host_s_per_seq:.3f} ms (not overlapped with the GPU "
            "when speculating; fitted on SGLang's SD speedups by batch).")


def model_name(arch: str) -> str:
    """A model's short name: the preset's, or a config file's (the package's `Org--Name_config.json`)."""
    p = Path(arch)
    if not p.is_file():
        return arch  # a preset name (its dots are not a suffix: qwen2.5-7b)
    stem = p.parent.name if p.name == "config.json" else p.stem
    return stem.removesuffix("_config")
