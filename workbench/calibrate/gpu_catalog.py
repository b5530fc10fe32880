"""Which measured-database profiles exist and where they are kept: the shipped presets for the
preset workloads (`PRESET_CASES`), the models a profile can be derived for (`model_choices`), and
the derived profiles cached per process (the app) and on disk (the CLI)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from workbench.calibrate.gpu_database import package_version
from workbench.calibrate.measured_gpu import (
    DERIVATION,
    SD_HOST_S_PER_SEQ,
    derive_profile,
    model_name,
)
from workbench.contracts import fileio
from workbench.contracts.architecture import architecture_presets
from workbench.contracts.profile import Profile, load_profile, profile_presets
from workbench.contracts.schema import ConfigError, save


@lru_cache(maxsize=32)
def cached_profile(arch: str, gpu: str, tp: int, framework: str, base_name: str,
                   version: str = "") -> Profile:
    """`derive_profile` memoised per process (the app re-asks on every rerun)."""
    name = f"{gpu}-{model_name(arch)}-tp{tp}-{framework}"
    return derive_profile(arch, gpu, tp, framework, load_profile(base_name), name, version).profile


@lru_cache(maxsize=32)
def bare_profile(arch: str, gpu: str, tp: int, framework: str, base_name: str) -> Profile:
    """The database's costs alone: no draft-step overhead and no SD host work (what the fits of
    those two constants start from, `gpu_validation`, `sd_batch`)."""
    name = f"{gpu}-{model_name(arch)}-tp{tp}-bare"
    return derive_profile(arch, gpu, tp, framework, load_profile(base_name), name,
                          overhead_at_reference_s=0.0, sd_host_s_per_seq=0.0).profile


def with_sd_host(prof: Profile, sd_host_s_per_seq: float | None) -> Profile:
    """The profile with the SD pass's host work per sequence set (None: the profiles' constant)."""
    h = SD_HOST_S_PER_SEQ if sd_host_s_per_seq is None else sd_host_s_per_seq
    return replace(prof, drafter=replace(prof.drafter, sd_host_s_per_seq=h))


@dataclass(frozen=True)
class PresetCase:
    """A shipped measured-database profile: the engine shape of preset workloads."""

    model: str
    gpu: str
    tp: int
    framework: str
    base: str  # the published-fit profile whose acceptance and learning curve it keeps

    @property
    def name(self) -> str:
        return f"{self.gpu}-{self.model}-tp{self.tp}-{self.framework}"


# The TLT paper's evaluation shapes (its rollouts ran on SGLang), for the tlt-eval-*, paper-* and
# peer-* workloads.
PRESET_CASES = tuple(PresetCase(m, "h100", tp, "sglang", f"h100-{m}-tp{tp}") for m, tp in (
    ("qwen2.5-7b", 1), ("qwen2.5-7b", 4), ("r1-distill-qwen-7b", 4), ("qwen2.5-32b", 4),
    ("qwen2.5-32b", 8), ("llama3.3-70b", 8)))


def preset_profile(case: PresetCase) -> Profile:
    return derive_profile(case.model, case.gpu, case.tp, case.framework, load_profile(case.base),
                          case.name).profile


def default_base_profile(arch: str, tp: int) -> str:
    """What the database cannot give (acceptance, the drafter's learning curve) comes from the H100
    profile of this model and TP fitted to the TLT paper when there is one, else Qwen2.5-7B's at
    TP1."""
    # a preset's dots are not a suffix (qwen2.5-7b)
    name = Path(arch).stem if Path(arch).is_file() else arch
    same = f"h100-{name}-tp{tp}"
    return same if same in profile_presets() else "h100-qwen2.5-7b-tp1"


def cache_dir() -> Path:
    """Where derived profiles are kept between runs ($XDG_CACHE_HOME/tlt/profiles)."""
    return fileio.cache_dir("profiles")


def disk_cached_profile(arch: str, gpu: str, tp: int, framework: str, base_name: str) -> Profile:
    """`derive_profile`, kept on disk per (model, GPU, TP, framework, base, package version,
    derivation): a second run of the same cluster reads the file instead of asking the database
    again."""
    src = Path(arch)
    tag = hashlib.sha256(src.read_bytes()).hexdigest()[:8] if src.is_file() else arch
    name = f"{gpu}-{model_name(arch)}-tp{tp}-{framework}"
    path = cache_dir() / f"{name}-{tag}-{base_name}-aic{package_version()}-d{DERIVATION}.yaml"
    if path.is_file():
        try:
            return load_profile(path)
        except ConfigError:
            pass  # a damaged cache file is derived again and replaced
    prof = derive_profile(arch, gpu, tp, framework, load_profile(base_name), name).profile
    save(prof, path)
    return prof


_DENSE = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM")


def model_choices() -> dict[str, str]:
    """Models a profile can be derived for: the architecture presets, then the package's own
    Hugging Face configs of dense decoder models (name -> preset name or config path)."""
    import aiconfigurator_core

    out = {n: n for n in architecture_presets() if n != "tiny-gcd"}
    configs = Path(aiconfigurator_core.__file__).parent / "model_configs"
    for f in sorted(configs.glob("*_config.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        moe = any(k in data for k in ("num_experts", "num_local_experts", "n_routed_experts"))
        lower = f.name.lower()
        quantised = "quantization_config" in data or "fp8" in lower or "fp4" in lower
        if not moe and not quantised and data.get("architectures", [""])[0] in _DENSE:
            out[model_name(str(f)).replace("--", "/")] = str(f)
    return out
