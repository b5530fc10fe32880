"""What the run's rollout engine is, as its log says: the settings that decide where a rollout's
fixed costs go, each with where it was read.

Read from the launch command's override, else the resolved config veRL printed at start, else
vLLM's own start line (`Initializing ... LLM engine (vX) with config: ..., enforce_eager=...`);
a setting none of them gives is None ("not in the log"), and the priors built on it widen to
cover both of its values (workbench/runlog/priors.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.runlog.reader import RunLog
from workbench.runlog.shape import ROLLOUT

NOT_IN_LOG = "not in the log"


@dataclass(frozen=True)
class EngineSetting:
    name: str
    value: object  # None: not in the log
    source: str


@dataclass(frozen=True)
class EngineConfig:
    framework: str  # vllm or sglang (the shape's)
    settings: tuple[EngineSetting, ...]

    def value(self, name: str) -> object:
        return next((s.value for s in self.settings if s.name == name), None)

    @property
    def version(self) -> str:
        return str(self.value("version") or "")

    @property
    def enforce_eager(self) -> bool | None:
        return _bool(self.value("enforce_eager"))

    @property
    def free_cache_engine(self) -> bool | None:
        return _bool(self.value("free_cache_engine"))


# (name, the key under actor_rollout_ref.rollout., vLLM's start line's name for it)
SETTINGS = (("enforce_eager", "enforce_eager", "enforce_eager"),
            ("free_cache_engine", "free_cache_engine", None),
            ("gpu_memory_utilization", "gpu_memory_utilization", None),
            ("max_num_seqs", "max_num_seqs", None),
            ("max_num_batched_tokens", "max_num_batched_tokens", None),
            ("enable_chunked_prefill", "enable_chunked_prefill", "enable_chunked_prefill"),
            ("n", "n", None),
            ("load_format", "load_format", None),
            ("layered_summon", "layered_summon", None))


def _bool(v: object) -> bool | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    return True if text in ("true", "1", "yes") else False if text in ("false", "0", "no") else None


def _literal(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return _bool(text) if _bool(text) is not None else text


def _one(log: RunLog, name: str, key: str, engine_name: str | None) -> EngineSetting:
    s = log.command.get(ROLLOUT + key)
    if s is not None and not s.unresolved:
        return EngineSetting(name, _literal(s.value), f"launch command, line {s.line}")
    printed = log.config.get(ROLLOUT + key)
    if printed is not None and printed.value is not None:
        return EngineSetting(name, printed.value, f"printed config, line {printed.line}")
    if engine_name and log.config.engine_setting(engine_name) is not None:
        return EngineSetting(name, _literal(log.config.engine_setting(engine_name)),
                             f"the engine's start line, line {log.config.engine_line}")
    return EngineSetting(name, None, NOT_IN_LOG)


def engine_config(log: RunLog, framework: str) -> EngineConfig:
    """The engine's settings from the log (module docstring)."""
    settings = [_one(log, *row) for row in SETTINGS]
    version = log.config.engine_version
    settings.insert(0, EngineSetting(
        "version", f"{framework} {version}" if version else None,
        f"the engine's start line, line {log.config.engine_line}" if version else NOT_IN_LOG))
    return EngineConfig(framework, tuple(settings))
