"""MoE decode steps of the measured-database profiles against NVIDIA's end-to-end measurements.

aiconfigurator-core ships, beside its operator rows, end-to-end serving measurements taken on real
GPUs (systems/silicon_sample.csv: model, GPU, engine and version, TP and EP, input and output
lengths, concurrency, and the measured time per output token, TPOT). The profiles here are derived
from the operator rows alone; these runs are a check they never saw.

Which rows (declared, not chosen by their errors): aggregated serving on vLLM or SGLang on H100,
H200 or B200; the mixtures of experts this workbench ships as presets (gpt-oss-120b, DeepSeek-V3
and R1, Qwen3-235B-A22B in its FP8 release), each in its checkpoint's own weight format; one node
(TP <= 8, no attention data parallelism, moe_tp x moe_ep = TP); decode-dominated (output at least
as long as input); concurrency up to 256 (the largest batch a profile is fitted on).

The prediction of a row's TPOT: the profile's decode step at batch = concurrency and context =
input + output / 2, plus each request's prefill spread over its output tokens (an aggregated engine
runs every request's prefill once, inside the steps that decode the others: prefill(input) x
concurrency / output per step).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.costs import prefill_s, verify_step_s
from workbench.calibrate.database.aiconfigurator import GPU_SYSTEMS
from workbench.contracts.profile import Profile

SILICON = "silicon_sample.csv"
# The package's model id -> (architecture preset or package config, the checkpoint's format).
MODELS = {
    "openai/gpt-oss-120b": ("gpt-oss-120b", "fp4"),
    "deepseek-ai/DeepSeek-V3": ("deepseek-v3", "fp8"),
    "deepseek-ai/DeepSeek-R1": ("model_configs/deepseek-ai--DeepSeek-R1_config.json", "fp8"),
    "Qwen/Qwen3-235B-A22B-FP8": ("model_configs/Qwen--Qwen3-235B-A22B-FP8_config.json", "fp8"),
}
GPUS = ("h100", "h200", "b200")
MAX_CONCURRENCY = 256


@dataclass(frozen=True)
class SiliconRow:
    """One measured serving run and its prediction."""

    model: str
    gpu: str
    framework: str
    version: str  # the engine version measured ("": not recorded)
    tp: int
    ep: int
    isl: int
    osl: int
    concurrency: int
    measured_ms: float  # TPOT
    step_ms: float  # the profile's decode step alone
    predicted_ms: float  # plus the prefill share

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_ms / self.measured_ms - 1.0)


def package_root() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent


def selected_rows(gpus: tuple[str, ...] = GPUS):
    """The measured runs the check uses (module docstring), one per distinct setting."""
    import pandas as pd

    d = pd.read_csv(package_root() / "systems" / SILICON)
    systems = {GPU_SYSTEMS[g]: g for g in gpus}
    d = d[(d["mode"] == "agg") & d.backend.isin(["vllm", "sglang"]) & d.system.isin(systems)
          & d.model_path.isin(MODELS) & (d.osl >= d.isl) & (d.tp_size <= 8)
          & (d.batch_size <= MAX_CONCURRENCY) & (d.attention_dp_size.fillna(1) == 1)
          & (d.moe_tp_size * d.moe_ep_size == d.tp_size)]
    d = d[[MODELS[m][1] == p for m, p in zip(d.model_path, d.precision)]]
    keys = ["model_path", "system", "backend", "backend_version", "isl", "osl", "batch_size",
            "tp_size", "moe_ep_size"]
    d = d.drop_duplicates(keys).sort_values(keys, na_position="first")
    return d.assign(gpu=[systems[s] for s in d.system])


def arch_of(model: str) -> str:
    name = MODELS[model][0]
    return str(package_root() / name) if name.startswith("model_configs/") else name


def predict(prof: Profile, concurrency: int, isl: int, osl: int) -> tuple[float, float]:
    """(decode step, TPOT) in seconds: the step at batch = concurrency, context = isl + osl / 2,
    and that plus each request's prefill spread over its output tokens."""
    step = verify_step_s(prof.decode, concurrency, isl + osl / 2, 0)
    share = (prefill_s(prof.decode, isl) + verify_step_s(prof.decode, 0, 0.0, 0)) \
        * concurrency / osl
    return step, step + share


def silicon_check(profile_of, gpus: tuple[str, ...] = GPUS) -> list[SiliconRow]:
    """Every selected run against its predicted TPOT; `profile_of(arch, gpu, tp, framework, ep)`
    derives (or reads) the profile of that engine."""
    out = []
    for r in selected_rows(gpus).itertuples():
        tp, ep = int(r.tp_size), int(r.moe_ep_size)
        prof = profile_of(arch_of(r.model_path), r.gpu, tp, r.backend, ep if ep > 1 else None)
        step, tpot = predict(prof, int(r.batch_size), int(r.isl), int(r.osl))
        version = "" if r.backend_version != r.backend_version else str(r.backend_version)
        out.append(SiliconRow(r.model_path.split("/")[1], r.gpu, r.backend, version, tp, ep,
                              int(r.isl), int(r.osl), int(r.batch_size), float(r.silicon_tpot_ms),
                              1e3 * step, 1e3 * tpot))
    return out


def median_abs_error(rows: list[SiliconRow]) -> float:
    return float(np.median([abs(r.error_pct) for r in rows])) if rows else float("nan")
