"""Engine releases as the workbench prices them: `traces/published/engine-versions.yaml` (what each
SGLang and vLLM release does to a speculative pass, read from its source) and the fitted host costs
no source states, turned into a profile's `EngineMechanisms` for a model on a release.

A release between two listed ones takes the older one's mechanisms (`release_for`: the newest
listed release at or below it, and whether it is exact), a release below every listed one the
oldest: the answer says which release it priced.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version

from workbench.contracts.engine_mechanisms import MAX_GRAPH, EngineMechanisms
from workbench.contracts.schema import ConfigError

CATALOG = Path(__file__).resolve().parents[3] / "traces" / "published" / "engine-versions.yaml"
SCHEMA = "tlt-engine-versions/1"
# Fitted on the catalog's `eager_pairs` (role fit) and, per framework, on the series the split names
# (workbench/calibrate/published/sd_mechanisms.py `fit_mechanism_constants`; `tlt gpu-check`
# refits and prints them): the host's time to launch one layer's kernels eagerly, and its work per
# sequence per draft step of a pass.
LAUNCH_S_PER_LAYER = 3.28e-4
HOST_STEP_SGLANG_S = 0.0
HOST_STEP_VLLM_S = 3.65e-5
_RELEASE_FIELDS = ("plain_graph_max", "verify_graph_max", "draft_graph_max", "extend_graph_max")


@dataclass(frozen=True)
class EngineRelease:
    """One release's mechanisms as its source states them (the catalog's row)."""

    framework: str
    version: str
    released: str
    plain_graph_max: int
    verify_graph_max: int
    draft_graph_max: int
    extend_graph_max: int
    graphs_by_tokens: bool
    kv_read_per_token: bool
    sd_running_cap: int
    source: str
    large_tp_graph_max: int = 0  # the graph limit from TP4 on (0: as below TP4)

    def graph_max(self, limit: int, tp: int) -> int:
        """A limit at `tp`: releases that raise their cap from TP4 raise every pass's to it."""
        return max(limit, self.large_tp_graph_max) if tp >= 4 and limit else limit


@dataclass(frozen=True)
class EagerPair:
    """One engine run with and without CUDA graphs, everything else alike."""

    name: str
    role: str
    source: str
    framework: str
    version: str
    gpu: str
    model: str
    tp: int
    context: float
    draft_vocab: int  # the drafter's own vocabulary (0: the target's)
    strategy: str
    eager_tokens_per_s: float
    eager_accepted: float
    graphs_tokens_per_s: float
    graphs_accepted: float


@dataclass(frozen=True)
class EngineCatalog:
    releases: tuple[EngineRelease, ...]
    eager_pairs: tuple[EagerPair, ...]
    draft_step_layers: float
    path: str

    def release_for(self, framework: str, version: str) -> tuple[EngineRelease, bool]:
        """The listed release whose mechanisms `version` has, and whether it is that release."""
        rows = sorted((r for r in self.releases if r.framework == framework),
                      key=lambda r: _version(r.version, self.path))
        if not rows:
            raise ConfigError(self.path, "versions[].framework", framework,
                              "a framework the catalog lists (" + ", ".join(
                                  sorted({r.framework for r in self.releases})) + ")")
        want = _version(version, "--engine-version")
        older = [r for r in rows if _version(r.version, self.path) <= want]
        pick = older[-1] if older else rows[0]
        return pick, _version(pick.version, self.path) == want


def _version(text: str, where: str) -> Version:
    try:
        return Version(str(text))
    except InvalidVersion:
        raise ConfigError(where, "version", text, "a release such as 0.4.4 or 0.10.1.1") from None


def load_catalog(path: str | Path = CATALOG) -> EngineCatalog:
    """The catalog; a malformed row is refused naming the file, the row and the field."""
    return _load(str(path))


@lru_cache(maxsize=8)
def _load(src: str) -> EngineCatalog:
    path = Path(src)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), "<file>", "unreadable", f"{SCHEMA} YAML ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ConfigError(str(path), "schema", data.get("schema") if isinstance(data, dict)
                          else type(data).__name__, SCHEMA)
    releases = tuple(_release(src, i, r) for i, r in enumerate(data.get("versions") or []))
    pairs = tuple(_pair(src, i, p) for i, p in enumerate(data.get("eager_pairs") or []))
    return EngineCatalog(releases, pairs, float(data.get("draft_step_layers", 2)), src)


def _release(src: str, i: int, d: dict) -> EngineRelease:
    where = f"versions[{i}]"
    try:
        row = EngineRelease(
            str(d["framework"]), str(d["version"]), str(d.get("released", "")),
            *(int(d[f]) for f in _RELEASE_FIELDS), bool(d["graphs_by_tokens"]),
            bool(d["kv_read_per_token"]), int(d.get("sd_running_cap", 0)), str(d["source"]),
            int(d.get("large_tp_graph_max", 0)))
    except KeyError as exc:
        raise ConfigError(src, f"{where}.{exc.args[0]}", None, "a value (every row names it)"
                          ) from None
    except (TypeError, ValueError):
        raise ConfigError(src, where, d, "integers for the graph limits, true/false flags"
                          ) from None
    _version(row.version, f"{src}: {where}")
    if any(not 0 <= getattr(row, f) <= MAX_GRAPH for f in _RELEASE_FIELDS):
        raise ConfigError(src, where, d, f"graph limits from 0 to {MAX_GRAPH}")
    return row


def _pair(src: str, i: int, d: dict) -> EagerPair:
    where = f"eager_pairs[{i}]"
    try:
        e, g = d["eager"], d["graphs"]
        return EagerPair(str(d["name"]), str(d["role"]), str(d["source"]), str(d["framework"]),
                         str(d["version"]), str(d["gpu"]), str(d["model"]), int(d["tp"]),
                         float(d["context"]), int(d.get("draft_vocab", 0)), str(d["strategy"]),
                         float(e["tokens_per_s"]),
                         float(e["accepted"]), float(g["tokens_per_s"]), float(g["accepted"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(src, where, repr(exc), "name, role, source, framework, version, gpu, "
                          "model, tp, context, strategy, eager and graphs {tokens_per_s, accepted}"
                          ) from None


@dataclass(frozen=True)
class HostCosts:
    """The host's costs no source states (fitted: module constants): launching one layer's kernels
    eagerly, and the work per sequence per draft step on each framework."""

    launch_s_per_layer: float = LAUNCH_S_PER_LAYER
    host_step_sglang_s: float = HOST_STEP_SGLANG_S
    host_step_vllm_s: float = HOST_STEP_VLLM_S

    def per_step(self, framework: str) -> float:
        return {"sglang": self.host_step_sglang_s, "vllm": self.host_step_vllm_s}.get(framework,
                                                                                     0.0)


def mechanisms_for(framework: str, version: str, layers: int, tp: int, draft_head_s: float,
                   costs: HostCosts = HostCosts(), catalog: EngineCatalog | None = None,
                   graph_max: int | None = None, draft_vocab_share: float = 1.0
                   ) -> EngineMechanisms:
    """A model of `layers` layers on `framework` `version` at TP `tp`: the release's limits (every
    pass's capped at `graph_max` where the user caps them, as `--cuda-graph-max-bs` does), the
    eager launches of its target (its layers and its LM head, one layer's worth) and of a drafter
    step, the host's work per draft step."""
    cat = catalog or load_catalog()
    rel, exact = cat.release_for(framework, version)
    limits = [rel.graph_max(getattr(rel, f), tp) for f in _RELEASE_FIELDS]
    if graph_max is not None:
        limits = [min(v, graph_max) for v in limits]
    per_step = costs.per_step(framework)
    cap = "" if graph_max is None else f"; graphs capped at {graph_max}"
    return EngineMechanisms(
        framework=framework, version=version, plain_graph_max=limits[0],
        verify_graph_max=limits[1], draft_graph_max=limits[2], extend_graph_max=limits[3],
        graphs_by_tokens=rel.graphs_by_tokens,
        target_launch_s=round(costs.launch_s_per_layer * (layers + 1), 9),
        draft_launch_s=round(costs.launch_s_per_layer * cat.draft_step_layers, 9),
        host_s_per_seq_step=per_step, kv_read_per_token=rel.kv_read_per_token,
        draft_head_s=draft_head_s, draft_vocab_share=draft_vocab_share,
        sd_running_cap=rel.sd_running_cap,
        source=_source(cat, rel, exact) + cap)


def _source(cat: EngineCatalog, rel: EngineRelease, exact: bool) -> str:
    """Where the release's mechanisms were read (the catalog repo-relative when it is the
    shipped one: a profile file must not name this machine's paths)."""
    note = "" if exact else f" (priced as {rel.version}, the nearest listed release at or below)"
    where = CATALOG.relative_to(CATALOG.parents[2]) if Path(cat.path) == CATALOG else cat.path
    return f"{where} ({rel.framework} {rel.version}{note}): {rel.source}"


def repriced(m: EngineMechanisms, version: str | None = None, graph_max: int | None = None,
             vocab_share: float | None = None, tp: int = 1,
             catalog: EngineCatalog | None = None) -> EngineMechanisms:
    """A profile's mechanisms for another release of its engine (its limits and verify form from
    the catalog), every pass's graphs capped at `graph_max`, or another drafter vocabulary; the
    launch and host costs, which belong to the model and the host, kept."""
    cat = catalog or load_catalog()
    out = m
    if version is not None:
        rel, exact = cat.release_for(m.framework, version)
        limits = {f: rel.graph_max(getattr(rel, f), tp) for f in _RELEASE_FIELDS}
        out = replace(out, version=version, graphs_by_tokens=rel.graphs_by_tokens,
                      kv_read_per_token=rel.kv_read_per_token, sd_running_cap=rel.sd_running_cap,
                      source=_source(cat, rel, exact), **limits)
    if graph_max is not None:
        out = replace(out, source=f"{out.source}; graphs capped at {graph_max}",
                      **{f: min(getattr(out, f), graph_max) for f in _RELEASE_FIELDS})
    if vocab_share is not None:
        out = replace(out, draft_vocab_share=vocab_share)
    return out
