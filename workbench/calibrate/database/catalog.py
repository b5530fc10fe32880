"""Which measured-database profiles exist and where they are kept: the shipped presets for the
preset workloads (`PRESET_CASES`), the models a profile can be derived for (`model_choices`), and
the derived profiles cached per process (the app) and on disk (the CLI)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from workbench.calibrate.database.aiconfigurator import package_version
from workbench.calibrate.database.profile import (
    DERIVATION,
    NO_OVERHEADS,
    SD_HOST_S_PER_SEQ,
    derive_profile,
    model_name,
)
from workbench.contracts import fileio
from workbench.contracts.architecture import architecture_presets
from workbench.contracts.profile import Profile, load_profile, profile_presets
from workbench.contracts.schema import ConfigError, save


def profile_name(arch: str, gpu: str, tp: int, framework: str, ep: int | None = None) -> str:
    """A derived profile's name: GPU, model, TP, framework, and EP when it is not the default."""
    return f"{gpu}-{model_name(arch)}-tp{tp}-{framework}" + (f"-ep{ep}" if ep and ep > 1 else "")


@lru_cache(maxsize=32)
def cached_profile(arch: str, gpu: str, tp: int, framework: str, base_name: str,
                   version: str = "", ep: int | None = None) -> Profile:
    """`derive_profile` memoised per process (the app re-asks on every rerun)."""
    name = profile_name(arch, gpu, tp, framework, ep)
    return derive_profile(arch, gpu, tp, framework, load_profile(base_name), name, version,
                          ep=ep).profile


@lru_cache(maxsize=32)
def bare_profile(arch: str, gpu: str, tp: int, framework: str, base_name: str) -> Profile:
    """The database's costs alone: no draft overheads and no SD host work (what the fits of those
    constants start from, `database_check`, `sd_batch`), with the database release's mechanisms
    (whose drafter head the fits re-price for the release a measurement ran)."""
    name = f"{gpu}-{model_name(arch)}-tp{tp}-bare"
    return derive_profile(arch, gpu, tp, framework, load_profile(base_name), name,
                          overheads=NO_OVERHEADS, sd_host_s_per_seq=0.0).profile


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
    ("qwen2.5-32b", 8), ("llama3.3-70b", 8))) + (
    # veRL's Qwen3-30B-A3B DAPO recipe (verl-dapo-qwen3-30b-a3b): vLLM rollouts at TP8, EP1;
    # no paper fit of this model, so acceptance and learning curve are Qwen2.5-7B's.
    PresetCase("qwen3-30b-a3b", "h100", 8, "vllm", "h100-qwen2.5-7b-tp1"),)


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


def disk_cached_profile(arch: str, gpu: str, tp: int, framework: str, base_name: str,
                        ep: int | None = None) -> Profile:
    """`derive_profile`, kept on disk per (model, GPU, TP, framework, EP, base, package version,
    derivation): a second run of the same cluster reads the file instead of asking the database
    again."""
    src = Path(arch)
    tag = hashlib.sha256(src.read_bytes()).hexdigest()[:8] if src.is_file() else arch
    name = profile_name(arch, gpu, tp, framework, ep)
    key = f"{tag}-ep{ep or 'default'}-{base_name}-aic{package_version()}-d{DERIVATION}"
    path = cache_dir() / f"{name}-{key}.yaml"
    if path.is_file():
        try:
            return load_profile(path)
        except ConfigError:
            pass  # a damaged cache file is derived again and replaced
    prof = derive_profile(arch, gpu, tp, framework, load_profile(base_name), name, ep=ep).profile
    save(prof, path)
    return prof


# The package's configs offered as models: dense decoders and the mixtures of experts whose shape
# contracts/architecture.py reads (Mixtral, gpt-oss, Qwen2/3-MoE, DeepSeek-V3).
_OFFERED = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM",
            "MixtralForCausalLM", "GptOssForCausalLM", "Qwen2MoeForCausalLM",
            "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM")


def model_choices() -> dict[str, str]:
    """Models a profile can be derived for: the architecture presets, then the package's own
    Hugging Face configs of the decoders it offers, as their checkpoints ship (FP8 for
    DeepSeek-V3, MXFP4 experts for gpt-oss; not the re-quantized copies) (name -> preset name or
    config path)."""
    import aiconfigurator_core

    out = {n: n for n in architecture_presets() if n != "tiny-gcd"}
    configs = Path(aiconfigurator_core.__file__).parent / "model_configs"
    for f in sorted(configs.glob("*_config.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        lower = f.name.lower()
        requantised = "fp8" in lower or "fp4" in lower or "hf_quant" in lower
        if not requantised and data.get("architectures", [""])[0] in _OFFERED:
            out[model_name(str(f)).replace("--", "/")] = str(f)
    return out


def same_models(choices: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """The package's configs that are a model already offered under another name (the same
    shape: layers, widths, heads, experts, quantisation), each listed under the first name of that
    shape (a preset before the configs): a list of models offers it once. Presets are never
    listed under another (each is a model of its own, with its own acceptance)."""
    from workbench.contracts.architecture import load_architecture

    first: dict[tuple, str] = {}
    out: dict[str, tuple[str, ...]] = {}
    for name, arch in choices.items():
        try:
            shape = tuple(v for k, v in vars(load_architecture(arch)).items() if k != "name")
        except (ConfigError, ValueError, OSError):
            continue
        if shape in first and arch != name:
            out[first[shape]] = (*out.get(first[shape], ()), name)
        else:
            first.setdefault(shape, name)
    return out
