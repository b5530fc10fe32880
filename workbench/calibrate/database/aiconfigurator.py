"""NVIDIA's measured operator database (aiconfigurator-core) as this workbench asks it: the GPUs
and frameworks it holds, the compiled engine for one cluster (`Engine`: a step's time in seconds on
one TP rank, op by op), and the grid of engine steps a profile is fitted to (`measure_grid`).
measured_gpu.py fits the simulator's cost forms to that grid.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from workbench.calibrate.database.attention_coverage import Coverage, attention_coverage
from workbench.calibrate.database.config_support import priced_as, respace_heads
from workbench.calibrate.database.experts import (
    check_moe_rows,
    drafter_config,
    moe_rows,
    resolve_ep,
)
from workbench.contracts.architecture import Architecture, from_hf_config, read_config
from workbench.contracts.schema import ConfigError

# Our GPU keys -> the package's system names (systems/<name>.yaml).
GPU_SYSTEMS = {
    "h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm",
    "gb200": "gb200", "gb300": "gb300", "a100": "a100_sxm", "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server", "h100-pcie": "h100_pcie", "a100-pcie": "a100_pcie",
    "l4": "l4", "a30": "a30",
}
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


@dataclass(frozen=True)
class Point:
    """One engine step the database answered, on one TP rank, in seconds."""

    op: str  # decode, verify, drafter, prefill, train
    batch: int
    context: int
    tokens: int  # verify: tokens per sequence; prefill/train: tokens in all
    topk: int
    step_s: float
    # The share of the step's time from measured rows (the rest: interpolated or empirical).
    silicon_share: float
    allreduce_s: float  # the TP all-reduces inside the step


def gpu_names() -> list[str]:
    """The GPU keys whose system spec and data the installed package holds."""
    root = _systems_root()
    return [k for k, v in GPU_SYSTEMS.items()
            if (root / f"{v}.yaml").is_file() and (root / "data" / v).is_dir()]


def _systems_root() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent / "systems"


def system_spec(gpu: str) -> dict:
    """The package's system spec of a GPU key (memory capacity, bandwidth, power, NCCL and other
    memory)."""
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
        raise ConfigError("--framework", "framework", framework,
                          f"a framework the database measured on {gpu}")
    return v


def write_config(config: dict, into: Path, stem: str) -> str:
    """A directory holding `config` as config.json (the package reads directories), made in
    `into` (a temporary directory the engine removes once its models are built)."""
    d = into / stem
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    return str(d)


class Engine:
    """The package's compiled engine for one cluster: step times in seconds on one TP rank.

    `ep`: a mixture-of-experts model's expert-parallel degree (None: the framework's default,
    workbench/calibrate/database/experts.py). `priced` says what the database prices for the
    config (itself, or a stand-in of the same shape, config_support.py)."""

    def __init__(self, arch: str, gpu: str, tp: int, framework: str, version: str = "",
                 ep: int | None = None):
        from aiconfigurator_core.sdk.perf_database import get_database

        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        self.version = version or latest_version(gpu, framework)
        self.system = system_of(gpu)
        self.db = get_database(self.system, framework, self.version)
        if self.db is None:
            raise ConfigError("--version", "version", self.version,
                              f"a {framework} version measured on {gpu}")
        data, path = read_config(arch)
        self.source = str(path)
        self.priced = respace_heads(priced_as(data, self.source), self.head_sizes(framework))
        self.arch = from_hf_config(self.priced.config, path.stem, self.source)
        heads = self.arch.heads
        if tp < 1 or heads % tp:
            raise ConfigError("--tp", "tp", tp, f"a TP degree that divides the model's {heads} "
                              f"attention heads (num_attention_heads in {self.source})")
        self.ep = resolve_ep(self.arch, tp, framework, ep, self.source)
        self.ep_default = ep is None
        # the configs are read while the models are built; nothing is left in the temp folder
        with tempfile.TemporaryDirectory(prefix="tlt-aic-config-") as tmp:
            self._build_all(Path(tmp), data, path, tp, framework, gpu)

    def _build_all(self, tmp: Path, data: dict, path: Path, tp: int, framework: str,
                   gpu: str) -> None:
        cdir = write_config(self.priced.config, tmp, path.stem if path.name != "config.json"
                            else path.parent.name)
        moe = self.arch.is_moe
        self.model = self._build(cdir, tp, 0, framework, self.ep if moe else None)
        self.full = self._build(cdir, 1, 0, framework, 1 if moe else None)
        if self.arch.is_moe:
            dtype = self.model.config.moe_quant_mode.name
            rows = moe_rows(self.moe_dir(framework), self.arch, dtype)
            check_moe_rows(rows, self.arch, tp, self.ep, f"{gpu} {framework} {self.version}",
                           self.source)
            check_moe_rows(rows, self.arch, 1, 1, f"{gpu} {framework} {self.version} (TP1, for "
                           "the training forward)", self.source)
        if self.arch.is_moe or self.arch.mla is not None:
            head = drafter_config(data, self.arch)
            # a head whose heads the TP does not split is priced at the largest TP that does
            self.layer = self._build(write_config(head, tmp, "eagle-head"),
                                     math.gcd(tp, head["num_attention_heads"]), 0, framework, None)
        else:
            self.layer = self._build(cdir, tp, 1, framework, None)

    def _build(self, cdir: str, tp: int, layers: int, framework: str, ep: int | None):
        """The package's model at `tp` (`layers` > 0: only that many layers; `ep`: its experts'
        parallel degree, None for a dense model)."""
        from aiconfigurator_core.sdk import common, config
        from aiconfigurator_core.sdk.models import get_model

        kw = {} if ep is None else {"moe_tp_size": tp // ep, "moe_ep_size": ep}
        if self.arch.quant != "bf16":  # the engines' KV cache: the model's bf16 by default
            kw.update(kvcache_quant_mode=common.KVCacheQuantMode.bfloat16,
                      fmha_quant_mode=common.FMHAQuantMode.bfloat16)
        try:
            return get_model(cdir, config.ModelConfig(tp_size=tp, overwrite_num_layers=layers,
                                                      **kw), framework)
        except (ValueError, AssertionError, KeyError) as exc:
            raise ConfigError(self.source, "architectures", self.priced.family,
                              f"a model the database's engine can build at TP{tp} ({exc})"
                              ) from None

    def refusal(self, exc: Exception, where: str) -> ConfigError:
        """The package's "no rows for this shape" as a refusal naming the config field whose value
        the database never measured (`where`: GPU, framework and version)."""
        text = str(exc).split(" at /")[0].replace("\n", " ")
        a = self.arch
        if "MLA" in text:
            field, value = "kv_lora_rank", a.mla.kv_rank if a.mla else None
        elif "attention" in text:
            field, value = "num_key_value_heads", a.kv_heads
        elif "MoE" in text and a.experts:
            field, value = "num_experts", a.experts.count
        else:
            field, value = "architectures", self.priced.family
        return ConfigError(self.source, field, value,
                           f"a shape the database measured on {where} (it has no rows for this "
                           f"one: {text}; another --framework or --gpu may hold them)")

    def head_sizes(self, framework: str) -> tuple[int, ...]:
        """The head sizes whose decode attention this GPU x framework x version measured."""
        import pandas as pd

        path = self.attention_dir(framework) / "generation_attention_perf.parquet"
        if not path.is_file():
            return ()
        return tuple(sorted(int(d) for d in pd.read_parquet(path, columns=["head_dim"]).head_dim
                            .unique()))

    def moe_dir(self, framework: str) -> Path:
        """Where the package keeps this GPU's MoE kernel rows for `framework` at this version."""
        return _systems_root() / "data" / self.system / "moe" / framework / self.version

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
        decode = self._gen(self.model, batch, context)
        read_kv = next((o for o in decode if o[0].endswith("attention")), None)
        extend = self._ctx(self.model, batch, tokens, context)
        ops = [o for o in extend if not o[0].endswith("logits_gemm")]
        # Verifying reads each sequence's KV cache at least once, as a decode step does (measured);
        # the extend rows' prefix blend can come out below that at long contexts, so take the
        # larger (MLA's block holds its projections too: no separate attention row to compare).
        ops = [max(o, read_kv, key=lambda v: v[1]) if read_kv and o[0].endswith("attention")
               else o for o in ops]
        ops += [o for o in gen if o[0].endswith("logits_gemm")]
        return _total(ops), ops

    def drafter(self, batch: int, topk: int, context: int) -> tuple[float, list[tuple]]:
        n = batch * topk
        ops = [o for o in self._gen(self.layer, n, context, x=n) if not o[0].endswith("embedding")]
        proj = [o for o in ops if o[0].endswith("proj_gemm")]
        ops += [("fc_gemm (2 x proj)", 2 * p[1], 2 * p[2], p[3]) for p in proj]
        return _total(ops), ops

    def drafter_head_s(self, context: int) -> float:
        """One drafter forward's LM head at batch 1: a GEMM over the target's full vocabulary."""
        _, ops = self.drafter(1, 1, context)
        return sum(o[1] for o in ops if o[0].endswith("logits_gemm")) / 1e3

    def prefill(self, tokens: int) -> tuple[float, list[tuple]]:
        ops = self._ctx(self.model, 1, tokens, 0)
        return _total(ops), ops

    def train_forward(self, model, tokens: int) -> tuple[float, list[tuple]]:
        """One forward over a packed sequence with the LM head on every token."""
        ops = [o for o in self._ctx(model, 1, tokens, 0) if not o[0].endswith("logits_gemm")]
        ops += [o for o in self._gen(model, 1, tokens, x=tokens) if o[0].endswith("logits_gemm")]
        return _total(ops), ops

    def micro_batch_forward(self, model, batch: int, length: int,
                            lm_head: bool = True) -> tuple[float, list[tuple]]:
        """One training forward over `batch` sequences of `length` tokens each (causal attention
        within each), the LM head on every token (`lm_head`; a critic's value head: none)."""
        ops = [o for o in self._ctx(model, batch, length, 0) if not o[0].endswith("logits_gemm")]
        if lm_head:
            ops += [o for o in self._gen(model, 1, length, x=batch * length)
                    if o[0].endswith("logits_gemm")]
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
