"""Public measurements of SD's speedup by batch (`traces/published/sd-by-batch.yaml`) and by draft
length (`traces/published/sd-by-draft-length.yaml`), as data: one format, two files.

Each series is one engine (framework, version, GPU, model, TP) and drafter measured at several
batch sizes or strategies, with the role its file declares for it: `fit` (what an engine constant
is fitted on), `held_out` (predicted and scored) or `context` (printed, never scored). The fits and
the predictions live in `workbench/calibrate/published/sd_batch.py` and `sd_length.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.contracts.policy import DrafterKind
from workbench.contracts.strategy import Strategy
from workbench.contracts.schema import ConfigError

SD_PUBLISHED = Path(__file__).resolve().parents[3] / "traces" / "published" / "sd-by-batch.yaml"
SD_LENGTH_PUBLISHED = SD_PUBLISHED.with_name("sd-by-draft-length.yaml")
SCHEMA = "tlt-sd-by-batch/1"
LENGTH_SCHEMA = "tlt-sd-by-draft-length/1"
ROLES = ("fit", "held_out", "context")
_MEASURES = ("speedup", "tokens_per_s")


@dataclass(frozen=True)
class SdPoint:
    """One published figure: SD's speedup over the same engine without SD at the same batch, or a
    rate without SD (`tokens_per_s`, strategy 0)."""

    batch: int
    strategy: Strategy
    accepted: float | None  # tokens per verify pass, E[L] (None: not published)
    measure: str  # "speedup" or "tokens_per_s"
    value: float
    tp: int  # the series' TP unless the point names its own


@dataclass(frozen=True)
class SdSeries:
    name: str
    role: str
    source: str
    framework: str
    gpu: str
    model: str  # an architecture preset or a config.json path
    tp: int
    drafter: DrafterKind  # eagle, ngram, none
    context: float  # tokens per sequence the figures are judged at (stated in the file)
    points: tuple[SdPoint, ...]
    version: str = ""  # the engine release ("": not stated: the database's release is priced)
    # The drafter's own vocabulary (0: the target's full vocabulary, as EAGLE-1 and FastRL's
    # drafters; EAGLE-3 heads draft over 32,000 tokens)
    draft_vocab: int = 0
    # Every pass's CUDA graphs capped at this size, as the run set them (0: no graphs at all;
    # None: the release's defaults)
    graph_max: int | None = None
    rl_rollout: bool = False  # measured inside RL rollouts (its batch and context are assumed)
    fits: str = ""  # the engine constant this series is declared to fit ("": none)


@dataclass(frozen=True)
class SpecDecodeBenchModel:
    """SpecDecode-Bench's fitted vLLM 0.10.1 step model (H100, Llama-3.1-8B), in seconds."""

    target_s_per_kv_token: float
    target_s_per_batched_token: float
    target_fixed_s: float
    draft_s_per_kv_token: float
    draft_s_per_spec_token: float
    draft_fixed_s: float
    overhead_per_step_s: float
    accepted_by_k: tuple[float, ...]  # GSM8K, EAGLE-3: tokens per pass of a chain of K = 1, 2, ...
    context: float

    def speedup(self, batch: int, k: int) -> float:
        """Its throughput with a chain of K over without SD (`batch` sequences, `context` each)."""
        kv = batch * self.context
        plain = (
            self.target_fixed_s
            + self.target_s_per_kv_token * kv
            + self.target_s_per_batched_token * batch
        )
        verify = (
            self.target_fixed_s
            + self.target_s_per_kv_token * kv
            + self.target_s_per_batched_token * batch * (k + 1)
        )
        draft = (
            self.draft_fixed_s
            + self.draft_s_per_kv_token * kv
            + self.draft_s_per_spec_token * (k + 1)
        )
        step = self.overhead_per_step_s
        return self.accepted_by_k[k - 1] * (plain + step) / (verify + draft + step)


@dataclass(frozen=True)
class SdPublished:
    series: tuple[SdSeries, ...]
    specdecode_bench: SpecDecodeBenchModel | None  # sd-by-batch.yaml's alone
    path: str

    def by_role(self, role: str) -> tuple[SdSeries, ...]:
        return tuple(s for s in self.series if s.role == role)

    def named(self, name: str) -> SdSeries:
        for s in self.series:
            if s.name == name:
                return s
        raise KeyError(name)


def load_sd_published(path: str | Path = SD_PUBLISHED, schema: str = SCHEMA) -> SdPublished:
    """The file's series; a malformed one is refused naming the file, the series and the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(
            str(path), "<file>", "unreadable", f"an sd-by-batch YAML file ({exc})"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(str(path), "schema", got, schema)
    series = tuple(_series(str(path), i, s) for i, s in enumerate(data.get("series") or []))
    names = [s.name for s in series]
    if len(set(names)) != len(names):
        raise ConfigError(str(path), "series[].name", names, "distinct series names")
    bench = data.get("specdecode_bench")
    return SdPublished(series, None if bench is None and schema != SCHEMA
                       else _specdecode(str(path), bench), str(path))


def load_sd_length_published(path: str | Path = SD_LENGTH_PUBLISHED) -> SdPublished:
    """`traces/published/sd-by-draft-length.yaml`: the series measured at several draft lengths."""
    return load_sd_published(path, LENGTH_SCHEMA)


def _series(src: str, i: int, d: dict) -> SdSeries:
    where = f"series[{i}]"
    if not isinstance(d, dict):
        raise ConfigError(
            src, where, d, "a mapping with name, role, framework, gpu, model, tp, points"
        )
    try:
        role = str(d["role"])
        if role not in ROLES:
            raise ConfigError(src, f"{where}.role", role, " or ".join(ROLES))
        tp = int(d["tp"])
        pts = tuple(_point(src, f"{where}.points[{j}]", p, tp) for j, p in enumerate(d["points"]))
        return SdSeries(
            str(d["name"]),
            role,
            str(d.get("source", "")),
            str(d["framework"]),
            str(d["gpu"]),
            str(d["model"]),
            tp,
            DrafterKind(str(d.get("drafter", DrafterKind.EAGLE))),
            float(d["context"]),
            pts,
            str(d.get("version", "")),
            int(d.get("draft_vocab", 0)),
            None if d.get("graph_max") is None else int(d["graph_max"]),
            bool(d.get("rl_rollout", False)),
            str(d.get("fits", "")),
        )
    except KeyError as exc:
        raise ConfigError(
            src, f"{where}.{exc.args[0]}", None, "a value (every series names it)"
        ) from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            src, where, repr(exc), "numbers where numbers are due (tp, context)"
        ) from None


def _point(src: str, where: str, p: dict, tp: int) -> SdPoint:
    measures = [m for m in _MEASURES if isinstance(p, dict) and p.get(m) is not None]
    if len(measures) != 1:
        raise ConfigError(
            src, where, p, f"one of {', '.join(_MEASURES)} per point, with batch and strategy"
        )
    try:
        strategy = Strategy.parse(str(p["strategy"]))
        batch, value = int(p["batch"]), float(p[measures[0]])
        accepted = None if p.get("accepted") is None else float(p["accepted"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            src, where, p, f'batch, strategy (e.g. "3" or "8_4_16") and numbers ({exc})'
        ) from None
    if batch < 1 or value <= 0 or (accepted is not None and accepted < 1.0):
        raise ConfigError(
            src, where, p, "batch >= 1, a positive value, accepted >= 1 tokens per pass"
        )
    return SdPoint(batch, strategy, accepted, measures[0], value, int(p.get("tp", tp)))


def _specdecode(src: str, d: dict | None) -> SpecDecodeBenchModel:
    fields = (
        "target_s_per_kv_token",
        "target_s_per_batched_token",
        "target_fixed_s",
        "draft_s_per_kv_token",
        "draft_s_per_spec_token",
        "draft_fixed_s",
        "overhead_per_step_s",
    )
    try:
        return SpecDecodeBenchModel(
            *(float(d[f]) for f in fields),
            tuple(float(v) for v in d["gsm8k_eagle3_accepted_by_k"]),
            float(d["context"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            src,
            "specdecode_bench",
            repr(exc),
            f"a mapping with {', '.join(fields)}, gsm8k_eagle3_accepted_by_k and context",
        ) from None
